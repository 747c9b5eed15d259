"""The rollup's partitions: P holders share the change stream, each with its own lease,
watermark and tick tasks, so the rollup's capacity grows with P (docs/architecture.md,
"Partitions").

Every counter has a home, a hash in 0..HOMES-1 (128); partition p of P owns the counters whose
home is p mod P. A shard write carries a stripe that names its home at the writer's resolution
R = max(16, P), spread over index ranges: `stripe = home mod R + R * r`, r random below the
spread (P up to 16, then WIDE_SPREAD). A partition's change query is `stripe in [its stripes]`
on the `(stripe, updated_at)` index: R / P residues times the spread, 16 values up to P = 16 and
30 past it (with a P = 1 writer's stripe), one query; the index has 16 P ranges up to P = 16 and
29 P past it, each taking about 500 writes/s for values that increase in time. Up to P = 16 the
stripes are those of the first design (16 homes, P spreads), so its data reads the same.

Trending tags live at the first 16 homes only (`tag_home`): their buckets' `spread` and their
totals' `home` keep the first design's values, and partitions 17 and beyond carry counters only.

P is configuration: `internal/rollup_partitions` (absent: 1), changed by the rollup's
`counting.rollup.repartition` (the operator CLI's `counters partitions N`), up to the tick
functions the deploy made (`ROLLUP_PARTITIONS_MAX` in functions/.env). A writer learns the new P
within CONFIG_CACHE_TTL_S; until then its stripes may be the old P's, so the new leases read the
old stripes too until `narrow_at`, and their sweeps for WIDE_SWEEP_S after it.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from google.cloud import firestore

from counting.foundation import config
from counting.foundation.config import Names
from counting.writepath.caching import TtlCache

log = logging.getLogger(__name__)

HOMES = 128
CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)  # powers of two up to HOMES: each gets HOMES / P homes
# The first design's homes: the stripes' resolution up to P = 16, and every trending tag's home.
BASE_HOMES = 16
# Past P = 16 a partition owns one residue, spread over this many index ranges: with the stripe
# of a writer that took P = 1 (`Part.ticks`), as many values as one `in` filter takes. The index
# then takes 29 x 500 writes/s per partition: 1,856,000 at P = 128, twice a million increments.
WIDE_SPREAD = 29
# The tick functions a deploy makes, one per partition index: P can be set up to this
# (functions/.env; each function costs nothing while P leaves it unused).
MAX_ENV = "ROLLUP_PARTITIONS_MAX"
DEFAULT_MAX = 16
# A counter above its minimum of shards carries its home in this field (`watched`).
SHRINK_HOME = "shrink_home"
PARTITIONS_DOC = "rollup_partitions"  # internal/rollup_partitions: {count, changed_at}
# Firestore's `in` takes at most 30 values: a wider set of stripes is read in several queries.
IN_VALUES = 30
# After a change, the new partitions' ticks also read the stripes a writer with the old P picks,
# for this long: writers learn P within CONFIG_CACHE_TTL_S, so their writes are found within a
# tick. Any later write with an old stripe (a writer paused between choosing its stripe and
# sending, a commit that lands late) is found by the next sweep, which reads every stripe of
# every P (`rollup.Rollup.stripes`): narrowing only ever costs such a write a sweep's lag.
NARROW_AFTER_S = 2 * config.CONFIG_CACHE_TTL_S
# A sweep reads the stripes of every P up to the widest one writers may still know for this long
# after `narrow_at`; then those of every P up to 16 (or P) only. A write that lands later than this
# with a wider P's stripe (beyond MAX_REQUEST_S, the longest a request's commit is modelled late)
# is read at its shard's next write, which carries a current stripe and the shard's whole value.
WIDE_SWEEP_S = 3600.0


def resolution(count: int) -> int:
    """R: the residue of the home a writer that knows P = count puts in its stripes."""
    return max(BASE_HOMES, count)


def spread_of(count: int) -> int:
    """The index ranges per residue a writer that knows P = count spreads its writes over: P up
    to 16 (the first design's), then WIDE_SPREAD."""
    return count if count <= BASE_HOMES else WIDE_SPREAD


def deployed_max(env: Mapping[str, str]) -> int:
    """The largest P the deployed tick functions serve (`env`: functions/.env's variables)."""
    raw = str(env.get(MAX_ENV, DEFAULT_MAX)).strip()
    if not raw.isdigit() or int(raw) not in CHOICES:
        raise ValueError(f"{MAX_ENV}={raw!r}: one of {', '.join(map(str, CHOICES))}")
    return int(raw)


def home_of(key: str) -> int:
    """A counter's home: the first 32 bits of its SHA-256, modulo HOMES."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % HOMES


def tag_home(tag: str) -> int:
    """A trending tag's home: its counter home's residue among the first 16 (`BASE_HOMES`)."""
    return home_of(tag) % BASE_HOMES


def tag_home_of_hex(digest: str) -> int:
    """A tag's home from the hex SHA-256 digest its bucket's id begins with (`trends.tag_key`)."""
    return int(digest[:8], 16) % BASE_HOMES


def home_of_shard(shard: firestore.DocumentReference, names: Names) -> int:
    """The home of what a shard document belongs to: a counter, or a tag's minute bucket."""
    parent = shard.parent.parent
    assert parent is not None
    if parent.parent.id == names.trend_minutes:
        return tag_home_of_hex(parent.id)
    return home_of(parent.id)


@dataclass(frozen=True, order=True)
class Part:
    """Partition `index` of `count`."""

    count: int
    index: int

    @property
    def lease_id(self) -> str:
        """Its lease document in `internal`: the one-partition rollup's keeps its old name."""
        if self.count == 1:
            return config.ROLLUP_STATE_DOC
        return f"{config.ROLLUP_STATE_DOC}-{self.count}-{self.index}"

    @property
    def function(self) -> str:
        """The task queue function that ticks it: one per partition index, each dispatching one
        task at a time to one instance, which keeps the partition's ledger between ticks."""
        return config.ROLLUP_TASK_FUNCTION + (str(self.index) if self.index else "")

    @property
    def trend_parts_id(self) -> str:
        """Its index of published trend parts in `internal` (`counting.features.trends`; P > 1
        only)."""
        return f"{config.TREND_PARTS_DOC}-{self.count}-{self.index}"

    def owns(self, home: int) -> bool:
        return home % self.count == self.index

    def homes(self) -> list[int]:
        """The homes of the counters it owns."""
        return [home for home in range(HOMES) if self.owns(home)]

    def tag_homes(self) -> list[int]:
        """The homes of its trending tags (none beyond the first 16 partitions)."""
        return [home for home in range(BASE_HOMES) if self.owns(home)]

    def stripes_of(self, writers: int) -> list[int]:
        """The stripes writers that know P = `writers` give what it owns: the residues of its
        homes at their resolution, in each of their spreads."""
        size = resolution(writers)
        step = min(self.count, size)
        residues = range(self.index % step, size, step)
        return [residue + size * r for r in range(spread_of(writers)) for residue in residues]

    def ticks(self) -> list[int]:
        """The stripes its ticks read once writers know its P: theirs, and those of a writer that
        could not read P and took 1 (`Known`; already among them up to P = 16)."""
        return sorted({*self.stripes_of(self.count), *self.stripes_of(1)})

    def heirs(self, count: int) -> list[Part]:
        """The partitions of P = count that own some of its homes (all of them from 1 of 1)."""
        step = min(self.count, count)
        return [part for part in parts(count) if part.index % step == self.index % step]

    def reads(self, widest: int) -> list[int]:
        """The stripes of what it owns from writers that know any P up to `widest`."""
        return sorted({stripe for writers in CHOICES if writers <= widest
                       for stripe in self.stripes_of(writers)})

    def __str__(self) -> str:
        return f"{self.index + 1} of {self.count}"


WHOLE = Part(1, 0)


def parts(count: int) -> list[Part]:
    return [Part(count, index) for index in range(count)]


def stripe(home: int, count: int, rng: random.Random) -> int:
    """The stripe of a shard write whose key lives at `home`, by a writer that knows P = count."""
    size = resolution(count)
    return home % size + size * rng.randrange(spread_of(count))


def watched(counter: str, above: bool) -> dict[str, object]:
    """The fields by which the rollup's watch finds a counter above its minimum of shards
    (`rollup.store.Store.above_min`): `above_min`, and `shrink_home`, its home while it is above
    (None otherwise), which the watch of the partition owning it queries."""
    return {"above_min": above, SHRINK_HOME: home_of(counter) if above else None}


def chunks(values: list[int]) -> list[list[int]]:
    """`values` in pieces that one `in` filter takes."""
    return [values[start:start + IN_VALUES] for start in range(0, len(values), IN_VALUES)]


def partitions_ref(db: firestore.Client, names: Names) -> firestore.DocumentReference:
    return db.collection(names.internal).document(PARTITIONS_DOC)


def lease_ref(db: firestore.Client, names: Names, part: Part) -> firestore.DocumentReference:
    return db.collection(names.internal).document(part.lease_id)


def trend_parts_ref(db: firestore.Client, names: Names, part: Part) -> firestore.DocumentReference:
    return db.collection(names.internal).document(part.trend_parts_id)


# -- what P is --


def read_count(db: firestore.Client, names: Names) -> int:
    """P as configured (one read)."""
    count = (partitions_ref(db, names).get().to_dict() or {}).get("count")
    return count if count in CHOICES else 1


class Known:
    """P as a process's writers know it (`counting.writepath.context.Writing`): read at most every
    CONFIG_CACHE_TTL_S per database and placement (`names`). A writer that
    cannot read it takes P = 1 until the next read: stripe = home mod 16, which every tick of
    every P reads (`Part.ticks`), and the task of partition 1 of 1, which, retired, wakes the
    current ones. A
    write never fails for this, nor goes on with a P it can no longer check."""

    def __init__(self, ttl_s: float = config.CONFIG_CACHE_TTL_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._cache: TtlCache[tuple[str, str, str], int] = TtlCache(ttl_s, monotonic)

    def count(self, db: firestore.Client, names: Names) -> int:
        key = (db.project, getattr(db, "_database", "(default)"), names.internal)
        known = self._cache.get(key)
        if known is not None:
            return known
        asked = self._monotonic()
        try:
            count = read_count(db, names)
        except Exception as error:
            log.warning("could not read the rollup's partitions (taking 1): %r", error)
            count = 1
        self._cache.put(key, count, at=asked)
        return count

    def forget(self) -> None:
        self._cache = TtlCache(self._ttl_s, self._monotonic)
