// The dashboard's rollup health (health.js): one partition reads as before partitions; several
// read as their latest tick, their worst tick and lag, how many are held, and which is stuck.
import { Timestamp } from "firebase/firestore";
import { describe, expect, test } from "vitest";
import { auditSummary, leaseIds, partitionCount, rollupHealth, STALE_S } from "../src/health.js";

const NOW = Date.parse("2025-03-01T12:00:00Z");
/** A Firestore timestamp `s` seconds before NOW. */
const ago = (s) => Timestamp.fromMillis(NOW - s * 1000);
/** Times as UTC hh:mm:ss, whatever the machine's locale and zone. */
const time = (at) => at.toISOString().slice(11, 19);

describe("which documents", () => {
  test("P is the configured count, 1 when absent or not a choice", () => {
    expect(partitionCount(undefined)).toBe(1);
    expect(partitionCount({ count: 4 })).toBe(4);
    expect(partitionCount({ count: 128 })).toBe(128);
    expect(partitionCount({ count: 3 })).toBe(1);
  });

  test("one partition keeps internal/rollup; P of them are rollup-P-i", () => {
    expect(leaseIds(1)).toEqual(["rollup"]);
    expect(leaseIds(4)).toEqual(["rollup-4-0", "rollup-4-1", "rollup-4-2", "rollup-4-3"]);
  });
});

describe("one partition", () => {
  test("reads as its lease document, in the browser's time of day", () => {
    const lease = {
      owner: "host-1", renewed_at: ago(2), holder_since: ago(600), tick_s: 0.125, lag_s: 1.5,
      errors: ["2025-03-01T11:59:00Z tick failed: boom"],
    };
    expect(rollupHealth([lease], { now: NOW })).toEqual({
      facts: [
        ["last tick", new Date(NOW - 2000).toLocaleTimeString()],
        ["holder", `host-1 since ${new Date(NOW - 600_000).toLocaleTimeString()}`],
        ["tick duration", "0.125 s"],
        ["lag", "1.5 s"],
      ],
      partitions: [],
      errors: ["2025-03-01T11:59:00Z tick failed: boom"],
      point: { at: (NOW - 2000) / 1000, tick: 0.125, lag: 1.5 },
    });
  });

  test("never ran, released, or not ticked yet: no point to plot", () => {
    expect(rollupHealth([undefined], { now: NOW })).toEqual({
      facts: [["last tick", "never"], ["holder", "none (released)"], ["tick duration", "?"], ["lag", "?"]],
      partitions: [], errors: [], point: null,
    });
    const { facts, point } = rollupHealth([{ owner: "host-1", renewed_at: ago(1) }], { now: NOW, time });
    expect(facts[1]).toEqual(["holder", "host-1 since ?"]);
    expect(point).toBeNull();
  });

  test("a stale lease reads as before partitions: its time, no note", () => {
    const { facts } = rollupHealth([{ renewed_at: ago(STALE_S + 60) }], { now: NOW, time });
    expect(facts[0]).toEqual(["last tick", "11:56:30"]);
  });
});

describe("four partitions, one stuck", () => {
  const leases = [
    { owner: "a", renewed_at: ago(3), holder_since: ago(60), tick_s: 0.2, lag_s: 1.1, errors: [] },
    { owner: "b", renewed_at: ago(1), holder_since: ago(60), tick_s: 0.4, lag_s: 0.9, errors: ["e1"] },
    // Its holder stopped ten minutes ago without releasing: its lease has long expired.
    { owner: "c", renewed_at: ago(600), holder_since: ago(900), tick_s: 0.1, lag_s: 2.5,
      errors: ["e2", "e3"] },
    { owner: null, renewed_at: ago(20), tick_s: 0.3, lag_s: 1.0 },
  ];
  const health = rollupHealth(leases, { now: NOW, time });

  test("the overall facts: the latest tick, the live holders, the worst tick and lag", () => {
    expect(health.facts).toEqual([
      ["last tick", "11:59:59"],
      ["holder", "2 of 4 held"],
      ["tick duration", "0.4 s"],
      ["lag", "2.5 s"],
    ]);
  });

  test("each partition's facts, the stuck one marked", () => {
    expect(health.partitions).toEqual([
      { name: "1 of 4", stale: false, facts: [["last tick", "11:59:57"], ["holder", "a since 11:59:00"],
        ["tick duration", "0.2 s"], ["lag", "1.1 s"]] },
      { name: "2 of 4", stale: false, facts: [["last tick", "11:59:59"], ["holder", "b since 11:59:00"],
        ["tick duration", "0.4 s"], ["lag", "0.9 s"]] },
      { name: "3 of 4", stale: true, facts: [["last tick", "11:50:00 (no tick for 600 s)"],
        ["holder", "c since 11:45:00"], ["tick duration", "0.1 s"], ["lag", "2.5 s"]] },
      { name: "4 of 4", stale: false, facts: [["last tick", "11:59:40"], ["holder", "none (released)"],
        ["tick duration", "0.3 s"], ["lag", "1 s"]] },
    ]);
  });

  test("every partition's errors, named by partition; the worst values plotted at the latest renewal", () => {
    expect(health.errors).toEqual(["2 of 4: e1", "3 of 4: e2", "3 of 4: e3"]);
    expect(health.point).toEqual({ at: (NOW - 1000) / 1000, tick: 0.4, lag: 2.5 });
  });

  test("a partition not read yet counts as never ticked", () => {
    const partial = rollupHealth([leases[0], undefined], { now: NOW, time });
    expect(partial.facts.slice(0, 2)).toEqual([["last tick", "11:59:57"], ["holder", "1 of 2 held"]]);
    expect(partial.partitions[1]).toMatchObject({ stale: true, facts: [["last tick", "never"],
      ["holder", "none (released)"], ["tick duration", "?"], ["lag", "?"]] });
  });
});

describe("the exactness audit", () => {
  test("says it never ran before the first scheduled run", () => {
    expect(auditSummary(undefined)).toEqual({
      text: "exactness audit: never ran (the scheduled rollup runs it)", drift: false });
  });

  test("reads as its last run, its suspects and no drift", () => {
    const audit = { last_run_at: ago(20), checked: 42, suspects: { b: {}, a: {} }, drift: [] };
    expect(auditSummary(audit, { time })).toEqual({
      text: "exactness audit: last run 11:59:40; 42 counters checked; suspects: a, b; no drift",
      drift: false });
  });

  test("names the latest drift it found", () => {
    const found = { counter: "likes", published: 4, shards: 8, as_of: ago(400), found_at: ago(60) };
    const audit = { last_run_at: ago(5), checked: 7, suspects: {}, drift: [{ ...found, counter: "old" }, found] };
    const summary = auditSummary(audit, { time });
    expect(summary.drift).toBe(true);
    expect(summary.text).toBe("exactness audit: last run 11:59:55; 7 counters checked; no suspect; "
      + "DRIFT on likes: published 4, shards 8 (found 11:59:00)");
  });
});
