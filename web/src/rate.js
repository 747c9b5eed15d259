// A counter's write rate as readers show it (docs/architecture.md, "Autoscaling"). The rollup
// publishes `rate` with its instant `rate_at` and does not write it again while it falls: a
// reader decays it as the rollup does (the measured rate's 10 s fall while nobody writes), and
// shows 0 below 0.05 writes/s. The same as counting.rollup.ledger.shown_rate and publishable
// (tests/unit/test_ledger.py checks these constants against the rollup's).
export const FALL_TAU_S = 10;
export const SHOWN_MIN = 0.05;

/** The write rate of a counter document's `data` at `nowMs` (a document from before `rate_at`:
 * decayed from `updated_at`, as the rollup does). */
export function rateNow(data, nowMs = Date.now()) {
  const rate = Number(data?.rate ?? 0);
  const at = (data?.rate_at ?? data?.updated_at)?.toMillis?.();
  const shown = at === undefined || nowMs <= at
    ? rate : rate * Math.exp(-(nowMs - at) / 1000 / FALL_TAU_S);
  return shown < SHOWN_MIN ? 0 : shown;
}
