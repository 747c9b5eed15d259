// The demo page: a post (likes, claps, views, comments, its page's visits), the trending panel and a
// tenant's ticket screen.
// Query parameters pick other documents: ?post=<counter>&tenant=<tenant>.
import { CountersClient, firebaseTransport, TapStore } from "@counters/client";
import { onAuthStateChanged, signInAnonymously } from "firebase/auth";
import { doc, onSnapshot } from "firebase/firestore";
import { httpsCallable } from "firebase/functions";
import { connect, LOCAL, loadConfig } from "./backend.js";
import { startComments } from "./comments.js";
import { clearErrors, describe, reportUncaught, showError } from "./errors.js";
import { startPost } from "./post.js";
import { startTenant } from "./tenant.js";
import { startTrends } from "./trends.js";
import { startVisits } from "./visits.js";

// What `make dev` seeds (tools/demo.py). The demo staff account only exists in the emulator:
// only the local build fills it in, so a deployed page never shows a password.
const DEMO = {
  post: "demo-post",
  tenant: "demo-diner",
  email: LOCAL ? "staff@demo-diner.test" : "",
  password: LOCAL ? "demo-password" : "",
};
// The error banner topic of the anonymous sign-in.
const VISITOR = "visitor";

reportUncaught();
registerServiceWorker();
const params = new URLSearchParams(location.search);
const config = await loadConfig();
// The visitor (anonymous) counts taps; the tenant screen uses an app of its own, so signing in
// as staff never changes the identity queued taps are sent under (request ids are per user).
const visitor = connect(config, { offline: true });
const staff = connect(config, { name: "staff" });
const callable = (app) => (name) => httpsCallable(app.functions, name);

// The panels that need no visitor first: a form filled early is already theirs.
startTrends(visitor);
startComments(visitor, params.get("post") || DEMO.post);
startVisits(visitor, params.get("post") || DEMO.post);
startTenant({ ...staff, callable: callable(staff) }, {
  tenant: params.get("tenant") || DEMO.tenant,
  email: params.get("tenant") ? "" : DEMO.email,
  password: params.get("tenant") ? "" : DEMO.password,
});

const transport = firebaseTransport(visitor, { doc, onSnapshot }, { httpsCallable });
// Taps are sent while the browser is online and someone is signed in, as that user: the client
// keeps a tap it already sent for the user it was sent as (request ids are per user).
const client = new CountersClient({
  transport,
  store: await TapStore.open(),
  online: () => navigator.onLine,
  user: () => visitor.auth.currentUser?.uid ?? null,
});
const userChanged = startPost(client, transport, params.get("post") || DEMO.post);
// Taps an earlier visit left show at once; they are sent once signed in.
await client.start();

const who = document.getElementById("who");
let uid = null;
onAuthStateChanged(visitor.auth, (user) => {
  if (user) clearErrors(VISITOR);
  who.textContent = user ? `Signed in anonymously as ${user.uid}` : "Signed out";
  who.dataset.uid = user ? user.uid : "";
  if (!user) {
    // Signed out (or the session was lost): the page always needs a visitor.
    uid = null;
    signIn();
    return;
  }
  if (user.uid !== uid) {
    uid = user.uid;
    userChanged();
  }
});

let signingIn = false;
function signIn() {
  if (visitor.auth.currentUser || signingIn) return;
  signingIn = true;
  signInAnonymously(visitor.auth).catch((error) => {
    who.textContent = "Not signed in";
    showError(describe("Anonymous sign-in", error), VISITOR);
  }).finally(() => {
    signingIn = false;
  });
}
await visitor.auth.authStateReady();
signIn();
// A first visit made offline (or a failed sign-in) signs in once the network is back.
addEventListener("online", signIn);

/** The service worker makes the page load offline (web/public/sw.js); the emulator build
 * registers it too, so that the offline path is what the browser tests exercise. */
function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.register("/sw.js").catch((error) => showError(describe("Installing for offline use", error)));
}
