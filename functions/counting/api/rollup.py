"""The rollup's two entry points (`counting.cadence` explains the design):

- `rolluptick`, a Cloud Tasks queue function: one tick per task, for the slot (second) of the
  writes that enqueued it (`counting.waking`). One instance at a time, one request at a time:
  its queue dispatches one task at once, and a warm instance keeps the rollup's ledger between
  ticks. A task that finds another holder, or whose tick fails, fails and is delivered again.
- `rollup`, scheduled by Cloud Scheduler every minute: the backstop, and the housekeeping of a
  rollup nobody writes to.
"""

from __future__ import annotations

import os

from firebase_functions import options, scheduler_fn, tasks_fn

from .. import cadence, config
from . import Request, db
from .task_queues import RUNTIME_SERVICE_ACCOUNT, task_queue_invoker

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
    cadence.holder_for(db()).housekeeping()


@task_queue_invoker(RUNTIME_SERVICE_ACCOUNT)  # the functions may enqueue it (task_queues.py)
@tasks_fn.on_task_dispatched(
    **ROLLUP_RUNTIME,  # type: ignore[arg-type]
    rate_limits=options.RateLimits(max_concurrent_dispatches=1),
    # A failed tick (another holder, a lost lease, Firestore) is delivered again soon; the next
    # slot's tick, or the scheduler's, catches up anyway.
    retry_config=options.RetryConfig(max_attempts=5, min_backoff_seconds=1,
                                     max_backoff_seconds=10),
)
def rolluptick(req: Request) -> None:
    data = req.data if isinstance(req.data, dict) else {}
    slot = data.get("slot")
    reason = data.get("reason")
    cadence.holder_for(db()).tick_slot(
        slot if isinstance(slot, int) and not isinstance(slot, bool) else None,
        trigger=reason if reason in TASK_REASONS else "task")


# What a `rolluptick` task says it is for (`waking.enqueue_tick`); anything else counts as "task".
TASK_REASONS = ("write", "deferred")
