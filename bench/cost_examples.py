"""The worked monthly figures of docs/operations.md ("Idle and cadence costs"): `cost_model`
applied to four loads under assumed durations and operation counts (model estimates; the cost
benchmark measures them). `python bench/cost_examples.py` prints the table's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import cost_model
from counting.foundation import config

WINDOW_S = 600.0
CALLABLE_S = 0.05  # an `increment` request: under 100 ms, so billed 100 ms alone
TICK_S = 0.1  # a tick's request, billed 100 ms
# Per tick: the lease's read and the fence written with the counters; per counter changed in the
# tick's second, its shard read by 1 + CHANGE_OVERLAP_S ticks (the change query's overlap reads
# it again that share of the time) and its document written.
TICK_READS, TICK_WRITES = 1, 1
CHANGE_READS, CHANGE_WRITES = 1 + config.CHANGE_OVERLAP_S, 1
HOUSEKEEPING_READS, HOUSEKEEPING_WRITES = 6, 4  # the scheduled tick of an idle minute


@dataclass(frozen=True, kw_only=True)
class Load:
    name: str
    rate: float  # increments a second, round robin over the counters
    counters: int


LOADS = (
    Load(name="idle: nothing written", rate=0.0, counters=0),
    Load(name="trickle: 1 increment every 10 s, one counter", rate=0.1, counters=1),
    Load(name="steady: 1/s on one counter", rate=1.0, counters=1),
    Load(name="busy: 100/s over 100 counters", rate=100.0, counters=100),
)


@dataclass(frozen=True, kw_only=True)
class Month:
    increments: int
    write_path_usd: float
    rollup_usd: float  # the Scheduler job included
    total_usd: float
    usd_per_million: float | None


def month(load: Load) -> Month:
    """A WINDOW_S of `load`, priced by the model and scaled to a month."""
    n = round(load.rate * WINDOW_S)
    requests = [(i / load.rate, CALLABLE_S) for i in range(n)]
    slots: dict[int, set[int]] = {}  # second -> counters written in it
    for i, (start, _) in enumerate(requests):
        slots.setdefault(int(start), set()).add(i % load.counters)
    changed = sum(len(written) for written in slots.values())
    scheduled = WINDOW_S / cost_model.SCHEDULE_S
    invocations = len(slots) + scheduled
    usage = {
        "invocations": invocations,
        "billed_seconds": invocations * TICK_S,
        "ticks": invocations,
        "tasks": 0.0,
        "reads": len(slots) * TICK_READS + changed * CHANGE_READS
        + scheduled * HOUSEKEEPING_READS,
        "writes": len(slots) * TICK_WRITES + changed * CHANGE_WRITES
        + scheduled * HOUSEKEEPING_WRITES,
        "deletes": 0.0,
    }
    rollup = cost_model.rollup_usd(usage, scheduled)
    write_path = cost_model.write_path_usd(
        requests, cost_model.slot_tasks(usage, scheduled), load.counters)
    return Month(
        increments=round(load.rate * cost_model.MONTH_S),
        write_path_usd=write_path * cost_model.MONTH_S / WINDOW_S,
        rollup_usd=cost_model.month_usd(rollup, WINDOW_S),
        total_usd=cost_model.month_usd(write_path + rollup, WINDOW_S),
        usd_per_million=cost_model.usd_per_million_increments(write_path + rollup, n)
        if n else None)


def row(load: Load) -> str:
    """The docs' table row of a load."""
    m = month(load)
    per_million = "-" if m.usd_per_million is None else f"${m.usd_per_million:,.2f}"
    return (f"| {load.name} | {m.increments:,} | ${m.write_path_usd:,.2f} | "
            f"${m.rollup_usd:,.2f} | **${m.total_usd:,.2f}** | {per_million} |")


def partition_month(*, busy: bool) -> float:
    """What one more rollup partition adds to a month, beside the counters it publishes: its
    housekeeping tick in the scheduled run each minute (billed 100 ms, HOUSEKEEPING_READS, the
    lease taken, renewed and let go: the usage record and the invocation are shared), and, when
    written every second, a tick a second of its own (an invocation, a task created and
    delivered, 100 ms, the lease's read and the fence)."""
    minutes = cost_model.MONTH_S / cost_model.SCHEDULE_S
    usage = {"invocations": 0.0, "billed_seconds": minutes * TICK_S, "ticks": minutes,
             "tasks": 0.0, "reads": minutes * HOUSEKEEPING_READS,
             "writes": minutes * (HOUSEKEEPING_WRITES - 1), "deletes": 0.0}
    idle = cost_model.rollup_usd(usage, 0)
    if not busy:
        return idle
    seconds = cost_model.MONTH_S
    ticking = {"invocations": seconds, "billed_seconds": seconds * TICK_S, "ticks": seconds,
               "tasks": 0.0, "reads": seconds * TICK_READS, "writes": seconds * TICK_WRITES,
               "deletes": 0.0}
    # Its slot tasks' creations, one per second (refused duplicates aside).
    return idle + cost_model.rollup_usd(ticking, 0) + seconds * cost_model.TASK_OPERATION


def partition_row() -> str:
    """The docs' figures of one more partition."""
    return (f"${partition_month(busy=False):,.2f} a month idle, "
            f"${partition_month(busy=True):,.2f} a month written every second")


if __name__ == "__main__":
    for load in LOADS:
        print(row(load))
    print("one more partition:", partition_row())
