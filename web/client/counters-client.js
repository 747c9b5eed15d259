// The counters client: what an app needs to count taps exactly once and show the count right,
// online or not. It knows nothing of the page: it is the package @counters/client, which the web
// app installs as another app would (README.md); its types, what each field means, are in index.d.ts.
//
// - Taps are queued durably (IndexedDB) with their request_id before anything is sent, sent when
//   the browser is online, and removed only once the server answered. A reload, an app restart or
//   a lost answer re-sends the same request_id, which the server counts at most once (24 h).
// - The shown count of a counter is
//     rollup.count + acknowledged taps the rollup does not include yet + queued taps (pending).
//   The rollup is exact as of its `updated_at`, so an acknowledged tap is in it iff its
//   `committed_at` <= `updated_at`. Instants are compared as BigInt microseconds: JS Dates only
//   have milliseconds, and two commits a few microseconds apart must not be confused. An
//   `applied: false` answer to a retry of a request that had landed carries the first
//   application's `committed_at`: the tap stays acknowledged-unconfirmed like an applied one. One
//   without it (a no-op toggle of a `unique` counter) has nothing to count and is dropped.
//   Acknowledged taps stay in the store until the rollup includes them (or for `ackedTtlMs`), so
//   the count stays right across a reload too.
// - Taps on a `unique` counter (a toggle: +1 then -1) are sent one at a time, in order.
// - The server scopes request ids per user and remembers them for 24 h. A tap records the user
//   it was first sent as: once attempted, it is only ever sent as that user, and not after
//   `markerTtlMs` (the server may have forgotten it: a re-send could count twice). Such a tap is
//   dropped and reported through onRejected instead. A tap never sent is safe at any age.
// - Every transport call is bounded by `timeoutMs` (App Check or Auth waiting forever for a token
//   must not stall the queue): a timeout is a transient failure, retried with the same id.
//
// - A counter kept in the layout of Firebase's Distributed Counter extension is written and shown
//   as the extension's web SDK does (`extensionCounter`, at the end): its total is a counter like
//   any other, counters/{id} with the id `declaredCounterId` gives.
//
// Firestore and Functions come in through `firebaseTransport`, so the logic is tested without them.

/**
 * @typedef {import("./index.js").Tap} Tap
 * @typedef {import("./index.js").Rollup} Rollup
 * @typedef {import("./index.js").CounterState} CounterState
 * @typedef {import("./index.js").IncrementAnswer} IncrementAnswer
 * @typedef {import("./index.js").Transport} Transport
 * @typedef {import("./index.js").CountersClientOptions} CountersClientOptions
 * @typedef {import("./index.js").RetryOptions} RetryOptions
 * @typedef {import("./index.js").FirebaseTransportOptions} FirebaseTransportOptions
 */

// Codes a retry with the same request_id may fix: network failures surface as `internal`
// (the SDK maps "no HTTP response" to it), overload as `unavailable`, a timeout (ours or the
// SDK's) as `deadline-exceeded`. Retrying is safe for all of them because the request_id makes
// the increment exactly-once. Not `resource-exhausted`: the server's write policy (a
// `min_interval_s` counter's "too soon") answers it, and a retry is refused the same way.
export const TRANSIENT = new Set([
  "functions/internal",
  "functions/unavailable",
  "functions/deadline-exceeded",
  "functions/aborted",
  "functions/unknown",
]);

// The SDK sends a callable without its ID token or App Check token when getting one failed; the
// server then answers UNAUTHENTICATED without counting. The tap waits for the next flush.
const NOT_SIGNED_IN = "functions/unauthenticated";

/** An error with a `code`, as the SDK's are. @param {string} code @param {string} message */
const coded = (code, message) => Object.assign(new Error(message), { code });

/** `promise`, or a `functions/deadline-exceeded` failure after `ms` (a transient code).
 * @template T @param {Promise<T>} promise @param {number} ms @returns {Promise<T>} */
export function withTimeout(promise, ms) {
  let timer;
  const timeout = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(coded("functions/deadline-exceeded", `no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$/;

/** Microseconds since the epoch of an RFC 3339 string, fraction kept to the microsecond.
 * @param {string} text
 * @returns {bigint} */
export function rfc3339Micros(text) {
  const m = RFC3339.exec(text);
  if (!m) throw new Error(`not an RFC 3339 time: ${text}`);
  const [, y, mo, d, h, mi, s, fraction = "", zone] = m;
  let seconds = Date.UTC(+y, +mo - 1, +d, +h, +mi, +s) / 1000;
  if (zone !== "Z") {
    const sign = zone[0] === "-" ? -1 : 1;
    seconds -= sign * (Number(zone.slice(1, 3)) * 3600 + Number(zone.slice(4, 6)) * 60);
  }
  return BigInt(seconds) * 1000000n + BigInt((fraction + "000000").slice(0, 6));
}

/** Microseconds since the epoch of a Firestore Timestamp (nanoseconds truncated).
 * @param {{seconds: number, nanoseconds: number}} ts
 * @returns {bigint} */
export function timestampMicros(ts) {
  return BigInt(ts.seconds) * 1000000n + BigInt(Math.floor(ts.nanoseconds / 1000));
}

/** A request id the contract accepts (A-Z a-z 0-9 _ -), from the CSPRNG.
 * @param {string} [prefix]
 * @returns {string} */
export function newRequestId(prefix = "tap") {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `${prefix}-` + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Call `send` until it answers or fails for good: transient failures are retried with backoff
 * (the caller keeps the same request_id, so a retry never counts twice).
 * @template T
 * @param {() => Promise<T>} send
 * @param {RetryOptions} [options]
 * @returns {Promise<T>} */
export async function withRetries(send, options = {}) {
  const { attempts = 6, transient = TRANSIENT, onRetry = () => {}, wait = sleep } = options;
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await send();
    } catch (error) {
      if (!transient.has(error?.code) || attempt >= attempts) throw error;
      onRetry(attempt, error);
      await wait(Math.min(4000, 250 * 2 ** (attempt - 1)));
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const STORE = "taps";

/** The durable store of taps: one IndexedDB object store keyed by request_id. */
export class TapStore {
  /** @param {IDBDatabase} db */
  constructor(db) {
    this.db = db;
  }

  /** @param {string} [name] @param {IDBFactory} [factory] @returns {Promise<TapStore>} */
  static open(name = "counters-client", factory = globalThis.indexedDB) {
    return new Promise((resolve, reject) => {
      const request = factory.open(name, 1);
      request.onupgradeneeded = () => request.result.createObjectStore(STORE, { keyPath: "id" });
      request.onsuccess = () => resolve(new TapStore(request.result));
      request.onerror = () => reject(request.error);
    });
  }

  /** @param {Tap} tap */
  put(tap) {
    return this.#run("readwrite", (store) => store.put(tap));
  }

  /** @param {string} id */
  delete(id) {
    return this.#run("readwrite", (store) => store.delete(id));
  }

  /** Every stored tap, in the order they were made. @returns {Promise<Tap[]>} */
  async all() {
    const taps = await this.#run("readonly", (store) => store.getAll());
    return taps.sort((a, b) => a.seq - b.seq);
  }

  close() {
    this.db.close();
  }

  #run(mode, operation) {
    return new Promise((resolve, reject) => {
      // Strict: a tap is on disk, not only in the OS's buffers, once put() resolves.
      const transaction = this.db.transaction(STORE, mode, { durability: "strict" });
      const request = operation(transaction.objectStore(STORE));
      // Resolved once committed (durable), not when the request succeeds.
      transaction.oncomplete = () => resolve(request.result);
      transaction.onerror = () => reject(transaction.error);
      transaction.onabort = () => reject(transaction.error);
    });
  }
}

const HOUR_MS = 3600_000;

/** Counts taps exactly once and tells what to show for each counter it watches. */
export class CountersClient {
  /** @param {CountersClientOptions} options */
  constructor({ transport, store, user, online = () => true, inFlight = 4, onAnswered = () => {},
    onRejected = () => {}, onTransientError = () => {}, retryLaterMs = 15000, timeoutMs = 30000,
    markerTtlMs = 23 * HOUR_MS, maxFailedRounds = 40, ackedTtlMs = HOUR_MS, now = Date.now,
    wait = sleep }) {
    if (typeof user !== "function") throw new TypeError("CountersClient needs user(): request ids are per user");
    Object.assign(this, { transport, store, user, online, inFlight, onAnswered, onRejected,
      onTransientError, retryLaterMs, timeoutMs, markerTtlMs, maxFailedRounds, ackedTtlMs, now, wait });
    /** @type {Map<string, Tap>} every tap not yet in the rollup, by request_id */
    this.taps = new Map();
    /** @type {Set<string>} request_ids being sent */
    this.sending = new Set();
    /** @type {Set<string>} request_ids whose first write is not committed yet: not sent before */
    this.storing = new Set();
    /** @type {Map<string, {rollup: Rollup | null, exists: boolean, data: any,
     *   listeners: Set<Function>, errorListeners: Set<Function>, stop: () => void}>} */
    this.counters = new Map();
    this.seq = 0;
    this.flushing = null;
    this.again = false;
    this.later = null;
  }

  /** Load the taps an earlier session left (queued or not yet in the rollup) and send them. */
  async start() {
    for (const tap of await this.store.all()) {
      this.taps.set(tap.id, tap);
      this.seq = Math.max(this.seq, tap.seq + 1);
    }
    for (const tap of [...this.taps.values()]) {
      if (this.#expired(tap)) await this.#drop(tap, coded("counters/expired", "sent more than a day ago and never answered"));
    }
    this.#pruneOld();
    for (const counter of this.counters.keys()) this.#changed(counter);
    return this.flush();
  }

  /**
   * Follow a counter: `onChange` gets its state now and on every change. Returns unsubscribe.
   * @param {string} counter
   * @param {(state: CounterState) => void} onChange
   * @param {(error: any) => void} [onError] the listener failed
   * @returns {() => void}
   */
  watch(counter, onChange, onError = () => {}) {
    let entry = this.counters.get(counter);
    if (!entry) {
      const created = { rollup: null, exists: true, data: null, listeners: new Set(),
        errorListeners: new Set(), stop: () => {} };
      this.counters.set(counter, created);
      created.stop = this.transport.listen(counter, (data) => this.#onDocument(counter, data),
        (error) => created.errorListeners.forEach((listener) => listener(error)));
      entry = created;
    }
    const { listeners, errorListeners } = entry;
    listeners.add(onChange);
    errorListeners.add(onError);
    onChange(this.state(counter));
    return () => {
      listeners.delete(onChange);
      errorListeners.delete(onError);
      if (listeners.size === 0 && this.counters.get(counter) === entry) {
        entry.stop();
        this.counters.delete(counter);
      }
    };
  }

  /** @param {string} counter @returns {CounterState} */
  state(counter) {
    const entry = this.counters.get(counter);
    const rollup = entry?.rollup ?? null;
    let unconfirmed = 0;
    let pending = 0;
    for (const tap of this.taps.values()) {
      if (tap.counter !== counter) continue;
      if (tap.committedAt === null) pending += tap.by;
      else if (!rollup || rfc3339Micros(tap.committedAt) > rollup.asOf) unconfirmed += tap.by;
    }
    return {
      rollup: rollup ? rollup.count : null,
      unconfirmed,
      pending,
      shown: rollup ? rollup.count + unconfirmed + pending : null,
      exists: entry ? entry.exists : true,
      data: entry ? entry.data : null,
    };
  }

  /**
   * Count one tap: stored durably first, then sent (now when online, else at the next flush).
   * Resolves once the tap is stored, not once it is sent. The tap is in queued() at once, so
   * that a toggle's next `by` (computed from queued()) sees it even before the write commits.
   * @param {string} counter
   * @param {{by?: number, ordered?: boolean}} [options] ordered: a toggle, sent in order
   * @returns {Promise<Tap>}
   */
  async tap(counter, { by = 1, ordered = false } = {}) {
    /** @type {Tap} */
    const tap = { id: newRequestId(), counter, by, ordered, seq: this.seq++, committedAt: null,
      uid: this.user(), attempted: false, firstSentAt: null, failedRounds: 0, ackedAt: null };
    this.taps.set(tap.id, tap);
    this.storing.add(tap.id);
    try {
      await this.store.put(tap);
    } catch (error) {
      this.taps.delete(tap.id);
      throw error;
    } finally {
      this.storing.delete(tap.id);
    }
    this.#changed(counter);
    void this.flush();
    return tap;
  }

  /** The taps not answered yet, oldest first (of one counter when named).
   * @param {string} [counter] @returns {Tap[]} */
  queued(counter) {
    return [...this.taps.values()]
      .filter((tap) => tap.committedAt === null && (counter === undefined || tap.counter === counter))
      .sort((a, b) => a.seq - b.seq);
  }

  /** Send what is queued. Resolves once nothing more can be sent now: everything answered, or
   * offline or signed out, or a tap's retries exhausted (it stays queued; a later flush sends it). */
  flush() {
    if (this.flushing) {
      this.again = true;
      return this.flushing;
    }
    clearTimeout(this.later);
    this.flushing = (async () => {
      let stalled = false;
      do {
        this.again = false;
        stalled = await this.#sendAll();
      } while (this.again);
      if (stalled && this.#canSend()) this.later = setTimeout(() => void this.flush(), this.retryLaterMs);
    })().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  #canSend() {
    return this.online() && this.user() !== null;
  }

  /** @returns {Promise<boolean>} whether a tap stayed queued after its retries */
  async #sendAll() {
    const running = new Set();
    let stalled = false;
    while (this.#canSend() && !stalled) {
      const next = this.#eligible();
      if (next.length === 0 && running.size === 0) break;
      for (const tap of next) {
        const sent = this.#send(tap).then((answered) => {
          stalled ||= !answered;
          running.delete(sent);
        });
        running.add(sent);
      }
      await Promise.race(running);
    }
    await Promise.all(running);
    return stalled;
  }

  /** The queued taps that may start now, oldest first, at most `inFlight` in flight in all; an
   * ordered tap only once every earlier tap of its counter was answered. */
  #eligible() {
    const out = [];
    const earlier = new Set();
    for (const tap of this.queued()) {
      if (this.sending.size >= this.inFlight) break;
      const waits = tap.ordered && earlier.has(tap.counter);
      earlier.add(tap.counter);
      if (this.sending.has(tap.id) || this.storing.has(tap.id) || waits) continue;
      this.sending.add(tap.id);
      out.push(tap);
    }
    return out;
  }

  /** An attempted tap the server may have forgotten: sent again, it could count twice. */
  #expired(tap) {
    return tap.committedAt === null && tap.attempted && tap.firstSentAt !== null &&
      this.now() - tap.firstSentAt > this.markerTtlMs;
  }

  /** Send one tap. Returns false when it stays queued (retries exhausted, or not signed in). */
  async #send(tap) {
    try {
      const uid = this.user();
      if (tap.attempted && tap.uid !== uid) {
        await this.#drop(tap, coded("counters/user-changed", "made by another user, who may have been counted for it"));
        return true;
      }
      if (this.#expired(tap)) {
        await this.#drop(tap, coded("counters/expired", "sent more than a day ago and never answered"));
        return true;
      }
      if (!tap.attempted) {
        // Recorded before the first send: from then on the server may have applied it as `uid`.
        tap = { ...tap, uid, attempted: true, firstSentAt: this.now() };
        this.taps.set(tap.id, tap);
        await this.store.put(tap);
      }
      const sent = tap;
      const answer = await withRetries(
        () => withTimeout(this.transport.increment({ counter: sent.counter, by: sent.by, request_id: sent.id }),
          this.timeoutMs),
        { onRetry: (attempt, error) => this.onTransientError(error), wait: this.wait },
      );
      // A retry of a request that had landed answers applied: false with its first commit time.
      if (answer.applied || answer.committed_at !== undefined) {
        rfc3339Micros(answer.committed_at ?? ""); // a missing or malformed time fails loudly
        const acked = { ...tap, committedAt: answer.committed_at, ackedAt: this.now() };
        await this.store.put(acked);
        this.taps.set(tap.id, acked);
        this.#prune(tap.counter);
      } else {
        await this.#forget(tap);
      }
      this.onAnswered(tap, answer);
      this.#changed(tap.counter);
      return true;
    } catch (error) {
      if (error?.code === NOT_SIGNED_IN) {
        this.onTransientError(error);
        return false;
      }
      if (TRANSIENT.has(error?.code)) {
        this.onTransientError(error);
        const failed = { ...tap, failedRounds: (tap.failedRounds ?? 0) + 1 };
        if (failed.failedRounds < this.maxFailedRounds) {
          this.taps.set(tap.id, failed);
          await this.store.put(failed);
          return false;
        }
        await this.#drop(failed, coded("counters/gave-up", `still failing after ${failed.failedRounds} rounds of retries: ${error.message}`));
        return true;
      }
      await this.#drop(tap, error);
      return true;
    } finally {
      this.sending.delete(tap.id);
    }
  }

  /** Drop a tap from the queue and report why. */
  async #drop(tap, error) {
    await this.#forget(tap);
    this.#changed(tap.counter);
    this.onRejected(tap, error);
  }

  async #forget(tap) {
    await this.store.delete(tap.id);
    this.taps.delete(tap.id);
  }

  /** Drop the acknowledged taps the rollup now includes, and those acknowledged long ago. */
  #prune(counter) {
    this.#pruneOld();
    const rollup = this.counters.get(counter)?.rollup;
    if (!rollup) return;
    for (const tap of [...this.taps.values()]) {
      if (tap.counter === counter && tap.committedAt !== null && rfc3339Micros(tap.committedAt) <= rollup.asOf) {
        this.taps.delete(tap.id);
        void this.store.delete(tap.id);
      }
    }
  }

  /** Acknowledged taps of counters nobody watches would stay forever: the rollup has long
   * included those acknowledged `ackedTtlMs` ago. */
  #pruneOld() {
    for (const tap of [...this.taps.values()]) {
      if (tap.committedAt !== null && this.now() - (tap.ackedAt ?? 0) > this.ackedTtlMs) {
        this.taps.delete(tap.id);
        void this.store.delete(tap.id);
      }
    }
  }

  #onDocument(counter, data) {
    const entry = this.counters.get(counter);
    if (!entry) return;
    entry.exists = data !== null;
    entry.data = data;
    entry.rollup = data === null ? null : {
      count: Number(data.count ?? 0),
      asOf: data.updated_at ? timestampMicros(data.updated_at) : 0n,
    };
    this.#prune(counter);
    this.#changed(counter);
  }

  #changed(counter) {
    const entry = this.counters.get(counter);
    if (!entry) return;
    const state = this.state(counter);
    for (const listener of entry.listeners) listener(state);
  }
}

// Where a backend deployed under prefixes keeps its functions and counters. firebase-tools names
// the functions of a codebase with a "prefix" `${prefix}-${id}`, and refuses a prefix of any other
// shape than this (its validatePrefix).
const FUNCTION_PREFIX = /^([a-z](?:[a-z0-9-]*[a-z0-9])?)?$/;
const FUNCTION_PREFIX_MAX = 30;
const COLLECTION_PREFIX = /^[a-z0-9_]{0,40}$/;

/** The callables' and the counters collection's names; a bad or unknown option is a TypeError,
 * so that a typo never sends taps to a function or collection that does not exist.
 * @param {FirebaseTransportOptions} options */
function backendNames({ functionPrefix = "", collectionPrefix = "", ...unknown }) {
  const extra = Object.keys(unknown);
  if (extra.length > 0) {
    throw new TypeError(`firebaseTransport: unknown option ${extra.join(", ")} (there are functionPrefix and collectionPrefix)`);
  }
  if (typeof functionPrefix !== "string" || functionPrefix.length > FUNCTION_PREFIX_MAX || !FUNCTION_PREFIX.test(functionPrefix)) {
    throw new TypeError(`firebaseTransport: functionPrefix ${JSON.stringify(functionPrefix)} is not a codebase prefix: ` +
      `a lowercase letter, then lowercase letters, digits and dashes, not ending with a dash, at most ${FUNCTION_PREFIX_MAX} characters`);
  }
  if (typeof collectionPrefix !== "string" || !COLLECTION_PREFIX.test(collectionPrefix)) {
    throw new TypeError(`firebaseTransport: collectionPrefix ${JSON.stringify(collectionPrefix)} is not ` +
      "0 to 40 lowercase letters, digits and underscores");
  }
  const callable = (name) => (functionPrefix ? `${functionPrefix}-${name}` : name);
  return { increment: callable("increment"), getCount: callable("get_count"), counters: `${collectionPrefix}counters` };
}

/**
 * The transport over the Firebase JS SDK: the `increment` and `get_count` callables and a
 * listener on counters/{counter}, under the prefixes `options` names. Pass the modules so that
 * this file imports no SDK itself.
 * @param {{db: unknown, functions: unknown}} app
 * @param {import("./index.js").FirestoreFunctions} firestore firebase/firestore
 * @param {import("./index.js").FunctionsFunctions} functionsSdk firebase/functions
 * @param {FirebaseTransportOptions} [options]
 * @returns {Transport}
 */
export function firebaseTransport({ db, functions }, { doc, onSnapshot }, { httpsCallable }, options = {}) {
  const names = backendNames(options);
  const increment = httpsCallable(functions, names.increment);
  const getCount = httpsCallable(functions, names.getCount);
  return {
    increment: async (data) => (await increment(data)).data,
    getCount: async (data) => (await getCount(data)).data,
    listen: (counter, onData, onError) =>
      onSnapshot(doc(db, names.counters, counter), (snap) => onData(snap.exists() ? snap.data() : null), onError),
  };
}

// Counter ids from values: the id of the counter a declaration `name:{placeholder}` (a collection
// or extension counter, docs/api.md "Counter ids from values") keeps for one value, as the
// backend's functions escape it (functions/counting/features/collections.py, escape): A-Z a-z
// 0-9 _ - stay, every other UTF-8 byte is "." and two upper-case hex digits; an id past
// MAX_COUNTER_ID characters keeps the escaped head that fits (never half an escape) and ends in
// ".." and the first 32 hex digits of the value's SHA-256.
const MAX_COUNTER_ID = 128;
const KEPT = /^[A-Za-z0-9_-]$/;
const HASH_MARK = "..";
const HASH_HEX = 32;

const hexOf = (bytes) => Array.from(bytes, (b) => b.toString(16).toUpperCase().padStart(2, "0"));

/**
 * The id of the counter the declaration `name` keeps for `value`: `counters/visits:{page}` of the
 * page "été" is `declaredCounterId("visits", "été")`, "visits:.C3.A9t.C3.A9". Asynchronous: a
 * long value's id ends in its SHA-256 (crypto.subtle, which a page has in a secure context).
 * @param {string} name @param {string} value @returns {Promise<string>}
 */
export async function declaredCounterId(name, value) {
  if (typeof name !== "string" || name === "" || name.includes(":") || typeof value !== "string") {
    throw new TypeError("declaredCounterId: a declaration's name (without ':') and a string value");
  }
  const room = MAX_COUNTER_ID - name.length - 1;
  const encoder = new TextEncoder();
  let escaped = "";
  for (const char of value) {
    escaped += KEPT.test(char) ? char : hexOf(encoder.encode(char)).map((h) => `.${h}`).join("");
  }
  if (escaped.length > room) {
    const digest = await crypto.subtle.digest("SHA-256", encoder.encode(value));
    let head = escaped.slice(0, room - HASH_MARK.length - HASH_HEX);
    const cut = head.lastIndexOf(".");
    if (cut >= head.length - 2) head = head.slice(0, cut); // never half an escape
    escaped = `${head}${HASH_MARK}${hexOf(new Uint8Array(digest)).join("").toLowerCase().slice(0, HASH_HEX)}`;
  }
  return `${name}:${escaped}`;
}

// The Distributed Counter extension's protocol (firestore-counter), as its web SDK speaks it, for
// a counter the backend keeps in that layout (docs/api.md "Extension counters"):
// - a device picks a shard id once, a UUID the SDK keeps in the cookie FIRESTORE_COUNTER_SHARD_ID
//   (30 days, path /), shared here with any copy of the SDK on the same site;
// - it increments by merging {field: increment(n)} into {document}/_counter_shards_/{shard id};
// - it shows the document's field + its own shard's + the partials' named "\t" + id[0:4],
//   "\t\t" + id[0:3], "\t\t\t" + id[0:2], "\t\t\t\t" + id[0:1]: a view that has this device's
//   increments at once (Firestore's latency compensation), and everyone's once the backend (or
//   the extension) moved their shards into the document.
// The backend counts every document of the layout into counters/{declaredCounterId(...)}, the
// total, which firebaseTransport's listener (or CountersClient.watch) follows like any counter.
const SHARDS = "_counter_shards_";
const SHARD_COOKIE = "FIRESTORE_COUNTER_SHARD_ID";
const SHARD_COOKIE_DAYS = 30;
// What the backend's generated rules accept as a shard id (a UUID's characters).
const SHARD_ID = /^[A-Za-z0-9-]{1,64}$/;
// A declaration's field: a dotted path of at most 8 names (docs/api.md).
const FIELD_PATH = /^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,7}$/;

/** A version 4 UUID from the CSPRNG (crypto.randomUUID needs a secure context). */
function newShardId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** This device's shard id, as the extension's web SDK keeps it: the cookie's, or a new one written
 * there. Without cookies (no `document`: a worker, Node), a new id each time. */
function deviceShardId() {
  const jar = globalThis.document;
  if (jar === undefined) return newShardId();
  const found = new RegExp(`(?:^|; )${SHARD_COOKIE}=([^;]*)`).exec(jar.cookie);
  if (found && SHARD_ID.test(found[1])) return found[1];
  const shardId = newShardId();
  const expires = new Date(Date.now() + SHARD_COOKIE_DAYS * 24 * HOUR_MS).toUTCString();
  jar.cookie = `${SHARD_COOKIE}=${shardId}; expires=${expires}; path=/`;
  return shardId;
}

/**
 * A counter kept in the Distributed Counter extension's layout, spoken to as the extension's web
 * SDK does: `incrementBy(n)` merges `{[field]: increment(n)}` into this device's shard of
 * `documentPath`, `onSnapshot` follows the document's field plus the shard's and its partials'.
 * Pass the SDK's functions so that this file imports no SDK itself. A malformed argument or an
 * unknown option is a TypeError.
 * @param {unknown} db the Firestore instance
 * @param {import("./index.js").ExtensionFirestoreFunctions} firestore firebase/firestore
 * @param {string} documentPath e.g. "pages/home"
 * @param {string} field e.g. "visits"
 * @param {import("./index.js").ExtensionCounterOptions} [options]
 * @returns {import("./index.js").ExtensionCounter}
 */
export function extensionCounter(db, { doc, increment, onSnapshot, setDoc }, documentPath, field, options = {}) {
  const { shardId: chosen, ...unknown } = options;
  const extra = Object.keys(unknown);
  if (extra.length > 0) throw new TypeError(`extensionCounter: unknown option ${extra.join(", ")} (there is shardId)`);
  const segments = typeof documentPath === "string" ? documentPath.split("/") : [];
  if (segments.length === 0 || segments.length % 2 !== 0 || segments.includes("")) {
    throw new TypeError(`extensionCounter: ${JSON.stringify(documentPath)} is not a document's path (collection/id/...)`);
  }
  if (typeof field !== "string" || !FIELD_PATH.test(field)) {
    throw new TypeError(`extensionCounter: field ${JSON.stringify(field)} is not a dotted path of at most 8 names of A-Z a-z 0-9 _`);
  }
  if (chosen !== undefined && (typeof chosen !== "string" || !SHARD_ID.test(chosen))) {
    throw new TypeError(`extensionCounter: shardId ${JSON.stringify(chosen)} is not 1 to 64 of A-Z a-z 0-9 -`);
  }
  const shardId = chosen ?? deviceShardId();
  const shard = doc(db, documentPath, SHARDS, shardId);
  const viewed = [doc(db, documentPath), shard,
    ...[1, 2, 3, 4].map((tabs) => doc(db, documentPath, SHARDS, "\t".repeat(tabs) + shardId.slice(0, 5 - tabs)))];
  const names = field.split(".");

  return Object.freeze({
    shardId,
    incrementBy(n) {
      if (!Number.isSafeInteger(n)) {
        return Promise.reject(new TypeError(`extensionCounter: incrementBy(${n}): the amount is an integer`));
      }
      const update = names.reduceRight((value, name) => ({ [name]: value }), increment(n));
      return setDoc(shard, update, { merge: true });
    },
    onSnapshot(onNext, onError = () => {}) {
      // Each document's value, undefined until its first snapshot: nothing is shown before all
      // of them reported (a partial view would show a wrong total for a moment).
      const values = viewed.map(() => undefined);
      const stops = [];
      let timer = null;
      let last = null;
      let stopped = false;
      const stop = () => {
        stopped = true;
        clearTimeout(timer);
        stops.splice(0).forEach((unsubscribe) => unsubscribe());
      };
      // The snapshots one change raises come together (a move of the backend changes the
      // document and a shard in one commit): they are summed once, after the last of them.
      const notify = () => {
        timer = null;
        if (stopped) return;
        const total = values.reduce((sum, value) => sum + value, 0);
        if (total === last) return;
        last = total;
        onNext(total);
      };
      const fail = (error) => {
        if (stopped) return;
        stop();
        onError(error);
      };
      for (const [i, reference] of viewed.entries()) {
        if (stopped) break;
        const unsubscribe = onSnapshot(reference, (snapshot) => {
          const value = snapshot.get(field);
          values[i] = typeof value === "number" ? value : 0;
          if (timer === null && !stopped && values.every((seen) => seen !== undefined)) timer = setTimeout(notify, 0);
        }, fail);
        if (stopped) unsubscribe(); // it failed at once
        else stops.push(unsubscribe);
      }
      return stop;
    },
  });
}
