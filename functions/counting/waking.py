"""Waking a sleeping rollup after a write (docs/architecture.md, "Rollup cadence").

Every write path of the domain ends in `counters.settle`, which calls `after_write`: the
process's `Waker` reads the lease document at most once per WAKE_CACHE_TTL_S and, when it says
asleep (or its holder stopped renewing), enqueues a `rolluptick` task at most once per
WAKE_RETRY_S. Failures are logged, never raised: the scheduled backstop wakes the rollup within
a minute anyway. Deployed functions, the operator CLI and the demo seed use the Cloud Tasks
waker made on first use; tests and the simulation `install` their own.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import firebase_admin
from firebase_admin import functions as admin_functions
from google.cloud import firestore

from . import config
from .lease import LeaseView, state_ref

log = logging.getLogger(__name__)


def enqueue_tick(db: firestore.Client, reason: str) -> None:
    """Enqueue a `rolluptick` invocation for `db`'s project (Cloud Tasks; the emulator's when
    CLOUD_TASKS_EMULATOR_HOST is set). The task body is the callable envelope `{"data": ...}`
    the task function reads."""
    queue = admin_functions.task_queue(
        f"locations/{config.REGION}/functions/{config.ROLLUP_TASK_FUNCTION}", app=_app(db.project))
    queue.enqueue({"data": {"reason": reason}},
                  admin_functions.TaskOptions(dispatch_deadline_seconds=config.ROLLUP_TIMEOUT_S))


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


def asleep(view: LeaseView) -> bool:
    """Nobody will tick unless woken: the lease says asleep, or nobody has renewed it for
    longer than its TTL (a holder died, or a successor never came)."""
    if not view.awake or view.renewed_at is None:
        return True
    silent = view.read_time - view.renewed_at
    return silent > dt.timedelta(seconds=config.ROLLUP.lease_s + 2 * config.ROLLUP.period_s)


class Waker:
    """The write path's side of waking (one per process): after a write, make sure the rollup
    is awake. `enqueue` asks for a tick of the given database's rollup."""

    def __init__(self, enqueue: Callable[[firestore.Client], None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._enqueue = enqueue
        self._clock = clock
        self._lock = threading.Lock()
        self._checked_at = -float("inf")
        self._asleep = False
        self._woken_at = -float("inf")

    def after_write(self, db: firestore.Client) -> bool:
        """Returns True when this call enqueued a wake-up.

        One call at a time reads the lease, outside the lock: the others count that read as a
        fresh answer of "awake", so a slow Firestore holds up no write. That is safe because the
        reader wakes the rollup if it finds it asleep or cannot tell (the read failed), and the
        rollup keeps ticking for `Cadence.drain_s` (more than WAKE_CACHE_TTL_S) after it marks
        itself asleep: a write made within WAKE_CACHE_TTL_S of the start of a read that found
        it awake is in a tick."""
        with self._lock:
            now = self._clock()
            if now - self._woken_at < config.WAKE_RETRY_S:
                return False
            read = now - self._checked_at >= config.WAKE_CACHE_TTL_S
            if read:
                self._checked_at, self._asleep = now, False  # the others wait on this read
            elif not self._asleep:
                return False
            else:
                self._woken_at, self._checked_at = now, -float("inf")
        if read:
            try:
                view = LeaseView.of(state_ref(db).get(),
                                    dt.timedelta(seconds=config.ROLLUP.lease_s))
            except Exception as error:  # never fail the write that came before
                log.warning("could not read the rollup's lease (waking it anyway): %r", error)
                view = None
            with self._lock:
                self._asleep = view is None or asleep(view)
                if not self._asleep or now - self._woken_at < config.WAKE_RETRY_S:
                    return False
                self._woken_at, self._checked_at = now, -float("inf")
        try:
            self._enqueue(db)
        except Exception as error:
            log.warning("could not wake the rollup (the scheduler will, within a minute): %r",
                        error)
            return False
        log.info("rollup asleep: woke it")
        return True


class AfterWrite(Protocol):
    def after_write(self, db: firestore.Client) -> bool: ...


class Never:
    """Wakes nothing: for writers whose rollup runs in-process (tests, benchmarks)."""

    def after_write(self, db: firestore.Client) -> bool:
        return False


_installed: AfterWrite | None = None


def install(waker: AfterWrite | None) -> AfterWrite | None:
    """Make `waker` the process's (None: the Cloud Tasks waker, made on next use); returns the
    one it replaces."""
    global _installed
    previous, _installed = _installed, waker
    return previous


def after_write(db: firestore.Client) -> bool:
    """Called by the domain after each committed shard write; never raises (the write is done:
    a client told otherwise would retry it)."""
    global _installed
    if _installed is None:
        _installed = Waker(lambda target: enqueue_tick(target, "wake"))
    try:
        return _installed.after_write(db)
    except Exception:
        log.exception("could not wake the rollup (the scheduler will, within a minute)")
        return False
