// The demo page: a post (likes, claps, views), the trending panel and a tenant's ticket screen.
// Query parameters pick other documents: ?post=<counter>&tenant=<tenant>.
import { onAuthStateChanged, signInAnonymously } from "firebase/auth";
import { doc, onSnapshot } from "firebase/firestore";
import { httpsCallable } from "firebase/functions";
import { connect, loadConfig } from "./backend.js";
import { CountersClient, firebaseTransport, TapStore } from "./counters-client.js";
import { clearErrors, describe, reportUncaught, showError } from "./errors.js";
import { startPost } from "./post.js";
import { startTenant } from "./tenant.js";
import { startTrends } from "./trends.js";

// What `make dev` seeds (tools/demo.py); the demo staff account only exists in the emulator.
const DEMO = {
  post: "demo-post",
  tenant: "demo-diner",
  email: "staff@demo-diner.test",
  password: "demo-password",
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
startTenant({ ...staff, callable: callable(staff) }, {
  tenant: params.get("tenant") || DEMO.tenant,
  email: params.get("tenant") ? "" : DEMO.email,
  password: params.get("tenant") ? "" : DEMO.password,
});

const transport = firebaseTransport(visitor, { doc, onSnapshot }, { httpsCallable });
let signedIn = false;
const client = new CountersClient({
  transport,
  store: await TapStore.open(),
  online: () => navigator.onLine && signedIn,
});
const signedInNow = startPost(client, transport, params.get("post") || DEMO.post);
// Taps an earlier visit left show at once; they are sent once signed in.
await client.start();

const who = document.getElementById("who");
onAuthStateChanged(visitor.auth, (user) => {
  if (user) clearErrors(VISITOR);
  who.textContent = user ? `Signed in anonymously as ${user.uid}` : "Signed out";
  who.dataset.uid = user ? user.uid : "";
  // Queued taps are sent as the user who made them (Auth keeps it on the device).
  if (user && !signedIn) {
    signedIn = true;
    signedInNow();
  }
});

function signIn() {
  if (visitor.auth.currentUser) return;
  signInAnonymously(visitor.auth).catch((error) => {
    who.textContent = "Not signed in";
    showError(describe("Anonymous sign-in", error), VISITOR);
  });
}
await visitor.auth.authStateReady();
signIn();
// A first visit made offline signs in once the network is back.
addEventListener("online", signIn);

/** The service worker makes the page load offline (web/public/sw.js); the emulator build
 * registers it too, so that the offline path is what the browser tests exercise. */
function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.register("/sw.js").catch((error) => showError(describe("Installing for offline use", error)));
}
