// Extension counters from the client's side: extensionCounter speaks the Distributed Counter
// extension's protocol as its web SDK does (a shard per device, a merge of increment(n) into it,
// a view of the document + the shard + its four partials), against an in-memory Firestore; the
// total's id as the backend escapes it (declaredCounterId), and its rollup followed by the
// counters client like any counter.
import { IDBFactory } from "fake-indexeddb";
import { afterEach, describe, expect, test } from "vitest";
import {
  CountersClient,
  declaredCounterId,
  extensionCounter,
  firebaseTransport,
  TapStore,
} from "../client/counters-client.js";
import { refusal } from "./refusal.js";

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const SHARD = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9";
/** A shard's and its partials' paths under pages/home. */
const under = (id) => `pages/home/_counter_shards_/${id}`;
const PARTIALS = ["\t0f1e", "\t\t0f1", "\t\t\t0f", "\t\t\t\t0"].map(under);

/** Let the timers due now run (the view sums the snapshots one change raised after them). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 5));

/** The SDK's functions as extensionCounter calls them, over documents kept in memory: a
 * reference is its path, a write merges (applying increments), snapshots are raised at once, as
 * Firestore's latency compensation raises a local write's. */
function fakeFirestore() {
  const documents = new Map();
  const listeners = new Map();
  const writes = [];
  const snapshot = (path) => ({
    get: (field) => field.split(".").reduce((value, name) => value?.[name], documents.get(path)),
  });
  const raise = (path) => (listeners.get(path) ?? new Set()).forEach(({ onNext }) => onNext(snapshot(path)));
  const merge = (into, data) => {
    const out = { ...into };
    for (const [name, value] of Object.entries(data)) {
      if (value && typeof value.increment === "number") out[name] = (typeof out[name] === "number" ? out[name] : 0) + value.increment;
      else if (value && typeof value === "object") out[name] = merge(out[name] ?? {}, value);
      else out[name] = value;
    }
    return out;
  };
  const sdk = {
    doc: (db, ...segments) => segments.join("/"),
    increment: (n) => ({ increment: n }),
    setDoc: async (path, data, options) => {
      writes.push({ path, data, options });
      documents.set(path, merge(documents.get(path) ?? {}, data));
      raise(path);
    },
    onSnapshot: (path, onNext, onError) => {
      const listener = { onNext, onError };
      if (!listeners.has(path)) listeners.set(path, new Set());
      listeners.get(path).add(listener);
      onNext(snapshot(path));
      return () => listeners.get(path).delete(listener);
    },
  };
  return {
    sdk,
    writes,
    /** What another writer (the backend, another device) changes: several documents at once. */
    set(changes) {
      for (const [path, data] of Object.entries(changes)) documents.set(path, data);
      Object.keys(changes).forEach(raise);
    },
    listened: () => [...listeners].filter(([, set]) => set.size > 0).map(([path]) => path),
    fail(path, error) {
      [...(listeners.get(path) ?? [])].forEach(({ onError }) => onError(error));
    },
  };
}


/** A document.cookie as a browser keeps it: each write sets one cookie, reads list them all. */
function cookieJar(initial = {}) {
  const cookies = new Map(Object.entries(initial));
  const written = [];
  return {
    written,
    get cookie() {
      return [...cookies].map(([name, value]) => `${name}=${value}`).join("; ");
    },
    set cookie(text) {
      written.push(text);
      const [pair] = text.split(";");
      const at = pair.indexOf("=");
      cookies.set(pair.slice(0, at), pair.slice(at + 1));
    },
  };
}

afterEach(() => {
  delete globalThis.document;
});

describe("extensionCounter", () => {
  test("increments by merging increment(n) into this device's shard, as the extension's SDK does", async () => {
    const firestore = fakeFirestore();
    const counter = extensionCounter({}, firestore.sdk, "pages/home", "visits", { shardId: SHARD });
    expect(counter.shardId).toBe(SHARD);
    await counter.incrementBy(1);
    await counter.incrementBy(-1);
    expect(firestore.writes).toEqual([
      { path: under(SHARD), data: { visits: { increment: 1 } }, options: { merge: true } },
      { path: under(SHARD), data: { visits: { increment: -1 } }, options: { merge: true } },
    ]);
  });

  test("a dotted field is written as nested maps and read as a path", async () => {
    const firestore = fakeFirestore();
    const counter = extensionCounter({}, firestore.sdk, "pages/home", "stats.visits", { shardId: SHARD });
    const seen = [];
    counter.onSnapshot((value) => seen.push(value));
    await counter.incrementBy(3);
    await settle();
    expect(firestore.writes[0].data).toEqual({ stats: { visits: { increment: 3 } } });
    expect(seen).toEqual([3]);
  });

  test("the view is the document's field + the device's shard + its four partials, and nothing else", async () => {
    const firestore = fakeFirestore();
    firestore.set({
      "pages/home": { visits: 10, title: "Home" },
      [under(SHARD)]: { visits: 2 },
      [PARTIALS[0]]: { visits: 3 },
      [PARTIALS[3]]: { visits: -1 },
      [under("another-device")]: { visits: 100 }, // counted in the total, not in this view
      [under("\t0f1f")]: { visits: 1000 }, // another prefix's partial
    });
    const counter = extensionCounter({}, firestore.sdk, "pages/home", "visits", { shardId: SHARD });
    const seen = [];
    counter.onSnapshot((value) => seen.push(value));
    expect(firestore.listened().sort()).toEqual(["pages/home", under(SHARD), ...PARTIALS].sort());
    await settle();
    expect(seen).toEqual([14]);
    await counter.incrementBy(1); // shown at once, before any move
    await settle();
    expect(seen).toEqual([14, 15]);
  });

  test("a move of the shard into the document shows no other value; a missing document or a non-number reads 0", async () => {
    const firestore = fakeFirestore();
    const counter = extensionCounter({}, firestore.sdk, "pages/home", "visits", { shardId: SHARD });
    const seen = [];
    counter.onSnapshot((value) => seen.push(value));
    await settle();
    expect(seen).toEqual([0]);
    await counter.incrementBy(1);
    await counter.incrementBy(1);
    await settle();
    // The backend's move: the document +2 and the shard -2 in one commit.
    firestore.set({ "pages/home": { visits: 2 }, [under(SHARD)]: { visits: 0 } });
    await settle();
    firestore.set({ [PARTIALS[1]]: { visits: "three" } });
    await settle();
    expect(seen).toEqual([0, 2]);
  });

  test("nothing is shown before each of the six documents reported", async () => {
    const firestore = fakeFirestore();
    const pending = [];
    const slow = { ...firestore.sdk, onSnapshot: (path, onNext, onError) => {
      pending.push(() => firestore.sdk.onSnapshot(path, onNext, onError));
      return () => {};
    } };
    const seen = [];
    extensionCounter({}, slow, "pages/home", "visits", { shardId: SHARD }).onSnapshot((value) => seen.push(value));
    firestore.set({ "pages/home": { visits: 5 } });
    pending.slice(0, 5).forEach((start) => start());
    await settle();
    expect(seen).toEqual([]);
    pending[5]();
    await settle();
    expect(seen).toEqual([5]);
  });

  test("unsubscribe stops every listener; a listener's failure stops them all and is reported once", async () => {
    const firestore = fakeFirestore();
    const counter = extensionCounter({}, firestore.sdk, "pages/home", "visits", { shardId: SHARD });
    const stop = counter.onSnapshot(() => {});
    expect(firestore.listened()).toHaveLength(6);
    stop();
    expect(firestore.listened()).toEqual([]);

    const errors = [];
    const seen = [];
    counter.onSnapshot((value) => seen.push(value), (error) => errors.push(error.code));
    firestore.fail(under(SHARD), { code: "permission-denied" });
    firestore.fail("pages/home", { code: "permission-denied" });
    await settle();
    expect(errors).toEqual(["permission-denied"]);
    expect(seen).toEqual([]); // the failure came before the sum was shown
    expect(firestore.listened()).toEqual([]);
  });

  test("an amount that is not an integer is refused before anything is written", async () => {
    const firestore = fakeFirestore();
    const counter = extensionCounter({}, firestore.sdk, "pages/home", "visits", { shardId: SHARD });
    for (const n of [1.5, Number.NaN, 2 ** 53, "1"]) {
      await expect(counter.incrementBy(n)).rejects.toThrow(TypeError);
    }
    expect(firestore.writes).toEqual([]);
  });

  test("the shard id is the extension SDK's cookie, written the first time for 30 days", () => {
    const { sdk } = fakeFirestore();
    globalThis.document = cookieJar({ other: "x" });
    const first = extensionCounter({}, sdk, "pages/home", "visits");
    expect(first.shardId).toMatch(UUID_V4);
    expect(globalThis.document.written).toHaveLength(1);
    const [cookie, expires, path] = globalThis.document.written[0].split("; ");
    expect(cookie).toBe(`FIRESTORE_COUNTER_SHARD_ID=${first.shardId}`);
    expect(Date.parse(expires.replace(/^expires=/, "")) - Date.now()).toBeGreaterThan(29 * 24 * 3600_000);
    expect(path).toBe("path=/");
    // Any counter of the page, or the extension's SDK itself, uses the same shard after that.
    expect(extensionCounter({}, sdk, "pages/other", "visits").shardId).toBe(first.shardId);
    expect(globalThis.document.written).toHaveLength(1);
  });

  test("a cookie the rules would refuse is replaced; without cookies each counter gets a new UUID", () => {
    const { sdk } = fakeFirestore();
    globalThis.document = cookieJar({ FIRESTORE_COUNTER_SHARD_ID: "not/a-shard" });
    expect(extensionCounter({}, sdk, "pages/home", "visits").shardId).toMatch(UUID_V4);
    delete globalThis.document;
    const a = extensionCounter({}, sdk, "pages/home", "visits").shardId;
    const b = extensionCounter({}, sdk, "pages/home", "visits").shardId;
    expect([a, b]).toEqual([expect.stringMatching(UUID_V4), expect.stringMatching(UUID_V4)]);
    expect(a).not.toBe(b);
  });

  test.each([
    [["pages", "visits", { shardId: SHARD }], /^TypeError: extensionCounter: "pages" is not a document's path/],
    [["pages//home", "visits", {}], /is not a document's path/],
    [["pages/home", "visits..x", {}], /^TypeError: extensionCounter: field "visits..x" is not a dotted path/],
    [["pages/home", "a.b.c.d.e.f.g.h.i", {}], /field .* is not a dotted path of at most 8 names/],
    [["pages/home", "visits", { shardId: "a/b" }], /^TypeError: extensionCounter: shardId "a\/b" is not 1 to 64/],
    [["pages/home", "visits", { shardId: "x".repeat(65) }], /shardId .* is not 1 to 64/],
    [["pages/home", "visits", { shard: SHARD }], /^TypeError: extensionCounter: unknown option shard/],
  ])("%j is a TypeError", (args, message) => {
    expect(refusal(() => extensionCounter({}, fakeFirestore().sdk, ...args))).toMatch(message);
  });
});

describe("declaredCounterId", () => {
  // functions/counting/features/collections.py's ids of the same values (Declaration.counter_id).
  test.each([
    ["visits", "home", "visits:home"],
    ["visits", "web-abc_1", "visits:web-abc_1"],
    ["visits", "été: a.b", "visits:.C3.A9t.C3.A9.3A.20a.2Eb"],
    ["comments", "😀", "comments:.F0.9F.98.80"],
    ["visits", "x".repeat(121), `visits:${"x".repeat(121)}`],
    ["visits", "x".repeat(122), `visits:${"x".repeat(87)}..ccd16bc19afac2e6fd5b0931420d12e3`],
    ["comments", "x".repeat(150) + "é", `comments:${"x".repeat(85)}..d5b31502274ec65949d2605de87d685d`],
    ["visits", "é".repeat(60), `visits:${".C3.A9".repeat(14)}.C3..f989aaf52260aef87908350aa7466526`],
    ["comments", "é".repeat(60), `comments:${".C3.A9".repeat(14)}..f989aaf52260aef87908350aa7466526`],
  ])("%s of %j is %j", async (name, value, id) => {
    expect(await declaredCounterId(name, value)).toBe(id);
  });

  test.each([["", "home"], ["visits:", "home"], ["visits", 1]])("(%j, %j) is a TypeError", async (name, value) => {
    await expect(declaredCounterId(name, value)).rejects.toThrow(TypeError);
  });
});

test("the counters client follows an extension counter's total, counters/visits:{page}, like any counter", async () => {
  const listened = [];
  const firestore = {
    doc: (db, ...segments) => segments.join("/"),
    onSnapshot: (path, onNext) => {
      listened.push(path);
      onNext({ exists: () => true, data: () => ({ count: 7, updated_at: { seconds: 1, nanoseconds: 0 } }) });
      return () => {};
    },
  };
  const functions = { httpsCallable: () => async () => ({ data: {} }) };
  const transport = firebaseTransport({ db: {}, functions: {} }, firestore, functions);
  const client = new CountersClient({ transport, store: await TapStore.open("test", new IDBFactory()), user: () => "u1" });
  const counter = await declaredCounterId("visits", "home");
  let state = null;
  client.watch(counter, (next) => { state = next; });
  expect(listened).toEqual(["counters/visits:home"]);
  expect(state).toMatchObject({ rollup: 7, shown: 7, exists: true });
});
