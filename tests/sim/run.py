"""`make sim SEEDS=N`: run the simulation for seeds 0..N-1, each once as built and once with the
protection against straddling writes switched off, and write `bench/results/sim.json`.

`seeds`, `lost`, `doubled`, `fenced_violations` count the protected runs that broke each check
(0 expected); `unprotected_lost` counts the unprotected runs that lost a count (above 0: the
simulation sees the bug the protection guards against). `failing` lists the seeds that broke a
check: `make sim SEED=n` replays one exactly and prints what it found. Of the protected runs:
`partitions_at_start` counts the runs that started with each P, `partition_changes` the changes
of P made while writers wrote, `retired` the invocations answered RETIRED, and
`handovers_by_partition` the lease takeovers of each partition ("2 of 4"), `struck_by_instance`
the invocations chaos killed or paused on each partition index's instances and the scheduled
one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "functions"), str(ROOT / "tools"), str(ROOT)]

from tests.sim import world  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "sim.json"


def one(seed: int) -> dict[str, Any]:
    logging.disable(logging.CRITICAL)  # holders log every failure they survive
    started = time.perf_counter()
    protected = world.run(seed)
    unprotected = world.run(seed, protected=False)
    return {"seed": seed, "protected": protected, "unprotected_lost": bool(unprotected.lost),
            "seconds": time.perf_counter() - started}


def describe(outcome: world.Outcome) -> str:
    found = {"lost": outcome.lost, "doubled": outcome.doubled,
             "fenced": outcome.fenced_violations, "crashes": outcome.crashes}
    problems = "; ".join(f"{k}: {v[:3]}" for k, v in found.items() if v)
    handovers = ", ".join(f"{part}: {n}" for part, n in sorted(outcome.handovers.items()))
    return (f"seed {outcome.seed} ({'protected' if outcome.protected else 'unprotected'}): "
            f"P {' -> '.join(map(str, outcome.partitions))}, {outcome.writes} writes, "
            f"{outcome.invocations} invocations, {outcome.retired} retired, {outcome.kills} "
            f"kills, {outcome.pauses} pauses, handovers {{{handovers}}}: {problems or 'ok'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--seed", type=int, help="replay one seed and print what it found")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to save the summary")
    args = parser.parse_args()
    if args.seed is not None:
        logging.disable(logging.CRITICAL)
        print(describe(world.run(args.seed)))
        print(describe(world.run(args.seed, protected=False)))
        return 0
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        runs = list(pool.map(one, range(args.seeds), chunksize=4))
    outcomes: list[world.Outcome] = [r["protected"] for r in runs]
    failing = [o for o in outcomes if not o.ok]
    for outcome in failing:
        print(describe(outcome), flush=True)
    summary = {
        "seeds": args.seeds,
        "lost": sum(1 for o in outcomes if o.lost),
        "doubled": sum(1 for o in outcomes if o.doubled),
        "fenced_violations": sum(1 for o in outcomes if o.fenced_violations),
        "crashes": sum(1 for o in outcomes if o.crashes),
        "unprotected_lost": sum(1 for r in runs if r["unprotected_lost"]),
        "failing": [o.seed for o in failing],
        "kills": sum(o.kills for o in outcomes),
        "pauses": sum(o.pauses for o in outcomes),
        "invocations": sum(o.invocations for o in outcomes),
        "client_writes": sum(o.writes for o in outcomes),
        "partitions_at_start": {str(count): sum(1 for o in outcomes if o.partitions[0] == count)
                                for count in world.COUNTS},
        "partition_changes": sum(o.partition_changes for o in outcomes),
        "retired": sum(o.retired for o in outcomes),
        "handovers_by_partition": {
            part: sum(o.handovers.get(part, 0) for o in outcomes)
            for part in sorted({p for o in outcomes for p in o.handovers},
                               key=lambda p: (int(p.split()[-1]), int(p.split()[0])))},
        "struck_by_instance": {
            instance: sum(o.struck.get(instance, 0) for o in outcomes)
            for instance in sorted({i for o in outcomes for i in o.struck})},
        "seconds_per_seed": round(sum(r["seconds"] for r in runs) / max(1, len(runs)), 2),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 1 if failing or not summary["unprotected_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
