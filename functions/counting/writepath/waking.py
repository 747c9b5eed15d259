"""After a write, make sure a rollup tick follows it (docs/architecture.md, "Rollup cadence").

Every write path of the domain ends in `shards.settle`, which calls its context's waker
(`counting.writepath.context.Writing.after_write`) with the commit time of what it wrote and the
homes of the keys it wrote (`counting.writepath.partitions`). The
write committed in the one-second slot s (its commit time's whole second); for each partition that
owns one of those homes, the process's `Waker` enqueues a task on that partition's queue named for s
and scheduled for s + 1, once per slot, partition and process. Cloud Tasks refuses a second task of
one name, so the writes of one second, on any number of instances, share one tick per partition,
which starts after every one of them has committed. Failures are logged, never raised: the scheduled
backstop ticks within about 70 s (the lease of the tick instance expires, then the next minute's run
comes). Deployed functions, the operator CLI and the demo seed build their context with the Cloud
Tasks waker (`cloud_tasks`); tests and the simulation build theirs with a waker of their own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from typing import Protocol

import firebase_admin
from firebase_admin import exceptions as admin_exceptions
from firebase_admin import functions as admin_functions
from google.cloud import firestore

from counting.foundation import config
from counting.foundation.config import Placement
from counting.writepath import partitions
from counting.writepath.partitions import Part

log = logging.getLogger(__name__)


def slot_of(instant: dt.datetime) -> int:
    """The slot of a commit: its whole second since the epoch."""
    return int(instant.timestamp() // config.TICK_SLOT_S)


def slot_end(slot: int) -> dt.datetime:
    """When a slot's tick may start: every write of the slot has committed by then."""
    return dt.datetime.fromtimestamp((slot + 1) * config.TICK_SLOT_S, dt.UTC)


def task_id(slot: int, part: Part = partitions.WHOLE) -> str:
    """The task's name: Cloud Tasks serves names with a spread-out prefix best (sequential ones
    concentrate its lookups), so a short digest of the slot goes first. A name is kept for a
    while after its task ran, so the partitioning is part of it."""
    name = f"{slot}" if part.count == 1 else f"{slot}-{part.count}-{part.index}"
    return f"{hashlib.sha256(name.encode()).hexdigest()[:8]}-{name}"


def enqueue_tick(db: firestore.Client, placement: Placement, reason: str,
                 part: Part = partitions.WHOLE, slot: int | None = None) -> bool:
    """Enqueue an invocation of `part`'s tick function, as the backend at `placement` deploys it,
    for `db`'s project (Cloud Tasks; the
    emulator's when CLOUD_TASKS_EMULATOR_HOST is set): for `slot`, named for it and scheduled at
    its end (False when that task exists already), or else at once. The task body is the
    callable envelope `{"data": ...}` the task function reads."""
    queue = admin_functions.task_queue(
        f"locations/{config.REGION}/functions/{placement.function_id(part.function)}",
        app=_app(db.project))
    options = admin_functions.TaskOptions(dispatch_deadline_seconds=config.ROLLUP_TIMEOUT_S)
    if slot is not None:
        options.task_id, options.schedule_time = task_id(slot, part), slot_end(slot)
    data = {"reason": reason, "slot": slot, "partitions": part.count, "partition": part.index}
    try:
        queue.enqueue({"data": data}, options)
    except (admin_exceptions.AlreadyExistsError, admin_exceptions.ConflictError):
        return False
    except ValueError as error:
        # firebase-admin 7.7 reads the emulator's answer for a named task wrongly: it drops the
        # first character of the name, assuming the leading "/" the emulator adds only to the
        # names it makes up, and fails to parse what is left, after the task was created.
        emulated = bool(os.environ.get("CLOUD_TASKS_EMULATOR_HOST"))
        if not (emulated and slot is not None and "resource name" in str(error)):
            raise
    return True


def _app(project: str) -> firebase_admin.App:
    """The Admin SDK app for `project`: the default one when it is that project's (deployed
    functions), else one of its own (a shell without GCLOUD_PROJECT: the CLI)."""
    if firebase_admin._DEFAULT_APP_NAME in firebase_admin._apps:
        default = firebase_admin.get_app()
        if default.project_id == project:
            return default
    name = f"counters-{project}"
    try:
        return firebase_admin.get_app(name)
    except ValueError:
        return firebase_admin.initialize_app(options={"projectId": project}, name=name)


class Waker:
    """The write path's side of ticking (one per process, in its context): after a write, make
    sure a tick of its slot is enqueued for each partition it wrote to. `enqueue(db, part,
    slot)` enqueues it (False: it existed already); `count(db)` is P as the process knows it;
    `pools(max_workers, thread_name_prefix)` makes the pool its calls run in."""

    def __init__(self, enqueue: Callable[[firestore.Client, Part, int], bool], *,
                 count: Callable[[firestore.Client], int],
                 timeout_s: float = config.TICK_ENQUEUE_TIMEOUT_S,
                 pools: Callable[[int, str], Executor] = ThreadPoolExecutor) -> None:
        self._enqueue = enqueue
        self._count = count
        self._timeout_s = timeout_s
        # The Admin SDK waits up to 120 s for Cloud Tasks and retries: a write waits this
        # long at most for all its creations together (the calls go on in the background).
        # They run at once, one thread each (up to the largest P), so that the wait does not
        # grow with the partitions a write touches.
        self._calls = pools(partitions.CHOICES[-1], "tick-enqueue")
        self._lock = threading.Lock()
        # Per database and partition: the last slot enqueued.
        self._last: dict[tuple[str, str, Part], int] = {}
        self.created = 0  # tasks this process created
        self.refused = 0  # create calls refused because another process created that slot's

    def after_write(self, db: firestore.Client, committed_at: dt.datetime,
                    homes: Iterable[int]) -> bool:
        """Returns True when this call created a task. A failed enqueue is not tried again for
        that slot (the backstop ticks within about 70 s; a flood of retries would only slow
        every write while Cloud Tasks is down)."""
        slot = slot_of(committed_at)
        database = getattr(db, "_database", "(default)")
        count = self._count(db)
        due: list[Part] = []
        with self._lock:
            for part in sorted({Part(count, home % count) for home in homes}):
                key = (db.project, database, part)
                if self._last.get(key, -1) < slot:
                    self._last[key] = slot
                    due.append(part)
        calls = [self._calls.submit(self._enqueue, db, part, slot) for part in due]
        answered, waiting = wait(calls, self._timeout_s)
        if waiting:
            log.warning("%d of the rollup's tick tasks not created within %.0f s (the scheduler "
                        "ticks within a minute)", len(waiting), self._timeout_s)
        created = False
        for call in answered:
            try:
                made = call.result()
            except Exception as error:  # refused or failed
                log.warning("could not enqueue the rollup's tick (the scheduler ticks within a "
                            "minute): %r", error)
                continue
            with self._lock:
                if made:
                    self.created += 1
                else:
                    self.refused += 1
            created = created or made
        return created


class AfterWrite(Protocol):
    def after_write(self, db: firestore.Client, committed_at: dt.datetime,
                    homes: Iterable[int]) -> bool: ...


class Never:
    """Enqueues nothing: for writers whose rollup runs in-process (tests, benchmarks)."""

    def after_write(self, db: firestore.Client, committed_at: dt.datetime,
                    homes: Iterable[int]) -> bool:
        return False


def cloud_tasks(known: partitions.Known, placement: Placement) -> Waker:
    """The deployed waker of the backend at `placement`: its tasks go to Cloud Tasks
    (`enqueue_tick`), for the partitions of P as `known` has it."""
    return Waker(lambda target, part, slot: enqueue_tick(target, placement, "write", part, slot),
                 count=lambda target: known.count(target, placement.names))
