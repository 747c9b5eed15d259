"""When the rollup ticks: one invocation's run under the lease, handovers, sleep and wake-up.

Cloud Scheduler fires at most once a minute and never overlaps two executions of a job, so a
rollup that publishes every second cannot be one scheduled loop (it would stop for the rest of
each minute plus a cold start). The deployed design:

- Every invocation, whatever triggered it, calls `serve`: take the lease, tick every
  ROLLUP_PERIOD_S, and release it at the end.
- Awake, an invocation ticks for ROLLUP_RUN_S and enqueues its successor (a Cloud Tasks task for
  the `rolluptick` function) ROLLUP_SUCCESSOR_LEAD_S before its end. The successor finds the lease
  held by a holder that hands over soon, so it waits, polling, and takes the lease within a poll
  of the release: publishes go on across handovers.
- With no shard written for ROLLUP_IDLE_S the holder marks the lease asleep, ticks ROLLUP_DRAIN_S
  longer (the write path's cache of the mark is shorter), and releases it without a successor.
  Asleep, the system costs one short scheduled invocation a minute (housekeeping: shrinking idle
  counters, folding, trend windows).
- Writes wake it: after a write the increment and track paths check the lease document through
  a per-instance cache (`Waker`) and, when it says asleep (or its holder stopped renewing),
  enqueue a `rolluptick` task.
- The scheduled `rollup` function is the backstop: it finds a live holder and returns at once, or
  it takes the lease (a chain broken by a crash) and carries on.

Deliveries are at least once and may be duplicated: an invocation that finds a live holder that
is not about to hand over returns at once, and the lease makes every handover exact (the
successor reads from the persisted watermark).
"""

from __future__ import annotations

import collections
import datetime as dt
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import firebase_admin
from firebase_admin import functions as admin_functions
from google.cloud import firestore

from . import config
from .autoscale import AutoscaleParams
from .lease import EPOCH, Lease, LeaseLost, LeaseView
from .rollup import Rollup, TickStats, state_ref
from .usage import Usage

log = logging.getLogger(__name__)

RECENT_ERRORS = 10  # kept on the lease document


@dataclass(frozen=True, kw_only=True)
class Cadence:
    """The timing of one invocation (config's values; tests shorten them)."""

    period_s: float = config.ROLLUP_PERIOD_S
    lease_s: float = config.ROLLUP_LEASE_S
    run_s: float = config.ROLLUP_RUN_S
    lead_s: float = config.ROLLUP_SUCCESSOR_LEAD_S
    extend_s: float = config.ROLLUP_EXTEND_S
    idle_s: float = config.ROLLUP_IDLE_S
    drain_s: float = config.ROLLUP_DRAIN_S
    handover_wait_s: float = config.ROLLUP_HANDOVER_WAIT_S
    poll_s: float = config.ROLLUP_WAIT_POLL_S


def in_process(period_s: float) -> Cadence:
    """A holder that ticks until stopped and never sleeps: tests and benchmarks drive the rollup
    in-process on projects of their own, where no trigger runs."""
    return Cadence(period_s=period_s, run_s=float("inf"), idle_s=float("inf"))


class Outcome(StrEnum):
    BUSY = "busy"  # another holder is live and not about to hand over: nothing done
    ASLEEP = "asleep"  # released the lease asleep (no writes for a while)
    HANDED_OVER = "handed_over"  # ran its time; released it awake for the successor
    LOST = "lost"  # the lease was taken from it (it stalled past its TTL)
    STOPPED = "stopped"  # asked to stop (tests, SIGTERM)


@dataclass(kw_only=True)
class Invocation:
    """What one invocation did, logged and added to `internal/rollup_usage`."""

    owner: str
    outcome: Outcome = Outcome.BUSY
    ticks: int = 0
    failed_ticks: int = 0
    successors: int = 0  # tasks enqueued
    seconds: float = 0.0
    waited_s: float = 0.0  # for the lease
    max_tick_s: float = 0.0
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, kw_only=True)
class Clock:
    """Where an invocation reads the time: the system's, or a simulation's virtual one."""

    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))


SYSTEM_CLOCK = Clock()


def new_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def enqueue_tick(reason: str) -> None:
    """Enqueue a `rolluptick` invocation (Cloud Tasks; the emulator's under the stack). The task
    body is the callable envelope `{"data": ...}` the task function reads."""
    app = firebase_admin.get_app() if firebase_admin._apps else firebase_admin.initialize_app()
    queue = admin_functions.task_queue(
        f"locations/{config.REGION}/functions/{config.ROLLUP_TASK_FUNCTION}", app=app)
    queue.enqueue({"data": {"reason": reason}},
                  admin_functions.TaskOptions(dispatch_deadline_seconds=config.ROLLUP_TIMEOUT_S))


def usage_ref(db: firestore.Client) -> firestore.DocumentReference:
    return db.collection(config.INTERNAL).document(config.ROLLUP_USAGE_DOC)


def serve(
    db: firestore.Client,
    *,
    successor: Callable[[], None] | None,
    woken: bool,
    cadence: Cadence | None = None,
    scaling: AutoscaleParams | None = None,
    owner: str | None = None,
    stop: threading.Event | None = None,
    on_tick: Callable[[TickStats], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Invocation:
    """One invocation of the rollup (see the module doc). `successor` enqueues the next
    invocation (None: nobody continues after this one); `woken` says a write or a predecessor
    asked for this invocation, so it starts awake (a scheduled one starts as the lease says)."""
    timing = cadence or Cadence()
    stop = stop or threading.Event()
    started = clock.monotonic()
    lease = Lease(db, state_ref(db), owner or new_owner(), timing.lease_s)
    run = Invocation(owner=lease.owner)
    try:
        if _take(lease, timing, run, stop, woken, clock):
            log.info("rollup lease taken by %s after %.2f s (%s)", lease.owner, run.waited_s,
                     "awake" if lease.awake else "housekeeping")
            _hold(db, lease, successor, timing, scaling, run, stop, on_tick, clock)
    finally:
        run.seconds = clock.monotonic() - started
        _record(db, run)
    log.info("rollup invocation %s: %s after %.1f s, %d ticks (%d failed), max tick %.2f s",
             run.owner, run.outcome, run.seconds, run.ticks, run.failed_ticks, run.max_tick_s)
    return run


def _take(lease: Lease, timing: Cadence, run: Invocation, stop: threading.Event,
          woken: bool, clock: Clock) -> bool:
    """Acquire the lease, waiting for it when its holder is about to let it go (a handover, a
    sleep) or has stopped renewing it (dead or stalled: the lease expires within its TTL). A
    holder seen renewing that is not about to let go keeps it: give up."""
    waited_from = clock.monotonic()
    deadline = waited_from + timing.handover_wait_s + timing.lease_s
    watched: tuple[str | None, dt.datetime | None] | None = None
    while True:
        acquired = lease.acquire(wake=woken)
        run.usage.reads += 1
        if acquired:
            run.usage.writes += 1
            run.waited_s = clock.monotonic() - waited_from
            return True
        found = lease.found
        if found is None or clock.monotonic() >= deadline:
            return False
        if not _lets_go_soon(found, timing):
            renewal = (found.owner, found.renewed_at)
            if watched is not None and renewal != watched:
                return False  # alive, and far from its end: a duplicate delivery
            watched = renewal
        if stop.wait(timing.poll_s):
            return False


def _lets_go_soon(view: LeaseView, timing: Cadence) -> bool:
    if not view.awake:
        return True  # housekeeping or draining: it releases within a few ticks
    left = None if view.ends_at is None else (view.ends_at - view.read_time).total_seconds()
    return left is not None and left <= timing.handover_wait_s


def _hold(
    db: firestore.Client,
    lease: Lease,
    successor: Callable[[], None] | None,
    timing: Cadence,
    scaling: AutoscaleParams | None,
    run: Invocation,
    stop: threading.Event,
    on_tick: Callable[[TickStats], None] | None,
    clock: Clock,
) -> None:
    began = clock.monotonic()
    ends = began + timing.run_s
    lease.ends_at = (None if math.isinf(timing.run_s)
                     else clock.now() + dt.timedelta(seconds=timing.run_s))
    rollup = Rollup(db, lease, scaling)
    health = Health(lease, clock)
    last_change = began
    # Asleep, the holder ends once a tick read at least drain_s after the first renewal that
    # told writers so (its instant, `marked`): any write it did not see was made by a writer
    # whose cached view of the lease said asleep, and woke the rollup. A housekeeping holder
    # took a lease that already said asleep: one tick.
    marked: dt.datetime | None = None if lease.awake else EPOCH
    try:
        while True:
            tick_began = clock.monotonic()
            try:
                stats = rollup.tick()
            except LeaseLost:
                log.warning("rollup lease lost by %s", lease.owner)
                run.outcome = Outcome.LOST
                return
            except Exception as error:  # any failure: this tick is redone from the watermark
                log.exception("rollup tick failed; it will be done again")
                run.failed_ticks += 1
                health.failed(error)
            else:
                health.ticked(stats)
                run.ticks += 1
                run.usage.add(stats.usage)
                run.max_tick_s = max(run.max_tick_s, stats.seconds)
                if on_tick is not None:
                    on_tick(stats)
                if stats.changed:
                    last_change = clock.monotonic()
                    if not lease.awake:
                        log.info("rollup awake again: writes arrived")
                    lease.awake, marked = True, None
                elif not lease.awake:
                    marked = marked or stats.as_of  # this tick's renewal said asleep
                    if stats.as_of - marked >= dt.timedelta(seconds=timing.drain_s):
                        run.outcome = Outcome.ASLEEP
                        return
            now = clock.monotonic()
            if lease.awake and now - last_change >= timing.idle_s:
                log.info("rollup going to sleep: no writes for %.0f s", now - last_change)
                lease.awake = False  # the next renewal tells writers
            if lease.awake and successor is not None and not run.successors \
                    and now >= ends - timing.lead_s:
                try:
                    successor()
                    run.successors += 1
                except Exception:
                    log.exception("could not enqueue the rollup's successor; retrying")
            # Draining (asleep) goes on to its end, past `ends` if need be: a few seconds.
            if lease.awake and now >= ends and (run.successors or successor is None
                                                or now >= ends + timing.extend_s):
                run.outcome = Outcome.HANDED_OVER
                return
            if stop.wait(max(0.0, timing.period_s - (clock.monotonic() - tick_began))):
                run.outcome = Outcome.STOPPED
                return
    finally:
        # Handing over (or stopping) leaves the lease awake for the successor; falling asleep
        # has already marked it asleep. A lost lease has nothing to release.
        lease.release(rollup.durable_watermark, rollup.swept)
        run.usage.writes += 1
        rollup.close()


class Health:
    """What the lease document tells operators (each renewal writes it; no extra write): the
    last tick's duration and lag, the holder's start, and the recent problems."""

    def __init__(self, lease: Lease, clock: Clock) -> None:
        self._lease = lease
        self._clock = clock
        self._errors: collections.deque[str] = collections.deque(maxlen=RECENT_ERRORS)
        self._last_as_of: dt.datetime | None = None
        lease.status = {"holder_since": clock.now(), "errors": []}

    def ticked(self, stats: TickStats) -> None:
        for problem in stats.problems:
            self._errors.append(f"{stats.as_of:%Y-%m-%dT%H:%M:%SZ} {problem}")
        # How stale a count can be when it is published: the time since the previous tick's
        # instant, plus this tick's work.
        lag = stats.seconds + (0.0 if self._last_as_of is None
                               else (stats.as_of - self._last_as_of).total_seconds())
        self._last_as_of = stats.as_of
        self._lease.status.update(tick_s=round(stats.seconds, 3), lag_s=round(lag, 3),
                                  errors=list(self._errors))

    def failed(self, error: Exception) -> None:
        now = self._clock.now()
        self._errors.append(f"{now:%Y-%m-%dT%H:%M:%SZ} tick failed: {error!r}"[:300])
        self._lease.status["errors"] = list(self._errors)


def _record(db: firestore.Client, run: Invocation) -> None:
    """Add this invocation's figures to the running totals (one write; best effort)."""
    billed_s = max(0.1, -(-run.seconds // 0.1) * 0.1)  # billed in 100 ms steps
    fields = {
        "invocations": firestore.Increment(1),
        "billed_seconds": firestore.Increment(round(billed_s, 1)),
        "ticks": firestore.Increment(run.ticks),
        "tasks": firestore.Increment(run.successors),
        "reads": firestore.Increment(run.usage.reads),
        "writes": firestore.Increment(run.usage.writes + 1),  # this write included
        "deletes": firestore.Increment(run.usage.deletes),
        "outcomes": {run.outcome.value: firestore.Increment(1)},
    }
    try:
        usage_ref(db).set(fields, merge=True)
    except Exception:
        log.exception("could not record the rollup's usage")


class Waker:
    """The write path's side of waking: after a write, make sure the rollup is awake.

    One per instance. It reads the lease document at most once per WAKE_CACHE_TTL_S and, when
    that says asleep (or the holder stopped renewing), calls `enqueue` (a `rolluptick` task) at
    most once per WAKE_RETRY_S. Failures are logged, never raised: the scheduled backstop wakes
    the rollup within a minute anyway.
    """

    def __init__(self, enqueue: Callable[[], None], *,
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
        rollup keeps ticking for ROLLUP_DRAIN_S (more than WAKE_CACHE_TTL_S) after it marks
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
                                    dt.timedelta(seconds=config.ROLLUP_LEASE_S))
            except Exception as error:  # never fail the write that came before
                log.warning("could not read the rollup's lease (waking it anyway): %r", error)
                view = None
            with self._lock:
                self._asleep = view is None or asleep(view)
                if not self._asleep or now - self._woken_at < config.WAKE_RETRY_S:
                    return False
                self._woken_at, self._checked_at = now, -float("inf")
        try:
            self._enqueue()
        except Exception as error:
            log.warning("could not wake the rollup (the scheduler will, within a minute): %r",
                        error)
            return False
        log.info("rollup asleep: woke it")
        return True


# The scheduler's housekeeping renews a sleeping rollup's lease every minute; allow a late one.
ASLEEP_STALE_S = 150.0


@dataclass(frozen=True, kw_only=True)
class RollupHealth:
    """The rollup's state for operators (`counters status`), from the lease document."""

    holder: str | None
    awake: bool
    last_tick_at: dt.datetime | None
    last_tick_age_s: float | None
    tick_s: float | None
    lag_s: float | None
    holder_since: dt.datetime | None
    errors: list[str]
    stale: str | None  # why the rollup looks stuck; None while healthy


def health(db: firestore.Client) -> RollupHealth:
    snapshot = state_ref(db).get()
    view = LeaseView.of(snapshot, dt.timedelta(seconds=config.ROLLUP_LEASE_S))
    data = snapshot.to_dict() or {}
    age = None if view.renewed_at is None else (view.read_time - view.renewed_at).total_seconds()
    stale = None
    if age is None:
        stale = "the rollup never ran"
    elif view.awake and age > config.ROLLUP_LEASE_S + 2 * config.ROLLUP_PERIOD_S:
        stale = f"awake, but no tick for {age:.0f} s"
    elif not view.awake and age > ASLEEP_STALE_S:
        stale = f"asleep, and no scheduled housekeeping for {age:.0f} s"
    return RollupHealth(holder=view.owner, awake=view.awake, last_tick_at=view.renewed_at,
                        last_tick_age_s=age, tick_s=data.get("tick_s"), lag_s=data.get("lag_s"),
                        holder_since=data.get("holder_since"),
                        errors=list(data.get("errors") or []), stale=stale)


def tasks_waker() -> Waker:
    """A waker that enqueues `rolluptick` through Cloud Tasks: for the deployed write paths and
    for in-process writers (the operator CLI, the demo seed)."""
    return Waker(lambda: enqueue_tick("wake"))


def asleep(view: LeaseView) -> bool:
    """Nobody will tick unless woken: the lease says asleep, or nobody has renewed it for
    longer than its TTL (a holder died, or a successor never came)."""
    if not view.awake or view.renewed_at is None:
        return True
    silent = view.read_time - view.renewed_at
    return silent > dt.timedelta(seconds=config.ROLLUP_LEASE_S + 2 * config.ROLLUP_PERIOD_S)
