// The like card: latency compensation that never double-counts.
//
// displayed = rollup.count + the sum of this client's acknowledged increments whose commit
// time is after the rollup's `updated_at`. The rollup is exact as of `updated_at`, so an
// increment is in it iff committed_at <= updated_at. Instants are compared as BigInt
// microseconds: JS Dates only have milliseconds, and two commits a few microseconds apart
// must not be confused. An `applied: false` answer (a retry of a request that had landed)
// has no commit time: the rollup counts it, this client does not add it.

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$/;

/** Microseconds since the epoch of an RFC 3339 string, fraction kept to the microsecond. */
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

/** Microseconds since the epoch of a Firestore Timestamp (nanoseconds truncated). */
export function timestampMicros(ts) {
  return BigInt(ts.seconds) * 1000000n + BigInt(Math.floor(ts.nanoseconds / 1000));
}

export class LikeCount {
  rollup = null; // { count, asOf: BigInt micros } from the listener
  acked = new Map(); // request_id -> { by, committedAt: BigInt micros }, not in the rollup yet

  onRollup(count, asOf) {
    this.rollup = { count, asOf };
    this.prune();
  }

  onAck(requestId, by, committedAt) {
    if (committedAt !== null) this.acked.set(requestId, { by, committedAt });
    this.prune();
  }

  prune() {
    if (!this.rollup) return;
    for (const [id, ack] of this.acked) {
      if (ack.committedAt <= this.rollup.asOf) this.acked.delete(id);
    }
  }

  get unconfirmed() {
    let sum = 0;
    for (const ack of this.acked.values()) sum += ack.by;
    return sum;
  }

  get displayed() {
    return this.rollup ? this.rollup.count + this.unconfirmed : null;
  }
}

// Codes a retry with the same request_id may fix: network failures surface as `internal`
// (the SDK maps "no HTTP response" to it), overload as `unavailable`/`resource-exhausted`.
// Retrying is safe for all of them because the request_id makes the increment exactly-once.
const TRANSIENT = new Set([
  "functions/internal",
  "functions/unavailable",
  "functions/deadline-exceeded",
  "functions/resource-exhausted",
  "functions/aborted",
  "functions/unknown",
]);
const ATTEMPTS = 6;

function backoff(attempt) {
  return new Promise((resolve) => setTimeout(resolve, Math.min(4000, 250 * 2 ** (attempt - 1))));
}

/** Call `increment` once for this request id, retrying transient failures with the same id. */
export async function incrementOnce(increment, counter, requestId, onRetry) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      const { data } = await increment({ counter, request_id: requestId });
      return data;
    } catch (error) {
      if (!TRANSIENT.has(error?.code) || attempt >= ATTEMPTS) throw error;
      onRetry(attempt, error);
      await backoff(attempt);
    }
  }
}

/** A request id the contract accepts (A-Z a-z 0-9 _ -), from the browser's CSPRNG. */
export function newRequestId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "like-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Runs at most `limit` tasks at once, in click order, so a burst of clicks does not start a
 * Functions emulator worker per click (it starts one Python worker per concurrent request). */
export class Limiter {
  constructor(limit) {
    this.limit = limit;
    this.running = 0;
    this.queue = [];
  }

  run(task) {
    return new Promise((resolve, reject) => {
      this.queue.push({ task, resolve, reject });
      this.next();
    });
  }

  next() {
    while (this.running < this.limit && this.queue.length) {
      const { task, resolve, reject } = this.queue.shift();
      this.running += 1;
      task()
        .then(resolve, reject)
        .finally(() => {
          this.running -= 1;
          this.next();
        });
    }
  }
}
