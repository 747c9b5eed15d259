"""Cloud Scheduler's stand-in for the local stack: the Functions emulator loads scheduled
functions but never fires them.

It fires the `rollup` function's job the way Cloud Scheduler does: at each minute boundary
("every 1 minutes" is the cron `* * * * *`), as an HTTP POST with the `X-CloudScheduler-*`
headers, waiting for each execution to finish before the next may start (an execution that runs
past a boundary delays the next one to the following boundary, as Scheduler never overlaps two
executions of a job), with the function's deployed timeout as the attempt deadline and no
retries (the function's `retry_count` is 0).

Where it differs from Cloud Scheduler: it fires through the emulator's scheduled-function URL
(`<name>-0`), its first execution is the first minute boundary after the stack starts, and an
attempt that passes its deadline is abandoned here but the emulator's worker runs on (deployed,
the function's timeout ends it).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

PERIOD_S = 60.0


class Scheduler:
    """Fires one job on a thread of its own until `stop()`; each execution is logged."""

    def __init__(self, url: str, job: str, deadline_s: float, log: Path) -> None:
        self._url = url
        self._job = job
        self._deadline_s = deadline_s
        self._log = log
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        with self._log.open("a") as log:
            while not self._stop.wait(PERIOD_S - time.time() % PERIOD_S):
                scheduled = dt.datetime.now(dt.UTC).replace(microsecond=0)
                began = time.monotonic()
                outcome = self._fire(scheduled)
                log.write(f"{scheduled.isoformat()} {self._job}: {outcome} "
                          f"({time.monotonic() - began:.1f} s)\n")
                log.flush()

    def _fire(self, scheduled: dt.datetime) -> str:
        request = urllib.request.Request(
            self._url,
            data=b"{}",
            headers={
                "Content-Type": "application/json",
                "X-CloudScheduler": "true",
                "X-CloudScheduler-JobName": self._job,
                "X-CloudScheduler-ScheduleTime": scheduled.isoformat().replace("+00:00", "Z"),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._deadline_s) as response:
                return f"HTTP {response.status}"
        except urllib.error.HTTPError as error:
            return f"HTTP {error.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            return f"failed: {error}"
