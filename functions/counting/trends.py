"""Trending tags: exact windowed counts per region and worldwide, and the Top-K clients read.

`track` is the write path (one commit per event: a blind shard write per distinct tag into its
minute bucket); `TrendRollup` is one step of each rollup tick (bucket changes into hours and
window totals, expiry, the top lists, `trends/{scope}`), for the tags of one rollup partition:
with P > 1 each partition publishes its own lists of a scope, and partition 0 merges them into
`trends/{scope}`. How and why, once: docs/architecture.md, "Trends".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from . import config, counters, kinds, partitions, writes
from .kinds import Window
from .partitions import WHOLE, Part
from .store import Store
from .usage import Usage

MINUTE_S = 60

Snapshot = firestore.DocumentSnapshot[firestore.DocumentReference]
Item = tuple[str, int]  # (tag, count)


@dataclass(frozen=True, kw_only=True, order=True)
class TotalKey:
    """One window total: the count of `tag` in `scope` (a region, or `global`) over `window`."""

    scope: str
    window: Window
    tag: str


@dataclass(frozen=True, kw_only=True)
class BucketWrite:
    """One write to a bucket document, as it goes into a commit."""

    op: Literal["set", "merge", "delete"]  # replace the document, merge into it, or delete it
    ref: firestore.DocumentReference
    fields: dict[str, Any] = field(default_factory=dict)  # none for a delete

    def add_to(self, batch: firestore.WriteBatch) -> None:
        if self.op == "delete":
            batch.delete(self.ref)
        else:
            batch.set(self.ref, self.fields, merge=self.op == "merge")


@dataclass(frozen=True, kw_only=True)
class Entry:
    """A bucket write and the changes it makes to window totals: they are committed together."""

    write: BucketWrite
    deltas: dict[TotalKey, int]


@dataclass(frozen=True, kw_only=True)
class TagCount:
    tag: str
    count: int


@dataclass(frozen=True, kw_only=True)
class TopTags:
    region: str
    window: Window
    items: list[TagCount]
    as_of: dt.datetime


@dataclass(frozen=True, kw_only=True)
class TrendStats:
    changed_buckets: int  # minute buckets whose count changed
    expired_buckets: int  # minute and hour buckets subtracted and deleted
    changed_totals: int  # (scope, window, tag) totals written
    rebuilt_lists: int  # Top-K lists read again from the totals
    published: int  # trends documents written
    reads: int
    writes: int
    deletes: int
    parts: int = 0  # part documents written (P > 1, partitions other than 0)
    # The commit time of those writes: partition 0 must tick after it to merge them.
    parts_at: dt.datetime | None = None
    # Every known scope was published, as `republish` asked (the first tick after a change of P).
    republished: bool = False


# --- arithmetic ------------------------------------------------------------------------------


def minute_of(instant: dt.datetime) -> int:
    """The minute bucket of an instant: whole minutes since the Unix epoch."""
    return int(instant.timestamp() // MINUTE_S)


def bucket_of(window: Window, minute: int) -> int:
    """The bucket of `window` that a minute falls in."""
    bucket_s, _ = config.WINDOWS[window]
    return minute * MINUTE_S // bucket_s


def in_window(window: Window, bucket: int, now_minute: int) -> bool:
    """Whether a bucket of `window` still counts at `now_minute` (the current one included)."""
    _, buckets = config.WINDOWS[window]
    return bucket > bucket_of(window, now_minute) - buckets


def rank(item: Item) -> tuple[int, str]:
    """The Top-K order: count descending, then tag ascending."""
    return -item[1], item[0]


def tag_key(tag: str) -> str:
    """Document-id-safe key of a tag (tags may hold `/` and up to 100 characters)."""
    return hashlib.sha256(tag.encode()).hexdigest()[:32]


def minute_id(region: str, minute: int, tag: str) -> str:
    """A minute bucket's id. It begins with the tag's hash: ids that begin with the minute would
    increase in time, and Firestore limits writes to a range of sequential ids (about 500/s)."""
    return f"{tag_key(tag)}:{region}:{minute}"


def hour_id(region: str, hour: int, tag: str) -> str:
    return f"{tag_key(tag)}:{region}:{hour}"


def spread_of(tag: str) -> int:
    """The bucket documents' `spread`: the tag's home (`counting.partitions`). The index that
    finds expired buckets by `minute` (or `hour`) leads with it, so their writes, whose minutes
    increase, spread over HOMES ranges of the index instead of one."""
    return partitions.home_of(tag)


def part_ref(db: firestore.Client, scope: str, part: Part) -> firestore.DocumentReference:
    """A partition's lists of a scope: trends/{scope}/parts/{P}-{index}."""
    scoped = db.collection(config.TRENDS).document(scope)
    ref: firestore.DocumentReference = scoped.collection(config.TREND_PARTS).document(
        f"{part.count}-{part.index}")
    return ref


def total_id(key: TotalKey) -> str:
    return f"{key.scope}:{key.window}:{tag_key(key.tag)}"


def expiry(window: Window, bucket: int) -> dt.datetime:
    """When the TTL policy may delete a bucket: after it left its window, plus the grace."""
    bucket_s, buckets = config.WINDOWS[window]
    seconds = (bucket + buckets) * bucket_s
    return dt.datetime.fromtimestamp(seconds, dt.UTC) + config.TREND_TTL_GRACE


def tag_of(shards: Mapping[str, Snapshot]) -> str:
    """The tag of a bucket, from any of its shard snapshots."""
    return str(next(iter(shards.values())).get("tag"))


# --- write path and reads --------------------------------------------------------------------

_RNG = random.Random()


def track(
    db: firestore.Client,
    region: str,
    tags: Iterable[str],
    *,
    request_id: str | None = None,
    uid: str = "",
    now: dt.datetime | None = None,
    rng: random.Random = _RNG,
) -> int:
    """Count one event: one occurrence of each distinct (normalised) tag, in one commit.

    Returns the number of tags recorded; 0 when `request_id` was already applied for this user.
    """
    distinct = list(dict.fromkeys(tags))
    minute = minute_of(now or dt.datetime.now(dt.UTC))
    expires_at = expiry("1h", minute)
    buckets = db.collection(config.TREND_MINUTES)
    ids = [minute_id(region, minute, tag) for tag in distinct]
    shards = [buckets.document(bucket).collection(config.SHARDS).document(
        str(rng.randrange(config.TREND_SHARDS))) for bucket in ids]
    shard_writes = [counters.ShardWrite(shard, {
        **counters.shard_write(db, shard, 1, rng), "region": region, "tag": tag,
        "minute": minute, config.EXPIRES_AT: expires_at}, creates=True)
        for tag, shard in zip(distinct, shards, strict=True)]
    request = None if request_id is None or not config.PROTECTIONS.request_markers \
        else f"track:{request_id}"
    applied = counters.commit_marked(db, shard_writes, uid=uid, request_id=request,
                                     counters=ids, nonce=writes.new_nonce(), rng=rng)
    return len(distinct) if applied else 0


def top_tags(db: firestore.Client, region: str | None, k: int, window: Window) -> TopTags:
    """The first k of the list the rollup maintains: one document read."""
    scope = region or config.GLOBAL_SCOPE
    snapshot = db.collection(config.TRENDS).document(scope).get()
    data = snapshot.to_dict() or {}
    section = (data.get("windows") or {}).get(window) or {}
    items = [TagCount(tag=str(item["tag"]), count=int(item["count"]))
             for item in (section.get("items") or [])[:k]]
    return TopTags(region=scope, window=window, items=items,
                   as_of=data.get("updated_at") or snapshot.read_time)


# --- rollup ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class MinuteBucket:
    """A minute bucket document as the rollup last wrote it."""

    region: str
    tag: str
    minute: int
    count: int = 0
    shards: dict[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class Board:
    """One (scope, window): its exact top TOP_K."""

    items: list[Item]


@dataclass(kw_only=True)
class Pending:
    """Writes of one commit, and the totals they change (written with them)."""

    writes: list[BucketWrite] = field(default_factory=list)
    totals: set[TotalKey] = field(default_factory=set)


def trends_document(lists: Mapping[Window, list[Item]], thresholds: Mapping[Window, int]
                    ) -> dict[str, Any]:
    """`trends/{scope}` (without `updated_at`): per window its top TOP_K and, of those, the tags
    at or above the window's threshold (so `trending` holds at most TOP_K tags, the highest);
    the 24 h window again at the top level. Bounded whatever clients send: 2 x 100 tags of at
    most 100 characters, each listed at most twice per window, three times for 24 h."""
    windows = {
        window: {
            "items": [{"tag": tag, "count": count} for tag, count in items[:config.TOP_K]],
            "trending": sorted(tag for tag, count in items[:config.TOP_K]
                               if count >= thresholds[window]),
        }
        for window, items in lists.items()
    }
    return {"window": kinds.DEFAULT_WINDOW, **windows[kinds.DEFAULT_WINDOW], "windows": windows}


def merge_lists(lists: Iterable[Mapping[Window, list[Item]]]) -> dict[Window, list[Item]]:
    """The top TOP_K per window of the union of partitions' lists. Exact when each list is its
    partition's exact top TOP_K and a tag is counted in one partition only (its home's): a tag
    in the top TOP_K of the union is in the top TOP_K of its own partition."""
    found: dict[Window, list[Item]] = {window: [] for window in kinds.WINDOWS}
    for each in lists:
        for window, items in each.items():
            found[window].extend(items)
    return {window: sorted(items, key=rank)[:config.TOP_K] for window, items in found.items()}


def part_document(lists: Mapping[Window, list[Item]]) -> dict[str, Any]:
    """trends/{scope}/parts/{P}-{index}: a partition's top TOP_K per window."""
    return {"windows": {window: [{"tag": tag, "count": count} for tag, count in items]
                        for window, items in lists.items()}}


def lists_of(document: Mapping[str, Any] | None) -> dict[Window, list[Item]]:
    """The lists of a part document (none when it does not exist)."""
    windows = (document or {}).get("windows") or {}
    return {window: [(str(item["tag"]), int(item["count"])) for item in windows.get(window) or []]
            for window in kinds.WINDOWS}


class TrendRollup:
    """The trends state of one lease holder of partition `part`: the tags whose home it owns.
    `clock` (for tests) replaces the tick instant as "now" when deciding which buckets are still
    in their window.

    With P = 1 it publishes `trends/{scope}` itself. With P > 1, partitions 1..P-1 publish their
    lists of a scope to `trends/{scope}/parts/{P}-{index}`, and in the same commit the scope and
    the tick's instant (the part's version) to their index `internal/trend_parts-{P}-{index}`;
    partition 0 merges: every tick it reads the P - 1 indexes at the tick's instant, the parts
    whose version changed (same instant: each index and its parts are consistent), and rewrites
    `trends/{scope}` from its own lists and the others' (`merge_lists`). It merges nothing while
    an index is missing: a partition that has not yet published since P changed would be left
    out. A partition's first tick in a P publishes every known scope (the ids of `trends`),
    empty lists included; after a part commit the holder wakes partition 0 for the slot of the
    commit (`TrendStats.parts_at`)."""

    def __init__(
        self,
        store: Store,
        *,
        part: Part = WHOLE,
        clock: Callable[[], dt.datetime] | None = None,
        thresholds: Mapping[Window, int] | None = None,
    ) -> None:
        self._store = store
        self._db = store.db
        self._part = part
        self._clock = clock
        self._thresholds = thresholds or config.TRENDING_THRESHOLDS
        self._minutes: dict[str, MinuteBucket] = {}
        self._totals: dict[TotalKey, int] = {}
        self._boards: dict[tuple[str, Window], Board] = {}
        # What it last wrote per scope: trends/{scope}'s content, or (P > 1, partitions
        # other than 0) its part's.
        self._published: dict[str, dict[str, Any]] = {}
        self._expired_through: tuple[int, int] | None = None  # (minute, hour) last checked
        # Partition 0 of P > 1: the other partitions' lists by (scope, index), and their versions.
        self._parts: dict[tuple[str, int], dict[Window, list[Item]]] = {}
        self._versions: dict[tuple[str, int], Any] = {}
        self._indexed = False  # partitions other than 0: their index exists (checked once)

    def forget(self) -> None:
        self._minutes.clear()
        self._totals.clear()
        self._boards.clear()
        self._published.clear()
        self._expired_through = None
        self._parts.clear()
        self._versions.clear()
        self._indexed = False

    def tick(self, changes: Mapping[str, Mapping[str, Snapshot]], as_of: dt.datetime, *,
             republish: bool) -> TrendStats:
        """Apply the changed minute-bucket shards (bucket id -> shard id -> snapshot, read at
        `as_of`), expire what left its window, and publish the lists that changed; with
        `republish`, every known scope's too (`TrendStats.republished`)."""
        usage = self._store.usage
        before = Usage(reads=usage.reads, writes=usage.writes, deletes=usage.deletes)
        now_minute = minute_of(self._clock() if self._clock else as_of)
        deltas: dict[TotalKey, int] = defaultdict(int)
        entries: list[Entry] = []
        changed = self._changed(changes, now_minute, entries)
        expired = self._expired(now_minute, entries)
        for entry in entries:
            for key, delta in entry.deltas.items():
                deltas[key] += delta
        self._load_totals([key for key, delta in deltas.items() if delta])
        written = self._commit(entries)
        rebuilt = 0
        touched = {key for key, delta in deltas.items() if delta}
        by_board: dict[tuple[str, Window], dict[str, int]] = defaultdict(dict)
        for key in touched:
            by_board[(key.scope, key.window)][key.tag] = self._totals.get(key, 0)
        for (scope, window), values in by_board.items():
            rebuilt += self._update_board(scope, window, values)
        scopes = {scope for scope, _ in by_board}
        parts, parts_at, published = 0, None, 0
        # The first holder of the partition that publishes trends/{scope} after a change of P:
        # the old partitions' last lists may not have reached it (a part not merged yet, a
        # publish fenced out by the change), so every scope is published once.
        if republish:
            scopes |= self._known_scopes()
        if self._part.count == 1:
            published = self._publish({scope: self._lists(scope) for scope in scopes}, as_of)
        elif self._part.index == 0:
            published = self._merge(scopes, as_of)
        else:
            parts, parts_at = self._publish_parts(scopes, as_of)
        after = self._store.usage
        return TrendStats(changed_buckets=changed, expired_buckets=expired,
                          changed_totals=written, rebuilt_lists=rebuilt, published=published,
                          reads=after.reads - before.reads, writes=after.writes - before.writes,
                          deletes=after.deletes - before.deletes, parts=parts, parts_at=parts_at,
                          republished=republish)

    # -- step 1: changed buckets --

    def _changed(self, changes: Mapping[str, Mapping[str, Snapshot]], now_minute: int,
                 entries: list[Entry]) -> int:
        self._load_minutes([bucket for bucket in changes if bucket not in self._minutes])
        minutes = self._db.collection(config.TREND_MINUTES)
        hours = self._db.collection(config.TREND_HOURS)
        changed = 0
        # In tag order, so that a tag's totals tend to be written once per tick.
        for bucket_id in sorted(changes, key=lambda b: tag_of(changes[b])):
            shards = changes[bucket_id]
            bucket = self._minutes.get(bucket_id)
            if bucket is None:
                sample = next(iter(shards.values()))
                minute = int(sample.get("minute"))
                if not in_window("1h", minute, now_minute):
                    continue  # a write that landed after its bucket expired (docs/architecture.md)
                bucket = MinuteBucket(region=str(sample.get("region")),
                                      tag=str(sample.get("tag")), minute=minute)
                self._minutes[bucket_id] = bucket
            delta = 0
            for shard, snapshot in shards.items():
                value = int(snapshot.get("count") or 0)
                delta += value - bucket.shards.get(shard, 0)
                bucket.shards[shard] = value
            if delta == 0:
                continue
            changed += 1
            bucket.count += delta
            hour = bucket_of("24h", bucket.minute)
            # The minute's write carries the change to both windows' totals; its hour's does not.
            counted_in: tuple[Window, ...] = (("1h", "24h") if in_window("24h", hour, now_minute)
                                              else ("1h",))
            entries.append(Entry(
                write=BucketWrite(op="set", ref=minutes.document(bucket_id), fields={
                    "region": bucket.region, "tag": bucket.tag, "minute": bucket.minute,
                    "spread": spread_of(bucket.tag),
                    "count": bucket.count, "shards": dict(bucket.shards),
                    config.EXPIRES_AT: expiry("1h", bucket.minute)}),
                deltas={TotalKey(scope=scope, window=window, tag=bucket.tag): delta
                        for window in counted_in
                        for scope in (bucket.region, config.GLOBAL_SCOPE)}))
            if "24h" in counted_in:
                entries.append(Entry(
                    write=BucketWrite(op="merge", ref=hours.document(
                        hour_id(bucket.region, hour, bucket.tag)), fields={
                            "region": bucket.region, "tag": bucket.tag, "hour": hour,
                            "spread": spread_of(bucket.tag),
                            "count": firestore.Increment(delta),
                            config.EXPIRES_AT: expiry("24h", hour)}),
                    deltas={}))
        return changed

    def _load_minutes(self, bucket_ids: list[str]) -> None:
        minutes = self._db.collection(config.TREND_MINUTES)
        for start in range(0, len(bucket_ids), config.TREND_READ_CHUNK):
            refs = [minutes.document(b) for b in bucket_ids[start:start + config.TREND_READ_CHUNK]]
            for snapshot in self._store.get_all(refs):
                if snapshot.exists:
                    data = snapshot.to_dict() or {}
                    self._minutes[snapshot.id] = MinuteBucket(
                        region=str(data["region"]), tag=str(data["tag"]),
                        minute=int(data["minute"]), count=int(data.get("count") or 0),
                        shards={str(k): int(v) for k, v in (data.get("shards") or {}).items()})

    # -- step 2: expiry --

    def _expired(self, now_minute: int, entries: list[Entry]) -> int:
        """Subtract and delete the buckets of this partition's tags that left their window
        (checked once per minute): `spread` is the tag's home."""
        hour = bucket_of("24h", now_minute)
        if self._expired_through == (now_minute, hour):
            return 0
        expired = 0
        sources: tuple[tuple[Window, str, str], ...] = (("1h", config.TREND_MINUTES, "minute"),
                                                        ("24h", config.TREND_HOURS, "hour"))
        complete = True
        for window, collection, field_name in sources:
            _, buckets = config.WINDOWS[window]
            last = bucket_of(window, now_minute) - buckets
            query = (self._db.collection(collection)
                     .where(filter=FieldFilter("spread", "in", self._part.homes()))
                     .where(filter=FieldFilter(field_name, "<=", last))
                     .limit(config.TREND_EXPIRE_CHUNK))
            snapshots = self._store.query(query)
            complete = complete and len(snapshots) < config.TREND_EXPIRE_CHUNK
            for snapshot in sorted(snapshots, key=lambda s: str(s.get("tag"))):
                data = snapshot.to_dict() or {}
                count = int(data.get("count") or 0)
                if window == "1h":
                    # Our copy includes what this tick added; the query saw the last commit.
                    cached = self._minutes.pop(snapshot.id, None)
                    count = cached.count if cached is not None else count
                tag = str(data["tag"])
                entries.append(Entry(
                    write=BucketWrite(op="delete", ref=snapshot.reference),
                    deltas={TotalKey(scope=str(data["region"]), window=window, tag=tag): -count,
                            TotalKey(scope=config.GLOBAL_SCOPE, window=window, tag=tag): -count}))
                expired += 1
        if complete:  # else the next tick takes the next chunk
            self._expired_through = (now_minute, hour)
        return expired

    # -- step 3: totals, committed with the bucket changes they include --

    def _load_totals(self, keys: list[TotalKey]) -> None:
        missing = [key for key in keys if key not in self._totals]
        coll = self._db.collection(config.TREND_TOTALS)
        for start in range(0, len(missing), config.TREND_READ_CHUNK):
            chunk = missing[start:start + config.TREND_READ_CHUNK]
            by_id = {total_id(key): key for key in chunk}
            for snapshot in self._store.get_all([coll.document(i) for i in by_id]):
                count = int((snapshot.to_dict() or {}).get("count") or 0)
                self._totals[by_id[snapshot.id]] = count

    def _commit(self, entries: list[Entry]) -> int:
        """Commit the bucket writes in order, each commit with the totals its entries changed
        (their values after those entries). Returns the number of total writes."""
        pending = Pending()
        written = 0
        for entry in entries:
            if len(pending.writes) + len(pending.totals) + 6 >= config.ROLLUP_COMMIT_WRITES:
                written += self._flush(pending)
                pending = Pending()
            pending.writes.append(entry.write)
            for key, delta in entry.deltas.items():
                if delta:
                    self._totals[key] = self._totals.get(key, 0) + delta
                    pending.totals.add(key)
        return written + self._flush(pending)

    def _flush(self, pending: Pending) -> int:
        if not pending.writes:
            return 0
        coll = self._db.collection(config.TREND_TOTALS)
        batch = self._db.batch()
        deletes = 0
        for write in pending.writes:
            write.add_to(batch)
            deletes += write.op == "delete"
        for key in sorted(pending.totals):
            ref = coll.document(total_id(key))
            if self._totals[key] > 0:
                batch.set(ref, {"scope": key.scope, "window": key.window, "tag": key.tag,
                                "home": partitions.home_of(key.tag),
                                "count": self._totals[key]})
            else:
                batch.delete(ref)
                deletes += 1
                self._totals.pop(key)
        self._store.commit(batch, deletes=deletes)
        return len(pending.totals)

    # -- step 4: the lists --

    def _update_board(self, scope: str, window: Window, values: dict[str, int]) -> int:
        """Merge changed totals into the (scope, window) list; 1 when it had to be read again."""
        board = self._boards.get((scope, window))
        if board is None:
            self._boards[(scope, window)] = self._read_board(scope, window)
            return 1
        full = len(board.items) >= config.TOP_K
        old_last = rank(board.items[-1]) if full else None
        merged = dict(board.items)
        merged.update(values)
        ranked = sorted(((tag, count) for tag, count in merged.items() if count > 0), key=rank)
        if old_last is not None and (len(ranked) < config.TOP_K
                                     or rank(ranked[config.TOP_K - 1]) > old_last):
            # A listed tag fell below the old last place: an unlisted one may now rank above it.
            self._boards[(scope, window)] = self._read_board(scope, window)
            return 1
        board.items = ranked[:config.TOP_K]
        return 0

    def _read_board(self, scope: str, window: Window) -> Board:
        """The top TOP_K of this partition's tags (all of them with P = 1: that query predates
        `home`)."""
        base = (self._db.collection(config.TREND_TOTALS)
                .where(filter=FieldFilter("scope", "==", scope))
                .where(filter=FieldFilter("window", "==", window)))
        if self._part.count > 1:
            base = base.where(filter=FieldFilter("home", "in", self._part.homes()))
        top = base.order_by("count", direction=firestore.Query.DESCENDING).order_by("tag")
        items = [(str(s.get("tag")), int(s.get("count")))
                 for s in self._store.query(top.limit(config.TOP_K))]
        return Board(items=items)

    # -- step 5: the documents clients read --

    def _lists(self, scope: str) -> dict[Window, list[Item]]:
        """This partition's top TOP_K of `scope` per window."""
        lists: dict[Window, list[Item]] = {}
        for window in kinds.WINDOWS:
            board = self._boards.get((scope, window))
            if board is None:
                board = self._boards[(scope, window)] = self._read_board(scope, window)
            lists[window] = board.items
        return lists

    def _known_scopes(self) -> set[str]:
        """Every scope with a `trends` document (one read each)."""
        known = self._db.collection(config.TRENDS).select(["window"])
        return {snapshot.id for snapshot in self._store.query(known)}

    def _publish(self, lists: Mapping[str, Mapping[Window, list[Item]]],
                 as_of: dt.datetime) -> int:
        """Write trends/{scope} for each scope whose content changed (P = 1, or the merge)."""
        changed: dict[str, dict[str, Any]] = {}
        for scope in sorted(lists):
            content = trends_document(lists[scope], self._thresholds)
            if self._published.get(scope) != content:
                changed[scope] = content
        if not changed:
            return 0
        batch = self._db.batch()
        coll = self._db.collection(config.TRENDS)
        deletes = 0
        for scope, content in changed.items():
            if scope != config.GLOBAL_SCOPE and not content["items"]:
                batch.delete(coll.document(scope))  # a region without events in 24 h goes
                deletes += 1
            else:
                batch.set(coll.document(scope), {**content, "updated_at": as_of})
        self._store.commit(batch, deletes=deletes)
        self._published.update(changed)
        return len(changed)

    def _publish_parts(self, scopes: set[str], as_of: dt.datetime
                       ) -> tuple[int, dt.datetime | None]:
        """P > 1, partitions other than 0: write the parts of the scopes whose lists changed,
        and their versions to the index, in one commit. When the index does not exist (the
        first tick in this P), every known scope's part is written, and the index created.
        Returns the parts written and the commit's time."""
        fresh = False
        if not self._indexed:
            index = self._store.get(partitions.trend_parts_ref(self._db, self._part))
            fresh = not index.exists
            if fresh:
                scopes = scopes | self._known_scopes()
        changed: dict[str, dict[str, Any]] = {}
        for scope in sorted(scopes):
            content = part_document(self._lists(scope))
            if self._published.get(scope) != content:
                changed[scope] = content
        if not changed and not fresh:
            self._indexed = True
            return 0, None
        batch = self._db.batch()
        deletes = 0
        for scope, content in changed.items():
            ref = part_ref(self._db, scope, self._part)
            if any(content["windows"].values()):
                batch.set(ref, content)
            else:
                batch.delete(ref)  # read as empty lists
                deletes += 1
        batch.set(partitions.trend_parts_ref(self._db, self._part), {
            "count": self._part.count, "index": self._part.index,
            "scopes": {scope: as_of for scope in changed}}, merge=True)
        self._store.commit(batch, deletes=deletes)
        self._published.update(changed)
        self._indexed = True
        return len(changed), self._store.lease.written_at

    def _merge(self, scopes: set[str], as_of: dt.datetime) -> int:
        """P > 1, partition 0: read the other partitions' indexes and the parts whose version
        changed, at `as_of`, and publish the scopes that changed here or there."""
        others = partitions.parts(self._part.count)[1:]
        indexes = self._store.get_all([partitions.trend_parts_ref(self._db, other)
                                       for other in others], read_time=as_of)
        if not all(index.exists for index in indexes):
            return 0  # a partition has not published since P changed: its tags would be missing
        stale: dict[tuple[str, int], Any] = {}
        for other, index in zip(others, indexes, strict=True):
            for scope, version in ((index.to_dict() or {}).get("scopes") or {}).items():
                if self._versions.get((scope, other.index)) != version:
                    stale[(scope, other.index)] = version
        keys = sorted(stale)
        for start in range(0, len(keys), config.TREND_READ_CHUNK):
            chunk = keys[start:start + config.TREND_READ_CHUNK]
            refs = [part_ref(self._db, scope, Part(self._part.count, index))
                    for scope, index in chunk]
            for key, snapshot in zip(chunk, self._store.get_all(refs, read_time=as_of),
                                     strict=True):
                self._parts[key] = lists_of(snapshot.to_dict() if snapshot.exists else None)
                self._versions[key] = stale[key]
        merged = {
            scope: merge_lists([self._lists(scope), *(
                self._parts.get((scope, other.index), {}) for other in others)])
            for scope in scopes | {scope for scope, _ in stale}}
        return self._publish(merged, as_of)
