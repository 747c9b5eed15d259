// The counters client against a fake server and fake-indexeddb: exactly-once across offline,
// reloads and lost answers; what it shows before and after the rollup catches up.
import { IDBFactory } from "fake-indexeddb";
import { beforeEach, describe, expect, test } from "vitest";
import { CountersClient, rfc3339Micros, TapStore, timestampMicros } from "../src/counters-client.js";

/** A server with the contract's semantics: request ids applied once, commit times in
 * microseconds, a rollup published when the test says so. */
class FakeServer {
  constructor() {
    this.counts = new Map();
    this.applied = new Set();
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
        this.calls.push(data);
        this.inFlight += 1;
        this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
        await Promise.resolve();
        this.inFlight -= 1;
        if (this.refuse) throw Object.assign(new Error("no"), { code: this.refuse });
        if (!this.online) throw Object.assign(new Error("offline"), { code: "functions/internal" });
        let answer = { applied: false };
        if (!this.applied.has(data.request_id)) {
          this.applied.add(data.request_id);
          this.counts.set(data.counter, (this.counts.get(data.counter) ?? 0) + data.by);
          this.micros += 7n;
          answer = { applied: true, committed_at: isoMicros(this.micros) };
        }
        if (this.loseNextAnswer) {
          this.loseNextAnswer = false;
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
    wait: noWait, retryLaterMs: 60_000, ...options });
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
    // The retry answered applied: false (no commit time): the rollup counts it, the client does not.
    expect(state()).toMatchObject({ rollup: 0, pending: 0, unconfirmed: 0, shown: 0 });
    server.publish("c");
    expect(state().shown).toBe(1);
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
    expect(errors.length).toBeGreaterThan(0);
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
    const increment = server.transport().increment;
    client.transport.increment = async (data) => {
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
    expect(server.maxInFlight).toBeGreaterThan(1);
    expect(server.maxInFlight).toBeLessThanOrEqual(4);
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
