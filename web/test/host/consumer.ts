// A host app of @counters/client, written as the package's README says, type-checked against the
// package installed from its tarball (`tsc -p web/test/host`, in make webunit): an index.d.ts that
// is wrong for a host fails here. Type-checked only, never run.
import {
  CountersClient,
  type CounterState,
  declaredCounterId,
  type ExtensionCounter,
  extensionCounter,
  firebaseTransport,
  type IncrementAnswer,
  newRequestId,
  rfc3339Micros,
  type Tap,
  TapStore,
  timestampMicros,
  TRANSIENT,
  type Transport,
  withRetries,
  withTimeout,
} from "@counters/client";
import { initializeApp } from "firebase/app";
import { getAuth } from "firebase/auth";
import { doc, getFirestore, increment, onSnapshot, setDoc, Timestamp } from "firebase/firestore";
import { getFunctions, httpsCallable } from "firebase/functions";

const app = initializeApp({ projectId: "demo-counters", apiKey: "demo" });
const auth = getAuth(app);
const db = getFirestore(app, "counters");
const functions = getFunctions(app, "us-central1");

const transport: Transport = firebaseTransport({ db, functions }, { doc, onSnapshot }, { httpsCallable },
  { functionPrefix: "counters", collectionPrefix: "t1_" });
const client = new CountersClient({
  transport,
  store: await TapStore.open(),
  online: () => navigator.onLine,
  user: () => auth.currentUser?.uid ?? null,
  timeoutMs: 10_000,
});
client.onAnswered = (tap: Tap, answer: IncrementAnswer) => {
  if (answer.committed_at !== undefined) console.log(tap.id, rfc3339Micros(answer.committed_at) > 0n);
};
client.onRejected = (tap, error) => console.warn(`tap on ${tap.counter} not counted`, error);
client.onTransientError = (error) => console.info("retrying", error);

const stop = client.watch("demo-post", (state: CounterState) => {
  const shown: number | null = state.shown;
  console.log(shown, state.pending, state.unconfirmed, state.exists, state.data?.count);
}, (error) => console.error(error));
await client.start();
addEventListener("online", () => void client.flush());
const tap: Tap = await client.tap("likes:demo-post", { by: -1, ordered: true });
const queued: Tap[] = client.queued("likes:demo-post");
console.log(tap.committedAt ?? "pending", queued.length, client.state("demo-post").rollup);
stop();

// What post.js uses besides the client: a call of its own, retried with one request id.
const requestId: string = newRequestId("view");
const answer: IncrementAnswer = await withRetries(
  () => withTimeout(transport.increment({ counter: "views:demo-post", by: 1, request_id: requestId }), 30_000),
  { attempts: 3, transient: TRANSIENT, onRetry: (attempt: number) => console.info(attempt) },
);
const asOf: bigint = timestampMicros(Timestamp.now());
console.log(answer.applied, asOf, TRANSIENT.has("functions/internal"));

// A counter of the Distributed Counter extension's layout, spoken to as its web SDK does, and its
// total followed as a counter.
const visits: ExtensionCounter = extensionCounter(db, { doc, increment, onSnapshot, setDoc }, "pages/home", "visits");
const stopVisits = visits.onSnapshot((value: number) => console.log(visits.shardId, value), (error) => console.error(error));
await visits.incrementBy(1);
stopVisits();
const mine: ExtensionCounter = extensionCounter(db, { doc, increment, onSnapshot, setDoc }, "pages/home", "visits",
  { shardId: "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9" });
const total: string = await declaredCounterId("visits", "home");
client.watch(total, (state) => console.log(state.shown, mine.shardId));

// What the types must refuse.
// @ts-expect-error: a prefix is a string
firebaseTransport({ db, functions }, { doc, onSnapshot }, { httpsCallable }, { functionPrefix: 1 });
// @ts-expect-error: there is no such option
firebaseTransport({ db, functions }, { doc, onSnapshot }, { httpsCallable }, { functionsPrefix: "counters" });
// @ts-expect-error: request ids are per user: user() is required
new CountersClient({ transport, store: await TapStore.open() });
// @ts-expect-error: an extension counter needs setDoc and increment
extensionCounter(db, { doc, onSnapshot }, "pages/home", "visits");
// @ts-expect-error: there is no such option
extensionCounter(db, { doc, increment, onSnapshot, setDoc }, "pages/home", "visits", { shard: "a" });
// @ts-expect-error: the view is a number, not a snapshot
visits.onSnapshot((snapshot: { data(): number }) => snapshot.data());
// @ts-expect-error: TRANSIENT is shared by every client: not to be changed
TRANSIENT.add("functions/not-found");
