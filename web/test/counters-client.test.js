// The counters client against a fake server and fake-indexeddb: exactly-once across offline,
// reloads and lost answers; what it shows before and after the rollup catches up.
import { IDBFactory } from "fake-indexeddb";
import { beforeEach, describe, expect, test } from "vitest";
import { CountersClient, firebaseTransport, rfc3339Micros, TapStore, timestampMicros } from "../client/counters-client.js";
import { refusal } from "./refusal.js";

/** A server with the contract's semantics: request ids applied once per user (`uid`, the
 * signed-in user), a retry answered with the first commit time, commit times in microseconds,
 * a rollup published when the test says so. */
class FakeServer {
  constructor() {
    this.counts = new Map();
    this.applied = new Map();
    this.uid = "u1";
    this.loseAnswers = 0;
    this.hangNext = false;
    this.micros = 1_700_000_000_000_000n;
    this.calls = [];
    this.listeners = new Map();
    this.loseNextAnswer = false;
    this.refuse = null;
    this.inFlight = 0;
    this.maxInFlight = 0;
  }

  transport() {
    return {
      increment: async (data) => {
        this.calls.push({ ...data, uid: this.uid });
        if (this.hangNext) {
          this.hangNext = false;
          return new Promise(() => {});
        }
        this.inFlight += 1;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        await Promise.resolve();
        this.inFlight -= 1;
        if (this.refuse) throw Object.assign(new Error("no"), { code: this.refuse });
        if (!this.online) throw Object.assign(new Error("offline"), { code: "functions/internal" });
        const key = `${this.uid}/${data.request_id}`;
        let answer = { applied: false, committed_at: this.applied.get(key) };
        if (!this.applied.has(key)) {
          this.counts.set(data.counter, (this.counts.get(data.counter) ?? 0) + data.by);
          this.micros += 7n;
          answer = { applied: true, committed_at: isoMicros(this.micros) };
          this.applied.set(key, answer.committed_at);
        }
        if (this.loseNextAnswer || this.loseAnswers > 0) {
          this.loseNextAnswer = false;
          this.loseAnswers -= 1;
          throw Object.assign(new Error("connection reset"), { code: "functions/internal" });
        }
        return answer;
      },
      getCount: async ({ counter }) => ({ counter, count: this.counts.get(counter) ?? 0 }),
      listen: (counter, onData) => {
        this.listeners.set(counter, onData);
        return () => this.listeners.delete(counter);
      },
    };
  }

  /** The rollup publishes the exact count as of now. */
  publish(counter) {
    this.micros += 3n;
    const seconds = Number(this.micros / 1_000_000n);
    const nanoseconds = Number(this.micros % 1_000_000n) * 1000;
    this.listeners.get(counter)({ count: this.counts.get(counter) ?? 0, updated_at: { seconds, nanoseconds } });
  }
}

function isoMicros(micros) {
  const date = new Date(Number(micros / 1000n)).toISOString().slice(0, 19);
  return `${date}.${String(micros % 1_000_000n).padStart(6, "0")}Z`;
}

const noWait = () => Promise.resolve();
let factory;
let server;

beforeEach(() => {
  factory = new IDBFactory();
  server = new FakeServer();
  server.online = true;
});

/** A client as a page load makes one: a store opened on the (persistent) fake IndexedDB. */
async function load(options = {}) {
  const store = await TapStore.open("test", factory);
  const client = new CountersClient({ transport: server.transport(), store, online: () => server.online,
    user: () => server.uid, wait: noWait, retryLaterMs: 60_000, ...options });
  return client;
}

function shown(client, counter) {
  let last = null;
  client.watch(counter, (state) => { last = state; });
  return () => last;
}

describe("CountersClient", () => {
  test("taps made offline are kept, shown as pending, and counted once when online", async () => {
    const client = await load();
    const state = shown(client, "c");
    server.counts.set("c", 10);
    server.publish("c");
    server.online = false;
    for (let i = 0; i < 5; i += 1) await client.tap("c");
    await client.flush();
    expect(server.applied.size).toBe(0);
    expect(state()).toMatchObject({ rollup: 10, pending: 5, unconfirmed: 0, shown: 15 });

    server.online = true;
    await client.flush();
    expect(server.counts.get("c")).toBe(15);
    expect(state()).toMatchObject({ rollup: 10, pending: 0, unconfirmed: 5, shown: 15 });
    server.publish("c");
    expect(state()).toMatchObject({ rollup: 15, pending: 0, unconfirmed: 0, shown: 15 });
    expect(await client.store.all()).toEqual([]);
  });

  test("a reload re-sends the taps an earlier page left with their request ids", async () => {
    const first = await load();
    server.online = false;
    const taps = [await first.tap("c"), await first.tap("c"), await first.tap("c")];
    // The first tap reached the server but the page was closed before its answer.
    server.online = true;
    await server.transport().increment({ counter: "c", by: 1, request_id: taps[0].id });
    first.store.close();

    const second = await load();
    const state = shown(second, "c");
    await second.start();
    expect(server.counts.get("c")).toBe(3);
    expect(server.calls.map((call) => call.request_id)).toEqual([taps[0].id, ...taps.map((tap) => tap.id)]);
    server.publish("c");
    expect(state()).toMatchObject({ rollup: 3, pending: 0, unconfirmed: 0, shown: 3 });
  });

  test("acknowledged taps the rollup does not include yet survive a reload", async () => {
    const first = await load();
    shown(first, "c");
    server.publish("c");
    await first.tap("c");
    await first.tap("c");
    await first.flush();
    first.store.close();

    const second = await load();
    const state = shown(second, "c");
    await second.start();
    server.listeners.get("c")({ count: 0, updated_at: { seconds: 0, nanoseconds: 0 } });
    expect(state()).toMatchObject({ rollup: 0, unconfirmed: 2, shown: 2 });
    server.publish("c");
    expect(state()).toMatchObject({ rollup: 2, unconfirmed: 0, shown: 2 });
  });

  test("a lost answer is retried with the same id and counted once", async () => {
    const client = await load();
    const state = shown(client, "c");
    server.publish("c");
    server.loseNextAnswer = true;
    await client.tap("c");
    await client.flush();
    expect(server.calls).toHaveLength(2);
    expect(server.calls[0].request_id).toBe(server.calls[1].request_id);
    expect(server.counts.get("c")).toBe(1);
    // The retry answered applied: false with the first commit time: shown until the rollup has it.
    expect(client.taps.get(server.calls[0].request_id).committedAt).toBe(server.applied.get(`u1/${server.calls[0].request_id}`));
    expect(state()).toMatchObject({ rollup: 0, pending: 0, unconfirmed: 1, shown: 1 });
    server.publish("c");
    expect(state()).toMatchObject({ rollup: 1, pending: 0, unconfirmed: 0, shown: 1 });
    expect(await client.store.all()).toEqual([]);
  });

  test("a rollup between two commits counts the first only once", async () => {
    const client = await load();
    const state = shown(client, "c");
    server.publish("c");
    await client.tap("c");
    await client.flush();
    server.publish("c"); // includes the first tap
    await client.tap("c");
    await client.flush();
    expect(state()).toMatchObject({ rollup: 1, unconfirmed: 1, shown: 2 });
  });

  test("taps still failing after their retries stay queued for the next flush", async () => {
    const errors = [];
    const client = await load({ onTransientError: (error) => errors.push(error.code) });
    server.refuse = "functions/unavailable";
    await client.tap("c");
    await client.flush();
    expect(client.queued("c")).toHaveLength(1);
    // Once per failed call, the last one included.
    expect(errors).toHaveLength(server.calls.length);
    server.refuse = null;
    await client.flush();
    expect(client.queued("c")).toHaveLength(0);
    expect(server.counts.get("c")).toBe(1);
  });

  test("a tap the server refuses for good is dropped and reported", async () => {
    const rejected = [];
    const client = await load({ onRejected: (tap, error) => rejected.push([tap.counter, error.code]) });
    const state = shown(client, "c");
    server.publish("c");
    server.refuse = "functions/permission-denied";
    await client.tap("c");
    await client.flush();
    expect(rejected).toEqual([["c", "functions/permission-denied"]]);
    expect(state()).toMatchObject({ pending: 0, shown: 0 });
    expect(await client.store.all()).toEqual([]);
  });

  test("toggles of one counter are sent one at a time, in order", async () => {
    const client = await load();
    server.online = false;
    for (const by of [1, -1, 1, -1, 1]) await client.tap("likes", { by, ordered: true });
    for (let i = 0; i < 8; i += 1) await client.tap("claps");
    server.online = true;
    const likesInFlight = [];
    let maxSending = 0;
    const increment = server.transport().increment;
    client.transport.increment = async (data) => {
      maxSending = Math.max(maxSending, client.sending.size);
      if (data.counter === "likes") {
        likesInFlight.push([...client.sending].filter((id) => client.taps.get(id).counter === "likes").length);
      }
      return increment(data);
    };
    await client.flush();
    expect(server.calls.filter((call) => call.counter === "likes").map((call) => call.by)).toEqual([1, -1, 1, -1, 1]);
    expect(server.counts.get("likes")).toBe(1);
    expect(server.counts.get("claps")).toBe(8);
    expect(likesInFlight).toEqual([1, 1, 1, 1, 1]);
    expect(maxSending).toBeGreaterThan(1);
    expect(maxSending).toBeLessThanOrEqual(4);
    expect(server.maxInFlight).toBeLessThanOrEqual(4);
  });

  test("a tap refused as not signed in stays queued and is sent later", async () => {
    const rejected = [];
    const client = await load({ onRejected: (tap, error) => rejected.push(error.code) });
    server.refuse = "functions/unauthenticated";
    await client.tap("c");
    await client.flush();
    expect(client.queued("c")).toHaveLength(1);
    expect(rejected).toEqual([]);
    server.refuse = null;
    await client.flush();
    expect(client.queued("c")).toHaveLength(0);
    expect(server.counts.get("c")).toBe(1);
  });

  test("nothing is sent while signed out", async () => {
    const client = await load();
    server.uid = null;
    await client.tap("c");
    await client.flush();
    expect(server.calls).toEqual([]);
    server.uid = "u1";
    await client.flush();
    expect(server.calls.map((call) => call.uid)).toEqual(["u1"]);
  });

  test("after a user change an attempted tap of the old user is dropped, a never-sent one is sent", async () => {
    const rejected = [];
    const client = await load({ onRejected: (tap, error) => rejected.push([tap.id, error.code]) });
    server.loseAnswers = 1000; // the tap lands as u1, but no answer ever comes back
    const landed = await client.tap("c");
    await client.flush();
    expect(server.counts.get("c")).toBe(1);
    server.online = false;
    const offline = await client.tap("c");
    server.loseAnswers = 0;
    server.uid = "u2";
    server.online = true;
    await client.flush();
    expect(rejected).toEqual([[landed.id, "counters/user-changed"]]);
    expect(server.calls.filter((call) => call.uid === "u2").map((call) => call.request_id)).toEqual([offline.id]);
    expect(server.counts.get("c")).toBe(2);
    expect(client.queued()).toEqual([]);
  });

  test("RESOURCE_EXHAUSTED (a policy's too soon) is not retried: the tap is dropped and reported", async () => {
    const rejected = [];
    const client = await load({ onRejected: (tap, error) => rejected.push(error.code) });
    server.refuse = "functions/resource-exhausted";
    await client.tap("views");
    await client.flush();
    expect(server.calls).toHaveLength(1);
    expect(rejected).toEqual(["functions/resource-exhausted"]);
    expect(await client.store.all()).toEqual([]);
  });

  test("a transport call that never answers times out and is retried with the same id", async () => {
    const errors = [];
    const client = await load({ timeoutMs: 5, onTransientError: (error) => errors.push(error.code) });
    server.hangNext = true;
    await client.tap("c");
    await client.flush();
    expect(errors).toEqual(["functions/deadline-exceeded"]);
    expect(server.calls).toHaveLength(2);
    expect(server.calls[0].request_id).toBe(server.calls[1].request_id);
    expect(server.counts.get("c")).toBe(1);
    expect(client.queued()).toEqual([]);
  });

  test("two quick toggles alternate +1 and -1", async () => {
    const client = await load();
    // What the Like button does: the next toggle undoes the last queued one.
    const next = () => {
      const queued = client.queued("likes");
      return queued.length && queued[queued.length - 1].by > 0 ? -1 : 1;
    };
    const first = client.tap("likes", { by: next(), ordered: true });
    const second = client.tap("likes", { by: next(), ordered: true });
    await Promise.all([first, second]);
    await client.flush();
    expect(server.calls.map((call) => call.by)).toEqual([1, -1]);
    expect(server.counts.get("likes")).toBe(0);
  });

  test("a tap whose store write fails is not kept", async () => {
    const client = await load();
    const state = shown(client, "c");
    client.store.put = () => Promise.reject(new Error("quota"));
    await expect(client.tap("c")).rejects.toThrow("quota");
    expect(client.queued()).toEqual([]);
    expect(state().pending).toBe(0);
  });

  test("an attempted tap older than the server's memory of its id is dropped; a never-sent one is sent", async () => {
    let now = 0;
    const rejected = [];
    const options = { now: () => now, onRejected: (tap, error) => rejected.push([tap.id, error.code]) };
    const first = await load(options);
    server.loseAnswers = 1000;
    const attempted = await first.tap("c");
    await first.flush();
    server.online = false;
    const never = await first.tap("c");
    first.store.close();

    now = 24 * 3600_000;
    server.loseAnswers = 0;
    server.online = true;
    const calls = server.calls.length;
    const second = await load(options);
    await second.start();
    expect(rejected).toEqual([[attempted.id, "counters/expired"]]);
    expect(server.calls.slice(calls).map((call) => call.request_id)).toEqual([never.id]);
  });

  test("a tap failing on every flush is given up and reported, and no longer blocks later toggles", async () => {
    const rejected = [];
    const client = await load({ maxFailedRounds: 2, onRejected: (tap, error) => rejected.push([tap.by, error.code]) });
    server.refuse = "functions/internal";
    await client.tap("likes", { by: 1, ordered: true });
    await client.flush();
    server.refuse = null;
    server.online = false;
    await client.tap("likes", { by: -1, ordered: true });
    server.online = true;
    server.refuse = "functions/internal";
    const original = client.transport.increment;
    client.transport.increment = (data) => {
      if (data.by === -1) server.refuse = null;
      return original(data);
    };
    await client.flush();
    expect(rejected).toEqual([[1, "counters/gave-up"]]);
    expect(server.counts.get("likes")).toBe(-1);
    expect(client.queued()).toEqual([]);
  });

  test("acknowledged taps of a counter nobody watches are forgotten after a while", async () => {
    let now = 0;
    const first = await load({ now: () => now });
    await first.tap("unwatched");
    await first.flush();
    expect(await first.store.all()).toHaveLength(1);
    first.store.close();
    now = 2 * 3600_000;
    const second = await load({ now: () => now });
    await second.start();
    expect(await second.store.all()).toEqual([]);
  });

  test("a counter that does not exist says so", async () => {
    const client = await load();
    const state = shown(client, "gone");
    server.listeners.get("gone")(null);
    expect(state()).toMatchObject({ exists: false, rollup: null, shown: null });
  });
});

describe("instants", () => {
  test("RFC 3339 keeps microseconds and honours offsets", () => {
    expect(rfc3339Micros("2026-01-02T03:04:05.123456Z") - rfc3339Micros("2026-01-02T03:04:05.123455Z")).toBe(1n);
    expect(rfc3339Micros("2026-01-02T04:04:05+01:00")).toBe(rfc3339Micros("2026-01-02T03:04:05Z"));
    expect(() => rfc3339Micros("yesterday")).toThrow("not an RFC 3339 time");
  });

  test("a Firestore timestamp compares with a commit time to the microsecond", () => {
    const ts = { seconds: 1_767_323_045, nanoseconds: 123_456_789 };
    expect(timestampMicros(ts)).toBe(rfc3339Micros("2026-01-02T03:04:05.123456Z"));
  });
});

/** The Firebase SDK's functions as firebaseTransport calls them, recording the callables' names
 * and the documents' paths, each callable answering with its own name. */
function fakeSdk() {
  const called = { callables: [], documents: [] };
  const firestore = {
    doc: (db, ...segments) => segments.join("/"),
    onSnapshot: (path, onNext) => {
      called.documents.push(path);
      onNext({ exists: () => true, data: () => ({ count: 1 }) });
      return () => {};
    },
  };
  const functions = {
    httpsCallable: (instance, name) => {
      called.callables.push(name);
      return async () => ({ data: { name } });
    },
  };
  const connect = (options) => firebaseTransport({ db: {}, functions: {} }, firestore, functions, options);
  return { called, connect };
}


describe("firebaseTransport", () => {
  test("calls increment and get_count and listens to counters/{id} by default", async () => {
    const { called, connect } = fakeSdk();
    const transport = connect();
    expect(await transport.increment({ counter: "c", by: 1, request_id: "r" })).toEqual({ name: "increment" });
    expect(await transport.getCount({ counter: "c" })).toEqual({ name: "get_count" });
    transport.listen("c", () => {}, () => {});
    expect(called).toEqual({ callables: ["increment", "get_count"], documents: ["counters/c"] });
  });

  test("a function prefix names the callables as firebase-tools names a prefixed codebase's", async () => {
    const { called, connect } = fakeSdk();
    const transport = connect({ functionPrefix: "counters" });
    expect(await transport.increment({ counter: "c", by: 1, request_id: "r" })).toEqual({ name: "counters-increment" });
    expect(called.callables).toEqual(["counters-increment", "counters-get_count"]);
  });

  test("a collection prefix names the counters collection", () => {
    const { called, connect } = fakeSdk();
    let data = null;
    connect({ collectionPrefix: "t1_" }).listen("likes", (fields) => { data = fields; }, () => {});
    expect(called.documents).toEqual(["t1_counters/likes"]);
    expect(data).toEqual({ count: 1 });
  });

  test.each(["", "a", "a-1", "x9", "a".repeat(30)])("functionPrefix %j is accepted", (functionPrefix) => {
    expect(() => fakeSdk().connect({ functionPrefix })).not.toThrow();
  });

  test.each(["a".repeat(31), "-a", "a-", "A", "1a", "a_b", "a b", 5, null])("functionPrefix %j is a TypeError", (functionPrefix) => {
    const { called, connect } = fakeSdk();
    expect(refusal(() => connect({ functionPrefix }))).toMatch(/^TypeError: firebaseTransport: functionPrefix .* is not a codebase prefix/);
    expect(called.callables).toEqual([]);
  });

  test.each(["", "t1_", "a".repeat(40)])("collectionPrefix %j is accepted", (collectionPrefix) => {
    expect(() => fakeSdk().connect({ collectionPrefix })).not.toThrow();
  });

  test.each(["a".repeat(41), "A", "a-b", "a/", "a.", 1])("collectionPrefix %j is a TypeError", (collectionPrefix) => {
    expect(refusal(() => fakeSdk().connect({ collectionPrefix })))
      .toMatch(/^TypeError: firebaseTransport: collectionPrefix .* is not 0 to 40 lowercase letters/);
  });

  test("an unknown option is a TypeError", () => {
    expect(refusal(() => fakeSdk().connect({ functionsPrefix: "counters" }))).toMatch(/^TypeError: .*unknown option functionsPrefix/);
  });
});
