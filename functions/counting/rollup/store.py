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
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

from counting.features.counter_refs import counter_ref, memory_ref
from counting.foundation import config
from counting.foundation.kinds import Window
from counting.rollup.lease import Lease, LeaseLost, Progress
from counting.rollup.ledger import LEGACY_FIELDS, Publish
from counting.rollup.usage import Usage
from counting.writepath import partitions
from counting.writepath.context import Writing
from counting.writepath.partitions import Part, trend_parts_ref

T = TypeVar("T")
R = TypeVar("R")
Snapshot = firestore.DocumentSnapshot[Any]
READ_THREADS = 8  # reads of many small queries (a counter's shards) run this many at once
# The fields of a counter document the rollup reads (not its policy: the write path's).
COUNTER_FIELDS = ["count", "num_shards", "strategy", "min_shards", "max_shards", "rate",
                  "rate_at", "low_since", "shrunk_at", "updated_at", "above_min",
                  partitions.SHRINK_HOME, *LEGACY_FIELDS]
# Shards a page of a change query returns (`Store.changed_shards`): about a quarter of a second
# of the client's decoding.
CHANGE_PAGE = 5000
# Counters a page of the watch returns (`Store.above_min`).
WATCH_PAGE = 1000
# Documents per `get_all` of first loads; the chunks are read several at once.
DOCUMENTS_PER_READ = 100


class Store:
    def __init__(self, db: firestore.Client, lease: Lease, writing: Writing, *,
                 renew_s: float, change_page: int = CHANGE_PAGE) -> None:
        """`lease` was just written (taken); it is renewed before a read when its last write is
        `renew_s` old on `writing`'s clock. `writing` names the collections (its placement's),
        stripes the writes of a fold and makes the pool of its reads."""
        self.db = db
        self.lease = lease
        self.names = writing.names
        self._writing = writing
        self._renew_s = renew_s
        self._change_page = change_page
        self._monotonic = writing.clock.monotonic
        self._written = self._monotonic()  # when this holder last wrote the lease
        # When the last tick's instant had been read (on `writing`'s clock): it is no later.
        self.begun = self._written
        self._usage = Usage()
        self._longest = 0.0  # seconds: the longest call since the last `take_longest`
        self._lock = threading.Lock()
        self._renewing = threading.Lock()
        self._pool = writing.pools(READ_THREADS, "store")

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

    def take_longest(self) -> float:
        """The seconds of the longest Firestore call since the last time it was taken (each
        read, page and commit is one)."""
        with self._lock:
            longest, self._longest = self._longest, 0.0
        return longest

    def _took(self, began: float) -> None:
        taken = self._monotonic() - began
        with self._lock:
            self._longest = max(self._longest, taken)

    def _bill(self, reads: int = 0, writes: int = 0, deletes: int = 0) -> None:
        with self._lock:
            self._usage.reads += reads
            self._usage.writes += writes
            self._usage.deletes += deletes

    def begin(self, progress: Progress) -> dt.datetime:
        """A tick's instant: the read time of a read of the lease that finds it still ours
        (LeaseLost otherwise). The progress so far goes with the next write to the lease."""
        instant = self.lease.held()
        self.begun = self._monotonic()
        self._bill(reads=1)
        if instant is None:
            raise LeaseLost("another holder has written the lease")
        self.lease.note(progress=progress)
        return instant

    def renew(self) -> dt.datetime:
        """Renew the lease, persisting its record; returns the renewal's commit time."""
        written = self._monotonic()
        instant = self.lease.renew()
        self._took(written)
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
        began = self._monotonic()
        found = list(query.stream(read_time=read_time) if read_time else query.stream())
        self._took(began)
        self._bill(reads=max(1, len(found)))
        return found

    def get(self, ref: firestore.DocumentReference,
            field_paths: list[str] | None = None) -> Snapshot:
        self._keep()
        began = self._monotonic()
        snapshot: Snapshot = ref.get(field_paths=field_paths)
        self._took(began)
        self._bill(reads=1)
        return snapshot

    def get_all(self, refs: Sequence[firestore.DocumentReference], *,
                field_paths: list[str] | None = None,
                read_time: dt.datetime | None = None) -> list[Snapshot]:
        if not refs:
            return []
        self._keep()
        options: dict[str, Any] = {} if read_time is None else {"read_time": read_time}
        began = self._monotonic()
        found = list(self.db.get_all(list(refs), field_paths=field_paths, **options))
        self._took(began)
        self._bill(reads=len(refs))
        return found

    def each(self, read: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`read` of every item, several at once (each read bills itself)."""
        return list(self._pool.map(read, items))

    def commit(self, batch: firestore.WriteBatch, *, deletes: int = 0) -> list[Any]:
        """Commit `batch`, which holds `deletes` deletes, fenced by the lease (`Lease.commit`)."""
        written = self._monotonic()
        results = self.lease.commit(batch)
        self._took(written)
        self._written = written
        self._bill(writes=len(results) - deletes, deletes=deletes)
        return results

    # -- counters --

    def changed_shards(self, stripes: list[int], since: dt.datetime, as_of: dt.datetime,
                       until: dt.datetime | None = None) -> list[Snapshot]:
        """Every shard (counters' and trend buckets') in `stripes` whose `updated_at` is after
        `since` (and at most `until`: a sweep's cell), read at `as_of`: one query, more while a
        partition also reads an earlier spread (`partitions`), run at once; each in pages of
        `change_page` in `updated_at` order, so that no one read lasts long however much changed:
        the lease is renewed between pages."""
        return [snapshot for found, _ in self.each(
            lambda query: self._pages(query, as_of, self._change_page, None),
            self._change_queries(stripes, since, until, self._change_page))
            for snapshot in found]

    def catching_up(self, stripes: list[int], since: dt.datetime, as_of: dt.datetime,
                    page: int, target: Callable[[dt.datetime], dt.datetime]
                    ) -> tuple[list[Snapshot], dt.datetime | None]:
        """As `changed_shards` without `until`, in pages of `page`, each query read up to the
        first page that passes `target` of its first shard's `updated_at` (a new holder's
        backlog, `Rollup.tick`). Returns the shards, and the `updated_at` up to which every
        query read everything (None: each read to the end)."""
        read = self.each(lambda query: self._pages(query, as_of, page, target),
                         self._change_queries(stripes, since, None, page))
        reached = [through for _, through in read if through is not None]
        return [snapshot for found, _ in read for snapshot in found], min(reached, default=None)

    def _change_queries(self, stripes: list[int], since: dt.datetime,
                        until: dt.datetime | None, page: int) -> list[Any]:
        queries = []
        for chunk in partitions.chunks(stripes):
            query = self.db.collection_group(self.names.shards) \
                .where(filter=FieldFilter("stripe", "in", chunk)) \
                .where(filter=FieldFilter("updated_at", ">", since))
            if until is not None:
                query = query.where(filter=FieldFilter("updated_at", "<=", until))
            queries.append(query.order_by("updated_at").limit(page))
        return queries

    def _pages(self, query: Any, as_of: dt.datetime, page: int,
               target: Callable[[dt.datetime], dt.datetime] | None
               ) -> tuple[list[Snapshot], dt.datetime | None]:
        """The pages of `query` read at `as_of`: all of them, or up to the first whose last
        `updated_at` is past `target` of the first's; and that `updated_at` when pages were left
        (None: read to the end)."""
        found: list[Snapshot] = []
        read = self.query(query, as_of)
        while True:
            found += read
            if len(read) < page:
                return found, None
            last = read[-1].get("updated_at")
            if target is not None and last > target(found[0].get("updated_at")):
                return found, last
            read = self.query(query.start_after(read[-1]), as_of)

    def above_min(self, homes: list[int], as_of: dt.datetime) -> list[str]:
        """The counters of `homes` above their minimum of shards (`partitions.watched`), read at
        `as_of`, WATCH_PAGE to a query: the lease is renewed between pages however many there
        are. Every home's (P = 1) are asked for at once, by `above_min`: one query, not one per
        30 homes."""
        found: list[str] = []
        counters = self.db.collection(self.names.counters)
        every = len(homes) == partitions.HOMES
        for chunk in [homes] if every else partitions.chunks(homes):
            query = (counters.where(filter=FieldFilter("above_min", "==", True)) if every
                     else counters.where(filter=FieldFilter(partitions.SHRINK_HOME, "in", chunk)))
            query = query.select(["above_min"]).limit(WATCH_PAGE)
            page = self.query(query, as_of)
            while True:
                found += [snapshot.id for snapshot in page]
                if len(page) < WATCH_PAGE:
                    break
                page = self.query(query.start_after(page[-1]), as_of)
        return found

    def counters(self, ids: list[str], as_of: dt.datetime
                 ) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
        """Each counter's document and memory at `as_of` (None: absent), in chunks read at
        once."""
        chunks = [ids[start:start + DOCUMENTS_PER_READ]
                  for start in range(0, len(ids), DOCUMENTS_PER_READ)]

        def read(chunk: list[str]) -> list[tuple[str, dict[str, Any] | None,
                                                 dict[str, Any] | None]]:
            documents = self.get_all([counter_ref(self.db, self.names, c) for c in chunk],
                                     field_paths=COUNTER_FIELDS, read_time=as_of)
            memories = self.get_all([memory_ref(self.db, self.names, c) for c in chunk],
                                    read_time=as_of)
            by_path = {snapshot.reference.path: snapshot for snapshot in [*documents, *memories]}
            found = []
            for counter in chunk:
                document = by_path[counter_ref(self.db, self.names, counter).path]
                memory = by_path[memory_ref(self.db, self.names, counter).path]
                found.append((counter, (document.to_dict() or {}) if document.exists else None,
                              (memory.to_dict() or {}) if memory.exists else None))
            return found

        return [item for found in self.each(read, chunks) for item in found]

    def shards(self, counter: str, as_of: dt.datetime | None = None) -> list[Snapshot]:
        """Every shard of a counter, at `as_of` (None: now)."""
        shards = counter_ref(self.db, self.names, counter).collection(self.names.shards)
        return self.query(shards, as_of)

    def each_counters_shards(self, counters: list[str], as_of: dt.datetime
                             ) -> list[list[Snapshot]]:
        """`shards` of each counter, at `as_of`, several at once."""
        return self.each(lambda counter: self.shards(counter, as_of), counters)

    def publish(self, items: list[tuple[str, Publish]]) -> None:
        """One fenced commit of counters' publishes: each counter's document and, when the
        ledger writes it (a round of memories, a whole read, a rate's `shard_load`), its memory."""
        batch = self.db.batch()
        for counter, publish in items:
            public = dict(publish.public)
            if publish.drop_legacy:
                public.update({name: firestore.DELETE_FIELD for name in LEGACY_FIELDS})
            if public:
                batch.update(counter_ref(self.db, self.names, counter), public)
            if publish.memory:
                batch.set(memory_ref(self.db, self.names, counter), publish.memory, merge=True)
        self.commit(batch)

    def forget_counts(self, counter: str) -> None:
        """Remove a counter's shard counts (its memory's, and a legacy document's): its shards
        are read whole by the next holder (after a publish of it failed)."""
        batch = self.db.batch()
        batch.set(memory_ref(self.db, self.names, counter),
                  {config.SHARD_COUNTS_FIELD: firestore.DELETE_FIELD}, merge=True)
        batch.update(counter_ref(self.db, self.names, counter),
                     {name: firestore.DELETE_FIELD for name in LEGACY_FIELDS})
        self.commit(batch)

    def bounds(self, counter: str) -> dict[str, Any]:
        """A counter's `min_shards` and `max_shards` now (an operator may change them)."""
        return self.get(counter_ref(self.db, self.names, counter),
                        field_paths=["min_shards", "max_shards"]).to_dict() or {}

    def create_shards(self, counter: str, shards: range) -> None:
        """Make sure shards exist (count 0, or kept if a fold left one), in fenced commits."""
        created = {"count": firestore.Increment(0), "writes": firestore.Increment(0)}
        coll = counter_ref(self.db, self.names, counter).collection(self.names.shards)
        numbers = list(shards)
        for start in range(0, len(numbers), config.ROLLUP_COMMIT_WRITES - 1):
            batch = self.db.batch()
            for n in numbers[start:start + config.ROLLUP_COMMIT_WRITES - 1]:
                batch.set(coll.document(str(n)), created, merge=True)
            self.commit(batch)

    def update_counter(self, counter: str, fields: dict[str, Any]) -> None:
        """One fenced update of a counter's document (a grow completed, a fold done)."""
        batch = self.db.batch()
        batch.update(counter_ref(self.db, self.names, counter), fields)
        self.commit(batch)

    def fold(self, counter: str, surplus: list[Snapshot], moved: dict[str, int], *,
             counts_kept: str | None) -> None:
        """One fenced commit of a fold (`folding`): each surplus shard deleted with a
        precondition on the version read, what it held added to its survivor, and the same
        moves in the counter's `shard_counts` where they are kept."""
        coll = counter_ref(self.db, self.names, counter).collection(self.names.shards)
        batch = self.db.batch()
        for snapshot in surplus:
            batch.delete(snapshot.reference,
                         option=self.db.write_option(last_update_time=snapshot.update_time))
        for survivor, amount in moved.items():
            # Stamped like a write, even when it takes nothing: a sweep then tells the fold's
            # version from a straddling write nobody touched (and skips it), the stamp is a
            # touch of whatever the survivor held, and a holder that did not hold the shards'
            # values (it held the counter for its scaling only) meets the counter again through
            # it and publishes the sum of what is left. A holder that held them applies the move
            # to the values it remembers, so its next tick finds the survivor unchanged.
            batch.update(coll.document(survivor), {
                "count": firestore.Increment(amount),
                "updated_at": firestore.SERVER_TIMESTAMP,
                "stripe": self._writing.stripe(
                    self.db, partitions.home_of_shard(coll.document(survivor), self.names))})
        if counts_kept is not None:
            moves = {**{shard_count(s.id): firestore.DELETE_FIELD for s in surplus},
                     **{shard_count(survivor): firestore.Increment(amount)
                        for survivor, amount in moved.items()}}
            batch.update(memory_ref(self.db, self.names, counter) if counts_kept == "memory"
                         else counter_ref(self.db, self.names, counter), moves)
        self.commit(batch, deletes=len(surplus))

    # --- trends: the documents of `counting.features.trends`, named by the ids it gives -------

    def trend_buckets(self, window: Window) -> tuple[str, str]:
        """The collection of a window's trend buckets, and the field that says which bucket of
        it they are."""
        return {"1h": (self.names.trend_minutes, "minute"),
                "24h": (self.names.trend_hours, "hour")}[window]

    def trend_minutes(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The minute buckets of `ids` that exist, by id (TREND_READ_CHUNK to a read)."""
        minutes = self.db.collection(self.names.trend_minutes)
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), config.TREND_READ_CHUNK):
            chunk = ids[start:start + config.TREND_READ_CHUNK]
            for snapshot in self.get_all([minutes.document(bucket) for bucket in chunk]):
                if snapshot.exists:
                    found[snapshot.id] = snapshot.to_dict() or {}
        return found

    def expired_trend_buckets(self, window: Window, last: int, homes: list[int], limit: int
                              ) -> list[tuple[str, dict[str, Any]]]:
        """(id, fields) of at most `limit` buckets of `window` (minutes for 1 h, hours for
        24 h) up to bucket `last`, of the tags whose home (their `spread`) is in `homes`."""
        collection, bucket = self.trend_buckets(window)
        query = (self.db.collection(collection)
                 .where(filter=FieldFilter("spread", "in", homes))
                 .where(filter=FieldFilter(bucket, "<=", last))
                 .limit(limit))
        return [(snapshot.id, snapshot.to_dict() or {}) for snapshot in self.query(query)]

    def trend_totals(self, ids: Sequence[str]) -> dict[str, int]:
        """The count of each window total of `ids`, 0 for one that does not exist
        (TREND_READ_CHUNK to a read)."""
        totals = self.db.collection(self.names.trend_totals)
        counts: dict[str, int] = {}
        for start in range(0, len(ids), config.TREND_READ_CHUNK):
            chunk = ids[start:start + config.TREND_READ_CHUNK]
            for snapshot in self.get_all([totals.document(total) for total in chunk]):
                counts[snapshot.id] = int((snapshot.to_dict() or {}).get("count") or 0)
        return counts

    def top_trend_totals(self, scope: str, window: Window, homes: list[int] | None, limit: int
                         ) -> list[tuple[str, int]]:
        """The `limit` highest totals of `scope` over `window`, count descending then tag, as
        (tag, count); of the tags whose home is in `homes` (None: of all: that query predates
        `home`)."""
        query = (self.db.collection(self.names.trend_totals)
                 .where(filter=FieldFilter("scope", "==", scope))
                 .where(filter=FieldFilter("window", "==", window)))
        if homes is not None:
            query = query.where(filter=FieldFilter("home", "in", homes))
        top = query.order_by("count", direction=firestore.Query.DESCENDING).order_by("tag")
        return [(str(s.get("tag")), int(s.get("count"))) for s in self.query(top.limit(limit))]

    def trend_scopes(self) -> set[str]:
        """Every scope with a `trends` document (one read each)."""
        known = self.db.collection(self.names.trends).select(["window"])
        return {snapshot.id for snapshot in self.query(known)}

    def trend_part_index(self, part: Part) -> dict[str, Any] | None:
        """A partition's index of its trend parts; None when it does not exist."""
        snapshot = self.get(trend_parts_ref(self.db, self.names, part))
        return (snapshot.to_dict() or {}) if snapshot.exists else None

    def trend_part_indexes(self, parts: Sequence[Part], read_time: dt.datetime
                           ) -> list[dict[str, Any] | None]:
        """The indexes of `parts` at `read_time` (None for one that does not exist)."""
        found = self.get_all([trend_parts_ref(self.db, self.names, part) for part in parts],
                             read_time=read_time)
        return [(snapshot.to_dict() or {}) if snapshot.exists else None for snapshot in found]

    def trend_parts(self, parts: Sequence[tuple[str, Part]], read_time: dt.datetime
                    ) -> list[dict[str, Any] | None]:
        """The parts of (scope, partition) at `read_time` (None for one that does not exist),
        in order (TREND_READ_CHUNK to a read)."""
        found: list[dict[str, Any] | None] = []
        for start in range(0, len(parts), config.TREND_READ_CHUNK):
            chunk = parts[start:start + config.TREND_READ_CHUNK]
            refs = [self._trend_part(scope, part) for scope, part in chunk]
            found += [(snapshot.to_dict() or {}) if snapshot.exists else None
                      for snapshot in self.get_all(refs, read_time=read_time)]
        return found

    def commit_trend_buckets(self, buckets: Sequence[tuple[Window, str, dict[str, Any] | None]],
                             totals: Mapping[str, dict[str, Any] | None]) -> None:
        """One fenced commit of bucket writes (window, id, fields: `trends.ledger.BucketWrite`),
        in order, and of the window totals by id; fields None delete. A minute bucket (1 h) is
        replaced; an hour bucket (24 h) gets its fields merged and their `count` added to its
        own."""
        batch = self.db.batch()
        deletes = 0
        for window, bucket, fields in buckets:
            ref = self.db.collection(self.trend_buckets(window)[0]).document(bucket)
            if fields is None:
                batch.delete(ref)
                deletes += 1
            elif window == "1h":
                batch.set(ref, fields)
            else:
                batch.set(ref, {**fields, "count": firestore.Increment(fields["count"])},
                          merge=True)
        deletes += replaced(batch, self.db.collection(self.names.trend_totals), totals)
        self.commit(batch, deletes=deletes)

    def publish_trends(self, documents: Mapping[str, dict[str, Any] | None]) -> None:
        """One fenced commit of `trends/{scope}` for each scope (None deletes it)."""
        batch = self.db.batch()
        deletes = replaced(batch, self.db.collection(self.names.trends), documents)
        self.commit(batch, deletes=deletes)

    def publish_trend_parts(self, part: Part, parts: Mapping[str, dict[str, Any] | None],
                            index: dict[str, Any]) -> dt.datetime | None:
        """One fenced commit of a partition's parts of scopes (None deletes one) and of `index`,
        merged into its index; returns the commit's time."""
        batch = self.db.batch()
        deletes = 0
        for scope, fields in parts.items():
            if fields is None:
                batch.delete(self._trend_part(scope, part))
                deletes += 1
            else:
                batch.set(self._trend_part(scope, part), fields)
        batch.set(trend_parts_ref(self.db, self.names, part), index, merge=True)
        self.commit(batch, deletes=deletes)
        return self.lease.written_at

    def _trend_part(self, scope: str, part: Part) -> firestore.DocumentReference:
        """A partition's lists of a scope: trends/{scope}/parts/{P}-{index}."""
        scoped = self.db.collection(self.names.trends).document(scope)
        ref: firestore.DocumentReference = scoped.collection(self.names.trend_parts).document(
            f"{part.count}-{part.index}")
        return ref



def shard_count(shard: str) -> str:
    """The field path of a shard's entry in `shard_counts` (ids are digits: quoted)."""
    return FieldPath(config.SHARD_COUNTS_FIELD, shard).to_api_repr()


def replaced(batch: firestore.WriteBatch, coll: firestore.CollectionReference,
             documents: Mapping[str, dict[str, Any] | None]) -> int:
    """Add to `batch` each document of `coll` written whole, or deleted (None); returns the
    deletes."""
    for name, fields in documents.items():
        if fields is None:
            batch.delete(coll.document(name))
        else:
            batch.set(coll.document(name), fields)
    return sum(1 for fields in documents.values() if fields is None)
