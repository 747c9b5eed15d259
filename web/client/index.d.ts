// The types of @counters/client (counters-client.js), written by hand: the module is plain
// JavaScript and refers to these from its JSDoc. What the client does is said at the top of
// counters-client.js.

/** One increment, kept durably from the tap until the rollup includes it. */
export interface Tap {
  /** the request_id */
  id: string;
  counter: string;
  by: number;
  /** sent only after the counter's earlier taps were answered (a toggle) */
  ordered: boolean;
  /** the order taps were made in */
  seq: number;
  /** RFC 3339, once the server applied it; null while queued */
  committedAt: string | null;
  /** the user it is (or will be) sent as; fixed once attempted */
  uid: string | null;
  /** whether it was ever sent (the server may have applied it) */
  attempted: boolean;
  /** ms since the epoch of its first send (device clock) */
  firstSentAt: number | null;
  /** flushes whose retries all failed transiently */
  failedRounds: number;
  /** ms since the epoch when the server acknowledged it */
  ackedAt: number | null;
}

/** A counter's rollup as its document tells it. */
export interface Rollup {
  count: number;
  /** microseconds since the epoch: the instant the count is exact for (`updated_at`) */
  asOf: bigint;
}

/** What an app shows for one counter. */
export interface CounterState {
  /** the rollup's count; null before the first snapshot */
  rollup: number | null;
  /** the sum of acknowledged taps the rollup does not include yet */
  unconfirmed: number;
  /** the sum of taps not answered yet (queued or in flight) */
  pending: number;
  /** rollup + unconfirmed + pending (null without a rollup) */
  shown: number | null;
  /** false once a snapshot said the counter does not exist */
  exists: boolean;
  /** the counter document's fields */
  data: Record<string, any> | null;
}

/** The `increment` callable's answer (docs/api.md). */
export interface IncrementAnswer {
  applied: boolean;
  /** RFC 3339 to the microsecond; also on a retry of a request that had been applied */
  committed_at?: string;
}

/** How the client reaches the backend: `firebaseTransport`, or a fake in tests. */
export interface Transport {
  increment(data: { counter: string; by: number; request_id: string }): Promise<IncrementAnswer>;
  getCount(data: { counter: string }): Promise<Record<string, any>>;
  /** Calls onData with the counter document's fields (null when it does not exist), now and on
   * every change; returns the function that stops listening. */
  listen(
    counter: string,
    onData: (data: Record<string, any> | null) => void,
    onError: (error: Error) => void,
  ): () => void;
}

/** Codes a retry with the same request_id may fix (`functions/internal`, `unavailable`, ...). */
export declare const TRANSIENT: ReadonlySet<string>;

/** `promise`, or a `functions/deadline-exceeded` failure after `ms` (a transient code). */
export declare function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T>;

/** Microseconds since the epoch of an RFC 3339 string; throws on anything else. */
export declare function rfc3339Micros(text: string): bigint;

/** Microseconds since the epoch of a Firestore Timestamp (nanoseconds truncated). */
export declare function timestampMicros(ts: { seconds: number; nanoseconds: number }): bigint;

/** A request id the contract accepts (A-Z a-z 0-9 _ -): `${prefix}-` and 32 random hex digits. */
export declare function newRequestId(prefix?: string): string;

export interface RetryOptions {
  /** calls in all, the first included (default 6) */
  attempts?: number;
  /** the error codes worth a retry (default TRANSIENT) */
  transient?: ReadonlySet<string>;
  onRetry?: (attempt: number, error: unknown) => void;
  /** how to wait between calls (tests pass their own) */
  wait?: (ms: number) => Promise<void>;
}

/** Call `send` until it answers or fails for good: transient failures are retried with backoff. */
export declare function withRetries<T>(send: () => Promise<T>, options?: RetryOptions): Promise<T>;

/** The durable store of taps: one IndexedDB object store keyed by request_id. */
export declare class TapStore {
  constructor(db: IDBDatabase);
  db: IDBDatabase;
  /** Opens (creating it the first time) the database `name` (default "counters-client"). */
  static open(name?: string, factory?: IDBFactory): Promise<TapStore>;
  /** Resolves once the write is committed durably. */
  put(tap: Tap): Promise<IDBValidKey>;
  delete(id: string): Promise<undefined>;
  /** Every stored tap, in the order they were made. */
  all(): Promise<Tap[]>;
  close(): void;
}

export interface CountersClientOptions {
  transport: Transport;
  store: TapStore;
  /** The signed-in user's uid, null when signed out: nothing is sent then; call flush() once
   * signed in (and after a user change). */
  user: () => string | null;
  /** Whether sending may succeed (navigator.onLine); call flush() when it becomes true.
   * Default: always. */
  online?: () => boolean;
  /** At most this many increments at once (default 4). */
  inFlight?: number;
  /** The server answered a tap. */
  onAnswered?: (tap: Tap, answer: IncrementAnswer) => void;
  /** A tap is dropped from the queue uncounted or maybe counted: the server refused it for good
   * (e.g. PERMISSION_DENIED, RESOURCE_EXHAUSTED), or the error's code is
   * `counters/user-changed`, `counters/expired` or `counters/gave-up`. */
  onRejected?: (tap: Tap, error: unknown) => void;
  /** A send failed; it will be retried. */
  onTransientError?: (error: unknown) => void;
  /** When a tap's retries are exhausted online, the next flush starts this much later (default
   * 15000 ms). */
  retryLaterMs?: number;
  /** A transport call not answered by then is a transient failure (default 30000 ms). */
  timeoutMs?: number;
  /** An attempted tap older than this is not sent again: the server remembers request ids for
   * 24 h (default 23 h). */
  markerTtlMs?: number;
  /** A tap whose retries ran out this many times is dropped (default 40). */
  maxFailedRounds?: number;
  /** Acknowledged taps are forgotten after this long, watched or not (default 1 h). */
  ackedTtlMs?: number;
  /** The clock, ms since the epoch (default Date.now). */
  now?: () => number;
  /** How retries wait (tests pass their own). */
  wait?: (ms: number) => Promise<void>;
}

/** Counts taps exactly once and tells what to show for each counter it watches. */
export declare class CountersClient {
  /** Throws a TypeError without `user`. */
  constructor(options: CountersClientOptions);
  /** The callbacks may also be set after construction. */
  onAnswered: (tap: Tap, answer: IncrementAnswer) => void;
  onRejected: (tap: Tap, error: unknown) => void;
  onTransientError: (error: unknown) => void;
  /** Load the taps an earlier session left (queued or not yet in the rollup) and send them. */
  start(): Promise<void>;
  /** Follow a counter: `onChange` gets its state now and on every change. Returns unsubscribe. */
  watch(counter: string, onChange: (state: CounterState) => void, onError?: (error: unknown) => void): () => void;
  state(counter: string): CounterState;
  /** Count one tap: stored durably first, then sent. Resolves once stored, not once sent.
   * `ordered`: a toggle, sent after the counter's earlier taps were answered. */
  tap(counter: string, options?: { by?: number; ordered?: boolean }): Promise<Tap>;
  /** The taps not answered yet, oldest first (of one counter when named). */
  queued(counter?: string): Tap[];
  /** Send what is queued. Resolves once nothing more can be sent now. */
  flush(): Promise<void>;
}

/** What firebaseTransport uses of `firebase/firestore`: pass `{ doc, onSnapshot }`. */
export interface FirestoreFunctions {
  doc(firestore: any, path: string, ...pathSegments: string[]): any;
  onSnapshot(
    reference: any,
    onNext: (snapshot: { exists(): boolean; data(): Record<string, any> | undefined }) => void,
    onError?: (error: Error) => void,
  ): () => void;
}

/** What firebaseTransport uses of `firebase/functions`: pass `{ httpsCallable }`. */
export interface FunctionsFunctions {
  httpsCallable(functions: any, name: string): (data?: any) => Promise<{ data: any }>;
}

/** Where the backend keeps its functions and counters. */
export interface FirebaseTransportOptions {
  /** The `prefix` of the functions' codebase in the backend's firebase.json: the callables are
   * then `${functionPrefix}-increment` and `${functionPrefix}-get_count`. A lowercase letter,
   * then lowercase letters, digits and dashes, not ending with a dash; at most 30 characters.
   * Default "": `increment` and `get_count`. */
  functionPrefix?: string;
  /** Counter documents are `${collectionPrefix}counters/{id}`: lowercase letters, digits and
   * underscores, at most 40. Default "". */
  collectionPrefix?: string;
}

/**
 * The transport over the Firebase JS SDK: the `increment` and `get_count` callables and a
 * listener on `${collectionPrefix}counters/{counter}`. `app.db` is the Firestore instance (for a
 * named database, `getFirestore(app, "name")`), `app.functions` the Functions instance of the
 * backend's region. Throws a TypeError on an unknown or malformed option.
 */
export declare function firebaseTransport(
  app: { db: unknown; functions: unknown },
  firestore: FirestoreFunctions,
  functions: FunctionsFunctions,
  options?: FirebaseTransportOptions,
): Transport;

/**
 * The id of the counter the declaration `name` (a collection or extension counter,
 * `name:{placeholder}`) keeps for `value`, escaped as the backend's functions escape it: A-Z a-z
 * 0-9 _ - stay, every other UTF-8 byte is `.` and two upper-case hex digits; past 128
 * characters, the head that fits, `..` and 32 hex digits of the value's SHA-256 (crypto.subtle).
 * `declaredCounterId("visits", "été")` is "visits:.C3.A9t.C3.A9". Rejects with a TypeError when
 * `name` is empty or holds ':'.
 */
export declare function declaredCounterId(name: string, value: string): Promise<string>;

/** What extensionCounter uses of `firebase/firestore`: pass `{ doc, increment, onSnapshot, setDoc }`. */
export interface ExtensionFirestoreFunctions {
  doc(firestore: any, path: string, ...pathSegments: string[]): any;
  increment(n: number): any;
  setDoc(reference: any, data: any, options: { merge: boolean }): Promise<void>;
  onSnapshot(
    reference: any,
    onNext: (snapshot: { get(fieldPath: string): any }) => void,
    onError?: (error: Error) => void,
  ): () => void;
}

export interface ExtensionCounterOptions {
  /** This device's shard id: 1 to 64 of A-Z a-z 0-9 - (what the backend's rules accept). Default:
   * the one the extension's web SDK keeps in the cookie FIRESTORE_COUNTER_SHARD_ID (a UUID,
   * written there the first time, for 30 days); without `document` (a worker, Node), a new UUID. */
  shardId?: string;
}

/** A counter kept in the Distributed Counter extension's layout, as its web SDK speaks to it. */
export interface ExtensionCounter {
  /** The shard this device increments: `${documentPath}/_counter_shards_/${shardId}`. */
  readonly shardId: string;
  /** Merges `{[field]: increment(n)}` into this device's shard (setDoc with `merge: true`); a dotted
   * field is written as nested maps. Resolves once Firestore accepted the write; rejects with its
   * error (`permission-denied`: the rules refused the amount or the user), or with a TypeError
   * when `n` is not a safe integer. */
  incrementBy(n: number): Promise<void>;
  /** Follows the extension's view: the document's field + this device's shard's + its four
   * partials' (a missing document or a non-number counts 0). `onNext` gets the sum once every one
   * of the six documents reported, then whenever it changes; this device's increments show at
   * once. A listener's failure stops them all and is passed to `onError`. Returns unsubscribe. */
  onSnapshot(onNext: (value: number) => void, onError?: (error: Error) => void): () => void;
}

/**
 * A counter of the Distributed Counter extension's layout: `documentPath` (e.g. "pages/home") and
 * its `field` (e.g. "visits", or a dotted path), with `db` the Firestore instance. The backend
 * publishes its total as `counters/${await declaredCounterId(name, documentId)}` (e.g.
 * `visits:home`), which firebaseTransport's listener follows like any counter. Throws a TypeError
 * on a malformed path, field or shard id, or an unknown option.
 */
export declare function extensionCounter(
  db: unknown,
  firestore: ExtensionFirestoreFunctions,
  documentPath: string,
  field: string,
  options?: ExtensionCounterOptions,
): ExtensionCounter;
