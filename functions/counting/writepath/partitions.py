"""The rollup's partitions: P holders share the change stream, each with its own lease,
watermark and tick tasks, so the rollup's capacity grows with P (docs/architecture.md,
"Partitions").

Every key the rollup sums (a counter's id, a trending tag) has a home, a hash in 0..HOMES-1;
partition p of P owns the keys whose home is p mod P. A shard write carries
`stripe = home + HOMES * r` with r random below the writer's P, so that a partition's change
query is `stripe in [its stripes]` on the existing index: HOMES / P homes times P spreads, 16
values whatever P is, one query; and the index takes P times as many shard writes as with one
partition (about 500 writes/s per stripe, for values that increase in time).

P is configuration: `internal/rollup_partitions` (absent: 1), changed by the rollup's
`counting.rollup.repartition` (the operator CLI's `counters partitions N`). A writer learns the
new P within CONFIG_CACHE_TTL_S; until then its stripes may be the old P's, so the new leases
read the old spread too until `narrow_at`.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.cloud import firestore

from counting.foundation import config
from counting.foundation.config import Names
from counting.writepath.caching import TtlCache

log = logging.getLogger(__name__)

HOMES = 16
CHOICES = (1, 2, 4, 8, 16)  # powers of two up to HOMES: every partition gets HOMES / P homes
PARTITIONS_DOC = "rollup_partitions"  # internal/rollup_partitions: {count, changed_at}
# Firestore's `in` takes at most 30 values: a wider set of stripes is read in several queries.
IN_VALUES = 30
# After a change, the new partitions' ticks also read the stripes a writer with the old P picks,
# for this long: writers learn P within CONFIG_CACHE_TTL_S, so their writes are found within a
# tick. Any later write with an old stripe (a writer paused between choosing its stripe and
# sending, a commit that lands late) is found by the next sweep, which reads every stripe of
# every P (`rollup.Rollup.stripes`): narrowing only ever costs such a write a sweep's lag.
NARROW_AFTER_S = 2 * config.CONFIG_CACHE_TTL_S


def home_of(key: str) -> int:
    """A counter's or a tag's home: the first 32 bits of its SHA-256, modulo HOMES (a trend
    bucket's id begins with the same digest of its tag: `trends.tag_key`)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % HOMES


def home_of_hex(digest: str) -> int:
    """The home of a key from the hex SHA-256 digest a document id begins with."""
    return int(digest[:8], 16) % HOMES


def home_of_shard(shard: firestore.DocumentReference, names: Names) -> int:
    """The home of what a shard document belongs to: a counter, or a tag's minute bucket."""
    parent = shard.parent.parent
    assert parent is not None
    if parent.parent.id == names.trend_minutes:
        return home_of_hex(parent.id)
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
        return [home for home in range(HOMES) if self.owns(home)]

    def stripes(self, spread: int) -> list[int]:
        """The stripes its change query reads: its homes, in each of `spread` spreads."""
        return [home + HOMES * r for r in range(spread) for home in self.homes()]

    def __str__(self) -> str:
        return f"{self.index + 1} of {self.count}"


WHOLE = Part(1, 0)


def parts(count: int) -> list[Part]:
    return [Part(count, index) for index in range(count)]


def stripe(home: int, count: int, rng: random.Random) -> int:
    """The stripe of a shard write whose key lives at `home`, by a writer that knows P = count."""
    return home + HOMES * rng.randrange(count)


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
    cannot read it takes P = 1 until the next read: stripe = home, which every partition of
    every P reads, and the task of partition 1 of 1, which, retired, wakes the current ones. A
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
