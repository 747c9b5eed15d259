"""The rollup's two entry points (`counting.rollup.cadence` explains the design):

- `rolluptick` (partition 1 of P), `rolluptick1` ... `rolluptick15` (up to 127 with
  ROLLUP_PARTITIONS_MAX), Cloud Tasks queue functions, one per partition index
  (`counting.writepath.partitions`): one tick per task, for the slot
  (second) of the writes that enqueued it (`counting.writepath.waking`). One instance at a time, one
  request at a time: each queue dispatches one task at once, and a warm instance keeps its
  partition's ledger between ticks. A task that finds another holder, or whose tick fails, fails
  and is delivered again. A partition index beyond P costs nothing: nothing enqueues to it.
- `rollup`, scheduled by Cloud Scheduler every minute: the backstop, and the housekeeping of a
  rollup nobody writes to, for every partition; then the sequence numbers no commit carried into
  their records (`counting.features.sequences.housekeeping`), a run of the exactness audit
  (`counting.rollup.audit`) and the extension counters' sweep (`counting.features.extension`).
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import cast

from counting.features import extension
from counting.features.sequences import housekeeping
from counting.foundation import config
from counting.rollup import audit, cadence
from counting.writepath import partitions
from counting.writepath.partitions import Part
from firebase_functions import options, scheduler_fn, tasks_fn

from handlers import Request, context, db, declared, placement
from handlers.task_queues import RUNTIME_SERVICE_ACCOUNT, task_queue_invoker

log = logging.getLogger(__name__)

# A rollup instance keeps every active counter's shards in memory: 512 MiB. Each invocation is
# one tick: at gen-1 CPU sizing (a third of a vCPU for 512 MiB, which allows one request per
# instance: what these functions serve) a tick costs a third of what it would at 1 vCPU; the
# work is Firestore round trips. tests/unit/test_manifest.py pins these, and bench/cost_model.py
# prices them.
ROLLUP_RUNTIME = {
    "cpu": "gcf_gen1",
    "memory": options.MemoryOption.MB_512,
    "timeout_sec": config.ROLLUP_TIMEOUT_S,
    "min_instances": 0,  # nothing written: one short scheduled invocation a minute
    "max_instances": 1,
    "concurrency": 1,
}
# The tick functions' memory, and so their gen-1 share of a vCPU (ROLLUP_TICK_MB in functions/.env:
# 512 as shipped; 1024 gives 0.58 vCPU, 2048 one vCPU): a holder's changed counters a second grow
# with it (docs/architecture.md, "Capacity"). A value not among these fails the load.
TICK_MEMORY = {512: options.MemoryOption.MB_512, 1024: options.MemoryOption.GB_1,
               2048: options.MemoryOption.GB_2}


def tick_runtime(env: Mapping[str, str]) -> dict[str, object]:
    raw = env.get("ROLLUP_TICK_MB", "512").strip()
    if not raw.isdigit() or int(raw) not in TICK_MEMORY:
        raise ValueError(f"ROLLUP_TICK_MB={raw!r}: one of {', '.join(map(str, TICK_MEMORY))}")
    return {**ROLLUP_RUNTIME, "memory": TICK_MEMORY[int(raw)]}


@functools.cache
def holders() -> cadence.Holders:
    """The instance's rollup holders, kept between invocations: the lease and the ledger stay
    with a warm instance."""
    return cadence.Holders(context().writing)


@scheduler_fn.on_schedule(
    schedule="every 1 minutes",
    **ROLLUP_RUNTIME,  # type: ignore[arg-type]
    retry_count=0,  # the next minute is the retry
)
def rollup(event: scheduler_fn.ScheduledEvent) -> None:
    if os.environ.get("FUNCTIONS_EMULATOR") == "true" and not event.job_name:
        # Every new emulator worker pings the function once (GET /__/health); only the local
        # Scheduler stand-in (tools/scheduler.py) sends a job name.
        return
    try:
        holders().housekeeping(db())
    finally:
        # The exactness audit and the numbers no commit carried into their records ride on the
        # same minute (no scheduler job of their own): a few reads each. A housekeeping that
        # failed keeps neither from its run, nor one the other.
        try:
            housekeeping.record_issued(db(), placement().names, dt.datetime.now(dt.UTC),
                                       context().sequence_limits)
        finally:
            try:
                audit.run(context().writing, db())
            finally:
                extension.sweep(context(), db(), declared().declarations)


def tick_function(index: int) -> Callable[[Request], None]:
    """The task queue function of partition index `index` (of any P): its own queue, which
    dispatches one task at a time, and at most one instance, which keeps the partition's ledger
    between ticks."""

    def tick(req: Request) -> None:
        data = req.data if isinstance(req.data, dict) else {}
        slot, reason, count = data.get("slot"), data.get("reason"), data.get("partitions", 1)
        if count not in partitions.CHOICES or data.get("partition", 0) != index \
                or index >= count:
            log.warning("task for another partition ignored: %r", data)
            return  # a task no tick can serve: delivering it again would not help
        holders().tick_task(
            db(), Part(count, index),
            slot if isinstance(slot, int) and not isinstance(slot, bool) else None,
            trigger=reason if reason in TASK_REASONS else "task")

    tick.__name__ = tick.__qualname__ = Part(partitions.HOMES, index).function
    # A failed tick (another holder, a lost lease, Firestore) is delivered again soon; the next
    # slot's tick, or the scheduler's, catches up anyway. The functions may enqueue it
    # (task_queues.py).
    deployed = cast(Callable[[Request], None], tasks_fn.on_task_dispatched(
        **tick_runtime(os.environ),  # type: ignore[arg-type]
        rate_limits=options.RateLimits(max_concurrent_dispatches=1),
        retry_config=options.RetryConfig(max_attempts=5, min_backoff_seconds=1,
                                         max_backoff_seconds=10),
    )(tick))
    return task_queue_invoker(RUNTIME_SERVICE_ACCOUNT)(deployed)


# What a tick task says it is for (`waking.enqueue_tick`); anything else counts as "task".
TASK_REASONS = ("write", "deferred", "partitions", "housekeeping")
# Function name -> function, one per partition index up to the largest P the deploy serves
# (`rolluptick`, `rolluptick1`, ...; ROLLUP_PARTITIONS_MAX in functions/.env, 16 by default: a
# value that is not a power of two up to 128 fails the load, and so the deploy); main.py exports
# each under its name.
TICKS: dict[str, Callable[[Request], None]] = {
    Part(partitions.HOMES, index).function: tick_function(index)
    for index in range(partitions.deployed_max(os.environ))
}
