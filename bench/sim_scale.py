"""`make sim-scale`: the rollup's real tick at scale, in virtual time.

Each partition's holder is the rollup's own `tick.Rollup` (its ledger, its sweep's cells, its
catch-up after a handover, its watch of counters above their minimum, its first meetings, its
autoscaling's rates and plans), run on `SimStore`, a stand-in for `counting.rollup.store.Store`
that answers every query and read from the model's shard documents at the tick's instant and
counts what the call would cost: the documents it returns, its round trips (a query's pages, one
after the other; several queries or reads at once, `store.READ_THREADS` of them), and the
counters the ledger visits (`Ledger.visited`). A tick takes, in virtual time,

    empty tick + round trips x ROUND_TRIP_S + documents x a document's CPU
    + counters visited x a counter's CPU,

each CPU term a deployed holder's (`capacity_model.reference_shape`, measured at the realistic
shape by `bench/run.py scale`, at the tick function's share of a vCPU; `--tick-mb`). Nothing in
it is a tick's cost per changed counter: a tick that reads or visits more than what changed
(every counter it holds, every counter in the database, a handover's backlog, a sweep) takes
longer because its code does more.

The load is the Capacity table's shape (`capacity_model.table_load`): each second
`changed_per_s` counters, drawn from 100 times as many, take 10 increments each, round robin over
their 8 shards, each increment a write of its shard's absolute value with the stripe its writer
picks (`partitions.stripe`, as tabled by `stripe_table`) at an instant in the second. Every shard
was last written at a random instant of the HISTORY_S before the run (as a steady load leaves
them), so the sweep reads what it would read at steady state. Each stripe is an index range of
increasing `updated_at` that admits INDEX_RANGE_WRITES a second, first come first served: a write
lands (commits, is visible, takes its `updated_at`) when its range gets to it. Each partition has
its own queue: slot s's task is due DISPATCH_S after s + 1, dispatched at most QUEUE_DISPATCHES a
second and one at a time; a task for a slot the holder has ticked past returns at once. Its
publishes land at its end. At `handover_s` every holder is replaced by a successor that starts
from the progress its predecessor last wrote to the lease, as the lease's record carries it.

Capacity(P) is the largest load P partitions keep up with (`Outcome.keeps_up`: the busiest
holder ticks at most TICK_BUDGET_S of each second, as the model's budget, outside the warm-up
and the handover's recovery; every increment published; the index ranges within their rate),
searched per P; linearity is capacity(P) / (P x
capacity(1)) and agreement is capacity(P) over `capacity_model`'s prediction for P ticks at the
same costs (its `largest_carried`, the tick's limit alone).

Not modelled: commits visible after their timestamp (tests/sim models those, on the real
rollup too), Firestore splitting ranges or its latency beyond a round trip and a range's queue,
Cloud Run cold starts, instance loss and retries; a handover is immediate (a successor of a dead
holder waits for the lease to expire); the trending tags (their step is left out); writers
follow no change of shards: autoscaling's grows (a counter drawn again within seconds of its
burst) are made, billed and timed, its writers keep 8 shards, and no shrink or fold comes within
a run shorter than the 600 s cool-down. Every counter starts the run at 8 shards and rate 0: at
steady state about a fifth of them would be grown (for the cool-down after each grow), growing no
further and spreading their writes over more shards. A sweep's cells are read and billed, and
what they return is dropped as a tick took it in (so it is here: every write commits at its
stamp). The waker is counted, not timed: the task creations
its writers' instances make a second (`task_creations_per_s`), against Cloud Tasks' quota; its
wait per write is what `bench/run.py scale` measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "functions"), str(ROOT / "tools")]

import capacity_model  # noqa: E402
import cost_model  # noqa: E402
from counting.foundation import config  # noqa: E402
from counting.foundation.config import AutoscaleParams  # noqa: E402
from counting.rollup import store as store_module  # noqa: E402
from counting.rollup.lease import Progress, Record  # noqa: E402
from counting.rollup.ledger import Ledger, Publish  # noqa: E402
from counting.rollup.tick import Rollup  # noqa: E402
from counting.rollup.trend_step import TrendStats  # noqa: E402
from counting.rollup.usage import Usage  # noqa: E402
from counting.writepath import partitions  # noqa: E402
from counting.writepath.context import Writing  # noqa: E402
from google.cloud import firestore  # noqa: E402

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

INDEX_RANGE_WRITES = capacity_model.INDEX_RANGE_WRITES  # writes/s an index range admits
QUEUE_DISPATCHES = capacity_model.QUEUE_DISPATCHES  # dispatches/s of a Cloud Tasks queue
DISPATCH_S = capacity_model.DISPATCH_S  # a task's dispatch after its slot's end (assumed)
ROUND_TRIP_S = capacity_model.ROUND_TRIP_S
READ_THREADS = store_module.READ_THREADS
# Every shard was last written within this before the run: what a sweep reaches back over.
HISTORY_S = config.MAX_REQUEST_S + config.ROLLUP_SWEEP_EVERY_S
RUN_S = 130  # three sweeps' starts, two sweeps whole, a handover between them
HANDOVER_S = 70.0
WARM_S = 30.0  # writes before this are not judged: every holder meets its counters first
RECOVER_S = 20.0  # nor those of this long from the handover, while the successor catches up
DRAIN_S = 15  # slots ticked after the load ends
ORIGIN = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
US = 1_000_000
TIME_BITS = 40  # a landing's microseconds beside a shard's or a stripe's number in one int64
WRITING = Writing.offline()
NAMES = WRITING.names


def instant(us: float) -> dt.datetime:
    return ORIGIN + dt.timedelta(microseconds=int(us))


def micros(at: dt.datetime) -> int:
    found: int = (at - ORIGIN) // dt.timedelta(microseconds=1)
    if found < 0:
        raise ValueError(f"{at}: before the model's origin")
    return found


class PartLike(Protocol):
    """What the model asks of a partition (`partitions.Part`; the tests break it)."""

    @property
    def count(self) -> int: ...

    @property
    def index(self) -> int: ...

    def owns(self, home: int) -> bool: ...

    def ticks(self) -> list[int]: ...

    def reads(self, spread: int) -> list[int]: ...

    def homes(self) -> list[int]: ...


@dataclass(frozen=True, kw_only=True)
class Load:
    """Each whole second of `seconds`, `changed_per_s` distinct counters of
    `counters_per_changed` times as many take `increments_per_changed` increments each, round
    robin over their `shards` from a shard at random; every holder is replaced at `handover_s`
    (None: never)."""

    changed_per_s: int
    increments_per_changed: int = capacity_model.INCREMENTS_PER_CHANGED
    counters_per_changed: int = capacity_model.COUNTERS_PER_CHANGED
    shards: int = capacity_model.TABLE_SHARDS
    seconds: int = RUN_S
    handover_s: float | None = HANDOVER_S
    warm_s: float = WARM_S

    def __post_init__(self) -> None:
        if self.changed_per_s < 1 or self.counters_per_changed < 1:
            raise ValueError(f"{self}: at least one changed counter of at least as many")

    @property
    def counters(self) -> int:
        return self.changed_per_s * self.counters_per_changed

    @property
    def increments_per_s(self) -> int:
        return self.changed_per_s * self.increments_per_changed

    def judged(self, landed_s: Floats) -> npt.NDArray[np.bool_]:
        """The writes whose lag judges whether the partitions keep up: after the warm-up, not
        in the handover's recovery, and in the load's seconds."""
        judged = (landed_s >= self.warm_s) & (landed_s < self.seconds)
        if self.handover_s is not None:  # (a write of the second before is the successor's)
            judged &= (landed_s < self.handover_s - 1) \
                | (landed_s >= self.handover_s + RECOVER_S)
        return judged


# -- the shared code, as tables --

_HOMES: list[int] = []


def homes(counters: int) -> Ints:
    """Each counter's home, `partitions.home_of` of its id `counter-<n>`."""
    _HOMES.extend(partitions.home_of(counter_id(n)) for n in range(len(_HOMES), counters))
    return np.array(_HOMES[:counters], dtype=np.int64)


def counter_id(n: int) -> str:
    return f"counter-{n}"


class _Fixed:
    """A generator whose `randrange` answers `value` (and notes the bound it was asked)."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.bound = 0

    def randrange(self, bound: int) -> int:
        self.bound = bound
        return self.value if self.value < bound else bound - 1


def stripe_table(count: int) -> Ints:
    """(home, r) -> the stripe `partitions.stripe` gives a write of `home` whose random draw
    is r, for a writer that knows P = count; its width is the spread it draws r below."""
    probe = _Fixed(0)
    partitions.stripe(0, count, probe)  # type: ignore[arg-type]
    spread = probe.bound
    return np.array([[partitions.stripe(home, count, _Fixed(r))  # type: ignore[arg-type]
                      for r in range(spread)] for home in range(partitions.HOMES)],
                    dtype=np.int64)


def whole(count: int) -> list[PartLike]:
    return list(partitions.parts(count))


# -- writers and the index --


@dataclass(frozen=True, kw_only=True)
class Writes:
    """Every shard write, the history's (before HISTORY_S) and the run's, in landing order within
    each stripe. Times in microseconds from ORIGIN; the run's start at HISTORY_S."""

    issued: Floats  # seconds
    landed: Ints  # microseconds
    counter: Ints
    shard: Ints
    stripe: Ints
    run: npt.NDArray[np.bool_]  # a write of the run (not the history)
    range_peak_per_s: float  # the busiest range's writes a second, its mean over the run
    range_load_max_per_s: float  # its expected rate under the load, from the homes' shares


def write(load: Load, count: int, rng: np.random.Generator) -> Writes:
    """The history's and the writers' shard writes, and where the index ranges land them."""
    home = homes(load.counters)
    table = stripe_table(count)
    counters, shards, k = load.counters, load.shards, load.increments_per_changed
    history = counters * shards
    counter_parts = [np.repeat(np.arange(counters, dtype=np.int64), shards)]
    shard_parts = [np.tile(np.arange(shards, dtype=np.int64), counters)]
    issued_parts = [rng.random(history) * HISTORY_S]
    for second in range(load.seconds):
        chosen = rng.choice(counters, load.changed_per_s, replace=False)
        start = rng.integers(0, shards, load.changed_per_s)
        counter_parts.append(np.repeat(chosen, k))
        shard_parts.append((np.repeat(start, k) + np.tile(np.arange(k), load.changed_per_s))
                           % shards)
        issued_parts.append(HISTORY_S + second + rng.random(load.changed_per_s * k))
    counter = np.concatenate(counter_parts).astype(np.int64)
    shard = np.concatenate(shard_parts).astype(np.int64)
    at = np.concatenate(issued_parts)
    run = np.arange(len(counter)) >= history
    stripe = table[home[counter], rng.integers(0, table.shape[1], len(counter))]
    # Each stripe's range admits INDEX_RANGE_WRITES a second, in order of arrival:
    # landed_i = max(issued_i, landed_{i-1} + 1/rate) = max over j <= i of issued_j + (i - j)/rate.
    order = np.argsort((stripe << TIME_BITS) | (at * US).astype(np.int64), kind="stable")
    stripe, at, counter, shard, run = stripe[order], at[order], counter[order], shard[order], \
        run[order]
    starts = np.flatnonzero(np.r_[True, stripe[1:] != stripe[:-1]])
    group = np.cumsum(np.r_[True, stripe[1:] != stripe[:-1]]) - 1
    nth = np.arange(len(stripe)) - starts[group]
    gap = 1.0 / INDEX_RANGE_WRITES
    offset = group * 1e6  # above any (issued - nth gap) spread within a group
    landed = nth * gap + np.maximum.accumulate(at - nth * gap + offset) - offset
    landed_us = np.ceil(landed * US).astype(np.int64)
    sizes = np.bincount(stripe[run], minlength=int(stripe.max()) + 1)
    # Counters are drawn alike: a home's share of the increments is its share of the counters,
    # spread evenly over its stripes. Sustained, a range whose share exceeds INDEX_RANGE_WRITES
    # falls behind without bound, whatever a short run shows.
    share = np.bincount(home, minlength=partitions.HOMES) / counters
    expected = np.bincount(table.ravel(), weights=np.repeat(share / table.shape[1],
                                                            table.shape[1]))
    return Writes(issued=at, landed=landed_us, counter=counter, shard=shard, stripe=stripe,
                  run=run, range_peak_per_s=float(sizes.max()) / load.seconds,
                  range_load_max_per_s=float(expected.max()) * load.increments_per_s)


class Documents:
    """The shard documents as the writes leave them: at an instant, a shard's value is its
    writes landed by then (each an increment of 1), its stripe and `updated_at` those of the
    last of them."""

    def __init__(self, writes: Writes, shards: int) -> None:
        self.writes = writes
        self.shards = shards
        if (int(writes.counter.max()) + 1) * shards >= 1 << (63 - TIME_BITS):
            raise ValueError(f"{shards} shards of {int(writes.counter.max()) + 1} counters: "
                             f"past what {TIME_BITS} bits of time leave an int64")
        key = writes.counter * shards + writes.shard
        combined = (key << TIME_BITS) | writes.landed
        by_shard = np.argsort(combined, kind="stable")
        self.shard_time = combined[by_shard]
        same = key[by_shard][1:] == key[by_shard][:-1]
        # Each write's shard's next write's landing (never: beyond any instant), and the
        # shard's count once the write landed (its place among the shard's writes).
        following = np.where(same, writes.landed[by_shard][1:], np.iinfo(np.int64).max)
        self.next_landed = np.empty(len(key), dtype=np.int64)
        self.next_landed[by_shard] = np.r_[following, np.iinfo(np.int64).max]
        first = np.flatnonzero(np.r_[True, ~same])
        runs = np.diff(np.r_[first, len(key)])
        self.count = np.empty(len(key), dtype=np.int64)
        self.count[by_shard] = np.arange(len(key)) - np.repeat(first, runs) + 1
        self.stripe_time = (writes.stripe << TIME_BITS) | writes.landed  # sorted: see `write`

    def query(self, stripes: Sequence[int], after_us: int, until_us: int, as_of_us: int) -> Ints:
        """The writes that made each shard document what it is at `as_of_us`, for the documents
        `stripe in stripes and after < updated_at <= until` returns read at `as_of_us` (one
        index range scan per stripe), in `updated_at` order."""
        values = np.array(stripes, dtype=np.int64) << TIME_BITS
        lo = np.searchsorted(self.stripe_time, values | after_us, side="right")
        hi = np.searchsorted(self.stripe_time, values | min(until_us, as_of_us), side="right")
        if not len(lo):
            return np.zeros(0, dtype=np.int64)
        found = np.concatenate([np.arange(a, b, dtype=np.int64)
                                for a, b in zip(lo, hi, strict=True)])
        # A document's index entry is that of its last write: an earlier one is gone from it.
        current = found[self.next_landed[found] > as_of_us]
        result: Ints = current[np.argsort(self.writes.landed[current], kind="stable")]
        return result

    def whole(self, counter: int, as_of_us: int) -> dict[int, int]:
        """Every shard of a counter at `as_of_us`: its count (absent: never written)."""
        keys = np.arange(self.shards, dtype=np.int64) + counter * self.shards
        first = np.searchsorted(self.shard_time, keys << TIME_BITS, side="left")
        upto = np.searchsorted(self.shard_time, (keys << TIME_BITS) | as_of_us, side="right")
        return {shard: int(n) for shard, n in enumerate(upto - first) if n}


# -- the store the real tick runs on --


class Ref:
    """A document's or a collection's reference, as far as the tick asks: its id and parent."""

    __slots__ = ("id", "parent")

    def __init__(self, id_: str, parent: Ref | None) -> None:
        self.id, self.parent = id_, parent


class Snap:
    """A shard document's snapshot, as far as the tick asks."""

    __slots__ = ("_data", "id", "reference", "update_time")

    def __init__(self, reference: Ref, data: dict[str, Any], update_time: dt.datetime) -> None:
        self.id, self.reference, self._data, self.update_time = \
            reference.id, reference, data, update_time

    def get(self, name: str) -> Any:
        return self._data.get(name)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)


@dataclass
class Published:
    """The counter documents and memories as the holders last wrote them, the writers to each
    counter (partition indexes), and every publish of a count: (counter, count, end of its
    tick, its tick's instant in microseconds)."""

    document: dict[int, dict[str, Any]] = field(default_factory=dict)
    memory: dict[int, dict[str, Any]] = field(default_factory=dict)
    by: dict[int, set[int]] = field(default_factory=dict)
    log: list[tuple[int, int, float, int]] = field(default_factory=list)


class SimLease:
    """The lease's record as its holder notes it at each tick's start (`Store.begin`)."""

    def __init__(self, record: Record) -> None:
        self.record = record

    def note(self, **fields: Any) -> None:
        self.record = dataclasses.replace(self.record, **fields)


class NoTrends:
    """The trends step, left out."""

    def __init__(self, store: Any, *, part: Any) -> None:
        pass

    def tick(self, changes: Any, as_of: dt.datetime, *, republish: bool) -> TrendStats:
        return TrendStats(changed_buckets=0, expired_buckets=0, changed_totals=0,
                          rebuilt_lists=0, published=0, reads=0, writes=0, deletes=0)

    def forget(self) -> None:
        pass


class SimStore:
    """`counting.rollup.store.Store` for `tick.Rollup`, on the model's documents: each call
    answers at its read time and counts its documents and round trips (`take_work`)."""

    def __init__(self, docs: Documents, home: Ints, part: PartLike, published: Published,
                 lease: SimLease) -> None:
        self.docs, self.home, self.part, self.published, self.lease = \
            docs, home, part, published, lease
        self.names = NAMES
        self.usage = Usage()
        self.as_of_us = 0
        self.documents = self.round_trips = 0
        self.pending: list[tuple[int, int]] = []  # (counter, count) published this tick
        self._counters = Ref(NAMES.counters, None)
        self._refs: dict[int, Ref] = {}
        self.lease_written_us = 0

    # -- accounting --

    def take_usage(self) -> Usage:
        usage, self.usage = self.usage, Usage()
        return usage

    def take_longest(self) -> float:
        return 0.0

    def take_work(self) -> tuple[int, int]:
        """(documents, round trips) since the last call."""
        work = self.documents, self.round_trips
        self.documents = self.round_trips = 0
        return work

    def _read(self, documents: int, billed: int, round_trips: int) -> None:
        self.documents += documents
        self.usage.reads += billed
        self.round_trips += round_trips

    def _paged(self, documents: int, pages: int, page: int, round_trips: int) -> None:
        """`documents` read in `pages` of `page`: a page that returns nothing bills a read."""
        self._read(documents, documents + pages - math.ceil(documents / page), round_trips)

    def close(self) -> None:
        pass

    # -- the tick's calls --

    def begin(self, progress: Progress) -> dt.datetime:
        self._read(0, 1, 1)
        self.lease.note(progress=progress)
        # `Store._keep`: a tick that has not written the lease for `renew_s` (one catching up,
        # which commits nothing) renews it before its reads.
        if self.as_of_us - self.lease_written_us >= config.ROLLUP.renew_s * US:
            self._commit(0)
        return instant(self.as_of_us)

    def _commit(self, writes: int) -> None:
        """A fenced commit of `writes` (and the lease's write)."""
        self.usage.writes += writes + 1
        self.round_trips += 1
        self.lease_written_us = self.as_of_us

    def _shard(self, at: int) -> Snap:
        writes, docs = self.docs.writes, self.docs
        counter = int(writes.counter[at])
        shards = Ref(NAMES.shards, self._counter_ref(counter))
        landed = instant(int(writes.landed[at]))
        count = int(docs.count[at])
        return Snap(Ref(str(int(writes.shard[at])), shards),
                    {"count": count, "writes": count, "stripe": int(writes.stripe[at]),
                     "updated_at": landed}, landed)

    def _counter_ref(self, counter: int) -> Ref:
        ref = self._refs.get(counter)
        if ref is None:
            ref = self._refs[counter] = Ref(counter_id(counter), self._counters)
        return ref

    def _pages(self, stripes: list[int], since: dt.datetime, until: dt.datetime | None,
               page: int, target: Callable[[dt.datetime], dt.datetime] | None
               ) -> tuple[list[int], dt.datetime | None]:
        """`Store.changed_shards`' and `catching_up`'s queries (one per chunk of stripes, run
        READ_THREADS at once, each in pages one after the other): the writes found, and where
        a catch-up's read stopped."""
        found: list[int] = []
        reached: list[dt.datetime] = []
        pages = []
        after = micros(since)
        upto = self.as_of_us if until is None else micros(until)
        for chunk in partitions.chunks(stripes):
            hits = self.docs.query(chunk, after, upto, self.as_of_us)
            read = len(hits)
            count = read // page + 1  # to the end: the last page is short (or empty)
            if target is not None and hits.size:
                limit = micros(target(instant(int(self.docs.writes.landed[hits[0]]))))
                for end in range(page, len(hits) + 1, page):  # each full page
                    last = int(self.docs.writes.landed[hits[end - 1]])
                    if last > limit:
                        read, count = end, end // page
                        reached.append(instant(last))
                        break
            found += hits[:read].tolist()
            pages.append(count)
            self._paged(read, count, page, 0)
        self.round_trips += max(pages, default=0) * math.ceil(len(pages) / READ_THREADS)
        return found, min(reached, default=None)

    def changed_shards(self, stripes: list[int], since: dt.datetime, as_of: dt.datetime,
                       until: dt.datetime | None = None) -> list[Snap]:
        found, _ = self._pages(stripes, since, until, store_module.CHANGE_PAGE, None)
        return [self._shard(at) for at in found]

    def catching_up(self, stripes: list[int], since: dt.datetime, as_of: dt.datetime,
                    page: int, target: Callable[[dt.datetime], dt.datetime]
                    ) -> tuple[list[Snap], dt.datetime | None]:
        found, reached = self._pages(stripes, since, None, page, target)
        return [self._shard(at) for at in found], reached

    def above_min(self, homes: list[int], as_of: dt.datetime) -> list[str]:
        """The counters of `homes` whose document says `above_min` (every home's in one query,
        else one per 30 homes, one after the other), WATCH_PAGE to a page."""
        every = len(homes) == partitions.HOMES
        found: list[str] = []
        for chunk in [homes] if every else partitions.chunks(homes):
            wanted = np.flatnonzero(np.isin(self.home, chunk)).tolist()
            mine = [counter_id(n) for n in wanted if self.published.document[n].get("above_min")]
            pages = len(mine) // store_module.WATCH_PAGE + 1
            self._paged(len(mine), pages, store_module.WATCH_PAGE, pages)
            found += mine
        return found

    def counters(self, ids: list[str], as_of: dt.datetime
                 ) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
        chunks = math.ceil(len(ids) / store_module.DOCUMENTS_PER_READ)
        self._read(2 * len(ids), 2 * len(ids), 2 * math.ceil(chunks / READ_THREADS))
        found: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = []
        for name in ids:
            n = number(name)
            found.append((name, dict(self.published.document[n]),
                          {key: dict(value) if isinstance(value, dict) else value
                           for key, value in self.published.memory[n].items()}))
        return found

    def each_counters_shards(self, counters: list[str], as_of: dt.datetime) -> list[list[Snap]]:
        found = []
        for name in counters:
            n = number(name)
            shards = Ref(NAMES.shards, self._counter_ref(n))
            values = self.docs.whole(n, self.as_of_us)
            self._read(len(values), max(1, len(values)), 0)
            found.append([Snap(Ref(str(s), shards), {"count": c, "writes": c}, as_of)
                          for s, c in values.items()])
        self.round_trips += math.ceil(len(counters) / READ_THREADS)
        return found

    def publish(self, items: list[tuple[str, Publish]]) -> None:
        writes = 0
        for name, publish in items:
            n = number(name)
            if publish.public:
                settle(self.published.document[n], publish.public, self.as_of_us)
                writes += 1
                if "count" in publish.public:
                    self.pending.append((n, int(publish.public["count"])))
                    self.published.by.setdefault(n, set()).add(self.part.index)
            if publish.memory:
                memory = self.published.memory[n]
                for key, value in publish.memory.items():
                    if isinstance(value, dict) and isinstance(memory.get(key), dict):
                        memory[key].update(value)
                    else:
                        memory[key] = value
                writes += 1
        self._commit(writes)

    def bounds(self, counter: str) -> dict[str, Any]:
        self._read(1, 1, 1)
        return dict(self.published.document[number(counter)])

    def update_counter(self, counter: str, fields: dict[str, Any]) -> None:
        settle(self.published.document[number(counter)], fields, self.as_of_us)
        self._commit(1)

    def create_shards(self, counter: str, shards: Any) -> None:
        numbers = list(shards)
        per_commit = config.ROLLUP_COMMIT_WRITES - 1
        for start in range(0, len(numbers), per_commit):
            self._commit(len(numbers[start:start + per_commit]))

    def forget_counts(self, counter: str) -> None:
        self.published.memory[number(counter)].pop(config.SHARD_COUNTS_FIELD, None)
        self._commit(1)


def number(name: str) -> int:
    return int(name.removeprefix("counter-"))


def settle(document: dict[str, Any], fields: dict[str, Any], as_of_us: int) -> None:
    """Update `document` as a commit of `fields` leaves it: a server timestamp is the tick's
    instant, a deleted field goes; any other transform is not modelled."""
    for name, value in fields.items():
        if value is firestore.SERVER_TIMESTAMP:
            document[name] = instant(as_of_us)
        elif value is firestore.DELETE_FIELD:
            document.pop(name, None)
        elif type(value).__module__.startswith("google.cloud.firestore"):
            raise NotImplementedError(f"{name}: {value!r}")
        else:
            document[name] = value


class SimLedger(Ledger):
    """The rollup's ledger, noting the counters each tick visited (`Ledger.visited`)."""

    last_visited = 0

    def end_tick(self, changes: Any) -> None:
        self.last_visited = self.visited
        super().end_tick(changes)


# -- the partitions --


@dataclass(frozen=True, kw_only=True)
class Costs:
    """A tick's virtual time: `fixed_s` + each round trip, document returned and counter
    visited."""

    fixed_s: float
    round_trip_s: float
    per_document_s: float
    per_visited_s: float
    source: str

    @classmethod
    def deployed(cls, tick_mb: int = cost_model.ROLLUP_MB,
                 shape: capacity_model.Shape | None = None) -> Costs:
        """A holder's CPU as measured at the realistic shape (the reference's median runs),
        on a tick function of `tick_mb` (its share of a vCPU), and ROUND_TRIP_S a round trip."""
        shape = shape or capacity_model.reference_shape()
        vcpu = capacity_model.Design(max_partitions=capacity_model.HOMES, tick_mb=tick_mb).vcpu
        return cls(fixed_s=shape.empty_cpu_s / vcpu, round_trip_s=ROUND_TRIP_S,
                   per_document_s=shape.cpu_per_shard_s / vcpu,
                   per_visited_s=shape.cpu_per_counter_s / vcpu,
                   source=f"capacity_model.reference_shape() at {tick_mb} MiB ({vcpu:.3g} vCPU)")

    def tick_s(self, *, round_trips: int, documents: int, visited: int) -> float:
        return self.fixed_s + round_trips * self.round_trip_s \
            + documents * self.per_document_s + visited * self.per_visited_s


@dataclass(frozen=True)
class Tick:
    at_us: int
    end_s: float
    changed: int  # counters whose shards changed (TickStats.changed_counters)
    visited: int
    documents: int
    round_trips: int
    sweep_reads: int
    swept: bool  # it completed a sweep
    catching_up: bool
    rescaled: int  # counters whose shards it grew or shrank (TickStats.rescaled)


class Holder:
    """One partition: its queue, and its holders (`tick.Rollup`, one after another) on a
    SimStore."""

    def __init__(self, part: PartLike, docs: Documents, home: Ints, costs: Costs,
                 published: Published, *, ledger: type[SimLedger] = SimLedger,
                 store: type[SimStore] = SimStore) -> None:
        start = instant(HISTORY_S * US)
        self.part, self.costs, self.ledger_type = part, costs, ledger
        self.lease = SimLease(Record(progress=Progress(watermark=start, swept=start,
                                                       checkpoint=start)))
        self.store = store(docs, home, part, published, self.lease)
        self.published = published
        self.rollup = self._successor()
        self.ticks: list[Tick] = []
        self.dispatches: list[float] = []
        self.handed_over_at: float | None = None

    def _successor(self) -> Rollup:
        """A holder that takes the lease as its record stands (a new ledger)."""
        rollup = Rollup(None, self.lease, AutoscaleParams(), trends=NoTrends,  # type: ignore[arg-type]
                        part=self.part, writing=WRITING)  # type: ignore[arg-type]
        rollup.store.close()
        rollup.store = self.store  # type: ignore[assignment]
        rollup.ledger = self.ledger_type(AutoscaleParams())
        return rollup

    def run(self, slots: int, handover_s: float | None) -> None:
        """Dispatch slots 0..slots-1 of the run in order: one at a time, QUEUE_DISPATCHES a
        second; the holder is replaced at the first dispatch at or after `handover_s`."""
        free = 0.0  # the holder's previous tick ended (seconds from the run's start)
        last = -math.inf  # the queue's previous dispatch
        ticked_us = 0
        for slot in range(slots):
            at = max(slot + 1 + DISPATCH_S, free, last + 1 / QUEUE_DISPATCHES)
            last = at
            self.dispatches.append(at)
            if ticked_us >= (HISTORY_S + slot + 1) * US:
                continue  # ticked past this slot: returns at once
            if handover_s is not None and self.handed_over_at is None and at >= handover_s:
                self.rollup.close()
                self.rollup, self.handed_over_at = self._successor(), at
            store = self.store
            store.as_of_us = ticked_us = math.ceil((HISTORY_S + at) * US)
            catching = self.rollup.catching_up or self.rollup.ledger.fresh
            stats = self.rollup.tick()
            documents, round_trips = store.take_work()
            visited = getattr(self.rollup.ledger, "last_visited", 0)
            free = at + self.costs.tick_s(round_trips=round_trips, documents=documents,
                                          visited=visited)
            self.published.log += [(n, count, free, ticked_us) for n, count in store.pending]
            store.pending.clear()
            self.ticks.append(Tick(at_us=ticked_us, end_s=free, changed=stats.changed_counters,
                                   visited=visited, documents=documents,
                                   round_trips=round_trips, sweep_reads=stats.sweep_reads,
                                   swept=stats.swept is not None, catching_up=catching,
                                   rescaled=stats.rescaled))


    def busy(self, load: Load) -> float:
        """The share of the judged time (`Load.judged`) this partition's holder spent
        ticking."""
        spans = [(load.warm_s, load.seconds)] if load.handover_s is None else \
            [(load.warm_s, load.handover_s), (load.handover_s + RECOVER_S, load.seconds)]
        spent = total = 0.0
        for begin, end in spans:
            if end <= begin:
                continue
            total += end - begin
            for tick in self.ticks:
                at = tick.at_us / US - HISTORY_S
                spent += max(0.0, min(tick.end_s, end) - max(at, begin))
        return spent / total if total else math.inf


@dataclass(kw_only=True)
class Outcome:
    partitions: int
    load: Load
    keeps_up: bool
    busy: float  # the busiest holder's share of the judged time spent ticking
    lag_p99_s: float  # of the judged increments: issued to the end of the tick publishing it
    lag_max_s: float
    write_delay_max_s: float  # the longest a write waited for its index range
    range_peak_per_s: float
    range_load_max_per_s: float
    lost: int  # counters whose last count is below the increments they received
    doubled: int  # above them, or published by more than one partition
    tick_median_s: float
    tick_max_s: float
    handover_tick_max_s: float | None  # the successor's longest tick while it caught up
    caught_up_s: float | None  # from the handover to the end of the successors' catch-up
    handover_documents: int  # what the successors' catching-up ticks returned, in all
    sweeps: int  # sweeps completed, of every partition
    sweep_reads_per_tick: float
    documents_per_tick: float
    visited_per_tick: float
    round_trips_per_tick: float
    held_max: int  # the most counters one holder held at the end
    # Autoscaling's grows and shrinks per changed counter of the load (each a read of its bounds
    # and two commits, one after the other; writers do not follow them here).
    rescaled_per_changed: float
    task_creations_per_s: float  # the writers' instances' tick tasks, created or refused
    dispatches_per_s_max: float
    ticks: int
    wall_s: float = 0.0

    def figures(self) -> dict[str, Any]:
        return asdict(self)


def simulate(count: int, load: Load, costs: Costs, *, seed: int = 0,
             part_of: Callable[[int], list[PartLike]] = whole,
             ledger: type[SimLedger] = SimLedger,
             store: type[SimStore] = SimStore, holder: type[Holder] = Holder) -> Outcome:
    """One run of P = `count` partitions under `load`; `part_of`, `ledger`, `store` and
    `holder` (the tests break them) give the partitions, their ledgers, the store they read and
    how a successor starts."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    writes = write(load, count, rng)
    docs = Documents(writes, load.shards)
    home = homes(load.counters)
    published = Published()
    start = instant(HISTORY_S * US)
    for n in range(load.counters):  # the history's writes, published: one on every shard
        published.document[n] = {"count": load.shards, "num_shards": load.shards,
                                 "above_min": True, "rate": 0.0, "rate_at": start,
                                 partitions.SHRINK_HOME: int(home[n])}
        published.memory[n] = {config.SHARD_COUNTS_FIELD:
                               {str(s): 1 for s in range(load.shards)}}
    held = [holder(part, docs, home, costs, published, ledger=ledger, store=store)
            for part in part_of(count)]
    for one in held:
        one.run(load.seconds + DRAIN_S, load.handover_s)
    lag, landed_s = lags(writes, published, load.shards)
    judged = load.judged(landed_s)
    lost, doubled = check(writes, published, load.shards)
    delay = (writes.landed[writes.run] / US - writes.issued[writes.run])
    ticks = [tick for one in held for tick in one.ticks]
    steady = [t.end_s - t.at_us / US + HISTORY_S for t in ticks if not t.catching_up
              and load.warm_s <= t.at_us / US - HISTORY_S < load.seconds]
    handover = [t.end_s - t.at_us / US + HISTORY_S for t in ticks if t.catching_up
                and load.handover_s is not None and t.at_us / US - HISTORY_S >= load.handover_s]
    lag_p99 = float(np.percentile(lag[judged], 99)) if judged.any() else math.inf
    busy = max(one.busy(load) for one in held)
    per_second = [np.bincount(np.floor(h.dispatches).astype(np.int64)).max() for h in held]
    outcome = Outcome(
        partitions=count, load=load,
        keeps_up=busy <= capacity_model.TICK_BUDGET_S / capacity_model.TICK_PERIOD_S
        and lost == 0 and doubled == 0 and float(delay.max()) <= 1.0
        and writes.range_load_max_per_s <= INDEX_RANGE_WRITES, busy=busy,
        lag_p99_s=lag_p99, lag_max_s=float(lag[judged].max()) if judged.any() else math.inf,
        write_delay_max_s=float(delay.max()), range_peak_per_s=writes.range_peak_per_s,
        range_load_max_per_s=writes.range_load_max_per_s, lost=lost, doubled=doubled,
        tick_median_s=float(np.median(steady)) if steady else math.inf,
        tick_max_s=max(steady, default=math.inf),
        handover_tick_max_s=max(handover, default=None),
        handover_documents=sum(t.documents for t in ticks if t.catching_up
                               and load.handover_s is not None
                               and t.at_us / US - HISTORY_S >= load.handover_s),
        caught_up_s=max((t.end_s for t in ticks if t.catching_up and load.handover_s is not None
                         and t.at_us / US - HISTORY_S >= load.handover_s),
                        default=load.handover_s) - load.handover_s
        if load.handover_s is not None else None,
        rescaled_per_changed=sum(t.rescaled for t in ticks)
        / (load.changed_per_s * load.seconds),
        sweeps=sum(t.swept for t in ticks),
        sweep_reads_per_tick=mean([t.sweep_reads for t in ticks]),
        documents_per_tick=mean([t.documents for t in ticks]),
        visited_per_tick=mean([t.visited for t in ticks]),
        round_trips_per_tick=mean([t.round_trips for t in ticks]),
        held_max=max(len(one.rollup.ledger.held) for one in held),
        task_creations_per_s=task_creations(writes, home, count, load, rng),
        dispatches_per_s_max=float(max(per_second)), ticks=len(ticks))
    outcome.wall_s = time.perf_counter() - started
    return outcome


def mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else 0.0


def lags(writes: Writes, published: Published, shards: int) -> tuple[Floats, Floats]:
    """For each increment of the run: issued to the end of the first tick that published a
    count including it (inf: none did), and when it landed (seconds from the run's start)."""
    run = np.flatnonzero(writes.run)
    counter, landed = writes.counter[run], writes.landed[run]
    order = np.lexsort((landed, counter))
    rank = np.empty(len(run), dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, counter[order][1:] != counter[order][:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    rank[order] = np.arange(len(order)) - np.repeat(starts, sizes)
    needed = shards + rank + 1  # the history's one a shard, then the run's in landing order
    lag = np.full(len(run), np.inf)
    if published.log:
        log = np.array([entry[:3] for entry in published.log])
        by, count, at = log[:, 0].astype(np.int64), log[:, 1].astype(np.int64), log[:, 2]
        sort = np.lexsort((at, by))
        by, count, at = by[sort], count[sort], at[sort]
        big = np.int64(1) << 32
        reached = np.maximum.accumulate(by * big + count)  # each counter's count so far
        found = np.searchsorted(reached, counter * big + needed, side="left")
        ok = found < len(reached)
        ok[ok] &= by[found[ok]] == counter[ok]
        lag[ok] = at[found[ok]] - (writes.issued[run][ok] - HISTORY_S)
    return lag, landed / US - HISTORY_S


def check(writes: Writes, published: Published, shards: int) -> tuple[int, int]:
    """(lost, doubled): counters whose last published count is below the increments they
    received, or one of whose counts fell below an earlier one; and those one of whose counts
    exceeded the increments landed by its tick's instant, or published by more than one
    partition."""
    received = np.bincount(writes.counter[writes.run], minlength=len(published.document))
    run = np.flatnonzero(writes.run)
    landed = np.sort((writes.counter[run] << TIME_BITS) | writes.landed[run])
    last: dict[int, int] = {}
    lost: set[int] = set()
    doubled = {n for n, by in published.by.items() if len(by) > 1}
    for n, count, _, at_us in sorted(published.log, key=lambda entry: entry[2]):
        by_then = int(np.searchsorted(landed, (n << TIME_BITS) | at_us, side="right")
                      - np.searchsorted(landed, n << TIME_BITS, side="left"))
        if count > shards + by_then:
            doubled.add(n)
        if count < last.get(n, shards):
            lost.add(n)
        last[n] = count
    for n, increments in enumerate(received.tolist()):
        if last.get(n, shards) < shards + increments:
            lost.add(n)
        elif last.get(n, shards) > shards + increments:
            doubled.add(n)
    return len(lost), len(doubled)


def task_creations(writes: Writes, home: Ints, count: int, load: Load,
                   rng: np.random.Generator) -> float:
    """The waker's tick tasks a second, created or refused as existing (billed alike): each
    writer instance (`capacity_model.writer_instances`, each write at one at random) asks once a
    slot for each partition it wrote to."""
    instances = capacity_model.writer_instances(capacity_model.table_load(load.changed_per_s))
    run = np.flatnonzero(writes.run)
    second = (writes.landed[run] // US - HISTORY_S).astype(np.int64)
    instance = rng.integers(0, instances, len(run))
    partition = home[writes.counter[run]] % count
    asks = np.unique((second * instances + instance) * count + partition)
    return len(asks) / load.seconds


# -- capacity by P --

TOLERANCE = 0.02  # the search stops when its bracket is this narrow
LAG_LOAD = 0.8  # the run whose figures are kept: this share of the partitions' capacity
# The top load: 1,000,000 increments a second over a million counters in all. At P = 128 the
# index's 3,712 ranges take 269 writes/s each on average: how far the busiest is from 500 depends
# on how evenly the hash spreads the counters in all over the homes (`index_headroom`).
TOP_INCREMENTS_PER_S = 1_000_000
HEADROOM_COUNTERS = (200_000, 1_000_000)
LIFTED = frozenset({"callables", "task_api", "index_ranges"})  # the model's tick limit alone


def model_capacity(count: int, tick_mb: int) -> float:
    """`capacity_model`'s changed counters a second for P = `count` ticks at the table's shape
    (`largest_carried`), its other limits lifted, for a run as long as this one: autoscaling's
    grows, not the shrinks and folds that follow them after the cool-down."""
    design = capacity_model.Design(max_partitions=count, tick_mb=tick_mb)
    shape = dataclasses.replace(capacity_model.reference_shape(),
                                rescale_round_trips=capacity_model.GROW_ROUND_TRIPS)
    carried, _ = capacity_model.largest_carried(shape, design, ignore=LIFTED)
    return carried


def capacity(count: int, costs: Costs, *, guess: float, seed: int = 0,
             load: Callable[[int], Load] = lambda changed: Load(changed_per_s=changed),
             **broken: Any) -> tuple[int, list[dict[str, Any]]]:
    """The largest changed counters a second P partitions keep up with (`Outcome.keeps_up`):
    from `guess`, doubled or halved until one fails and one keeps up, then bisected to
    TOLERANCE. Returns it and the probes."""
    probes: list[dict[str, Any]] = []

    def keeps_up(changed: int) -> bool:
        outcome = simulate(count, load(changed), costs, seed=seed, **broken)
        probes.append({"changed_per_s": changed, "keeps_up": outcome.keeps_up,
                       "busy": outcome.busy, "lag_p99_s": outcome.lag_p99_s,
                       "wall_s": outcome.wall_s})
        return outcome.keeps_up

    start = max(1, round(guess))
    if keeps_up(start):
        low, high = start, None
        while high is None:
            step = low * 2
            if keeps_up(step):
                low = step
            else:
                high = step
    else:
        low, high = 0, start
        while low == 0:
            step = high // 2
            if step == 0:
                return 0, probes
            if keeps_up(step):
                low = step
            else:
                high = step
    while high - low > max(1, TOLERANCE * low):
        middle = (low + high) // 2
        if keeps_up(middle):
            low = middle
        else:
            high = middle
    return low, probes


def one_p(task: tuple[int, Costs, int, int]) -> dict[str, Any]:
    """P's capacity, searched from the model's, then the run at LAG_LOAD of it."""
    count, costs, seed, tick_mb = task
    found, probes = capacity(count, costs, guess=model_capacity(count, tick_mb), seed=seed)
    outcome = simulate(count, Load(changed_per_s=max(1, round(LAG_LOAD * found))), costs,
                       seed=seed + 1)
    return {"partitions": count, "capacity": found, "probes": probes,
            "lag_run": outcome.figures()}


def index_headroom() -> dict[str, dict[str, float]]:
    """At the top load, the busiest range's expected writes/s by counters in all and P."""
    rows: dict[str, dict[str, float]] = {}
    for counters in HEADROOM_COUNTERS:
        home = homes(counters)
        share = np.bincount(home, minlength=partitions.HOMES) / counters
        for count in (64, 128):
            table = stripe_table(count)
            expected = np.bincount(table.ravel(), weights=np.repeat(share / table.shape[1],
                                                                    table.shape[1]))
            rows.setdefault(str(counters), {})[str(count)] = \
                float(expected.max()) * TOP_INCREMENTS_PER_S
    return rows


def summary(costs: Costs, per_p: list[dict[str, Any]], seed: int, tick_mb: int,
            wall_s: float) -> dict[str, Any]:
    by_p = {str(row["partitions"]): row for row in sorted(per_p, key=lambda r: r["partitions"])}
    one = by_p["1"]["capacity"] if "1" in by_p else None
    runs = {p: row["lag_run"] for p, row in by_p.items()}
    # The model as the reference now stands: with this run's grows (`keep_autoscaling` first).
    model = {p: model_capacity(int(p), tick_mb) for p in by_p}
    return {
        "counters_per_s_by_p": {p: row["capacity"] for p, row in by_p.items()},
        "model_counters_per_s_by_p": {p: round(found) for p, found in model.items()},
        "agreement_by_p": {p: row["capacity"] / model[p] if model[p] else None
                           for p, row in by_p.items()},
        "linearity": {p: row["capacity"] / (int(p) * one) if one else None
                      for p, row in by_p.items()},
        "increments_per_s_by_p": {p: capacity_model.INCREMENTS_PER_CHANGED * row["capacity"]
                                  for p, row in by_p.items()},
        "lag_p99_s_by_p": {p: run["lag_p99_s"] for p, run in runs.items()},
        "lag_load_by_p": {p: run["load"]["changed_per_s"] for p, run in runs.items()},
        "lost": sum(run["lost"] for run in runs.values()),
        "doubled": sum(run["doubled"] for run in runs.values()),
        "handover_by_p": {p: {"tick_max_s": run["handover_tick_max_s"],
                              "steady_tick_median_s": run["tick_median_s"],
                              "caught_up_s": run["caught_up_s"]} for p, run in runs.items()},
        "rescaled_per_changed_by_p": {p: run["rescaled_per_changed"] for p, run in runs.items()},
        "sweeps_by_p": {p: run["sweeps"] for p, run in runs.items()},
        "task_creations_per_s_by_p": {p: run["task_creations_per_s"] for p, run in runs.items()},
        "model": capacity_model.production(capacity_model.reference_shape()),
        "index_headroom": index_headroom(),
        "inputs": {
            "costs": asdict(costs), "tick_mb": tick_mb, "homes": partitions.HOMES,
            "choices": list(partitions.CHOICES), "history_s": HISTORY_S,
            "run_s": RUN_S, "handover_s": HANDOVER_S, "warm_s": WARM_S, "recover_s": RECOVER_S,
            "drain_s": DRAIN_S,
            "index_range_writes_per_s": INDEX_RANGE_WRITES,
            "queue_dispatches_per_s": QUEUE_DISPATCHES, "dispatch_s": DISPATCH_S,
            "shape": {"increments_per_changed": capacity_model.INCREMENTS_PER_CHANGED,
                      "counters_per_changed": capacity_model.COUNTERS_PER_CHANGED,
                      "shards": capacity_model.TABLE_SHARDS},
            "tolerance": TOLERANCE, "lag_load": LAG_LOAD, "seed": seed,
            "keeps_up": f"the busiest holder ticks at most "
                        f"{capacity_model.TICK_BUDGET_S / capacity_model.TICK_PERIOD_S:.0%} of the "
                        f"time after {WARM_S:.0f} s but the {RECOVER_S:.0f} s from the handover, "
                        f"every increment published, no write waiting more than 1 s for its "
                        f"index range, no range's expected rate over "
                        f"{INDEX_RANGE_WRITES:.0f} writes/s",
        },
        "probes": {p: row["probes"] for p, row in by_p.items()},
        "lag_runs": runs,
        "wall_s": wall_s,
    }


def keep_autoscaling(per_p: list[dict[str, Any]]) -> None:
    """Keep in bench/results/reference.json (`capacity_model.REFERENCE`) autoscaling's grows a
    changed counter, the median of the lag runs': the capacity model charges their round trips.
    A run that lost or doubled is not kept."""
    runs = [row["lag_run"] for row in per_p]
    if any(run["lost"] or run["doubled"] for run in runs):
        return
    path = capacity_model.REFERENCE
    reference = json.loads(path.read_text())
    reference["autoscaling"] = {
        "rescaled_per_changed": round(statistics.median(
            run["rescaled_per_changed"] for run in runs), 5),
        "from": "make sim-scale: the median of its lag runs' grows and shrinks a changed "
                "counter (the rollup's own ledger at the Capacity table's shape)",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="minutes")}
    path.write_text(json.dumps(reference, indent=2) + "\n")


def plot(figures: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ps = [int(p) for p in figures["counters_per_s_by_p"]]
    found = list(figures["counters_per_s_by_p"].values())
    model = list(figures["model_counters_per_s_by_p"].values())
    fig, (cap, lin, lag) = plt.subplots(1, 3, figsize=(16, 4.5))
    cap.loglog(ps, found, marker="o", base=2, label="simulated (the real tick)")
    cap.loglog(ps, model, linestyle="--", base=2, label="capacity_model")
    cap.set(title="Capacity: changed counters a second", xlabel="P", ylabel="counters/s")
    cap.legend()
    lin.bar([str(p) for p in ps], [v or 0 for v in figures["linearity"].values()],
            label="capacity(P) / (P x capacity(1))")
    lin.plot([str(p) for p in ps], [v or 0 for v in figures["agreement_by_p"].values()],
             color="black", marker="o", label="simulated / model")
    lin.set(title="Linearity and agreement", xlabel="P", ylim=(0, 1.5))
    lin.legend()
    lag.bar([str(p) for p in ps], list(figures["lag_p99_s_by_p"].values()))
    lag.set(title=f"Lag p99 at {LAG_LOAD:.0%} of capacity (lost {figures['lost']}, doubled "
                  f"{figures['doubled']})", xlabel="P", ylabel="seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, nargs="*", default=list(partitions.CHOICES))
    parser.add_argument("--tick-mb", type=int, choices=[512, 1024, 2048],
                        default=cost_model.ROLLUP_MB,
                        help="the tick function's size, whose share of a vCPU runs the holder "
                             "(other than the shipped one: bench/results/sim_scale_<mb>mb.json)")
    args = parser.parse_args()
    from concurrent.futures import ProcessPoolExecutor

    import run  # bench/run.py: where results are saved

    started = time.perf_counter()
    costs = Costs.deployed(args.tick_mb)
    big_first = sorted(args.partitions, reverse=True)
    with ProcessPoolExecutor(args.workers) as pool:
        per_p = list(pool.map(one_p, [(p, costs, args.seed, args.tick_mb) for p in big_first]))
    if args.tick_mb == cost_model.ROLLUP_MB and set(args.partitions) == set(partitions.CHOICES):
        keep_autoscaling(per_p)  # (a full run's, as shipped)
    figures = summary(costs, per_p, args.seed, args.tick_mb, time.perf_counter() - started)
    name = "sim_scale" if args.tick_mb == cost_model.ROLLUP_MB else f"sim_scale_{args.tick_mb}mb"
    run.save(name, figures)
    plot(figures, run.RESULTS / f"{name}.png")
    for p, found in figures["counters_per_s_by_p"].items():
        print(f"P = {p:>3}: {found:>7,} changed counters/s (model "
              f"{figures['model_counters_per_s_by_p'][p]:,}, agreement "
              f"{figures['agreement_by_p'][p]:.2f}, linearity {figures['linearity'][p] or 0:.3f}),"
              f" lag p99 {figures['lag_p99_s_by_p'][p]:.2f} s at "
              f"{figures['lag_load_by_p'][p]:,}/s, handover {figures['handover_by_p'][p]}")
    print(f"lost {figures['lost']}, doubled {figures['doubled']}; {figures['wall_s']:.0f} s; "
          f"bench/results/{name}.json and .png")


if __name__ == "__main__":
    main()
