// The Firebase apps this page uses, connected to the local Emulator Suite: its hosts, ports and
// project id come from firebase.json and .firebaserc, put into the bundle by vite.config.js.
// The like card and the trends panel use the default app (an anonymous user); the tenant screen
// uses an app of its own, so signing in as staff never changes the identity that like retries
// run under (request ids are scoped to the user who sent them).
import { initializeApp } from "firebase/app";
import { connectAuthEmulator, getAuth } from "firebase/auth";
import { connectFirestoreEmulator, getFirestore } from "firebase/firestore";
import { connectFunctionsEmulator, getFunctions, httpsCallable } from "firebase/functions";

// vite.config.js replaces __STACK__ with {project, emulators: {auth, firestore, functions}}.
const { project: PROJECT, emulators: EMULATORS } = __STACK__;
// The functions' region (functions/main.py); firebase.json does not name it.
const REGION = "us-central1";

// A `demo-` project is offline by design: the emulators accept any API key.
const CONFIG = { apiKey: "demo-key", projectId: PROJECT, authDomain: `${PROJECT}.firebaseapp.com` };

export function connect(name) {
  const app = name ? initializeApp(CONFIG, name) : initializeApp(CONFIG);
  const auth = getAuth(app);
  const { auth: authAt, firestore: firestoreAt, functions: functionsAt } = EMULATORS;
  connectAuthEmulator(auth, `http://${authAt.host}:${authAt.port}`, { disableWarnings: true });
  const db = getFirestore(app);
  connectFirestoreEmulator(db, firestoreAt.host, firestoreAt.port);
  const functions = getFunctions(app, REGION);
  connectFunctionsEmulator(functions, functionsAt.host, functionsAt.port);
  const callable = (fn) => httpsCallable(functions, fn);
  return { app, auth, db, callable };
}
