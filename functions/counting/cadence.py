"""When the rollup ticks: one invocation's run under the lease (`serve`), handovers to its
successor, sleep, and what each invocation cost (`internal/rollup_usage`). Every entry point
(the scheduled `rollup`, the `rolluptick` task) calls `serve`; writers wake a sleeping rollup
through `counting.waking`. How and why, once: docs/architecture.md, "Rollup cadence".
"""

from __future__ import annotations

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

from google.cloud import firestore

from . import config
from .config import AutoscaleParams, Cadence
from .lease import EPOCH, Lease, LeaseLost, LeaseView, state_ref
from .rollup import Rollup, TickStats
from .status import StatusRecorder
from .usage import Usage

log = logging.getLogger(__name__)

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
    trigger: str | None = None  # what invoked it: "schedule", "handover", "wake", ...
    outcome: Outcome = Outcome.BUSY
    ticks: int = 0
    failed_ticks: int = 0
    successors: int = 0  # tasks enqueued
    seconds: float = 0.0
    waited_s: float = 0.0  # for the lease
    took: str = ""  # the lease as it found it: "new", "released" (a handover) or "expired"
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
    trigger: str | None = None,
) -> Invocation:
    """One invocation of the rollup (see the module doc). `successor` enqueues the next
    invocation (None: nobody continues after this one); `woken` says a write or a predecessor
    asked for this invocation, so it starts awake (a scheduled one starts as the lease says).
    `trigger` names what invoked it, counted in `internal/rollup_usage` (`triggers`)."""
    timing = cadence or config.ROLLUP
    stop = stop or threading.Event()
    started = clock.monotonic()
    lease = Lease(db, state_ref(db), owner or new_owner(), timing.lease_s)
    run = Invocation(owner=lease.owner, trigger=trigger)
    try:
        if _take(lease, timing, run, stop, woken, clock):
            log.info("rollup lease taken by %s after %.2f s (%s, %s)", lease.owner, run.waited_s,
                     run.took, "awake" if lease.awake else "housekeeping")
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
            seen = lease.found
            run.took = ("new" if seen is None or seen.renewed_at is None
                        else "released" if seen.owner is None else "expired")
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
    status = StatusRecorder(lease, clock.now)
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
                status.failed(error)
            else:
                status.ticked(stats)
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
        **({"triggers": {run.trigger: firestore.Increment(1)}} if run.trigger else {}),
    }
    try:
        usage_ref(db).set(fields, merge=True)
    except Exception:
        log.exception("could not record the rollup's usage")
