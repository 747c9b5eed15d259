// The Node host app's own functions, in its default codebase: an HTTP function, and a Firestore
// trigger that notes each new order in `order_log`.
const { onRequest } = require("firebase-functions/v2/https");
const { onDocumentCreated } = require("firebase-functions/v2/firestore");
const { initializeApp } = require("firebase-admin/app");
const { getFirestore } = require("firebase-admin/firestore");

initializeApp();

exports.hello = onRequest((req, res) => {
  res.send("hello from the node host app");
});

exports.logorder = onDocumentCreated("orders/{order}", async (event) => {
  await getFirestore().doc(`order_log/${event.params.order}`).set({ seen: true });
});
