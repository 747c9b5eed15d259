"""The rollup's only way to Firestore: domain reads and writes (the shards that changed, the
counters' documents and memories, their shards, publishes, grows and folds; the trends' buckets
and totals) as snapshot reads and commits fenced by its lease, each counted as Firestore bills
it, so that the rollup and the trends step build no query of their own and keep no tallies; and
it keeps the lease live through a tick that reads for long (a first tick after a handover, say).

Reads bill one per document returned, and one for a query that returns nothing; a `get` bills
one whether the document exists or not. A commit bills one write per write in it, the lease's
fencing write included, and one delete per delete (priced apart). Firestore implements it, or
the simulation's model of Firestore (tests/sim), behind the same client API.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from . import config, partitions
from .counters import counter_ref, memory_ref
from .lease import Lease, LeaseLost, Progress
from .ledger import LEGACY_FIELDS, Publish
from .usage import Usage

T = TypeVar("T")
R = TypeVar("R")
Snapshot = firestore.DocumentSnapshot[Any]
READ_THREADS = 8  # reads of many small queries (a counter's shards) run this many at once
# The fields of a counter document the rollup reads (not its policy: the write path's).
COUNTER_FIELDS = ["count", "num_shards", "strategy", "min_shards", "max_shards", "rate",
                  "low_since", "shrunk_at", "updated_at", *LEGACY_FIELDS]
# Documents per `get_all` of first loads; the chunks are read several at once.
DOCUMENTS_PER_READ = 100


class Store:
    def __init__(self, db: firestore.Client, lease: Lease, *, renew_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`lease` was just written (taken); it is renewed before a read when its last write is
        `renew_s` old on the `monotonic` clock."""
        self.db = db
        self.lease = lease
        self._renew_s = renew_s
        self._monotonic = monotonic
        self._written = monotonic()  # when this holder last wrote the lease
        self._usage = Usage()
        self._lock = threading.Lock()
        self._renewing = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="store")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    @property
    def usage(self) -> Usage:
        """What was billed since the last `take_usage`."""
        return self._usage

    def take_usage(self) -> Usage:
        with self._lock:
            usage, self._usage = self._usage, Usage()
        return usage

    def _bill(self, reads: int = 0, writes: int = 0, deletes: int = 0) -> None:
        with self._lock:
            self._usage.reads += reads
            self._usage.writes += writes
            self._usage.deletes += deletes

    def begin(self, progress: Progress) -> dt.datetime:
        """A tick's instant: the read time of a read of the lease that finds it still ours
        (LeaseLost otherwise). The progress so far goes with the next write to the lease."""
        instant = self.lease.held()
        self._bill(reads=1)
        if instant is None:
            raise LeaseLost("another holder has written the lease")
        self.lease.note(progress=progress)
        return instant

    def renew(self) -> dt.datetime:
        """Renew the lease, persisting its record; returns the renewal's commit time."""
        written = self._monotonic()
        instant = self.lease.renew()
        self._written = written
        self._bill(writes=1)
        return instant

    def _keep(self) -> None:
        """Before a read: renew the lease when its last write is `renew_s` old, with the
        progress as of the tick's start (`begin`), so that a tick reading longer than the lease
        lives keeps it (LeaseLost, raised through the read, ends the tick). One renewal at a
        time: the read pool's threads would otherwise race their own preconditions."""
        with self._renewing:
            if self._monotonic() - self._written >= self._renew_s:
                self.renew()

    def query(self, query: Any, read_time: dt.datetime | None = None) -> list[Snapshot]:
        self._keep()
        found = list(query.stream(read_time=read_time) if read_time else query.stream())
        self._bill(reads=max(1, len(found)))
        return found

    def get(self, ref: firestore.DocumentReference,
            field_paths: list[str] | None = None) -> Snapshot:
        self._keep()
        snapshot: Snapshot = ref.get(field_paths=field_paths)
        self._bill(reads=1)
        return snapshot

    def get_all(self, refs: Sequence[firestore.DocumentReference], *,
                field_paths: list[str] | None = None,
                read_time: dt.datetime | None = None) -> list[Snapshot]:
        if not refs:
            return []
        self._keep()
        options: dict[str, Any] = {} if read_time is None else {"read_time": read_time}
        found = list(self.db.get_all(list(refs), field_paths=field_paths, **options))
        self._bill(reads=len(refs))
        return found

    def each(self, read: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`read` of every item, several at once (each read bills itself)."""
        return list(self._pool.map(read, items))

    def commit(self, batch: firestore.WriteBatch, *, deletes: int = 0) -> list[Any]:
        """Commit `batch`, which holds `deletes` deletes, fenced by the lease (`Lease.commit`)."""
        written = self._monotonic()
        results = self.lease.commit(batch)
        self._written = written
        self._bill(writes=len(results) - deletes, deletes=deletes)
        return results

    # -- counters --

    def changed_shards(self, stripes: list[int], since: dt.datetime,
                       as_of: dt.datetime) -> list[Snapshot]:
        """Every shard (counters' and trend buckets') in `stripes` whose `updated_at` is after
        `since`, read at `as_of`: one query, more while a partition also reads an earlier spread
        (`partitions`), run at once."""
        queries = [
            self.db.collection_group(config.SHARDS)
            .where(filter=FieldFilter("stripe", "in", chunk))
            .where(filter=FieldFilter("updated_at", ">", since))
            for chunk in partitions.chunks(stripes)]
        return [snapshot for found in self.each(lambda q: self.query(q, as_of), queries)
                for snapshot in found]

    def above_min(self, as_of: dt.datetime) -> list[str]:
        """The counters above their minimum of shards (`above_min`), read at `as_of`."""
        query = (self.db.collection(config.COUNTERS)
                 .where(filter=FieldFilter("above_min", "==", True)).select(["above_min"]))
        return [snapshot.id for snapshot in self.query(query, as_of)]

    def counters(self, ids: list[str], as_of: dt.datetime
                 ) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
        """Each counter's document and memory at `as_of` (None: absent), in chunks read at
        once."""
        chunks = [ids[start:start + DOCUMENTS_PER_READ]
                  for start in range(0, len(ids), DOCUMENTS_PER_READ)]

        def read(chunk: list[str]) -> list[tuple[str, dict[str, Any] | None,
                                                 dict[str, Any] | None]]:
            documents = self.get_all([counter_ref(self.db, c) for c in chunk],
                                     field_paths=COUNTER_FIELDS, read_time=as_of)
            memories = self.get_all([memory_ref(self.db, c) for c in chunk], read_time=as_of)
            by_path = {snapshot.reference.path: snapshot for snapshot in [*documents, *memories]}
            found = []
            for counter in chunk:
                document = by_path[counter_ref(self.db, counter).path]
                memory = by_path[memory_ref(self.db, counter).path]
                found.append((counter, (document.to_dict() or {}) if document.exists else None,
                              (memory.to_dict() or {}) if memory.exists else None))
            return found

        return [item for found in self.each(read, chunks) for item in found]

    def shards(self, counter: str, as_of: dt.datetime | None = None) -> list[Snapshot]:
        """Every shard of a counter, at `as_of` (None: now)."""
        return self.query(counter_ref(self.db, counter).collection(config.SHARDS), as_of)

    def each_counters_shards(self, counters: list[str], as_of: dt.datetime
                             ) -> list[list[Snapshot]]:
        """`shards` of each counter, at `as_of`, several at once."""
        return self.each(lambda counter: self.shards(counter, as_of), counters)

    def publish(self, items: list[tuple[str, Publish]]) -> None:
        """One fenced commit of counters' publishes: each counter's document and memory
        together, so that a successor finds the shard counts beside the sum they add up to."""
        batch = self.db.batch()
        for counter, publish in items:
            public = dict(publish.public)
            if publish.drop_legacy:
                public.update({name: firestore.DELETE_FIELD for name in LEGACY_FIELDS})
            if public:
                batch.update(counter_ref(self.db, counter), public)
            if publish.memory:
                batch.set(memory_ref(self.db, counter), publish.memory, merge=True)
        self.commit(batch)

    def forget_counts(self, counter: str) -> None:
        """Remove a counter's shard counts (its memory's, and a legacy document's): its shards
        are read whole by the next holder (after a publish of it failed)."""
        batch = self.db.batch()
        batch.set(memory_ref(self.db, counter),
                  {config.SHARD_COUNTS_FIELD: firestore.DELETE_FIELD}, merge=True)
        batch.update(counter_ref(self.db, counter),
                     {name: firestore.DELETE_FIELD for name in LEGACY_FIELDS})
        self.commit(batch)

    def bounds(self, counter: str) -> dict[str, Any]:
        """A counter's `min_shards` and `max_shards` now (an operator may change them)."""
        return self.get(counter_ref(self.db, counter),
                        field_paths=["min_shards", "max_shards"]).to_dict() or {}

    def create_shards(self, counter: str, shards: range) -> None:
        """Make sure shards exist (count 0, or kept if a fold left one), in fenced commits."""
        created = {"count": firestore.Increment(0), "writes": firestore.Increment(0)}
        coll = counter_ref(self.db, counter).collection(config.SHARDS)
        numbers = list(shards)
        for start in range(0, len(numbers), config.ROLLUP_COMMIT_WRITES - 1):
            batch = self.db.batch()
            for n in numbers[start:start + config.ROLLUP_COMMIT_WRITES - 1]:
                batch.set(coll.document(str(n)), created, merge=True)
            self.commit(batch)

    def update_counter(self, counter: str, fields: dict[str, Any]) -> None:
        """One fenced update of a counter's document (a grow completed, a fold done)."""
        batch = self.db.batch()
        batch.update(counter_ref(self.db, counter), fields)
        self.commit(batch)

    def fold(self, counter: str, surplus: list[Snapshot], moved: dict[str, int], *,
             counts_kept: str | None) -> None:
        """One fenced commit of a fold (`folding`): each surplus shard deleted with a
        precondition on the version read, what it held added to its survivor, and the same
        moves in the counter's `shard_counts` where they are kept."""
        coll = counter_ref(self.db, counter).collection(config.SHARDS)
        batch = self.db.batch()
        for snapshot in surplus:
            batch.delete(snapshot.reference,
                         option=self.db.write_option(last_update_time=snapshot.update_time))
        for survivor, amount in moved.items():
            if amount:
                # Stamped like a write: a sweep then tells the fold's version from a straddling
                # write nobody touched (and skips it), and the stamp is a touch of whatever the
                # survivor held. The holder applies the move to the values it remembers, so
                # the next tick finds the survivor unchanged: a fold wakes nothing.
                batch.update(coll.document(survivor), {
                    "count": firestore.Increment(amount),
                    "updated_at": firestore.SERVER_TIMESTAMP,
                    "stripe": partitions.shard_stripe(self.db, coll.document(survivor),
                                                      random.Random())})
        if counts_kept is not None:
            moves = {**{shard_count(s.id): firestore.DELETE_FIELD for s in surplus},
                     **{shard_count(survivor): firestore.Increment(amount)
                        for survivor, amount in moved.items()}}
            batch.update(memory_ref(self.db, counter) if counts_kept == "memory"
                         else counter_ref(self.db, counter), moves)
        self.commit(batch, deletes=len(surplus))


def shard_count(shard: str) -> str:
    """The field path of a shard's entry in `shard_counts` (ids are digits: quoted)."""
    return FieldPath(config.SHARD_COUNTS_FIELD, shard).to_api_repr()
