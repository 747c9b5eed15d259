// The Firebase apps the pages use. The config is the one Hosting serves at
// /__/firebase/init.json (the Hosting emulator serves the `demo-counters` one), unless the build
// names one in VITE_FIREBASE_CONFIG. Only the emulator build (`vite build --mode emulator`, what
// `make web` runs) connects to the local emulators: vite.config.js puts their addresses in
// __EMULATORS__, which is null in a production build, so none of them is in that bundle.
// In production each app initialises App Check first: reCAPTCHA Enterprise with the site key
// VITE_RECAPTCHA_SITE_KEY (once the browser is online). The emulator build starts no App Check.
import { initializeApp } from "firebase/app";
import { initializeAppCheck, ReCaptchaEnterpriseProvider } from "firebase/app-check";
import { connectAuthEmulator, getAuth } from "firebase/auth";
import {
  connectFirestoreEmulator,
  getFirestore,
  initializeFirestore,
  persistentLocalCache,
  persistentMultipleTabManager,
} from "firebase/firestore";
import { connectFunctionsEmulator, getFunctions } from "firebase/functions";

// The functions' region (functions/main.py); the config does not name it.
const REGION = "us-central1";
const EMULATORS = __EMULATORS__;
export const LOCAL = EMULATORS !== null;

/** The web app's Firebase config: from the build when it has one, else from Hosting. */
export async function loadConfig() {
  const built = import.meta.env.VITE_FIREBASE_CONFIG;
  if (built) return JSON.parse(built);
  const reply = await fetch("/__/firebase/init.json");
  if (!reply.ok) throw new Error(`/__/firebase/init.json answered ${reply.status}`);
  return reply.json();
}

function startAppCheck(app) {
  // The emulators check no token (there is no App Check emulator; functions/.env.local turns
  // enforcement off), and the debug provider cannot get one: its exchange needs the config's
  // appId, which the demo project's has not, and Google, which is not reachable offline.
  if (LOCAL) return;
  const siteKey = import.meta.env.VITE_RECAPTCHA_SITE_KEY;
  if (!siteKey) {
    console.warn("No VITE_RECAPTCHA_SITE_KEY at build time: App Check is off, and callables " +
      "that enforce it will refuse this app.");
    return;
  }
  // Offline, the reCAPTCHA script cannot load and the SDK would wait for a token forever: start
  // App Check once online. Functions and Firestore pick it up whenever it starts; until then a
  // callable goes without a token (refused UNAUTHENTICATED, and the tap stays queued).
  const start = () =>
    initializeAppCheck(app, { provider: new ReCaptchaEnterpriseProvider(siteKey), isTokenAutoRefreshEnabled: true });
  if (navigator.onLine) start();
  else addEventListener("online", start, { once: true });
}

/** A Firebase app (the default one, or a named one) with Auth, Firestore and Functions.
 * `offline`: Firestore keeps what it read on the device (IndexedDB), so that a page loaded
 * offline still shows the last counts it saw. */
export function connect(config, { name, offline = false } = {}) {
  const app = name ? initializeApp(config, name) : initializeApp(config);
  startAppCheck(app);
  const auth = getAuth(app);
  const db = offline
    ? initializeFirestore(app, { localCache: persistentLocalCache({ tabManager: persistentMultipleTabManager() }) })
    : getFirestore(app);
  const functions = getFunctions(app, REGION);
  if (LOCAL) {
    const { auth: authAt, firestore: firestoreAt, functions: functionsAt } = EMULATORS;
    connectAuthEmulator(auth, `http://${authAt.host}:${authAt.port}`, { disableWarnings: true });
    connectFirestoreEmulator(db, firestoreAt.host, firestoreAt.port);
    connectFunctionsEmulator(functions, functionsAt.host, functionsAt.port);
  }
  return { app, auth, db, functions };
}
