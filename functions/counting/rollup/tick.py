"""The rollup: about once a second, under the lease, sum the shards of every counter that
changed into its rollup, measure write rates and scale shards to them; then the trending tags.

`Rollup.tick` is the I/O around the pure `counting.rollup.ledger`: read what changed (one query),
read the documents of the counters met for the first time (and whole those whose document has no
`shard_counts`), let the ledger sum, measure and plan, commit the plan
through the `counting.rollup.store` (every commit fenced by the lease, every operation counted),
grow and fold, and hand the trend buckets to `counting.features.trends`. How and why, once:
docs/architecture.md, "Rollup" and "Exact on real Firestore". Who ticks and when:
`counting.rollup.cadence`.
"""


from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.foundation import config
from counting.foundation.clock import instant
from counting.foundation.config import AutoscaleParams
from counting.rollup import ledger as ledger_module
from counting.rollup import store as store_module
from counting.rollup.folding import fold_surplus
from counting.rollup.lease import Lease, LeaseLost, Progress
from counting.rollup.ledger import Changes, Grow, Ledger, Publish, ShardValue, Shrink
from counting.rollup.store import Snapshot, Store
from counting.rollup.trend_step import TrendRollup, TrendStats
from counting.rollup.usage import Usage
from counting.writepath import partitions
from counting.writepath.context import Writing
from counting.writepath.partitions import WHOLE, Part

# Counters published per commit (two writes each at most: document and memory) beside the
# lease's fencing write.
PUBLISHES_PER_COMMIT = (config.ROLLUP_COMMIT_WRITES - 1) // 2

# A sweep cuts the stripes every tick reads into this many cells at least (`Rollup.cells`): one
# a tick or so at a tick a second, each a slice of the sweep's stamps.
SWEEP_DENSE_CELLS = 50

# A new holder reads back from the checkpoint (tens of seconds of writes) over its first ticks
# rather than in one: each reads, in pages of CATCH_UP_PAGE, the stamps from the first it finds
# over a quarter of what is left (CATCH_UP_SPLIT) or CATCH_UP_TICKS intervals of ticks and the
# overlap, whichever is longer (the next reads from the overlap before its last stamp: so it
# gains an interval a tick at least, however fast the writes come and the ticks follow), and the
# counters found wait (`Ledger.wait`); the first tick whose pages reach its instant, or that has
# at most CATCH_UP_TICKS intervals and the overlap left, is a tick as any other and meets them.
CATCH_UP_PAGE = 500
CATCH_UP_SPLIT = 4
CATCH_UP_TICKS = 2

log = logging.getLogger(__name__)

# What one counter's own write can fail with, whatever the others do: its document was deleted,
# or Firestore refuses a value. Anything else (unavailable, a lost lease) fails the whole tick,
# which is then done again from the watermark.
COUNTER_FAULTS = (gexc.NotFound, gexc.InvalidArgument, ValueError)
PROBLEM_CHARS = 300  # of one reported problem


@dataclass(frozen=True, kw_only=True)
class TickStats:
    as_of: dt.datetime
    changed_shards: int  # held shards whose value changed since this holder last read them
    changed_counters: int  # counters with such a shard, or whose count was written
    written: int  # counters whose count was written
    usage: Usage  # billed operations of the whole tick, trends included
    seconds: float
    published: int = 0  # counter documents written (count, rate or scaling state)
    rescaled: int = 0  # counters whose num_shards changed
    folded: int = 0  # surplus shards folded away
    owed: int = 0  # changed counters left to later ticks (waiting to be met, or deferred)
    trends: TrendStats | None = None
    problems: tuple[str, ...] = ()  # counters skipped this tick, and why
    longest_call_s: float = 0.0  # its longest Firestore call (a read, a page, a commit)
    sweep_cells: int = 0  # cells of the sweep under way it read
    sweep_reads: int = 0  # what they billed
    # The instant up to which a sweep it completed found every commit (None: none completed).
    swept: dt.datetime | None = None

    @property
    def reads(self) -> int:
        return self.usage.reads



@dataclass(frozen=True)
class Cell:
    """Part of a sweep: the shard writes of one stripe stamped in (start, end]."""

    stripe: int
    start: dt.datetime
    end: dt.datetime


def to_micros(instant: dt.datetime) -> dt.datetime:
    """Snapshot reads take microsecond read times."""
    return dt.datetime(instant.year, instant.month, instant.day, instant.hour, instant.minute,
                       instant.second, instant.microsecond, tzinfo=dt.UTC)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The rollup's budgets: production's values; tests and the simulation make them small so
    that a few counters exercise what thousands would."""

    document_loads_per_tick: int = ledger_module.DOCUMENT_LOADS_PER_TICK
    first_loads_per_tick: int = ledger_module.FIRST_LOADS_PER_TICK
    publishes_per_commit: int = PUBLISHES_PER_COMMIT
    change_page: int = store_module.CHANGE_PAGE
    catch_up_page: int = CATCH_UP_PAGE


class Rollup:
    """One lease holder of a partition: its watermark, its ledger, its store. `writing` is the
    context of its own writes (a fold's stripes, the protections it runs with, its clock);
    `limits` its budgets (production's unless told)."""

    def __init__(self, db: firestore.Client, lease: Lease,
                 scaling: AutoscaleParams | None = None,
                 trends: Callable[..., TrendRollup] | None = None,
                 renew_s: float = config.ROLLUP.renew_s, part: Part = WHOLE, *,
                 writing: Writing, limits: Limits | None = None) -> None:
        self.part = part
        self.writing = writing
        self.limits = limits = limits or Limits()
        self.store = Store(db, lease, writing, renew_s=renew_s, change_page=limits.change_page)
        self.ledger = Ledger(scaling, document_loads_per_tick=limits.document_loads_per_tick,
                             first_loads_per_tick=limits.first_loads_per_tick)
        # `trends` (tests: a TrendRollup with a clock) is called with the store and `part`.
        self._trends = (trends or TrendRollup)(self.store, part=part)
        progress = lease.record.progress
        self.watermark = progress.watermark
        self.swept = progress.swept  # every commit up to it was read by a sweep
        self.checkpoint = progress.checkpoint  # every memory holds what was taken in up to it
        self.sweep_at, self.sweep_done = progress.sweep_at, progress.sweep_done
        self._problems: list[str] = []  # of the tick under way
        self._sweep_reads = 0  # of the tick under way: its sweep's cells
        self._watch_due = False  # the watch of counters above their minimum (`tick`)
        self._last_as_of: dt.datetime | None = None  # the instant of this holder's last tick
        # While catching up: where it began (the durable watermark goes no further), and the
        # trend buckets' shards read meanwhile, handed to the trends when it ends.
        self._catching: dt.datetime | None = None
        self._trend_backlog: dict[str, dict[str, Any]] = defaultdict(dict)

    def close(self) -> None:
        self.store.close()

    def forget(self) -> None:
        """Drop what this holder remembers; the next ticks read the changed counters whole."""
        self.ledger.forget()
        self._trends.forget()
        if self._catching is not None:
            self.watermark, self._catching = min(self.watermark, self._catching), None
        self._trend_backlog.clear()

    @property
    def overlap_s(self) -> float:
        """How far before the last tick's instant the change query reaches."""
        return config.CHANGE_OVERLAP_S if self.writing.protections.overlap else 0.0

    def sweep_cells(self, as_of: dt.datetime) -> tuple[int, list[Cell], bool]:
        """The sweep under way (docs/architecture.md, "Exact on real Firestore"), begun at
        `sweep_at`, reads shard writes stamped from MAX_REQUEST_S before the last sweep's
        instant up to its own, in cells (`cells`) spread over ROLLUP_SWEEP_EVERY_S: the tick at
        `as_of` reads those due by then that are not read yet. Returns how many are read once it
        has, those it reads, and whether that completes the sweep (never with the sweep off)."""
        if not self.writing.protections.sweep or self.sweep_at is None:
            return self.sweep_done, [], False
        cells = self.cells(self.swept - dt.timedelta(seconds=config.MAX_REQUEST_S), self.sweep_at)
        elapsed = (as_of - self.sweep_at).total_seconds() / config.ROLLUP_SWEEP_EVERY_S
        due = math.ceil(len(cells) * min(1.0, elapsed))
        done = min(self.sweep_done, due)
        return due, cells[done:due], due == len(cells)

    def cells(self, start: dt.datetime, end: dt.datetime) -> list[Cell]:
        """A sweep's cells over the stamps in (`start`, `end`]: each stripe it reads, those every
        tick reads (where nearly every shard is) cut into slices of stamps (SWEEP_DENSE_CELLS in
        all at least), the others whole; ordered so that each tick's share holds as many of
        either as the next."""
        stripes = self.stripes(start, end, sweep=True)
        every_tick = set(self.part.ticks())
        dense = [stripe for stripe in stripes if stripe in every_tick]
        sparse = [stripe for stripe in stripes if stripe not in every_tick]
        slices = max(1, math.ceil(SWEEP_DENSE_CELLS / max(1, len(dense))))
        bounds = [to_micros(start + (end - start) * k / slices) for k in range(slices)] + [end]
        ranked = [((n + 0.5) / (len(dense) * slices), Cell(stripe, bounds[k], bounds[k + 1]))
                  for n, (k, stripe) in enumerate((k, s) for k in range(slices) for s in dense)]
        ranked += [((n + 0.5) / len(sparse), Cell(stripe, start, end))
                   for n, stripe in enumerate(sparse)]
        return [cell for _, cell in sorted(ranked, key=lambda pair: pair[0])]

    @property
    def catching_up(self) -> bool:
        """Whether its last tick read only part of its backlog (`_caught_up_to`)."""
        return self._catching is not None

    @property
    def owed(self) -> int:
        """Changed counters not published yet (`Ledger.owed`), at least 1 while it catches up
        (what it has not read yet is owed too): its holder ticks on rather than wait for a
        write."""
        return self.ledger.owed or int(self.catching_up)

    @property
    def durable_progress(self) -> Progress:
        """Where a successor may start: everything before its watermark is published."""
        watermark = self.ledger.durable(self.watermark)
        if self._catching is not None:
            watermark = min(watermark, self._catching)
        return Progress(watermark=watermark, swept=self.swept,
                        checkpoint=self.checkpoint, sweep_at=self.sweep_at,
                        sweep_done=self.sweep_done)

    def tick(self) -> TickStats:
        """One tick at the instant the lease is read and found still ours. The lease is written
        by the tick's commits, and by the store before a read when its last write is `renew_s`
        old (the progress persisted, the lease kept live however long the tick reads)."""
        started = dt.datetime.now(dt.UTC)
        self.store.take_usage()
        self.store.take_longest()
        self._problems, self._sweep_reads = [], 0
        since = self.watermark
        as_of = to_micros(self.store.begin(self.durable_progress))
        if self.sweep_at is None:
            self.sweep_at, self.sweep_done = as_of, 0
        ledger = self.ledger
        # What a ledger knows starts at the checkpoint, up to which every memory holds what was
        # taken in (`Ledger.plan`): its first tick reads back from there, and takes as taken in
        # (in the memories) only what a tick up to it could have.
        known_from = min(since, self.checkpoint) if ledger.fresh else since
        # (What it takes in from before the checkpoint, a counter its predecessor deferred, is
        # in no memory until its round: its successor reads back as far.)
        self.checkpoint = min(self.checkpoint, known_from)
        reach = known_from - dt.timedelta(seconds=self.overlap_s)
        done, cells, sweep_complete = self.sweep_cells(as_of)
        # A counter deferred now is owed from this query's reach, or from its sweep's if a cell
        # may have returned it: a successor reads back there (a cell done is not read again).
        owed_from = min([reach, *(cell.start for cell in cells)])
        changes, births, trend_changes, swept, reached = self._changed_shards(
            reach, as_of, known_from, cells, catching=self._catching_up(as_of, known_from))
        if reached is not None:
            return self._caught_up_to(reached, started, as_of, changes, trend_changes,
                                      owed_from, cells, done, sweep_complete)
        if self._trend_backlog:
            trend_changes = self._backlog(trend_changes)
        in_hand = set(changes)  # what a failure forgets (the ledger adds what it visited)
        try:
            ledger.meet_born(changes, births)
            ledger.spread_first_loads(changes, owed_from)
            in_hand.update(changes)  # (with the waiting counters it meets now)
            # The watch, every ROLLUP_WATCH_EVERY_TICKS ticks from the first, waits while
            # counters wait to be met (a new holder catching up does not also watch).
            self._watch_due |= ledger.ticks % config.ROLLUP_WATCH_EVERY_TICKS == 0
            watched: list[str] | None = None
            if ledger.params.enabled and self._watch_due and not ledger.waiting:
                watched = self._above_min(as_of)
                in_hand.update(watched)
            self._hold([*changes, *(watched or ())], since, as_of)
            whole = ledger.first_loads(changes, owed_from)
            in_hand.update(whole)
            self._hold(whole, since, as_of)  # deferred counters caught up
            self._read_whole(whole, as_of)
            sums, grown = ledger.apply(changes, since, as_of, swept=frozenset(swept))
            plan = ledger.plan(sums, as_of, checkpoint=self.checkpoint)
            for problem in plan.problems:
                self._report(problem)
            self._commit(plan.updates)
            for grow in plan.grows:
                self._isolated(grow.counter, functools.partial(self._grow, grow))
            for shrink in plan.shrinks:
                self._isolated(shrink.counter, functools.partial(self._shrink, shrink, as_of))
            folded = self._fold_due(as_of)
            # Partition 0's first tick after a change of P publishes every trends/{scope}
            # (`repartition.change` sets `republish`). Done, the record says so from its next
            # write: a holder that dies before that leaves it to its successor, which publishes
            # them all again (harmless: absolute lists).
            lease = self.store.lease
            trends = self._trends.tick(
                trend_changes, as_of, republish=lease.record.republish and self.part.index == 0)
            if trends.republished:
                lease.note(republish=False)
        except LeaseLost:
            self.forget()
            raise
        except BaseException:
            # The counters in hand are read whole again; the others are as they were: nothing of
            # theirs was read or written by the tick.
            ledger.forget_counters(in_hand | ledger.in_hand(), min(reach, self.checkpoint))
            self._trends.forget()
            raise
        self.watermark = self._last_as_of = as_of
        self._catching, self._trend_backlog = None, defaultdict(dict)
        self._watch_due &= watched is None and ledger.params.enabled
        swept_to = self._sweep_read(as_of, done, sweep_complete)
        ledger.end_tick(changes)
        if ledger.checkpointed is not None:
            self.checkpoint = ledger.checkpointed
        written = {counter for counter, publish in plan.updates.items()
                   if "count" in publish.public}
        return TickStats(
            as_of=as_of,
            changed_shards=sum(grown.values()),
            changed_counters=len({counter for counter, n in grown.items() if n} | written),
            written=len(written),
            usage=self.store.take_usage(),
            seconds=(dt.datetime.now(dt.UTC) - started).total_seconds(),
            published=len(plan.updates),
            rescaled=len(plan.grows) + len(plan.shrinks),
            folded=folded,
            owed=self.owed,
            trends=trends,
            problems=tuple(self._problems),
            longest_call_s=self.store.take_longest(),
            sweep_cells=len(cells),
            sweep_reads=self._sweep_reads,
            swept=swept_to,
        )

    def _catching_up(self, as_of: dt.datetime, known_from: dt.datetime) -> bool:
        """Whether this tick reads only the older part of what is left (`CATCH_UP_PAGE`): a new
        ledger's first tick, and those after it while more than CATCH_UP_TICKS intervals of
        ticks and the overlap are left."""
        if not self.ledger.fresh and self._catching is None:
            return False
        last = self._last_as_of
        return last is None or as_of - known_from > CATCH_UP_TICKS * (as_of - last) \
            + dt.timedelta(seconds=self.overlap_s)

    def _caught_up_to(self, reached: dt.datetime, started: dt.datetime, as_of: dt.datetime,
                      changes: Changes, trend_changes: dict[str, dict[str, Any]],
                      owed_from: dt.datetime, cells: list[Cell], done: int,
                      sweep_complete: bool) -> TickStats:
        """A tick catching up, which read every shard stamped up to `reached`: the counters
        found wait with the values read (one whose other shards changed later is met when those
        are read too), the trend buckets' shards wait for the tick that ends the catch-up, and
        the next tick reads from `reached`. Nothing is written."""
        self.ledger.wait(changes, owed_from)
        self._backlog(trend_changes)
        # (A later tick's cell may reach back further than the first's: a sparse stripe's.)
        self._catching = owed_from if self._catching is None else min(self._catching, owed_from)
        # (Shards stamped at `reached` itself may be past the last page.)
        self.watermark = reached - dt.timedelta(microseconds=1)
        self._last_as_of = as_of
        swept_to = self._sweep_read(as_of, done, sweep_complete)
        self.ledger.end_tick({})
        return TickStats(
            as_of=as_of, changed_shards=0, changed_counters=0, written=0,
            usage=self.store.take_usage(),
            seconds=(dt.datetime.now(dt.UTC) - started).total_seconds(),
            owed=self.owed, longest_call_s=self.store.take_longest(),
            sweep_cells=len(cells), sweep_reads=self._sweep_reads, swept=swept_to)

    def _backlog(self, trend_changes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The trend buckets' shards read while catching up, with `trend_changes` over them (a
        shard read later holds its later value)."""
        for bucket, shards in trend_changes.items():
            self._trend_backlog[bucket].update(shards)
        return self._trend_backlog

    def _sweep_read(self, as_of: dt.datetime, done: int, complete: bool) -> dt.datetime | None:
        """A tick read the sweep's cells up to `done`: when that completes it, the next begins
        at `as_of`. Returns the instant it completed (None: it did not)."""
        self.sweep_done = done
        if not complete or self.sweep_at is None:
            return None
        swept = self.swept = self.sweep_at
        self.sweep_at, self.sweep_done = as_of, 0
        return swept

    def stripes(self, reach: dt.datetime, as_of: dt.datetime, *, sweep: bool) -> list[int]:
        """The stripes this partition reads for writes in (reach, as_of]. A sweep reads those of
        every P up to 16 (or this P), so that a write whose writer still knew another P whenever
        it landed (a paused instance, a commit minutes late) is found by the next sweep:
        narrowing is then safe at any time; and those of a wider P that writers knew for
        WIDE_SWEEP_S after `narrow_at` (a sweep whose reach starts before then, however late it
        runs). A tick reads, for a while after a change of P (`narrow_at`), those a writer that
        still knows the old P picks, so that such writes are found within a tick rather than a
        sweep."""
        partitioning = self.store.lease.record.partitioning
        if sweep and self.writing.protections.every_stripe_sweep:
            wide = reach < partitioning.narrow_at + dt.timedelta(seconds=partitions.WIDE_SWEEP_S)
            return self.part.reads(max(partitions.BASE_HOMES, self.part.count,
                                       partitioning.spread if wide else 1))
        if as_of < partitioning.narrow_at:
            return self.part.reads(partitioning.spread)
        return self.part.ticks()

    def _changed_shards(
        self, reach: dt.datetime, as_of: dt.datetime, known_from: dt.datetime, cells: list[Cell],
        *, catching: bool
    ) -> tuple[Changes, dict[str, dict[str, Any]], dict[str, dict[str, Any]], set[str],
               dt.datetime | None]:
        """Counter shards and trend minute-bucket shards whose `updated_at` is in
        (reach, as_of] (`catching`: its older part, `Store.catching_up`), and those of the
        sweep's `cells`; the birth stamps of the counters all of whose shards returned carry one
        (`Ledger.meet_born`); the counters a cell returned; and where a catch-up's read stopped
        (None: at `as_of`).

        `stripe in [its stripes]` is one query that the (stripe, updated_at) index serves as one
        range scan per stripe; what another partition owns (a shard written before its key's
        stripe was its home's) is left to it. Of a cell, a shard a past tick has already taken
        in is dropped (`known_from`: the last tick's instant, or on a fresh ledger's first tick
        the checkpoint, up to which the memories hold everything): committed by then, soon
        enough after its timestamp for that tick's overlap to have found it, and in a stripe
        every tick reads. What is left is what the sweep is for, and a new holder does not read
        whole every counter written in the last minutes."""
        changes: Changes = defaultdict(dict)
        stamps: dict[str, dict[str, Any] | None] = {}
        trend_changes: dict[str, dict[str, Any]] = defaultdict(dict)
        swept: set[str] = set()
        overlap = dt.timedelta(seconds=self.overlap_s)
        # Only a write in a stripe every tick reads, committed since this partitioning began, can
        # have been taken in by a past tick: one in another P's stripe (a writer that knew
        # another P), or committed while ticks of another P read other stripes, is the sweep's
        # to find.
        every_tick = set(self.part.ticks())
        partitioned_at = self.store.lease.record.partitioning.since
        stripes = self.stripes(reach, as_of, sweep=False)
        last = self._last_as_of
        interval = dt.timedelta(0) if last is None else as_of - last

        def target(first: dt.datetime) -> dt.datetime:
            return first + max((as_of - first) / CATCH_UP_SPLIT, CATCH_UP_TICKS * interval
                               + dt.timedelta(seconds=self.overlap_s))

        found, reached = self.store.catching_up(stripes, reach, as_of, self.limits.catch_up_page,
                                                target) \
            if catching else (self.store.changed_shards(stripes, reach, as_of), None)
        reads: list[tuple[bool, list[Snapshot]]] = [(False, found)]
        by_range: dict[tuple[dt.datetime, dt.datetime], list[int]] = defaultdict(list)
        for cell in cells:
            by_range[(cell.start, cell.end)].append(cell.stripe)
        before = self.store.usage.reads
        reads += [(True, self.store.changed_shards(swept_stripes, start, as_of, until=end))
                  for (start, end), swept_stripes in by_range.items()]
        self._sweep_reads = self.store.usage.reads - before
        for of_sweep, snapshots in reads:
            for snapshot in snapshots:
                if of_sweep and snapshot.get("stripe") in every_tick:
                    committed, stamped = instant(snapshot.update_time), snapshot.get("updated_at")
                    if partitioned_at < committed <= known_from \
                            and committed - stamped < overlap and stamped <= known_from - overlap:
                        continue
                parent = snapshot.reference.parent.parent
                if parent is None:
                    continue
                # Its key's home from its id, not from its stripe: shards written before stripes
                # carried the home hold a random stripe.
                kind = parent.parent.id
                if kind == self.store.names.counters \
                        and self.part.owns(partitions.home_of(parent.id)):
                    data = snapshot.to_dict() or {}
                    changes[parent.id][snapshot.id] = ShardValue.of(data)
                    if of_sweep:
                        swept.add(parent.id)
                    born = data.get(config.SHARD_BORN_FIELD)
                    stamps[parent.id] = born if stamps.get(parent.id, born) is not None else None
                elif kind == self.store.names.trend_minutes and self.part.owns(
                        partitions.tag_home_of_hex(parent.id)):
                    trend_changes[parent.id][snapshot.id] = snapshot
        births = {counter: born for counter, born in stamps.items() if isinstance(born, dict)}
        return changes, births, trend_changes, swept, reached

    def _above_min(self, as_of: dt.datetime) -> list[str]:
        """Counters this partition owns that may have shards to shed, whether or not anyone
        writes to them: found by their home (`partitions.watched`), not among all."""
        return self.store.above_min(self.part.homes(), as_of)

    def _hold(self, counters: list[str], since: dt.datetime, as_of: dt.datetime) -> None:
        """Read, at `as_of`, the documents and memories of the counters this holder has not
        seen (a watched counter nobody writes to needs its document only: shrinking it reads no
        shard); a cool-down derived from a document begins by `since`."""
        for counter, document, memory in self.store.counters(self.ledger.unseen(counters),
                                                             as_of):
            self.ledger.hold(counter, document, memory, since=since)

    def _read_whole(self, counters: list[str], as_of: dt.datetime) -> None:
        """Read, at `as_of`, every shard of each counter (one query each, several at once)."""
        for counter, shards in zip(counters, self.store.each_counters_shards(counters, as_of),
                                   strict=True):
            self.ledger.hold_shards(counter, {s.id: ShardValue.of(s.to_dict()) for s in shards})

    def _commit(self, updates: dict[str, Publish]) -> None:
        """Publish the counters, fenced by the lease, `publishes_per_commit` to a commit. A commit
        that a counter's own write fails (its document deleted, a value Firestore refuses) is
        redone a counter at a time, so the bad one is skipped and reported and the others are
        written."""
        items = list(updates.items())
        per_commit = self.limits.publishes_per_commit
        for start in range(0, len(items), per_commit):
            chunk = items[start:start + per_commit]
            try:
                self.store.publish(chunk)
            except COUNTER_FAULTS:
                if len(chunk) == 1:
                    raise
                for counter, publish in chunk:
                    self._isolated(counter, functools.partial(self._commit, {counter: publish}))
                continue
            for counter, publish in chunk:
                self.ledger.published(counter, publish)

    def _isolated(self, counter: str, step: Callable[[], Any]) -> None:
        """Run one counter's step; a fault of that counter's own is reported, not raised, and
        its sum is published again next tick."""
        try:
            step()
        except COUNTER_FAULTS as error:
            self._report(f"{counter}: {error}")
            self.ledger.failed(counter)
            # Its `shard_counts` may now lag its shards: a successor must read them whole.
            with contextlib.suppress(*COUNTER_FAULTS):
                self.store.forget_counts(counter)

    def _report(self, problem: str) -> None:
        problem = problem[:PROBLEM_CHARS]
        self._problems.append(problem)
        log.warning("rollup skipped %s", problem)

    def _grow(self, grow: Grow) -> None:
        """Create shards old..new-1 (count 0, or kept if a fold left one), then raise num_shards:
        a writer never picks a shard that does not exist. The bounds are read afresh first (one
        read; grows are rare): an operator may have pinned the counter since this holder met it."""
        bounded = self.ledger.bounded(grow, self.store.bounds(grow.counter))
        if bounded is None:
            return
        self.store.create_shards(grow.counter, range(bounded.old, bounded.new))
        self.store.update_counter(grow.counter, self.ledger.completing(bounded))
        self.ledger.grown(bounded)
        log.info("grew %s from %d to %d shards", grow.counter, bounded.old, bounded.new)

    def _shrink(self, shrink: Shrink, as_of: dt.datetime) -> None:
        """Lower num_shards, after a read of the bounds (as a grow: an operator may have pinned
        the counter since this holder met it; shrinks are rare); the surplus shards are folded
        after the grace."""
        fields = self.ledger.shrinking(shrink, self.store.bounds(shrink.counter), as_of)
        if fields is None:
            return
        self.store.update_counter(shrink.counter, fields)
        self.ledger.shrunk(shrink, fields)
        log.info("shrank %s from %d to %d shards", shrink.counter, shrink.old,
                 fields["num_shards"])

    def _fold_due(self, as_of: dt.datetime) -> int:
        """Fold the surplus shards of counters whose shrink is older than the grace period."""
        folded = 0
        for counter, num_shards in self.ledger.folds_due(as_of):
            result = fold_surplus(self.store, counter, num_shards,
                                  counts_kept=self.ledger.counts_kept(counter))
            self.ledger.folded(counter, result.deleted, result.moved, result.complete)
            folded += len(result.deleted)
            if result.complete:
                self.store.update_counter(counter, {
                    "shrunk_at": None,
                    **partitions.watched(counter, self.ledger.above_min(counter))})
                log.info("folded %s down to %d shards", counter, num_shards)
        return folded
