"""The rollup's two entry points (`counting.cadence` explains the design):

- `rollup`, scheduled every minute by Cloud Scheduler: the backstop and, while the rollup
  sleeps, its housekeeping tick.
- `rolluptick`, a Cloud Tasks queue function: the successor each invocation enqueues before its
  end, and the wake-up writers enqueue when the rollup sleeps. Its queue dispatches at most two
  at once, so a successor can wait for the lease beside its predecessor.
"""

from __future__ import annotations

import os

from firebase_functions import options, scheduler_fn, tasks_fn

from .. import cadence, config, waking
from . import Request, db
from .task_queues import RUNTIME_SERVICE_ACCOUNT, task_queue_invoker

# One holder at a time does the work; the lease makes extra instances return at once. A
# rollup instance keeps every active counter's shards in memory, hence 1 GiB.
ROLLUP_RUNTIME = {
    "cpu": 1,
    "memory": options.MemoryOption.GB_1,
    "timeout_sec": config.ROLLUP_TIMEOUT_S,  # a full run, waiting for the lease, a margin
    "min_instances": 0,  # asleep, the rollup costs one short invocation a minute
}


# What a `rolluptick` task says it is for (`waking.enqueue_tick`); anything else counts as "task".
TASK_REASONS = ("handover", "wake")


def successor() -> None:
    waking.enqueue_tick(db(), "handover")


@scheduler_fn.on_schedule(
    schedule="every 1 minutes",
    **ROLLUP_RUNTIME,  # type: ignore[arg-type]
    concurrency=1,  # Scheduler never overlaps two executions of the job
    max_instances=1,
    retry_count=0,  # the next minute is the retry
)
def rollup(event: scheduler_fn.ScheduledEvent) -> None:
    if os.environ.get("FUNCTIONS_EMULATOR") == "true" and not event.job_name:
        # Every new emulator worker pings the function once (GET /__/health); only the local
        # Scheduler stand-in (tools/scheduler.py) sends a job name.
        return
    cadence.serve(db(), successor=successor, woken=False, trigger="schedule")


@task_queue_invoker(RUNTIME_SERVICE_ACCOUNT)  # the functions may enqueue it (task_queues.py)
@tasks_fn.on_task_dispatched(
    **ROLLUP_RUNTIME,  # type: ignore[arg-type]
    # A successor lands on its predecessor's warm instance while that one finishes.
    concurrency=2,
    max_instances=2,
    rate_limits=options.RateLimits(max_concurrent_dispatches=2),
    # A crashed invocation (instance lost, 5xx) is redelivered quickly; the lease expires
    # within the lease's TTL and the redelivery takes over.
    retry_config=options.RetryConfig(max_attempts=5, min_backoff_seconds=1,
                                     max_backoff_seconds=10),
)
def rolluptick(req: Request) -> None:
    reason = req.data.get("reason") if isinstance(req.data, dict) else None
    cadence.serve(db(), successor=successor, woken=True,
                  trigger=reason if reason in TASK_REASONS else "task")
