"""When the rollup ticks: one short invocation per tick, billed only while something is written.

- A `rolluptick` task for a slot (the writers of one second enqueue it for the end of that
  second: `counting.writepath.waking`) runs `Holder.tick_slot`: one tick, unless this holder has
  already ticked after the slot's end (a late or duplicate delivery).
- The scheduled `rollup`, every minute, runs `Holder.housekeeping`: the backstop for a write whose
  task was lost, and what must happen while nothing is written (cool-downs, shrinks and folds,
  trend buckets leaving their window, sweeps). It ticks only when no other holder's lease is
  live, and lets the lease go when done.

A process keeps one `Holder` per database and partition between invocations, in the `Holders`
its handlers own: the lease and the ledger stay with a warm instance, so its next tick reads
only what changed. The lease says whether that is still true: a tick first reads it, and finds
it unchanged since its own last write, or takes it again with an empty ledger. What the
invocations cost is added to `internal/rollup_usage` at most every `Cadence.usage_flush_s`. How
and why, once: docs/architecture.md, "Rollup cadence".
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from google.cloud import firestore

from counting.foundation import config
from counting.foundation.config import AutoscaleParams, Cadence, Names
from counting.rollup import status
from counting.rollup.lease import Health, Lease, LeaseLost, state_ref
from counting.rollup.tick import Limits, Rollup, TickStats
from counting.rollup.usage import Usage
from counting.writepath import partitions, waking
from counting.writepath.context import Writing
from counting.writepath.partitions import WHOLE, Part

log = logging.getLogger(__name__)


class Outcome(StrEnum):
    TICKED = "ticked"
    COVERED = "covered"  # this holder already ticked after the slot's end: nothing to do
    BUSY = "busy"  # another holder's lease stayed live: the platform delivers it again
    RETIRED = "retired"  # its partitioning was replaced: the current partitions were woken
    FAILED = "failed"  # the tick failed (or lost the lease): the platform delivers it again


class Busy(Exception):
    """Another holder's lease is live: raised so that Cloud Tasks delivers the task again."""


class Retired(Exception):
    """The partition's lease was retired by a change of P (`repartition.change`)."""


@dataclass(kw_only=True)
class Invocation:
    """What one invocation did, logged and added to `internal/rollup_usage`."""

    trigger: str
    outcome: Outcome = Outcome.BUSY
    ticks: int = 0
    tasks: int = 0  # tasks it enqueued (the next slot's, for counters it deferred)
    early: bool = False  # delivered before its slot ended (Cloud Tasks' clock and Firestore's)
    seconds: float = 0.0
    usage: Usage = field(default_factory=Usage)


# The scheduled run housekeeps this many partitions itself (about 16 short ticks in its minute);
# each further one gets a task on its own queue (`Holders.housekeeping`).
HOUSEKEPT_HERE = 16
USAGE_WRITERS = 8  # partitions that flush every `usage_flush_s`; more flush less often


def new_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def usage_ref(db: firestore.Client, names: Names) -> firestore.DocumentReference:
    return db.collection(names.internal).document(config.ROLLUP_USAGE_DOC)


def billed_seconds(seconds: float) -> float:
    """A request's billed time: rounded up to 100 ms."""
    return max(0.1, -(-round(seconds, 6) // 0.1) * 0.1)


class Holder:
    """The rollup in one process: its lease, its ledger and what its invocations cost, kept
    between invocations. One invocation at a time (Cloud Run sends the rollup's functions one
    request per instance). `writing` is the context of its writes: its placement, its
    protections, and the clock it reads the time from and waits on."""

    def __init__(
        self,
        db: firestore.Client,
        *,
        writing: Writing,
        part: Part = WHOLE,
        enqueue: Callable[[Part, int], bool] | None = None,
        owner: str | None = None,
        cadence: Cadence | None = None,
        scaling: AutoscaleParams | None = None,
        limits: Limits | None = None,
        on_tick: Callable[[TickStats], None] | None = None,
    ) -> None:
        self._db = db
        self.part = part
        self._writing = writing
        self._enqueue = enqueue  # a partition's task for a slot (False: it existed already)
        self._timing = cadence or config.ROLLUP
        self._scaling = scaling
        self._limits = limits
        self._clock = clock = writing.clock
        self._on_tick = on_tick
        self._lock = threading.Lock()
        self.lease = Lease(db, state_ref(db, writing.names, part), owner or new_owner(),
                           self._timing.lease_s, protections=writing.protections)
        self.rollup: Rollup | None = None  # with the lease: the ledger of the current holding
        self.last_as_of: dt.datetime | None = None  # the current holding's last tick
        # Not yet added to internal/rollup_usage: "field" or "group.field" -> amount.
        self._pending: defaultdict[str, float] = defaultdict(float)
        self._recorded_at = clock.monotonic()
        # All partitions add to one record: together under a write a second.
        self._flush_s = self._timing.usage_flush_s * max(1.0, part.count / USAGE_WRITERS)

    # -- invocations --

    def tick_slot(self, slot: int | None, trigger: str = "write") -> Invocation:
        """A task's invocation: one tick that starts after the end of `slot` (None: at once),
        unless a tick of this holder already started after it and no counter is owed. Raises
        `Busy`, `LeaseLost` or the tick's error after recording what it did, so that the
        platform delivers the task again."""
        with self._lock:
            run = Invocation(trigger=trigger)
            began = self._clock.monotonic()
            try:
                end = None if slot is None else waking.slot_end(slot)
                if end is not None and self.rollup is not None and self.last_as_of is not None \
                        and self.last_as_of >= end and not self.rollup.owed:
                    run.outcome = Outcome.COVERED
                    return run
                if not self._take(run, self._timing.busy_wait_s):
                    raise Busy(f"the rollup's lease is held by {self._holder_seen()}")
                self._tick(run, end)
                return run
            except Retired:
                run.outcome = Outcome.RETIRED
                self._wake_current(run, slot)
                return run
            except Exception as error:
                if not isinstance(error, Busy):
                    run.outcome = Outcome.FAILED
                raise
            finally:
                self._done(run, began, flush=False)

    def housekeeping(self) -> Invocation:
        """The scheduled invocation: one tick unless another holder's lease is live (more while
        it owes counters, for `drain_s`), then the lease is let go (a warm holder elsewhere
        takes it back at its next task)."""
        with self._lock:
            run = Invocation(trigger="schedule")
            began = self._clock.monotonic()
            try:
                if self._take(run, 0.0):
                    try:
                        self._tick(run, None)
                        # Owed counters are drained here, not left to a task (`drain_s`).
                        drain_until = began + self._timing.drain_s / self.part.count
                        while self.rollup is not None and self.rollup.owed \
                                and self._clock.monotonic() < drain_until:
                            self._tick(run, None)
                    finally:
                        self._let_go(run)
                return run
            except Retired:
                run.outcome = Outcome.RETIRED
                return run
            except Exception:
                run.outcome = Outcome.FAILED
                raise
            finally:
                self._done(run, began, flush=True)

    def close(self) -> None:
        """Let the lease go and record what is pending (tests, benchmarks, shutdown)."""
        with self._lock:
            run = Invocation(trigger="close", outcome=Outcome.COVERED)
            self._let_go(run)
            self._pending["writes"] += run.usage.writes
            self._flush()

    # -- the lease --

    def _take(self, run: Invocation, wait_s: float) -> bool:
        """Hold the lease: still held (the tick's first read checks it), or taken when it is
        free, expired or released, polling up to `wait_s` while another holder's is live.
        Raises `Retired` when its partitioning was replaced."""
        if self.rollup is not None and self.lease.written_at is not None:
            return True
        deadline = self._clock.monotonic() + wait_s
        while True:
            acquired = self.lease.acquire(Health(holder_since=self._clock.now()))
            run.usage.reads += 1
            if acquired:
                run.usage.writes += 1
                self._drop()
                self.rollup = Rollup(self._db, self.lease, self._scaling,
                                     renew_s=self._timing.renew_s, part=self.part,
                                     writing=self._writing, limits=self._limits)
                log.info("rollup lease of partition %s taken by %s", self.part, self.lease.owner)
                return True
            if self.lease.found is not None and self.lease.found.retired:
                raise Retired(f"partition {self.part} was retired")
            if self._clock.monotonic() >= deadline:
                return False
            self._clock.sleep(self._timing.poll_s)

    def _wake_current(self, run: Invocation, slot: int | None) -> None:
        """A retired partition's task: its writes belong to the current partitions that own its
        homes now (`Part.heirs`), which start from where the retired ones were: wake them for
        the slot."""
        if self._enqueue is None:
            return
        count = partitions.read_count(self._db, self._writing.names)
        run.usage.reads += 1
        when = waking.slot_of(self._clock.now()) if slot is None else slot
        for part in self.part.heirs(count):
            run.tasks += int(self._enqueue(part, when))

    def _holder_seen(self) -> str:
        found = self.lease.found
        return "another holder" if found is None or found.owner is None else found.owner

    def _drop(self) -> None:
        """Forget the current holding (its ledger is no longer the truth)."""
        if self.rollup is not None:
            self.rollup.close()
        self.rollup, self.last_as_of = None, None

    def _let_go(self, run: Invocation) -> None:
        if self.rollup is not None and self.lease.written_at is not None:
            self.lease.release(self.rollup.durable_progress)
            run.usage.writes += 1
        self._drop()

    # -- the tick --

    def _tick(self, run: Invocation, not_before: dt.datetime | None) -> None:
        """One tick whose instant is at or after `not_before`. A lease found taken since this
        holder's last write is taken again once, with an empty ledger. Counters deferred by the
        first-load budget get the next second's task, served by this warm holder; if it cannot
        be created the task fails, to be delivered again. Trend parts written (P > 1) get a task
        of partition 0, which merges them."""
        retaken = False
        while True:
            rollup = self.rollup
            assert rollup is not None
            try:
                stats = rollup.tick()
            except LeaseLost:
                run.usage.add(rollup.store.take_usage())
                self._drop()
                if retaken or not self._take(run, self._timing.busy_wait_s):
                    raise
                retaken = True
                continue
            except Exception as error:
                run.usage.add(rollup.store.take_usage())
                log.exception("rollup tick failed; it will be done again")
                self.lease.note(health=status.failed(self.lease.record.health, error,
                                                     self._clock.now()))
                raise
            run.ticks += 1
            run.usage.add(stats.usage)
            self.lease.note(health=status.ticked(self.lease.record.health, stats,
                                                 self.last_as_of))
            self.last_as_of = stats.as_of
            if self._on_tick is not None:
                self._on_tick(stats)
            if not_before is None or stats.as_of >= not_before:
                break
            # Delivered before the slot ended (clocks differ): tick again once it has. The
            # instant was read by the time its read returned, and the tick's own time since
            # counts: waiting the whole difference from here would start the next tick a tick
            # late (every time on the emulator, which dispatches a task at once).
            run.early = True
            self._clock.sleep(max(0.0, (not_before - stats.as_of).total_seconds()
                                  - (self._clock.monotonic() - rollup.store.begun)))
        run.outcome = Outcome.TICKED
        if stats.owed and self._enqueue is not None and run.trigger != "schedule":
            run.tasks += int(self._enqueue(self.part, waking.slot_of(stats.as_of) + 1))
        merge_after = stats.trends.parts_at if stats.trends is not None else None
        if merge_after is not None and self._enqueue is not None:
            # Partition 0 merges the trend parts: its tick for the slot of their commit starts
            # after it (a task of that slot that ran already did too). A lost task is made up
            # for by its housekeeping, every minute.
            merger = Part(self.part.count, 0)
            run.tasks += int(self._enqueue(merger, waking.slot_of(merge_after)))

    # -- usage --

    def _done(self, run: Invocation, began: float, *, flush: bool) -> None:
        run.seconds = self._clock.monotonic() - began
        for key, amount in {
            "invocations": 1, "billed_seconds": billed_seconds(run.seconds), "ticks": run.ticks,
            "tasks": run.tasks, "reads": run.usage.reads, "writes": run.usage.writes,
            "deletes": run.usage.deletes, "early": int(run.early),
            f"outcomes.{run.outcome}": 1, f"triggers.{run.trigger}": 1,
        }.items():
            self._pending[key] += amount
        log.info("rollup %s invocation: %s, %d ticks, %.3f s", run.trigger, run.outcome,
                 run.ticks, run.seconds)
        if flush or self._clock.monotonic() - self._recorded_at >= self._flush_s:
            self._flush()

    def _flush(self) -> None:
        """Add the pending figures to internal/rollup_usage (one write, itself counted; best
        effort: a failure keeps them pending)."""
        if not self._pending:
            return
        self._pending["writes"] += 1
        fields: dict[str, Any] = {}
        for key, amount in self._pending.items():
            group, _, name = key.rpartition(".")
            value = firestore.Increment(round(amount, 1) if name == "billed_seconds"
                                        else int(amount))
            if group:
                fields.setdefault(group, {})[name] = value
            else:
                fields[name] = value
        try:
            usage_ref(self._db, self._writing.names).set(  # increments
                fields, merge=True, retry=self._writing.once())
        except Exception:
            self._pending["writes"] -= 1
            log.exception("could not record the rollup's usage")
            return
        self._pending.clear()
        self._recorded_at = self._clock.monotonic()


def closed_after(holders: Mapping[Part, object], part: Part, outcome: Outcome) -> list[Part]:
    """The holders of an instance to close after an invocation of `part`'s holder ended with
    `outcome`: that holder when its partitioning was retired; the holders of every other P once
    it has ticked, which it does only under a lease of the current partitioning. Nothing
    before: a late task of a retired P must not close the current partition's warm holder (its
    next task would read its counters whole)."""
    if outcome == Outcome.RETIRED:
        return [part]
    if outcome == Outcome.TICKED:
        return [other for other in holders if other.count != part.count]
    return []


class Holders:
    """A process's holders, one per database and partition, made on first use and kept between
    invocations (deployed functions: the handlers own one, for the instance). Each holder's
    writes go with `writing`, its budgets are `limits`."""

    def __init__(self, writing: Writing, *, limits: Limits | None = None) -> None:
        self._writing = writing
        self._limits = limits
        self._held: dict[tuple[str, str, Part], Holder] = {}
        self._lock = threading.Lock()

    def holder_for(self, db: firestore.Client, part: Part = WHOLE) -> Holder:
        """The holder of `part` for `db`'s database, made on first use. When the instance shuts
        down (Cloud Run sends SIGTERM; the worker exits), it lets the lease go and records what
        is pending."""
        key = (db.project, getattr(db, "_database", "(default)"), part)
        with self._lock:
            if key not in self._held:
                holder = self._held[key] = Holder(
                    db, writing=self._writing, part=part, limits=self._limits,
                    enqueue=lambda target, slot: waking.enqueue_tick(
                        db, self._writing.placement, "deferred", target, slot))
                atexit.register(holder.close)
            return self._held[key]

    def invoke(self, db: firestore.Client, part: Part,
               call: Callable[[Holder], Invocation]) -> Invocation:
        """Run one invocation on the holder of `part`, then close the holders it made useless
        (`closed_after`)."""
        run = call(self.holder_for(db, part))
        database = (db.project, getattr(db, "_database", "(default)"))
        with self._lock:
            mine = {key[2]: holder for key, holder in self._held.items() if key[:2] == database}
            stale = [self._held.pop((*database, other))
                     for other in closed_after(mine, part, run.outcome)]
        for holder in stale:
            holder.close()
        return run

    def tick_task(self, db: firestore.Client, part: Part, slot: int | None,
                  trigger: str) -> Invocation:
        """A task's invocation (`Holder.tick_slot`)."""
        return self.invoke(db, part, lambda holder: holder.tick_slot(slot, trigger))

    def housekeeping(self, db: firestore.Client) -> list[Invocation]:
        """The scheduled run: housekeeping of the first HOUSEKEPT_HERE partitions of the current
        P, one after the other (an idle partition's takes a few Firestore round trips), and a
        task to each further partition's own function, whose tick housekeeps it there: the
        minute's run stays within its minute whatever P is. One that fails does not keep the
        others from theirs; the run then fails, after them, with its error."""
        done: list[Invocation] = []
        failure: Exception | None = None
        for part in partitions.parts(partitions.read_count(db, self._writing.names)):
            try:
                if part.index < HOUSEKEPT_HERE:
                    done.append(self.invoke(db, part, Holder.housekeeping))
                else:
                    waking.enqueue_tick(db, self._writing.placement, "housekeeping", part)
            except Exception as error:
                log.exception("housekeeping of partition %s failed", part)
                failure = failure or error
        if failure is not None:
            raise failure
        return done


def loop(db: firestore.Client, *, writing: Writing, period_s: float, stop: threading.Event,
         part: Part = WHOLE, scaling: AutoscaleParams | None = None,
         on_tick: Callable[[TickStats], None] | None = None) -> None:
    """Tick every `period_s` until `stop`, then let the lease go: tests and benchmarks drive the
    rollup in-process on projects of their own, where no trigger runs."""
    holder = Holder(db, writing=writing, part=part, scaling=scaling, on_tick=on_tick)
    try:
        while not stop.is_set():
            began = time.monotonic()
            try:
                holder.tick_slot(None, trigger="loop")
            except Exception:
                log.exception("in-process tick failed")
            stop.wait(max(0.0, period_s - (time.monotonic() - began)))
    finally:
        holder.close()
