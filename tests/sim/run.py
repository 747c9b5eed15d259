"""`make sim SEEDS=N`: run the simulation for seeds 0..N-1 with every protection on, and, on the
first `--needed-seeds` of them (all by default), once with each protection alone off and once
unprotected (overlap, touch and sweep off); write `bench/results/sim.json`.

Of the protected runs: `lost`, `doubled`, `fenced_violations`, `wrong_answers` (a caller told
nothing was written for a write that counted), `late` (a shard state a change query should have
returned) and `crashes` count the runs with such a finding (0 expected); `failing` lists them by
seed with the checkers that failed (`make sim SEED=n` replays one exactly and prints its
findings); `library_retries` counts the commits the client library resent,
`max_commit_delay_s` the longest a commit landed after its server timestamp, `narrowed` the
partitions that narrowed their ticks while a writer that used an older P lived, `ops` the
operations by kind. `needed` counts, per protection, the seeds that fail with it alone off
(above 0: the simulation shows it needed), `needed_beyond_protected` those that then fail a
checker the seed's protected run passes, `needed_by_checker` which checkers failed;
`unprotected_lost` the unprotected runs that lost a count.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tools"), str(ROOT)]

from tests.sim import protections, world  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "sim.json"
UNPROTECTED = "unprotected"


def one(task: tuple[int, str | None]) -> tuple[str | None, world.Outcome]:
    """A seed's run with the named protection alone off (None: all on; UNPROTECTED)."""
    logging.disable(logging.CRITICAL)  # holders log every failure they survive
    seed, off = task
    switched = protections.ALL if off is None else protections.UNPROTECTED \
        if off == UNPROTECTED else protections.alone_off(off)
    return off, world.run(seed, protected=switched)


def describe(outcome: world.Outcome, *, findings: int = 3) -> str:
    tally = outcome.tally
    switched = ", ".join(outcome.off) + " off" if outcome.off else "protected"
    head = (f"seed {outcome.seed} ({switched}): P {' -> '.join(map(str, outcome.partitions))}, "
            f"{sum(outcome.ops.values())} operations, {tally['invocations']} invocations, "
            f"{tally['kills']} kills, {tally['pauses']} pauses, {tally['writer_kills']} writer "
            f"kills, {tally['writer_pauses']} writer pauses, {outcome.library_retries} library "
            f"resends, longest commit {outcome.max_commit_delay_s:.1f} s, "
            f"{outcome.seconds:.1f} s: {', '.join(outcome.failed) or 'ok'}")
    lines = [head, *(f"  {f}" for f in outcome.findings[:findings]),
             *(f"  crash: {c}" for c in outcome.crashes[:findings])]
    if len(outcome.findings) > findings:
        lines.append(f"  ... {len(outcome.findings) - findings} more findings")
    return "\n".join(lines)


def summary(protected: list[world.Outcome], switched: dict[str, list[world.Outcome]],
            needed_seeds: int, wall_s: float) -> dict[str, Any]:
    runs = protected + [o for outcomes in switched.values() for o in outcomes]
    by_seed = {o.seed: o for o in protected}
    ops: Counter[str] = Counter()
    for outcome in protected:
        ops += outcome.ops

    def failing(kind: str) -> int:
        return sum(1 for o in protected if o.of(kind))

    return {
        "seeds": len(protected),
        "lost": failing("lost"),
        "doubled": failing("doubled"),
        "fenced_violations": failing("fenced"),
        "wrong_answers": failing("answer"),
        "late": failing("late"),
        "crashes": sum(1 for o in protected if o.crashes),
        "unprotected_lost": sum(1 for o in switched.get(UNPROTECTED, []) if o.of("lost")),
        "library_retries": sum(o.library_retries for o in protected),
        "max_commit_delay_s": round(max((o.max_commit_delay_s for o in protected),
                                        default=0.0), 1),
        "narrowed": sum(o.tally["narrowed"] for o in protected),
        "ops": dict(sorted(ops.items())),
        "needed": {name: sum(1 for o in switched.get(name, []) if not o.ok)
                   for name in protections.NAMES},
        "needed_seeds": needed_seeds,
        # Of those seeds, the runs that fail a checker their protected run passes: what the
        # protection alone guards, whatever else fails today.
        "needed_beyond_protected": {
            name: sum(1 for o in switched.get(name, [])
                      if set(o.failed) - set(by_seed[o.seed].failed))
            for name in protections.NAMES},
        "needed_by_checker": {
            name: dict(sorted(Counter(c for o in switched.get(name, []) for c in o.failed)
                              .items()))
            for name in (*protections.NAMES, UNPROTECTED)},
        "failing": {str(o.seed): o.failed for o in protected if not o.ok},
        "failing_by_checker": dict(sorted(Counter(c for o in protected for c in o.failed)
                                          .items())),
        "partitions_at_start": dict(sorted(Counter(str(o.partitions[0])
                                                   for o in protected).items())),
        "partition_changes": sum(len(o.partitions) - 1 for o in protected),
        "hazards": dict(sorted(sum((o.tally for o in protected), Counter()).items())),
        "seconds_per_run": round(sum(o.seconds for o in runs) / max(1, len(runs)), 2),
        "virtual_seconds_per_run": round(sum(o.virtual_s for o in protected)
                                         / max(1, len(protected))),
        "wall_s": round(wall_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--needed-seeds", type=int, default=None,
                        help="seeds also run with each protection alone off (default: all)")
    parser.add_argument("--seed", type=int, help="replay one seed and print what it found")
    parser.add_argument("--off", choices=[*protections.NAMES, UNPROTECTED],
                        help="with --seed: that protection off")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to save the summary")
    args = parser.parse_args()
    if args.seed is not None:
        _, outcome = one((args.seed, args.off))
        print(describe(outcome, findings=50))
        return 0 if outcome.ok else 1
    needed_seeds = args.seeds if args.needed_seeds is None else min(args.needed_seeds,
                                                                     args.seeds)
    tasks: list[tuple[int, str | None]] = [(seed, None) for seed in range(args.seeds)]
    tasks += [(seed, name) for seed in range(needed_seeds)
              for name in (*protections.NAMES, UNPROTECTED)]
    started = time.perf_counter()
    protected: list[world.Outcome] = []
    switched: dict[str, list[world.Outcome]] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for off, outcome in pool.map(one, tasks, chunksize=2):
            if off is None:
                protected.append(outcome)
                if not outcome.ok:
                    print(describe(outcome), flush=True)
            else:
                switched.setdefault(off, []).append(outcome)
    result = summary(protected, switched, needed_seeds, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 1 if result["failing"] or not all(result["needed"].values()) \
        or not result["unprotected_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
