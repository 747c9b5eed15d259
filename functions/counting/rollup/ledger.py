"""What one rollup holder knows, and every decision it takes from it: pure, no I/O.

The ledger holds, per counter, the shard values as of the last tick, the published count, the
per-shard counts persisted by a round of memories or a publish (`shard_counts` in the counter's
memory document, what a successor starts from) and the autoscaling state. Given the
shard values a tick read (`apply`), it returns the new sums and measures the rates; `plan` turns
them into the counters' publishes and the grows to commit; the fold and eviction steps keep it
equal to the shards that exist. `counting.rollup.tick` does the
reads and commits around it (docs/architecture.md, "Rollup"); tests/unit/test_ledger.py drives
it with values alone.
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from counting.foundation import config, kinds
from counting.foundation.config import AutoscaleParams
from counting.writepath import autoscale, partitions

# A counter not changed for this many ticks is dropped from the ledger (unless it still has
# shards to shed).
IDLE_TICKS_KEPT = 120
# Counters first met by a holder: their documents are read, at most this many per tick (in
# chunks, several at once); a memory's `shard_counts` stands for the shards that did not change.
# Within that, a tick meets as many counters as the last one changed, or 1/MEETINGS_SPREAD of
# those still to meet, whichever is more, and no fewer than MEETINGS_MIN: a new holder meeting
# thousands catches up over a few ticks, none much longer than the others, and one that meets
# fewer than arrive a tick meets more each tick (`spread_first_loads`).
DOCUMENT_LOADS_PER_TICK = 5000
MEETINGS_MIN = 250
MEETINGS_SPREAD = 4
# Those whose document has no `shard_counts` (or that are owed a whole read: deferred) are read
# whole, at most this many per tick (a tick reading 200 counters of 10 shards stays near a
# second). The others wait for the next ticks.
FIRST_LOADS_PER_TICK = 200
# A rate sample never spans more than this (the first tick after a long pause).
MAX_SAMPLE_S = 60.0
# The memories of the counters whose counts moved are written in rounds of this long, a share of
# the round each tick (at least MEMORIES_PER_TICK), a round starting once the checkpoint is this
# old: a successor reads at most about twice this of changes, and no tick writes them all.
FLUSH_S = config.ROLLUP_SWEEP_EVERY_S
MEMORIES_PER_TICK = 250

INT64 = (-(2**63), 2**63 - 1)
# What a shard's birth stamp carries of its counter's document, besides its instant.
BORN_FIELDS = ("num_shards", "strategy", "min_shards", "max_shards")


@dataclass(frozen=True, kw_only=True)
class ShardValue:
    count: int
    # One more per write to the shard: its growth is the number of writes. None for a shard known
    # from `shard_counts` only: its next value read is the baseline, not a burst.
    writes: int | None

    @classmethod
    def of(cls, data: dict[str, Any] | None) -> ShardValue:
        data = data or {}
        return cls(count=int(data.get("count") or 0), writes=int(data.get("writes") or 0))


Changes = dict[str, dict[str, ShardValue]]  # counter -> shard id -> value at the tick's instant


def persisted_counts(document: dict[str, Any]) -> dict[str, int] | None:
    """The per-shard counts a holder persisted in a counter's memory (or, before the memory
    existed, on its document); None when there are none (a counter from before they were
    persisted, or whose counts were dropped: its shards are read whole)."""
    counts = document.get(config.SHARD_COUNTS_FIELD)
    return None if counts is None else {shard: int(n) for shard, n in counts.items()}


# What a version before the memory kept on counters/{id}: removed with the next publish.
LEGACY_FIELDS = (config.SHARD_COUNTS_FIELD, config.SHARD_LOAD_FIELD)


@dataclass(kw_only=True)
class Scaling:
    """What the ledger knows of one counter's configuration and load."""

    num_shards: int
    min_shards: int
    max_shards: int
    strategy: str
    rate: float
    measured_at: float | None  # epoch seconds: the instant `rate` is as of (None: any)
    # The rate on the document and its instant (`rate_at`, or `updated_at` on a document from
    # before it): what readers decay (`shown_rate`).
    published_rate: float
    published_at: float | None  # epoch seconds
    low_since: float | None  # epoch seconds
    shrunk_at: float | None  # epoch seconds; surplus shards are folded `fold_grace_s` later
    shard_load: dict[str, float] = field(default_factory=dict)
    # Whether its document carries the watch's `shrink_home` as `partitions.watched` writes it
    # (a counter from before it says `above_min` only: its next publish adds it).
    watched: bool = True

    @classmethod
    def from_document(cls, data: dict[str, Any], *, now: float | None = None,
                      params: AutoscaleParams = config.AUTOSCALE) -> Scaling:
        """The scaling state on a counter's document: its rate as of its instant (the ledger
        decays it from there, as readers do). A cool-down's start rides along with a publish;
        one that began after it, while nobody wrote, is when the published rate, falling,
        crossed the shrink line (if that was by `now`): what the holder that saw it begin
        measured, so no write is needed for it."""
        def seconds(value: Any) -> float | None:
            return value.timestamp() if isinstance(value, dt.datetime) else None

        published = float(data.get("rate") or 0.0)
        published_at = seconds(data.get("rate_at")) or seconds(data.get("updated_at"))
        num_shards = int(data.get("num_shards") or 1)
        above = bool(data.get("above_min"))
        low_since = seconds(data.get("low_since"))
        if low_since is None and published_at is not None and now is not None:
            crossed = low_from(published, published_at, num_shards, params)
            low_since = crossed if crossed <= now else None
        return cls(
            num_shards=num_shards,
            min_shards=int(data.get("min_shards") or config.DEFAULT_MIN_SHARDS),
            max_shards=int(data.get("max_shards") or config.DEFAULT_MAX_SHARDS),
            strategy=str(data.get("strategy") or kinds.DEFAULT_STRATEGY),
            rate=published,
            measured_at=published_at,
            published_rate=published,
            published_at=published_at,
            low_since=low_since,
            shrunk_at=seconds(data.get("shrunk_at")),
            watched=not above or partitions.SHRINK_HOME in data,
        )

    @property
    def above_min(self) -> bool:
        return self.num_shards > self.min_shards or self.shrunk_at is not None

    def published_load(self) -> list[float]:
        return [round(self.shard_load.get(str(n), 0.0), 3) for n in range(self.num_shards)]


@dataclass(kw_only=True)
class Held:
    """One counter as the holder knows it: its document and, once one of its shards changed
    while held, every shard's value as of the last tick."""

    shards: dict[str, ShardValue] | None  # None: not read (held for its scaling state only)
    written: int | None  # the count on counters/{id}; None: the document does not exist
    # Its `shard_counts` as this holder last wrote or read it; None: there are none.
    persisted: dict[str, int] | None
    scaling: Scaling | None  # None when the document does not exist
    last_changed: int  # the tick that last saw one of its shards change
    # Its document still carries what a version before the memory kept there (LEGACY_FIELDS),
    # and its counts are there, not in a memory.
    legacy: bool = False
    # Its counts moved since `persisted` was written: written with the next round.
    unpersisted: bool = False
    # Its shards were read whole (a first load without shard counts, a catch-up), or a sweep's
    # cell changed it: what that took in may be older than the checkpoint, so its counts go with
    # its next publish.
    read_whole: bool = False
    # The instant its next visit is due at (a cool-down ending, a fold, the shrink line
    # crossed: `Ledger._next_due`), None: none; the heap's entry of it that is not stale.
    due: float | None = None
    # The tick at which its eviction is looked at next (one entry in the idle wheel at a time).
    idle_check: int = 0
    # Met from its shards' birth stamp (`Ledger.meet_born`), the stamp's instant: its count is
    # published at its first visit whatever `written` says, and a publish that fails has it read
    # whole. None once published, or met otherwise.
    born: float | None = None

    def total(self) -> int:
        return sum(shard.count for shard in (self.shards or {}).values())

    def counts(self) -> dict[str, int]:
        return {shard: value.count for shard, value in (self.shards or {}).items()}


@dataclass(frozen=True, kw_only=True)
class Grow:
    counter: str
    old: int
    new: int


@dataclass(frozen=True, kw_only=True)
class Shrink:
    counter: str
    old: int
    new: int


@dataclass(frozen=True, kw_only=True)
class Publish:
    """One counter's writes of a tick, committed together: to its document (`public`, what
    clients read and listen to) and to its memory (`memory`: the shard counts a successor starts
    from, the loads writers pick by). Either may be empty."""

    public: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    # The document still carries LEGACY_FIELDS, which the memory now holds: remove them.
    drop_legacy: bool = False


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A tick's writes: counters' publishes, then the grows and the shrinks (each after a read
    of the counter's bounds: an operator may have pinned it since the ledger met it)."""

    updates: dict[str, Publish]
    grows: list[Grow]
    shrinks: list[Shrink]
    problems: list[str]  # counters that cannot be published, and why


def bound(bounds: dict[str, Any], name: str, current: int) -> int:
    """A counter's `min_shards` or `max_shards` as an operator left it: a positive integer, or
    else what the ledger had (a hand-edited document may hold anything)."""
    value = bounds.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 \
        else current


def timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)


def publishable(rate: float) -> float:
    return 0.0 if rate < config.RATE_PUBLISH_ABS else round(rate, 3)


def shown_rate(published: float, published_at: float | None, now: float,
               params: AutoscaleParams = config.AUTOSCALE) -> float:
    """What a reader makes of a document's `rate` published at `published_at` (its `rate_at`),
    at `now`: the measured rate decays as the holder decays it while nobody writes (the EWMA's
    fall), so no write is needed while a counter is idle. web/src/rate.js and the CLI's `watch`
    compute the same."""
    if published_at is None or now <= published_at:
        return published
    return autoscale.measured_rate(published, 0.0, now - published_at, params)


def low_from(rate: float, at: float, num_shards: int, params: AutoscaleParams) -> float:
    """When a rate published at `at`, falling unwritten, is under the shrink line of
    `num_shards` (`autoscale.decide`'s `low`)."""
    line = num_shards * params.shard_write_rate * params.shrink_utilisation
    return at if rate < line else at + params.fall_tau_s * math.log(rate / line)


def rate_departs(rate: float, shown: float) -> bool:
    """Whether the measured rate is off what readers show by more than the publishing margin: a
    counter written to in a tick whose sum did not move (+1 and -1), whose rate rose."""
    return abs(rate - shown) > max(config.RATE_PUBLISH_ABS, config.RATE_PUBLISH_REL * shown)


class Ledger:
    def __init__(self, params: AutoscaleParams | None = None, *,
                 document_loads_per_tick: int = DOCUMENT_LOADS_PER_TICK,
                 first_loads_per_tick: int = FIRST_LOADS_PER_TICK) -> None:
        """The first-load budgets of a tick (`spread_first_loads`, `first_loads`): production's
        unless told."""
        self.params = params or AutoscaleParams()
        self.document_loads_per_tick = document_loads_per_tick
        self.first_loads_per_tick = first_loads_per_tick
        self.held: dict[str, Held] = {}
        self.retry: set[str] = set()  # counters whose sum could not be published: again
        self.deferred: set[str] = set()  # changed, dropped, to be read whole (`first_loads`)
        # Changed, not met yet: the values read of their changed shards, the oldest first
        # (`spread_first_loads`).
        self.waiting: dict[str, dict[str, ShardValue]] = {}
        self._from_waiting: set[str] = set()  # of the tick under way: those it meets
        self._last_changed = 0  # the counters the last tick changed
        # The `since` of the earliest tick that dropped a counter still deferred: the watermark
        # persisted for a successor goes no further, so it finds that counter changed too.
        self.deferred_since: dt.datetime | None = None
        self.ticks = 0
        # No tick since it was made or forgot: its first reads back from the checkpoint.
        self.fresh = True
        # What a tick visits besides the counters that changed: a held counter nobody writes to
        # changes only by time (its rate decays as readers decay it), so it is visited when
        # something is due for it (`_next_due`), from a heap of (instant, counter); its eviction
        # is looked at from a wheel of ticks. Counters held since the last tick are visited
        # once (their bounds clamped, their cool-down scheduled); those whose counts moved
        # since they were last written are written by the next round. A tick's work is then
        # what changed and what is due, never what is held (docs/architecture.md, "Rollup").
        self._due: list[tuple[float, str]] = []
        self._idle: dict[int, list[str]] = defaultdict(list)
        self._met: set[str] = set()
        self._unpersisted: set[str] = set()
        self._visiting: set[str] = set()  # of the tick under way (`apply`)
        # The instant of this ledger's first tick (None: none since it was made or forgot), and
        # those of its last IDLE_TICKS_KEPT + 1 ticks: a counter born after both was met by no
        # holder before it, nor evicted by it (`meet_born`).
        self._started: float | None = None
        self._instants: deque[float] = deque(maxlen=IDLE_TICKS_KEPT + 1)
        # Met from their stamp, whose publish failed: read whole from the next tick on.
        self._unborn: set[str] = set()
        # The round of memories under way (`_flushing`): the counters whose counts had moved at
        # its instant, still to be written; and the instant of the last round done (`end_tick`),
        # which the rollup persists as its checkpoint.
        self._round: deque[str] = deque()
        self._round_at: dt.datetime | None = None
        self._round_total = 0
        self.checkpointed: dt.datetime | None = None

    def forget(self) -> None:
        """Drop everything; the next ticks read the changed counters whole. Counters still
        owed a publish are read whole again too."""
        self.held.clear()
        self.deferred |= self.retry | self.waiting.keys() | self._from_waiting
        self.waiting.clear()
        self._from_waiting.clear()
        self.retry.clear()
        self._due.clear()
        self._idle.clear()
        self._met.clear()
        self._unpersisted.clear()
        self._visiting.clear()
        self._started = None
        self._instants.clear()
        self._unborn.clear()
        self._round_at = None
        self.fresh = True

    def in_hand(self) -> set[str]:
        """The counters the tick under way visits (`apply`)."""
        return set(self._visiting)

    def forget_counters(self, counters: set[str], since: dt.datetime) -> None:
        """Drop these counters only (a tick failed while it had them in hand: what was
        committed of them is not known): later ticks read them whole and publish them, as they
        do a deferred counter (`first_loads`); a successor starts no later than `since` (the
        checkpoint or earlier: what a dropped counter took in since is in no memory). The
        others keep what the ledger knows; the round of memories under way starts again (which
        of this tick's share were written is not known)."""
        self._round_at = None
        dropped = {counter for counter in counters if self.held.pop(counter, None) is not None}
        # (One met from `waiting` this tick is held nowhere else: its values are gone with it.)
        dropped |= counters & (self.retry | self.waiting.keys() | self._from_waiting)
        for counter in dropped:
            self.waiting.pop(counter, None)
        self.retry -= dropped
        self._unpersisted -= dropped
        self._met -= dropped
        self._visiting -= dropped
        self._from_waiting -= dropped
        if dropped:
            self.deferred |= dropped
            self._owed_since(since)

    def _owed_since(self, since: dt.datetime) -> None:
        """A counter is owed from `since`: the durable watermark goes no further."""
        if self.deferred_since is None or since < self.deferred_since:
            self.deferred_since = since

    @property
    def owed(self) -> int:
        """Changed counters not published yet: deferred, or waiting to be met."""
        return len(self.deferred) + len(self.waiting)

    def durable(self, watermark: dt.datetime) -> dt.datetime:
        """The watermark a successor may start from: everything before it is published."""
        if self.deferred_since is None:
            return watermark
        return min(watermark, self.deferred_since)

    # -- what to read --

    def spread_first_loads(self, changes: Changes, since: dt.datetime) -> None:
        """Bound the counters met in one tick (their documents read: a new holder meeting
        thousands at once would otherwise hold up every counter's publish, and make one tick
        many times as long as the others): as many as the last tick changed, or
        1/MEETINGS_SPREAD of those to meet (waiting and new), whichever is more, no fewer than
        MEETINGS_MIN, no more than `document_loads_per_tick`. Changed counters
        past it wait with the values read of their changed shards (`waiting`), and are met
        first by the next ticks, with what their queries return since over those values (a
        shard's value is absolute); a successor starts no later than `since` meanwhile."""
        for counter, shards in self.waiting.items():
            changes[counter] = {**shards, **changes.get(counter, {})}
        unseen = [*self.waiting,  # the oldest first; the others whatever the reads' order
                  *sorted(c for c in changes if c not in self.held and c not in self.waiting)]
        budget = min(self.document_loads_per_tick,
                     max(MEETINGS_MIN, self._last_changed,
                         math.ceil(len(unseen) / MEETINGS_SPREAD)))
        self._from_waiting = {c for c in unseen[:budget] if self.waiting.pop(c, None) is not None}
        for counter in unseen[budget:]:
            self.waiting[counter] = changes.pop(counter)
            self._owed_since(since)

    def wait(self, changes: Changes, since: dt.datetime) -> None:
        """A tick catching up (`Rollup.tick`) read part of what changed: every counter found
        waits with the values read (none is held yet: a catch-up is a new ledger's), and is met
        once the rest is read; a successor starts no later than `since` meanwhile."""
        for counter, shards in changes.items():
            assert counter not in self.held, counter
            self.waiting[counter] = {**self.waiting.get(counter, {}), **shards}
        if changes:
            self._owed_since(since)
        changes.clear()

    def first_loads(self, changes: Changes, since: dt.datetime) -> list[str]:
        """With the changed counters' documents held: a counter whose document has
        `shard_counts` takes its unchanged shards from it (`changes` has the others). The others
        are read whole, at most `first_loads_per_tick`, deferred ones included (what was dropped
        from an earlier tick's changes is in no `shard_counts`); the rest are deferred as above.
        Returns those to read whole now."""
        whole = []
        for counter in changes:
            held = self.held[counter]
            if held.shards is not None:
                continue
            if held.persisted is None or counter in self.deferred:
                whole.append(counter)
            else:
                held.shards = {shard: ShardValue(count=count, writes=None)
                               for shard, count in held.persisted.items()}
        for counter in whole[self.first_loads_per_tick:]:
            self._defer(changes, counter, since)
        room = self.first_loads_per_tick - min(len(whole), self.first_loads_per_tick)
        catch_up = sorted(self.deferred - changes.keys() - self.waiting.keys())[:room]
        self.deferred -= {*catch_up, *changes}
        self.retry.update(catch_up)  # published from the values read whole
        return [*whole[:self.first_loads_per_tick], *catch_up]

    def _defer(self, changes: Changes, counter: str, since: dt.datetime) -> None:
        del changes[counter]
        self.deferred.add(counter)
        self._owed_since(since)

    def meet_born(self, changes: Changes, births: dict[str, dict[str, Any]]) -> list[str]:
        """Hold, with no read, the changed counters met for the first time whose changed shards
        carry their birth stamp (`births`: config.SHARD_BORN_FIELD) from after this ledger's
        first tick and after its last IDLE_TICKS_KEPT ticks began: no holder met them before
        (a predecessor's commits all came before this ledger's lease), none of their shard
        writes escaped this ledger's change queries (every one is stamped after the birth) and
        none was evicted from it; so every shard it has not seen holds 0, and its document holds
        what the stamp says (its count, 0 or an earlier sum, is written at its first visit
        anyway). A deferred counter (its changes dropped) is read whole instead. Returns those
        held."""
        if self._started is None:
            return []
        after = max(self._started, self._instants[0]) \
            if len(self._instants) == self._instants.maxlen else self._started
        met = []
        for counter, born in births.items():
            at = born.get("at")
            if counter in self.held or counter in self.deferred or counter in self.waiting \
                    or counter not in changes \
                    or not isinstance(at, dt.datetime) or at.timestamp() <= after:
                continue
            document: dict[str, Any] = {
                "count": 0, "rate": 0.0, "updated_at": at,
                **{name: born[name] for name in BORN_FIELDS if name in born}}
            self.hold(counter, document, {config.SHARD_COUNTS_FIELD: {}}, since=at)
            held = self.held[counter]
            held.shards, held.born = {}, at.timestamp()
            met.append(counter)
        return met

    def unseen(self, counters: list[str]) -> list[str]:
        """Counters whose document the ledger does not hold."""
        return [c for c in dict.fromkeys(counters) if c not in self.held]

    def hold(self, counter: str, document: dict[str, Any] | None,
             memory: dict[str, Any] | None = None, *, since: dt.datetime | None = None) -> None:
        """Take in a counter's document (None: it does not exist) and its memory (None: it has
        none: a counter from before the memory keeps its counts on its document). `since`: the
        start of the interval the tick measures (a cool-down derived from the document begins
        by then; `Scaling.from_document`)."""
        legacy = document is not None and any(name in document for name in LEGACY_FIELDS)
        self._met.add(counter)
        self._idle[self.ticks + IDLE_TICKS_KEPT + 1].append(counter)
        self.held[counter] = Held(
            shards=None,
            written=None if document is None else int(document.get("count") or 0),
            persisted=(persisted_counts(memory) if memory is not None
                       else None if document is None else persisted_counts(document)),
            scaling=None if document is None else Scaling.from_document(
                document, now=None if since is None else since.timestamp(), params=self.params),
            last_changed=self.ticks,
            legacy=legacy and memory is None,
            idle_check=self.ticks + IDLE_TICKS_KEPT + 1,
        )

    def hold_shards(self, counter: str, shards: dict[str, ShardValue]) -> None:
        """Take in every shard of a counter, read whole."""
        held = self.held[counter]
        held.shards, held.read_whole = shards, True

    # -- a tick --

    def apply(self, changes: Changes, since: dt.datetime, as_of: dt.datetime,
              swept: frozenset[str] = frozenset()) -> tuple[dict[str, int], dict[str, int]]:
        """Take in the shards the query returned; measure the rates of the counters visited:
        those that changed, those met since the last tick and those something is due for (a
        counter nobody writes to is brought up to date when it is next visited: its rate
        decays over the whole pause). Returns the new sums, and per counter how many of its
        shards changed since they were last read (a shard the overlap or a sweep returns again
        is unchanged). A counter of `swept` (returned by a sweep's cell), or met from
        `waiting`, that changed has its counts written with its next publish: what the sweep
        found, or a tick before the last round of memories, may be older than the checkpoint,
        and a successor's query would not reach it again."""
        begin, end = since.timestamp(), as_of.timestamp()
        if self._started is None:
            self._started = end
        self._instants.append(end)
        visiting = self._visiting = {*changes, *self._met, *self._pop_due(end)}
        self._met.clear()
        sums: dict[str, int] = {}
        grown: dict[str, int] = {}
        for counter, shards in changes.items():
            held = self.held[counter]
            assert held.shards is not None  # read before
            writes: dict[str, int] = {}
            grown[counter] = 0
            for shard, value in shards.items():
                before = held.shards.get(shard)
                assert value.writes is not None  # read from the shard
                if before is None:  # a shard created afresh: its write counter starts at 0
                    writes[shard] = value.writes
                elif before.writes is None:  # known from `shard_counts`: a baseline, no sample
                    writes[shard] = 0
                else:  # a shard created afresh (after a fold) restarts its write counter
                    grew = value.writes - before.writes
                    writes[shard] = grew if grew >= 0 else value.writes
                grown[counter] += before is None or value.count != before.count \
                    or before.writes not in (None, value.writes)
                held.shards[shard] = value
            sums[counter] = held.total()
            if grown[counter] and (counter in swept or counter in self._from_waiting):
                held.read_whole = True
            if held.scaling is not None:
                self._advance(held.scaling, writes, begin, end)
        for counter in visiting - changes.keys():
            idle = self.held.get(counter)
            if idle is not None and idle.scaling is not None:
                self._advance(idle.scaling, {}, begin, end)
        return sums, grown

    def _pop_due(self, end: float) -> set[str]:
        """The held counters whose visit is due by `end` (stale entries dropped)."""
        due = set()
        while self._due and self._due[0][0] <= end:
            when, counter = heapq.heappop(self._due)
            held = self.held.get(counter)
            if held is not None and held.due == when:
                held.due = None
                due.add(counter)
        return due

    def _schedule(self, counter: str, when: float | None) -> None:
        held = self.held[counter]
        if when is None or when == held.due:
            return
        if held.due is None or when < held.due:
            held.due = when
            heapq.heappush(self._due, (when, counter))

    def _next_due(self, state: Scaling, now: float) -> float | None:
        """When a counter nobody writes to needs its next visit: its fold's grace ending, its
        cool-down ending, or its falling rate crossing the shrink line (its cool-down starts
        then); None when nothing will change without a write."""
        times = []
        if state.shrunk_at is not None and state.shrunk_at + self.params.fold_grace_s > now:
            # (A fold due by now is this tick's: `folds_due` and `folded` see to the next.)
            times.append(state.shrunk_at + self.params.fold_grace_s)
        if self.params.enabled and state.num_shards > state.min_shards:
            times.append(state.low_since + self.params.cool_down_s if state.low_since is not None
                         else max(now, low_from(state.rate, now, state.num_shards, self.params)))
        return min(times, default=None)

    def _advance(self, state: Scaling, writes: dict[str, int], begin: float, end: float) -> None:
        """Bring a counter's rate from its instant to `end`, with the writes the tick saw in
        (`begin`, `end`]: unwritten, it falls over the whole pause, as readers decay it
        (`shown_rate`); a sample of writes spans the tick's interval, at most MAX_SAMPLE_S."""
        start = begin if state.measured_at is None else state.measured_at
        if end <= start:
            return
        window = min(MAX_SAMPLE_S, end - max(begin, start)) if writes else end - start
        if end - start > window:
            self._measure(state, {}, end - start - window)
        self._measure(state, writes, window)
        state.measured_at = end

    def _measure(self, state: Scaling, writes: dict[str, int], dt_s: float) -> None:
        params = self.params
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

    def plan(self, sums: dict[str, int], as_of: dt.datetime, *,
             checkpoint: dt.datetime | None = None) -> Plan:
        """The counters' publishes of this tick, and the grows to commit after them. The tick
        also writes its share of the round of memories under way (`_flushing`; one starts once
        `checkpoint`, up to which every memory holds every change taken in, is FLUSH_S old;
        None: none starts):
        the shard counts of the counters whose counts had moved at the round's instant. When
        they are written, every memory holds every change taken in up to that instant, the next
        checkpoint, from which a successor (or this holder after forgetting) reads back and
        misses nothing (docs/architecture.md, "The holder's memory"). A busy counter's counts
        wait for the round: it would otherwise pay a second write per counter-second. A counter
        read whole (its first load without shard counts, a catch-up of deferred changes) or
        changed by a sweep's cell (`apply`'s `swept`) has them written with its next publish:
        that read took in changes older than the checkpoint.

        A publish carries the counter's rate and its instant (`rate_at`), from which readers
        decay it (`shown_rate`); a rate is not written alone while it falls (every counter
        changed in the last minute would be written every other tick), only when it is off what
        readers show (`rate_departs`); a cool-down that starts meanwhile is derived from them
        (`Scaling.from_document`)."""
        now = as_of.timestamp()
        updates: dict[str, dict[str, Any]] = defaultdict(dict)
        memories: dict[str, dict[str, Any]] = defaultdict(dict)
        grows: list[Grow] = []
        shrinks: list[Shrink] = []
        problems: list[str] = []
        for counter in self.retry - sums.keys():
            if counter in self.held:
                sums[counter] = self.held[counter].total()
        visiting = {counter for counter in {*self._visiting, *sums} if counter in self.held}
        self._visiting = visiting
        for counter, total in sums.items():
            held = self.held[counter]
            if held.written is None:
                continue  # no document to publish to
            held.unpersisted = held.unpersisted or held.counts() != held.persisted
            if held.unpersisted:
                self._unpersisted.add(counter)
            if not INT64[0] <= total <= INT64[1]:
                # Firestore stores 64-bit integers: this count cannot be published (clients
                # are kept from getting here by the bounds on increments).
                problems.append(f"{counter}: sum {total} is outside 64-bit integers")
                self.retry.add(counter)
            elif held.written != total or held.born is not None:
                updates[counter].update({"count": total, "updated_at": as_of})
        flushing = self._flushing(as_of, checkpoint)
        for counter in visiting | flushing:
            held = self.held[counter]
            if ((held.unpersisted and (counter in flushing or held.read_whole)) or held.legacy) \
                    and held.shards is not None and held.written is not None:
                memories[counter][config.SHARD_COUNTS_FIELD] = held.counts()
        for counter in visiting:
            state = self.held[counter].scaling
            if state is None:
                continue
            fields = updates.get(counter, {})
            if self.params.enabled:
                decision = autoscale.decide(
                    state.num_shards, state.rate, now, state.low_since,
                    min_shards=state.min_shards, max_shards=state.max_shards, params=self.params)
                if decision.num_shards > state.num_shards:
                    grows.append(Grow(counter=counter, old=state.num_shards,
                                      new=decision.num_shards))
                elif decision.num_shards < state.num_shards:
                    shrinks.append(Shrink(counter=counter, old=state.num_shards,
                                          new=decision.num_shards))
                    decision = autoscale.Decision(num_shards=state.num_shards,
                                                  low_since=state.low_since)
                state.low_since = decision.low_since
            if fields and not state.watched:
                fields.update(partitions.watched(counter, state.above_min))
                state.watched = True
            if fields or rate_departs(state.rate, shown_rate(
                    state.published_rate, state.published_at, now, self.params)):
                # The rate and its instant, and the cool-down's start, ride along.
                fields["low_since"] = timestamp(state.low_since)
                state.published_rate, state.published_at = publishable(state.rate), now
                fields.update(rate=state.published_rate, rate_at=as_of)
                if state.strategy == "least_loaded":
                    memories[counter][config.SHARD_LOAD_FIELD] = state.published_load()
                updates[counter] = fields
            if not shrinks or shrinks[-1].counter != counter:  # (a shrink's step schedules it;
                # one that fails is owed a publish: visited again)
                self._schedule(counter, self._next_due(state, now))
        return Plan(updates={c: Publish(public=updates.get(c, {}), memory=memories.get(c, {}),
                                        drop_legacy=c in memories and self.held[c].legacy)
                             for c in sorted({*updates, *memories})
                             if updates.get(c) or memories.get(c)},
                    grows=grows, shrinks=shrinks, problems=problems)

    def _flushing(self, as_of: dt.datetime, checkpoint: dt.datetime | None) -> set[str]:
        """This tick's share of the round of memories: the round's part due by `as_of` (all of
        it once the checkpoint is twice FLUSH_S old: at once for a holder that starts after a
        pause that long; a scheduled run a minute after the checkpoint writes its share, and the
        rest of the round is lost with its ledger), at least MEMORIES_PER_TICK. A round starts
        with the counters whose counts moved (this tick's included) once the checkpoint is
        FLUSH_S old."""
        if checkpoint is None:
            return set()
        age = (as_of - checkpoint).total_seconds() / FLUSH_S
        if self._round_at is None:
            if age < 1.0:
                return set()
            self._round = deque(sorted(self._unpersisted))
            self._round_at, self._round_total = as_of, len(self._round)
        elapsed = min(1.0, age - 1.0)
        written = self._round_total - len(self._round)
        share = max(math.ceil(self._round_total * elapsed) - written, MEMORIES_PER_TICK)
        flushing = set()
        while self._round and share > 0:
            counter = self._round.popleft()
            if counter in self.held:  # (one forgotten is read whole and written so)
                flushing.add(counter)
            share -= 1
        return flushing

    def shrinking(self, shrink: Shrink, bounds: dict[str, Any], as_of: dt.datetime
                  ) -> dict[str, Any] | None:
        """Take in the counter's current bounds before a shrink: the counter document's update
        that shrinks it, or None when the bounds leave nothing of it (its cool-down then starts
        again: a pinned counter is not looked at every tick)."""
        state = self.held[shrink.counter].scaling
        assert state is not None
        state.min_shards = bound(bounds, "min_shards", state.min_shards)
        state.max_shards = bound(bounds, "max_shards", state.max_shards)
        new = max(shrink.new, state.min_shards)
        if new >= shrink.old:
            state.low_since = None
            self._schedule(shrink.counter, self._next_due(state, as_of.timestamp()))
            return None
        return {"num_shards": new, "shrunk_at": as_of, "low_since": None,
                "rate": publishable(state.rate), "rate_at": as_of,
                **partitions.watched(shrink.counter, True)}

    def shrunk(self, shrink: Shrink, fields: dict[str, Any]) -> None:
        """A shrink (`shrinking`'s update) was committed: its surplus is folded after the
        grace."""
        state = self.held[shrink.counter].scaling
        assert state is not None
        now = fields["shrunk_at"].timestamp()
        state.num_shards, state.shrunk_at, state.low_since = fields["num_shards"], now, None
        state.published_rate, state.published_at, state.watched = fields["rate"], now, True
        self._schedule(shrink.counter, self._next_due(state, now))

    def published(self, counter: str, publish: Publish) -> None:
        """A counter's publish was committed."""
        self.retry.discard(counter)
        held = self.held[counter]
        if "count" in publish.public:
            held.written, held.born = publish.public["count"], None
        if config.SHARD_COUNTS_FIELD in publish.memory:
            held.persisted = dict(publish.memory[config.SHARD_COUNTS_FIELD])
            held.unpersisted = held.read_whole = held.legacy = False
            self._unpersisted.discard(counter)

    def failed(self, counter: str) -> None:
        """A counter's own write failed: publish it again next tick, its shard counts with it
        (the rollup removes them from the document meanwhile); one held for its scaling only
        (its shards not read: nothing of its count to publish) is visited again next tick."""
        held = self.held.get(counter)
        if held is not None and held.shards is None:
            self._schedule(counter, 0.0)
            return
        self.retry.add(counter)
        if counter in self.held:
            self.held[counter].persisted = None
            if self.held[counter].born is not None:  # its document, which may be gone, is read
                self._unborn.add(counter)

    def bounded(self, grow: Grow, bounds: dict[str, Any]) -> Grow | None:
        """Take in the counter's current bounds before a grow (an operator may have pinned it
        since the ledger met it): the grow to commit, or None when nothing is left of it."""
        state = self.held[grow.counter].scaling
        assert state is not None  # only counters with a document are scaled
        state.min_shards = bound(bounds, "min_shards", state.min_shards)
        state.max_shards = bound(bounds, "max_shards", state.max_shards)
        new = min(grow.new, state.max_shards)
        return Grow(counter=grow.counter, old=grow.old, new=new) if new > grow.old else None

    def completing(self, grow: Grow) -> dict[str, Any]:
        """The counter document's update that completes a grow once its new shards exist."""
        state = self.held[grow.counter].scaling
        assert state is not None
        return {"num_shards": grow.new, **partitions.watched(
            grow.counter, grow.new > state.min_shards or state.shrunk_at is not None)}

    def grown(self, grow: Grow) -> None:
        """A grow was committed."""
        state = self.held[grow.counter].scaling
        assert state is not None
        state.num_shards = grow.new
        self._met.add(grow.counter)  # visited next tick: its cool-down is scheduled from there

    @property
    def visited(self) -> int:
        """The counters the tick under way visits: changed, met, owed or due."""
        return len(self._visiting)

    def rate(self, counter: str, as_of: dt.datetime) -> float:
        """A held counter's measured rate as of `as_of`: decayed from its last visit, as its
        next visit will (`_advance`) when nobody wrote to it since."""
        state = self.held[counter].scaling
        assert state is not None
        if state.measured_at is None or as_of.timestamp() <= state.measured_at:
            return state.rate
        return autoscale.measured_rate(state.rate, 0.0, as_of.timestamp() - state.measured_at,
                                       self.params)

    def above_min(self, counter: str) -> bool:
        state = self.held[counter].scaling
        return state is not None and state.above_min

    def folds_due(self, as_of: dt.datetime) -> list[tuple[str, int]]:
        """(counter, num_shards) of the counters visited this tick whose shrink is older than
        the grace period, but those whose changes are not taken in yet (deferred, or owed a
        publish: visited again next tick): a fold moves their shard counts, which must first be
        the sums published."""
        now = as_of.timestamp()
        due = []
        for counter in sorted(self._visiting):
            held = self.held.get(counter)
            state = None if held is None else held.scaling
            if state is None or state.shrunk_at is None \
                    or now < state.shrunk_at + self.params.fold_grace_s:
                continue
            if counter in self.deferred or counter in self.retry:
                self._schedule(counter, now)
            else:
                due.append((counter, state.num_shards))
        return due

    def counts_kept(self, counter: str) -> str | None:
        """Where the counter's `shard_counts` are, which a fold moves too: "memory", "document"
        (a counter from before the memory), or None (there are none)."""
        held = self.held[counter]
        if held.persisted is None:
            return None
        return "document" if held.legacy else "memory"

    def folded(self, counter: str, deleted: list[str], moved: dict[str, int],
               complete: bool) -> None:
        """Mirror a committed fold: the surplus shards are gone, their counts moved (in the
        shards and in `shard_counts`, when the document has it)."""
        held = self.held[counter]
        state = held.scaling
        assert state is not None
        for shard in deleted:
            state.shard_load.pop(shard, None)
        if held.persisted is not None:
            for shard in deleted:
                held.persisted.pop(shard, None)
            for survivor, amount in moved.items():
                held.persisted[survivor] = held.persisted.get(survivor, 0) + amount
        if held.shards is not None:
            for shard in deleted:
                held.shards.pop(shard, None)
            for survivor, amount in moved.items():
                before = held.shards.get(survivor, ShardValue(count=0, writes=0))
                held.shards[survivor] = ShardValue(count=before.count + amount,
                                                   writes=before.writes)
        if complete:
            state.shrunk_at = None
        elif state.shrunk_at is not None:  # more to fold: the next tick goes on
            self._schedule(counter, state.shrunk_at + self.params.fold_grace_s)

    def end_tick(self, changes: Changes) -> None:
        """Count the tick, close the round of memories whose last share it wrote, and drop the
        counters nobody has written to for a while."""
        if not self.deferred and not self.waiting:
            self.deferred_since = None
        self._last_changed = len(changes)
        self._from_waiting = set()
        self.checkpointed = None
        if self._round_at is not None and not self._round:
            self.checkpointed, self._round_at = self._round_at, None
        self.fresh = False
        self.ticks += 1
        self._visiting = set()
        for counter in changes:
            self.held[counter].last_changed = self.ticks
        for counter in self._unborn:
            born = self.held[counter].born if counter in self.held else None
            if born is not None:  # (not published since)
                self.forget_counters({counter}, dt.datetime.fromtimestamp(born, dt.UTC))
        self._unborn.clear()
        for counter in self._idle.pop(self.ticks, ()):
            held = self.held.get(counter)
            if held is None or held.idle_check != self.ticks:
                continue  # gone, or looked at later
            if self.ticks - held.last_changed <= IDLE_TICKS_KEPT:
                self._check_idle(held, counter, held.last_changed + IDLE_TICKS_KEPT + 1)
            elif held.unpersisted:  # its counts still to be written by a round
                self._check_idle(held, counter, self.ticks + 1)
            elif held.scaling is not None and held.scaling.above_min:
                # It still has shards to shed (its visits are due: `_next_due`).
                self._check_idle(held, counter, self.ticks + IDLE_TICKS_KEPT)
            else:
                del self.held[counter]
                self._met.discard(counter)

    def _check_idle(self, held: Held, counter: str, tick: int) -> None:
        held.idle_check = tick
        self._idle[tick].append(counter)
