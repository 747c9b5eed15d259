// The Firebase apps this page uses, connected to the local Emulator Suite (CONTRACT.md ports).
// The like card and the trends panel use the default app (an anonymous user); the tenant screen
// uses an app of its own, so signing in as staff never changes the identity that like retries
// run under (request ids are scoped to the user who sent them).
import { initializeApp } from "firebase/app";
import { connectAuthEmulator, getAuth } from "firebase/auth";
import { connectFirestoreEmulator, getFirestore } from "firebase/firestore";
import { connectFunctionsEmulator, getFunctions, httpsCallable } from "firebase/functions";

export const PROJECT = "demo-counters";
const REGION = "us-central1";
const HOST = "127.0.0.1";
const PORTS = { auth: 9099, firestore: 8080, functions: 5001 };

// A `demo-` project is offline by design: the emulators accept any API key.
const CONFIG = { apiKey: "demo-key", projectId: PROJECT, authDomain: `${PROJECT}.firebaseapp.com` };

export function connect(name) {
  const app = name ? initializeApp(CONFIG, name) : initializeApp(CONFIG);
  const auth = getAuth(app);
  connectAuthEmulator(auth, `http://${HOST}:${PORTS.auth}`, { disableWarnings: true });
  const db = getFirestore(app);
  connectFirestoreEmulator(db, HOST, PORTS.firestore);
  const functions = getFunctions(app, REGION);
  connectFunctionsEmulator(functions, HOST, PORTS.functions);
  const callable = (fn) => httpsCallable(functions, fn);
  return { app, auth, db, callable };
}
