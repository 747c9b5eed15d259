// The rollup's health as the dashboard shows it: P partitions' lease documents, each one
// partition's health record, merged into one picture (docs/architecture.md, "Partitions"). Pure:
// ops.js listens to the documents and shows the result; web/test/health.test.js checks it.

// What internal/rollup_partitions may hold (functions/counting/writepath/partitions.py, CHOICES).
const CHOICES = [1, 2, 4, 8, 16, 32, 64, 128];
// No tick for this long and a partition looks stuck, as `counters status` says (ROLLUP_STALE_S).
export const STALE_S = 150;

/** P, from the data of internal/rollup_partitions (absent, or not a choice: 1). */
export function partitionCount(data) {
  return CHOICES.includes(data?.count) ? data.count : 1;
}

/** The lease documents in `internal` of P partitions, in order (partitions.Part.lease_id). */
export function leaseIds(count) {
  return count === 1 ? ["rollup"] : Array.from({ length: count }, (_, i) => `rollup-${count}-${i}`);
}

const seconds = (value) => (value === undefined || value === null ? "?" : `${value} s`);
/** The highest of the values some partitions have, undefined when none has one. */
const worst = (values) => {
  const known = values.filter((value) => value !== undefined && value !== null).map(Number);
  return known.length ? Math.max(...known) : undefined;
};

/** The picture of P partitions from their lease documents' data (undefined: not read yet, or
 * absent), in partition order: `facts` ([name, text]: the last tick of any partition, the holder
 * (with P > 1, how many partitions a live holder has), the worst tick duration and lag),
 * `partitions` (with P > 1, each one's name, facts and whether it looks stuck), `errors` (each
 * prefixed with its partition when P > 1) and `point` (the latest renewal, in epoch seconds, with
 * the worst tick and lag: what the plot adds; null before any tick). */
export function rollupHealth(records, { now = Date.now(), time = (at) => at.toLocaleTimeString() } = {}) {
  const count = records.length;
  const parts = Array.from(records, (data = {}, index) => {
    const renewed = data.renewed_at?.toDate() ?? null;
    const age = renewed && Math.round((now - renewed.getTime()) / 1000);
    const stale = !renewed || age > STALE_S;
    const since = data.holder_since?.toDate();
    return {
      name: `${index + 1} of ${count}`, data, renewed, stale,
      facts: [
        ["last tick", renewed ? time(renewed) + (stale && count > 1 ? ` (no tick for ${age} s)` : "") : "never"],
        ["holder", data.owner ? `${data.owner} since ${since ? time(since) : "?"}` : "none (released)"],
        ["tick duration", seconds(data.tick_s)],
        ["lag", seconds(data.lag_s)],
      ],
    };
  });
  const renewals = parts.filter((part) => part.renewed).map((part) => part.renewed.getTime());
  const latest = renewals.length ? Math.max(...renewals) : null;
  const tick = worst(parts.map((part) => part.data.tick_s));
  const lag = worst(parts.map((part) => part.data.lag_s));
  const held = parts.filter((part) => part.data.owner && !part.stale).length;
  return {
    facts: [
      ["last tick", latest === null ? "never" : time(new Date(latest))],
      ["holder", count === 1 ? parts[0].facts[1][1] : `${held} of ${count} held`],
      ["tick duration", seconds(tick)],
      ["lag", seconds(lag)],
    ],
    partitions: count === 1 ? [] : parts.map(({ name, facts, stale }) => ({ name, facts, stale })),
    errors: parts.flatMap(({ name, data }) => (data.errors ?? []).map(
      (error) => (count === 1 ? error : `${name}: ${error}`))),
    point: latest === null || tick === undefined ? null : { at: latest / 1000, tick, lag: lag ?? 0 },
  };
}

/** The exactness audit's state (the data of internal/audit, undefined when it never ran) as one
 * line, and whether it found drift (functions/counting/rollup/audit.py): the last run, the counters
 * checked, the suspects, and the latest drift entry. */
export function auditSummary(data, { time = (at) => at.toLocaleTimeString() } = {}) {
  if (!data) return { text: "exactness audit: never ran (the scheduled rollup runs it)", drift: false };
  const ran = data.last_run_at?.toDate();
  const suspects = Object.keys(data.suspects ?? {});
  const drift = data.drift ?? [];
  const last = drift[drift.length - 1];
  const parts = [
    `exactness audit: last run ${ran ? time(ran) : "?"}`,
    `${data.checked ?? 0} counters checked`,
    suspects.length ? `suspects: ${suspects.sort().join(", ")}` : "no suspect",
    last ? `DRIFT on ${last.counter}: published ${last.published}, shards ${last.shards} (found ${time(last.found_at.toDate())})`
      : "no drift",
  ];
  return { text: parts.join("; "), drift: Boolean(last) };
}
