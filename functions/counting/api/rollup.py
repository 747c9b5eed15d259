"""The scheduled rollup: Cloud Scheduler's finest interval is a minute, so each invocation
loops about once a second for a little over its minute; the lease makes overlapping or
repeated deliveries wait instead of running twice."""

from __future__ import annotations

import os

from firebase_functions import scheduler_fn

from .. import config
from .. import rollup as rollup_loop
from . import db


@scheduler_fn.on_schedule(schedule="every 1 minutes", timeout_sec=120, max_instances=2)
def rollup(event: scheduler_fn.ScheduledEvent) -> None:
    if os.environ.get("FUNCTIONS_EMULATOR") == "true" and not event.job_name:
        # Every new emulator worker pings this body once (GET /__/health); the local loop of
        # `make dev` does the emulator's rollups instead.
        return
    rollup_loop.run(db(), seconds=config.ROLLUP_INVOCATION_S)
