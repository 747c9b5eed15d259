// The counters client: what an app needs to count taps exactly once and show the count right,
// online or not. It knows nothing of the page; another app imports it as it is.
//
// - Taps are queued durably (IndexedDB) with their request_id before anything is sent, sent when
//   the browser is online, and removed only once the server answered. A reload, an app restart or
//   a lost answer re-sends the same request_id, which the server counts at most once (24 h).
// - The shown count of a counter is
//     rollup.count + acknowledged taps the rollup does not include yet + queued taps (pending).
//   The rollup is exact as of its `updated_at`, so an acknowledged tap is in it iff its
//   `committed_at` <= `updated_at`. Instants are compared as BigInt microseconds: JS Dates only
//   have milliseconds, and two commits a few microseconds apart must not be confused. An
//   `applied: false` answer (a retry of a request that had landed, or a no-op toggle of a
//   `unique` counter) has no commit time: the rollup counts it or there is nothing to count.
//   Acknowledged taps stay in the store until the rollup includes them, so the count stays
//   right across a reload too.
// - Taps on a `unique` counter (a toggle: +1 then -1) are sent one at a time, in order.
//
// Firestore and Functions come in through `firebaseTransport`, so the logic is tested without them.

/**
 * @typedef {object} Tap
 * @property {string} id the request_id
 * @property {string} counter
 * @property {number} by
 * @property {boolean} ordered sent only after the counter's earlier taps were answered
 * @property {number} seq the order taps were made in
 * @property {string | null} committedAt RFC 3339, once the server applied it; null while queued
 *
 * @typedef {object} Rollup
 * @property {number} count
 * @property {bigint} asOf microseconds since the epoch
 *
 * @typedef {object} CounterState what an app shows for one counter
 * @property {number | null} rollup the rollup's count; null before the first snapshot
 * @property {number} unconfirmed the sum of acknowledged taps the rollup does not include yet
 * @property {number} pending the sum of taps not answered yet (queued or in flight)
 * @property {number | null} shown rollup + unconfirmed + pending (null without a rollup)
 * @property {boolean} exists false once a snapshot said the counter does not exist
 * @property {Record<string, any> | null} data the counter document's fields
 *
 * @typedef {object} IncrementAnswer
 * @property {boolean} applied
 * @property {string} [committed_at]
 *
 * @typedef {object} Transport
 * @property {(data: {counter: string, by: number, request_id: string}) => Promise<IncrementAnswer>} increment
 * @property {(data: {counter: string}) => Promise<Record<string, any>>} getCount
 * @property {(counter: string, onData: (data: Record<string, any> | null) => void,
 *             onError: (error: Error) => void) => () => void} listen
 *   calls onData with the counter document's fields (null when it does not exist)
 */

// Codes a retry with the same request_id may fix: network failures surface as `internal`
// (the SDK maps "no HTTP response" to it), overload as `unavailable`/`resource-exhausted`.
// Retrying is safe for all of them because the request_id makes the increment exactly-once.
export const TRANSIENT = new Set([
  "functions/internal",
  "functions/unavailable",
  "functions/deadline-exceeded",
  "functions/resource-exhausted",
  "functions/aborted",
  "functions/unknown",
]);

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
 * @param {{attempts?: number, transient?: Set<string>, onRetry?: (attempt: number, error: any) => void,
 *          wait?: (ms: number) => Promise<void>}} [options]
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
      const transaction = this.db.transaction(STORE, mode);
      const request = operation(transaction.objectStore(STORE));
      // Resolved once committed (durable), not when the request succeeds.
      transaction.oncomplete = () => resolve(request.result);
      transaction.onerror = () => reject(transaction.error);
      transaction.onabort = () => reject(transaction.error);
    });
  }
}

/** Counts taps exactly once and tells what to show for each counter it watches. */
export class CountersClient {
  /**
   * @param {object} options
   * @param {Transport} options.transport
   * @param {TapStore} options.store
   * @param {() => boolean} [options.online] whether sending may succeed (navigator.onLine);
   *   call flush() when it becomes true
   * @param {number} [options.inFlight] at most this many increments at once
   * @param {(tap: Tap, answer: IncrementAnswer) => void} [options.onAnswered] the server answered
   * @param {(tap: Tap, error: any) => void} [options.onRejected] the server refused a tap for
   *   good (e.g. PERMISSION_DENIED): it is dropped from the queue
   * @param {(error: any) => void} [options.onTransientError] a send failed; it will be retried
   * @param {number} [options.retryLaterMs] when a tap's retries are exhausted online, the next
   *   flush starts this much later
   * @param {(ms: number) => Promise<void>} [options.wait] how retries wait (tests pass their own)
   */
  constructor({ transport, store, online = () => true, inFlight = 4, onAnswered = () => {},
    onRejected = () => {}, onTransientError = () => {}, retryLaterMs = 15000, wait = sleep }) {
    Object.assign(this, { transport, store, online, inFlight, onAnswered, onRejected,
      onTransientError, retryLaterMs, wait });
    /** @type {Map<string, Tap>} every tap not yet in the rollup, by request_id */
    this.taps = new Map();
    /** @type {Set<string>} request_ids being sent */
    this.sending = new Set();
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
   * Resolves once the tap is stored, not once it is sent.
   * @param {string} counter
   * @param {{by?: number, ordered?: boolean}} [options] ordered: a toggle, sent in order
   * @returns {Promise<Tap>}
   */
  async tap(counter, { by = 1, ordered = false } = {}) {
    /** @type {Tap} */
    const tap = { id: newRequestId(), counter, by, ordered, seq: this.seq++, committedAt: null };
    await this.store.put(tap);
    this.taps.set(tap.id, tap);
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
   * offline, or a tap's retries exhausted (it stays queued; a later flush sends it). */
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
      if (stalled && this.online()) this.later = setTimeout(() => void this.flush(), this.retryLaterMs);
    })().finally(() => {
      this.flushing = null;
    });
    return this.flushing;
  }

  /** @returns {Promise<boolean>} whether a tap stayed queued after its retries */
  async #sendAll() {
    const running = new Set();
    let stalled = false;
    while (this.online() && !stalled) {
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
      if (this.sending.has(tap.id) || waits) continue;
      this.sending.add(tap.id);
      out.push(tap);
    }
    return out;
  }

  /** Send one tap. Returns false when it stays queued (retries exhausted). */
  async #send(tap) {
    try {
      const answer = await withRetries(
        () => this.transport.increment({ counter: tap.counter, by: tap.by, request_id: tap.id }),
        { onRetry: (attempt, error) => this.onTransientError(error), wait: this.wait },
      );
      if (answer.applied) {
        rfc3339Micros(answer.committed_at ?? ""); // a missing or malformed time fails loudly
        const acked = { ...tap, committedAt: answer.committed_at };
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
      if (TRANSIENT.has(error?.code)) {
        this.onTransientError(error);
        return false;
      }
      await this.#forget(tap);
      this.#changed(tap.counter);
      this.onRejected(tap, error);
      return true;
    } finally {
      this.sending.delete(tap.id);
    }
  }

  async #forget(tap) {
    await this.store.delete(tap.id);
    this.taps.delete(tap.id);
  }

  /** Drop the acknowledged taps the rollup now includes. */
  #prune(counter) {
    const rollup = this.counters.get(counter)?.rollup;
    if (!rollup) return;
    for (const tap of [...this.taps.values()]) {
      if (tap.counter === counter && tap.committedAt !== null && rfc3339Micros(tap.committedAt) <= rollup.asOf) {
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

/**
 * The transport over the Firebase JS SDK: the `increment` and `get_count` callables and a
 * listener on counters/{counter}. Pass the modules so that this file imports no SDK itself.
 * @param {{db: any, functions: any}} app
 * @param {{doc: Function, onSnapshot: Function}} firestore firebase/firestore
 * @param {{httpsCallable: Function}} functionsSdk firebase/functions
 * @returns {Transport}
 */
export function firebaseTransport({ db, functions }, { doc, onSnapshot }, { httpsCallable }) {
  const increment = httpsCallable(functions, "increment");
  const getCount = httpsCallable(functions, "get_count");
  return {
    increment: async (data) => (await increment(data)).data,
    getCount: async (data) => (await getCount(data)).data,
    listen: (counter, onData, onError) =>
      onSnapshot(doc(db, "counters", counter), (snap) => onData(snap.exists() ? snap.data() : null), onError),
  };
}
