"""The rollup: about once a second, sum the shards of every counter that changed into its rollup,
measure each counter's write rate, and scale its shards to it; then the trending tags.

One tick, under the lease (`counting.lease`):

1. Renew the lease; its commit time T is the instant of every read in this tick.
2. Find the shards written since the last tick's instant W: one query,
   `stripe in [0..STRIPES-1] and updated_at > W`, read at T. A shard's `updated_at` is the
   commit time of its last write, so a write is in exactly one (W, T] window: exact, with no
   lock on the write path. Idle counters match nothing and cost nothing.
3. For each changed counter, the sum of its shards at T: the changed shards plus the values of
   the others as of W, remembered from earlier ticks (a counter met for the first time in
   this process is read whole, at T).
4. Measure: a shard's `writes` field grows by one per write, so its growth over (W, T] is the
   number of writes it took. Per counter their sum over T - W feeds the rate EWMA
   (`counting.autoscale`); per shard, for `least_loaded` counters, the same feeds its load.
5. Write `count` and `updated_at = T` to the counters whose sum changed, with `rate` (and
   `shard_load`), and `rate` alone when it moved noticeably.
6. Scale every counter held in memory (`autoscale.decide`): grow = create the new shards, then
   raise `num_shards`; shrink = lower `num_shards` and stamp `shrunk_at`; FOLD_GRACE_S later (the
   write paths' caches have all seen the lower count by then) fold the surplus shards.

7. Trending tags (`counting.trends`): the same query returned the changed shards of the trend
   minute buckets; their changes go into the window totals, the Top-K lists and `trends/{scope}`.

Folding (`counting.folding`) never loses or doubles a count; the rollup applies each committed
move to the values it remembers (drop the shard, add its count to the survivor), so its sums stay
the sums of the shards that exist at T; if anything fails mid-tick it forgets everything and reads
afresh.

Every other step is a read or an absolute write, so a tick that dies half-way is simply done again
from the persisted watermark (at-least-once delivery is harmless). The autoscale state that must
outlive a lease holder (`rate`, `low_since`, `shrunk_at`, `above_min`) is on the counter
document; counters above their minimum are found again with one query on `above_min`.

Who ticks, and when, is `counting.cadence`: the deployed functions call it.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from . import autoscale, config
from .autoscale import AutoscaleParams
from .folding import fold_surplus
from .lease import Lease
from .trends import TrendRollup, TrendStats
from .usage import Usage

log = logging.getLogger(__name__)

# A counter not changed for this many ticks is dropped from the in-memory sums (unless it still
# has shards to shed).
IDLE_TICKS_KEPT = 120
WRITE_CHUNK = 499  # a commit holds 500 writes, the lease's fencing write included
# Counters read whole (first met by this holder) are read this many at a time, and at most
# FIRST_LOADS_PER_TICK per tick (a tick reading 200 counters of 10 shards stays near a second).
READ_THREADS = 8
FIRST_LOADS_PER_TICK = 200
# A rate sample never spans more than this (the first tick after a long pause).
MAX_SAMPLE_S = 60.0
# What one counter's own write can fail with, whatever the others do: its document was deleted,
# or Firestore refuses a value. Anything else (unavailable, a lost lease) fails the whole tick,
# which is then done again from the watermark.
COUNTER_FAULTS = (gexc.NotFound, gexc.InvalidArgument, ValueError)
INT64 = (-(2**63), 2**63 - 1)
PROBLEM_CHARS = 300  # of one reported problem
COUNTER_FIELDS = ["count", "num_shards", "strategy", "min_shards", "max_shards", "rate",
                  "low_since", "shrunk_at", "updated_at"]


@dataclass(frozen=True, kw_only=True)
class ShardValue:
    count: int
    writes: int  # one more per write to the shard: its growth is the number of writes

    @classmethod
    def of(cls, snapshot: firestore.DocumentSnapshot[Any]) -> ShardValue:
        data = snapshot.to_dict() or {}
        return cls(count=int(data.get("count") or 0), writes=int(data.get("writes") or 0))


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
    trends: TrendStats | None = None
    problems: tuple[str, ...] = ()  # counters skipped this tick, and why

    @property
    def reads(self) -> int:
        return self.usage.reads

    @property
    def changed(self) -> bool:
        """Anything written by clients since the last tick (counter or trend shards)."""
        return bool(self.changed_shards or (self.trends and self.trends.changed_buckets))


@dataclass(kw_only=True)
class Scaling:
    """What the rollup knows of one counter's configuration and load."""

    num_shards: int
    min_shards: int
    max_shards: int
    strategy: str
    rate: float
    published_rate: float
    low_since: float | None  # epoch seconds
    shrunk_at: float | None  # epoch seconds; surplus shards are folded FOLD_GRACE_S later
    shard_load: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> Scaling:
        def seconds(value: Any) -> float | None:
            return value.timestamp() if isinstance(value, dt.datetime) else None

        rate = float(data.get("rate") or 0.0)
        low_since = seconds(data.get("low_since"))
        if low_since is None and rate == 0.0:
            # Idle since at least its last count change (low_since is only ever written along
            # with other fields, so a counter nobody writes to has none).
            low_since = seconds(data.get("updated_at"))
        return cls(
            num_shards=int(data.get("num_shards") or 1),
            min_shards=int(data.get("min_shards") or config.DEFAULT_MIN_SHARDS),
            max_shards=int(data.get("max_shards") or config.DEFAULT_MAX_SHARDS),
            strategy=str(data.get("strategy") or config.DEFAULT_STRATEGY),
            rate=rate,
            published_rate=rate,
            low_since=low_since,
            shrunk_at=seconds(data.get("shrunk_at")),
        )

    @property
    def above_min(self) -> bool:
        return self.num_shards > self.min_shards or self.shrunk_at is not None

    def published_load(self) -> list[float]:
        return [round(self.shard_load.get(str(n), 0.0), 3) for n in range(self.num_shards)]


@dataclass(kw_only=True)
class Held:
    """One counter as this holder knows it: its document and, once one of its shards changed
    while held, every shard's value as of the last tick."""

    shards: dict[str, ShardValue] | None  # None: not read (held for its scaling state only)
    written: int | None  # the count on counters/{id}; None: the document does not exist
    scaling: Scaling | None  # None when the document does not exist
    last_changed: int  # the tick that last saw one of its shards change

    def total(self) -> int:
        return sum(shard.count for shard in (self.shards or {}).values())


@dataclass(frozen=True, kw_only=True)
class Grow:
    counter: str
    old: int
    new: int


def state_ref(db: firestore.Client) -> firestore.DocumentReference:
    return db.collection(config.INTERNAL).document(config.ROLLUP_STATE_DOC)


def to_micros(instant: dt.datetime) -> dt.datetime:
    """Snapshot reads take microsecond read times."""
    return dt.datetime(instant.year, instant.month, instant.day, instant.hour, instant.minute,
                       instant.second, instant.microsecond, tzinfo=dt.UTC)


def timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)


def publishable(rate: float) -> float:
    return 0.0 if rate < config.RATE_PUBLISH_ABS else round(rate, 3)


def rate_moved(rate: float, published: float) -> bool:
    value = publishable(rate)
    if value == published:
        return False
    margin = max(config.RATE_PUBLISH_ABS, config.RATE_PUBLISH_REL * published)
    return value == 0.0 or abs(value - published) > margin


def change_query(db: firestore.Client, since: dt.datetime) -> Any:
    """Every shard (counters' and trend buckets') written after `since`."""
    return (
        db.collection_group(config.SHARDS)
        .where(filter=FieldFilter("stripe", "in", list(range(config.STRIPES))))
        .where(filter=FieldFilter("updated_at", ">", since))
    )


Changes = dict[str, dict[str, ShardValue]]  # counter -> shard id -> value at the tick's instant


class Rollup:
    """The state of one lease holder: the watermark, the counters it holds, their loads."""

    def __init__(self, db: firestore.Client, lease: Lease,
                 scaling: AutoscaleParams | None = None,
                 trends: TrendRollup | None = None) -> None:
        self._db = db
        self._lease = lease
        self._params = scaling or AutoscaleParams()
        self._trends = trends or TrendRollup(db, lease)
        self.watermark = lease.watermark
        self.swept = lease.swept  # the instant of the last sweep
        self._held: dict[str, Held] = {}
        self._retry: set[str] = set()  # counters whose sum could not be published: again
        self._deferred: set[str] = set()  # changed, not read yet (see _spread_first_loads)
        # The `since` of the earliest tick that dropped a counter still deferred: the watermark
        # persisted for a successor goes no further, so it finds that counter changed too.
        self._deferred_since: dt.datetime | None = None
        self._problems: list[str] = []  # of the tick under way
        self._ticks = 0
        self._usage = Usage()  # of the tick under way
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="rollup")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def forget(self) -> None:
        """Drop what this holder remembers; the next ticks read the changed counters whole.
        Counters still owed a publish are read whole again too."""
        self._held.clear()
        self._deferred |= self._retry
        self._retry.clear()
        self._trends.forget()

    def sweeps_at(self, as_of: dt.datetime) -> bool:
        """Whether the tick at `as_of` is a sweep (docs/architecture.md, "Exact on real
        Firestore")."""
        return (as_of - self.swept).total_seconds() >= config.ROLLUP_SWEEP_EVERY_S

    def reach(self, since: dt.datetime, as_of: dt.datetime) -> dt.datetime:
        """How far back the change query of the tick at `as_of` looks: CHANGE_OVERLAP_S before
        the last tick's instant, and on a sweep MAX_REQUEST_S before the last sweep's. A shard
        write whose commit came at most that long after its `updated_at` and after the last
        (sweep) instant is returned."""
        reach = since - dt.timedelta(seconds=config.CHANGE_OVERLAP_S)
        if self.sweeps_at(as_of):
            reach = min(reach, self.swept - dt.timedelta(seconds=config.MAX_REQUEST_S))
        return reach

    @property
    def durable_watermark(self) -> dt.datetime:
        """The watermark a successor may start from: everything before it is published."""
        if self._deferred_since is None:
            return self.watermark
        return min(self.watermark, self._deferred_since)

    def tick(self) -> TickStats:
        started = dt.datetime.now(dt.UTC)
        self._usage = usage = Usage(writes=1)  # the lease renewal
        self._problems = []
        since = self.watermark
        as_of = to_micros(self._lease.renew(self.durable_watermark, self.swept))
        changes, trend_changes = self._changed_shards(self.reach(since, as_of), as_of)
        sweep = self.sweeps_at(as_of)
        try:
            watched: list[str] = []
            if self._params.enabled and self._ticks % config.ROLLUP_WATCH_EVERY_TICKS == 0:
                watched = self._above_min(as_of)
            catch_up = self._spread_first_loads(changes, since)
            self._load([*changes, *catch_up], watched, as_of)
            sums, grown = self._apply(changes, since, as_of)
            updates, grows = self._plan(sums, as_of)
            self._commit(updates)
            for grow in grows:
                self._isolated(grow.counter, functools.partial(self._grow, grow))
            folded = self._fold_due(as_of)
            trends = self._trends.tick(trend_changes, as_of)
            usage.add(Usage(reads=trends.reads, writes=trends.writes))
        except BaseException:
            self.forget()
            raise
        self.watermark = as_of
        if sweep:
            self.swept = as_of
        if not self._deferred:
            self._deferred_since = None
        self._evict_idle(changes)
        written = {counter for counter, fields in updates.items() if "count" in fields}
        return TickStats(
            as_of=as_of,
            changed_shards=sum(grown.values()),
            changed_counters=len({counter for counter, n in grown.items() if n} | written),
            written=len(written),
            usage=usage,
            seconds=(dt.datetime.now(dt.UTC) - started).total_seconds(),
            published=len(updates),
            rescaled=len(grows) + sum(1 for fields in updates.values() if "num_shards" in fields),
            folded=folded,
            trends=trends,
            problems=tuple(self._problems),
        )

    def _spread_first_loads(self, changes: Changes, since: dt.datetime) -> list[str]:
        """Bound the counters read whole in one tick (a new holder meeting thousands at once
        would otherwise hold up every counter's publish). Changed counters past the budget are
        dropped from this tick and remembered; later ticks read them whole at their own instant,
        which includes what was dropped, and publish them. Returns those read now for that."""
        unread = [c for c in changes if c not in self._held or self._held[c].shards is None]
        for counter in unread[FIRST_LOADS_PER_TICK:]:
            del changes[counter]
            self._deferred.add(counter)
            if self._deferred_since is None:
                self._deferred_since = since
        room = FIRST_LOADS_PER_TICK - min(len(unread), FIRST_LOADS_PER_TICK)
        catch_up = sorted(self._deferred - changes.keys())[:room]
        self._deferred -= {*catch_up, *changes}
        self._retry.update(catch_up)  # published from the values read whole
        return catch_up

    def _changed_shards(
        self, since: dt.datetime, as_of: dt.datetime
    ) -> tuple[Changes, dict[str, dict[str, Any]]]:
        """Counter shards and trend minute-bucket shards written in (since, as_of].

        `stripe in [all]` is one query that the (stripe, updated_at) index serves as one range
        scan per stripe."""
        snapshots = list(change_query(self._db, since).stream(read_time=as_of))
        self._usage.reads += max(1, len(snapshots))
        changes: Changes = defaultdict(dict)
        trend_changes: dict[str, dict[str, Any]] = defaultdict(dict)
        for snapshot in snapshots:
            parent = snapshot.reference.parent.parent
            if parent is None:
                continue
            if parent.parent.id == config.COUNTERS:
                changes[parent.id][snapshot.id] = ShardValue.of(snapshot)
            elif parent.parent.id == config.TREND_MINUTES:
                trend_changes[parent.id][snapshot.id] = snapshot
        return changes, trend_changes

    def _above_min(self, as_of: dt.datetime) -> list[str]:
        """Counters that may have shards to shed, whether or not anyone writes to them."""
        query = (
            self._db.collection(config.COUNTERS)
            .where(filter=FieldFilter("above_min", "==", True))
            .select(["above_min"])
        )
        found = [snapshot.id for snapshot in query.stream(read_time=as_of)]
        self._usage.reads += max(1, len(found))
        return found

    def _load(self, changed: list[str], watched: list[str], as_of: dt.datetime) -> None:
        """Read, at `as_of`, the documents of counters this holder has not seen, and every shard
        of changed counters whose shards it has not read (a watched counter nobody writes to
        needs its document only: shrinking it reads no shard)."""
        coll = self._db.collection(config.COUNTERS)
        unseen = [c for c in dict.fromkeys([*changed, *watched]) if c not in self._held]
        refs = [coll.document(counter) for counter in unseen]
        for snapshot in self._db.get_all(refs, field_paths=COUNTER_FIELDS, read_time=as_of):
            self._usage.reads += 1
            data = snapshot.to_dict() or {} if snapshot.exists else None
            self._held[snapshot.id] = Held(
                shards=None,
                written=None if data is None else int(data.get("count") or 0),
                scaling=None if data is None else Scaling.from_document(data),
                last_changed=self._ticks,
            )
        unread = [c for c in changed if self._held[c].shards is None]

        def shards(counter: str) -> dict[str, ShardValue]:
            stream = coll.document(counter).collection(config.SHARDS).stream(read_time=as_of)
            return {s.id: ShardValue.of(s) for s in stream}

        for counter, values in zip(unread, self._pool.map(shards, unread), strict=True):
            self._held[counter].shards = values
            self._usage.reads += max(1, len(values))

    def _apply(self, changes: Changes, since: dt.datetime, as_of: dt.datetime
               ) -> tuple[dict[str, int], dict[str, int]]:
        """Take in the shards the query returned; measure every held counter's rate. Returns
        the new sums, and per counter how many of its shards changed since they were last read
        (a shard the overlap or a sweep returns again is unchanged)."""
        dt_s = min(MAX_SAMPLE_S, (as_of - since).total_seconds())
        sums: dict[str, int] = {}
        grown: dict[str, int] = {}
        for counter, shards in changes.items():
            held = self._held[counter]
            assert held.shards is not None  # _load read them
            writes: dict[str, int] = {}
            grown[counter] = 0
            for shard, value in shards.items():
                before = held.shards.get(shard)
                # A shard created afresh (after a fold) restarts its write counter.
                grew = value.writes - (before.writes if before else 0)
                writes[shard] = grew if grew >= 0 else value.writes
                grown[counter] += value != before
                held.shards[shard] = value
            sums[counter] = held.total()
            if held.scaling is not None and dt_s > 0:
                self._measure(held.scaling, writes, dt_s)
        if dt_s > 0:
            for counter, held in self._held.items():
                if counter not in changes and held.scaling is not None:
                    self._measure(held.scaling, {}, dt_s)
        return sums, grown

    def _measure(self, state: Scaling, writes: dict[str, int], dt_s: float) -> None:
        params = self._params
        state.rate = autoscale.measured_rate(state.rate, sum(writes.values()) / dt_s, dt_s, params)
        if state.strategy != "least_loaded":
            return
        # Per-shard loads are compared with each other, so they use one (the longer) time
        # constant both ways: less noise, and no bias against shards that had a burst.
        for n in range(state.num_shards):
            shard = str(n)
            sample = writes.get(shard, 0) / dt_s
            load = state.shard_load.get(shard, 0.0)
            if load or sample:
                state.shard_load[shard] = autoscale.ewma(load, sample, dt_s, params.fall_tau_s)

    def _plan(
        self, sums: dict[str, int], as_of: dt.datetime
    ) -> tuple[dict[str, dict[str, Any]], list[Grow]]:
        """The counter document updates of this tick, and the grows to commit after them."""
        now = as_of.timestamp()
        updates: dict[str, dict[str, Any]] = defaultdict(dict)
        grows: list[Grow] = []
        for counter in self._retry - sums.keys():
            if counter in self._held:
                sums[counter] = self._held[counter].total()
        for counter, total in sums.items():
            written = self._held[counter].written
            if not INT64[0] <= total <= INT64[1]:
                # Firestore stores 64-bit integers: this counter cannot be published (clients
                # are kept from getting here by the bounds on increments).
                self._report(counter, f"sum {total} is outside 64-bit integers")
                self._retry.add(counter)
                continue
            if written is not None and written != total:
                updates[counter].update({"count": total, "updated_at": as_of})
        for counter, held in self._held.items():
            state = held.scaling
            if state is None:
                continue
            fields = updates.get(counter, {})
            if self._params.enabled:
                decision = autoscale.decide(
                    state.num_shards, state.rate, now, state.low_since,
                    min_shards=state.min_shards, max_shards=state.max_shards, params=self._params)
                if decision.num_shards > state.num_shards:
                    grows.append(Grow(counter=counter, old=state.num_shards,
                                      new=decision.num_shards))
                elif decision.num_shards < state.num_shards:
                    state.num_shards, state.shrunk_at = decision.num_shards, now
                    fields.update({"num_shards": state.num_shards, "shrunk_at": as_of,
                                   "above_min": True})
                state.low_since = decision.low_since
            if fields or rate_moved(state.rate, state.published_rate):
                # The cool-down's start rides along (an idle counter derives it on loading).
                fields["low_since"] = timestamp(state.low_since)
                state.published_rate = publishable(state.rate)
                fields["rate"] = state.published_rate
                if state.strategy == "least_loaded":
                    fields["shard_load"] = state.published_load()
                updates[counter] = fields
        return {counter: fields for counter, fields in updates.items() if fields}, grows

    def _commit(self, updates: dict[str, dict[str, Any]]) -> None:
        """Write the counter documents, fenced by the lease, 500 to a commit. A commit that a
        counter's own write fails (its document deleted, a value Firestore refuses) is redone a
        counter at a time, so the bad one is skipped and reported and the others are written."""
        coll = self._db.collection(config.COUNTERS)
        items = list(updates.items())
        for start in range(0, len(items), WRITE_CHUNK):
            chunk = items[start:start + WRITE_CHUNK]
            batch = self._db.batch()
            for counter, fields in chunk:
                batch.update(coll.document(counter), fields)
            try:
                self._lease.commit(batch)
            except COUNTER_FAULTS:
                if len(chunk) == 1:
                    raise
                for counter, fields in chunk:
                    self._isolated(counter, functools.partial(self._commit, {counter: fields}))
                continue
            self._usage.writes += len(chunk) + 1
            for counter, fields in chunk:
                self._retry.discard(counter)
                if "count" in fields:
                    self._held[counter].written = fields["count"]

    def _isolated(self, counter: str, step: Callable[[], Any]) -> None:
        """Run one counter's step; a fault of that counter's own is reported, not raised, and
        its sum is published again next tick."""
        try:
            step()
        except COUNTER_FAULTS as error:
            self._report(counter, error)
            self._retry.add(counter)

    def _report(self, counter: str, error: BaseException | str) -> None:
        problem = f"{counter}: {error}"[:PROBLEM_CHARS]
        self._problems.append(problem)
        log.warning("rollup skipped %s", problem)

    def _grow(self, grow: Grow) -> None:
        """Create shards old..new-1 (count 0, or kept if a fold left one), then raise num_shards:
        a writer never picks a shard that does not exist. The bounds are read afresh first (one
        read; grows are rare): an operator may have pinned the counter since this holder met it."""
        ref = self._db.collection(config.COUNTERS).document(grow.counter)
        state = self._held[grow.counter].scaling
        assert state is not None  # only counters with a document are scaled
        bounds = ref.get(field_paths=["min_shards", "max_shards"]).to_dict() or {}
        self._usage.reads += 1
        state.min_shards = int(bounds.get("min_shards") or state.min_shards)
        state.max_shards = int(bounds.get("max_shards") or state.max_shards)
        grow = Grow(counter=grow.counter, old=grow.old, new=min(grow.new, state.max_shards))
        if grow.new <= grow.old:
            return
        created = {"count": firestore.Increment(0), "writes": firestore.Increment(0)}
        for start in range(grow.old, grow.new, WRITE_CHUNK):
            batch = self._db.batch()
            created_here = range(start, min(grow.new, start + WRITE_CHUNK))
            for n in created_here:
                batch.set(ref.collection(config.SHARDS).document(str(n)), created, merge=True)
            self._lease.commit(batch)
            self._usage.writes += len(created_here) + 1  # and the fencing write
        batch = self._db.batch()
        batch.update(ref, {"num_shards": grow.new, "above_min": state.above_min})
        self._lease.commit(batch)
        state.num_shards = grow.new
        self._usage.writes += 2
        log.info("grew %s from %d to %d shards (rate %.1f/s)", grow.counter, grow.old, grow.new,
                 state.rate)

    def _fold_due(self, as_of: dt.datetime) -> int:
        """Fold the surplus shards of counters whose shrink is older than the grace period."""
        now = as_of.timestamp()
        folded = 0
        for counter, held in self._held.items():
            state = held.scaling
            if state is None or state.shrunk_at is None:
                continue
            if now < state.shrunk_at + self._params.fold_grace_s:
                continue
            ref = self._db.collection(config.COUNTERS).document(counter)
            result = fold_surplus(self._db, ref, state.num_shards, self._lease.commit)
            self._usage.add(Usage(reads=result.reads, writes=result.writes))
            for shard in result.deleted:
                state.shard_load.pop(shard, None)
            if held.shards is not None:
                for shard in result.deleted:
                    held.shards.pop(shard, None)
                for survivor, amount in result.moved.items():
                    before = held.shards.get(survivor, ShardValue(count=0, writes=0))
                    held.shards[survivor] = ShardValue(count=before.count + amount,
                                                       writes=before.writes)
            folded += len(result.deleted)
            if result.complete:
                state.shrunk_at = None
                batch = self._db.batch()
                batch.update(ref, {"shrunk_at": None, "above_min": state.above_min})
                self._lease.commit(batch)
                self._usage.writes += 2
                log.info("folded %s down to %d shards", counter, state.num_shards)
        return folded

    def _evict_idle(self, changes: Changes) -> None:
        self._ticks += 1
        for counter in changes:
            self._held[counter].last_changed = self._ticks
        for counter, held in list(self._held.items()):
            if self._ticks - held.last_changed <= IDLE_TICKS_KEPT:
                continue
            state = held.scaling
            if state is not None and (state.above_min or state.published_rate):
                continue  # it still has shards to shed, or a rate to bring down to 0
            del self._held[counter]
