"""What one rollup holder knows of the trends of its tags, and every decision it takes from it:
pure, no I/O.

The trend ledger holds the minute buckets as last written (their count and per-shard values),
the window totals read or written, the exact top K of each (scope, window) (its board), what was
last published per scope, and how far expiry got. Given the changed bucket shards a tick read
(`changed`), it returns the minute, hour and total changes to commit (`Entry`); given the
buckets that left their window (`expire`), their subtractions; `commits` chunks the entries into
commits with the totals that include them; `update_boards` merges the changed totals into the
boards and says which must be read again; `trends_document` and `unpublished` say what a scope's
document holds and whether it changed since it was last published.
`counting.rollup.trend_step` does the reads and commits around it (docs/architecture.md,
"Trends"); tests/unit/test_trend_ledger.py drives it with values alone.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from counting.features.trends.buckets import (
    TotalKey,
    bucket_of,
    expiry,
    hour_id,
    in_window,
    last_expired,
    spread_of,
    total_id,
)
from counting.foundation import config, kinds
from counting.foundation.kinds import Window
from counting.writepath import partitions

Item = tuple[str, int]  # (tag, count)
Lists = dict[Window, list[Item]]  # a scope's lists: per window, its top K
# Room a commit keeps for one more entry: its bucket write, the up to four totals it changes
# (two windows, in its region and in `global`), and the lease's fencing write.
ENTRY_ROOM = 6


def rank(item: Item) -> tuple[int, str]:
    """The Top-K order: count descending, then tag ascending."""
    return -item[1], item[0]


@dataclass(frozen=True, kw_only=True)
class ShardCount:
    """A changed shard of a minute bucket, as the tick's change query read it."""

    region: str
    tag: str
    minute: int
    count: int

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> ShardCount:
        return cls(region=str(data["region"]), tag=str(data["tag"]), minute=int(data["minute"]),
                   count=int(data.get("count") or 0))


@dataclass(frozen=True, kw_only=True)
class ExpiredBucket:
    """A bucket an expiry query found: a minute (the 1 h window's) or an hour (24 h)."""

    id: str
    region: str
    tag: str
    count: int

    @classmethod
    def of(cls, bucket_id: str, data: Mapping[str, Any]) -> ExpiredBucket:
        return cls(id=bucket_id, region=str(data["region"]), tag=str(data["tag"]),
                   count=int(data.get("count") or 0))


@dataclass(kw_only=True)
class MinuteBucket:
    """A minute bucket document as the rollup last wrote it."""

    region: str
    tag: str
    minute: int
    count: int = 0
    shards: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> MinuteBucket:
        return cls(region=str(data["region"]), tag=str(data["tag"]), minute=int(data["minute"]),
                   count=int(data.get("count") or 0),
                   shards={str(k): int(v) for k, v in (data.get("shards") or {}).items()})


class BucketWrite(NamedTuple):
    """A write to a bucket document: a minute's (window 1 h) is replaced by `fields`; an hour's
    (24 h) gets `fields` merged in and their `count` added to its own (the rollup never reads
    hours); `fields` None deletes the bucket."""

    window: Window
    id: str
    fields: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class Entry:
    """A bucket write and the changes it makes to window totals: they are committed together."""

    write: BucketWrite
    deltas: dict[TotalKey, int]


@dataclass(frozen=True, kw_only=True)
class Commit:
    """One commit: bucket writes in order, and the totals they change, each as its document
    after them by id (None deletes it: the total is 0)."""

    buckets: list[BucketWrite]
    totals: dict[str, dict[str, Any] | None]


@dataclass(frozen=True, kw_only=True)
class Touched:
    """What a tick's changes did to the boards."""

    scopes: set[str]  # the scopes with a changed total
    read_again: list[tuple[str, Window]]  # boards to read from the totals: not held, or stale


def net_deltas(entries: Iterable[Entry]) -> dict[TotalKey, int]:
    """Each total's change over `entries`."""
    deltas: dict[TotalKey, int] = defaultdict(int)
    for entry in entries:
        for key, delta in entry.deltas.items():
            deltas[key] += delta
    return deltas


def trends_document(lists: Mapping[Window, list[Item]], thresholds: Mapping[Window, int],
                    top_k: int = config.TOP_K) -> dict[str, Any]:
    """`trends/{scope}` (without `updated_at`): per window its top K and, of those, the tags
    at or above the window's threshold (so `trending` holds at most K tags, the highest);
    the 24 h window again at the top level. Bounded whatever clients send: 2 x 100 tags of at
    most 100 characters, each listed at most twice per window, three times for 24 h."""
    windows = {
        window: {
            "items": [{"tag": tag, "count": count} for tag, count in items[:top_k]],
            "trending": sorted(tag for tag, count in items[:top_k]
                               if count >= thresholds[window]),
        }
        for window, items in lists.items()
    }
    return {"window": kinds.DEFAULT_WINDOW, **windows[kinds.DEFAULT_WINDOW], "windows": windows}


def trends_fields(scope: str, content: Mapping[str, Any], as_of: dt.datetime
                  ) -> dict[str, Any] | None:
    """`trends/{scope}` as written at `as_of`; None deletes it: a region without events in 24 h
    goes, `global` stays with empty lists."""
    if scope != config.GLOBAL_SCOPE and not content["items"]:
        return None
    return {**content, "updated_at": as_of}


class TrendLedger:
    """The trends state of one holder, for the tags of its partition. `thresholds` (per window)
    make a listed tag trending; `top_k` is the length of every list."""

    def __init__(self, *, thresholds: Mapping[Window, int] | None = None,
                 top_k: int = config.TOP_K) -> None:
        self.thresholds = thresholds or config.TRENDING_THRESHOLDS
        self.top_k = top_k
        self.minutes: dict[str, MinuteBucket] = {}
        self.totals: dict[TotalKey, int] = {}
        self.boards: dict[tuple[str, Window], list[Item]] = {}
        # What it last wrote per scope: trends/{scope}'s content, or (P > 1, partitions other
        # than 0) its part's.
        self.published: dict[str, dict[str, Any]] = {}
        self.expired_through: tuple[int, int] | None = None  # (minute, hour) last checked

    def forget(self) -> None:
        """Drop everything: the next ticks read again what they need."""
        self.minutes.clear()
        self.totals.clear()
        self.boards.clear()
        self.published.clear()
        self.expired_through = None

    # -- step 1: changed buckets --

    def unheld_minutes(self, bucket_ids: Iterable[str]) -> list[str]:
        """The buckets whose document must be read before their changes are taken in."""
        return [bucket for bucket in bucket_ids if bucket not in self.minutes]

    def hold_minutes(self, documents: Mapping[str, Mapping[str, Any]]) -> None:
        """Take in minute bucket documents read, by id (one not found is a new bucket)."""
        for bucket_id, data in documents.items():
            self.minutes[bucket_id] = MinuteBucket.of(data)

    def changed(self, changes: Mapping[str, Mapping[str, ShardCount]], now_minute: int
                ) -> tuple[int, list[Entry]]:
        """Take in the changed shards (bucket id -> shard id -> value): the number of buckets
        whose count changed, and the writes and total changes that carry them."""
        entries: list[Entry] = []
        changed = 0
        # In tag order, so that a tag's totals tend to be written once per tick.
        for bucket_id in sorted(changes, key=lambda b: next(iter(changes[b].values())).tag):
            shards = changes[bucket_id]
            bucket = self.minutes.get(bucket_id)
            if bucket is None:
                sample = next(iter(shards.values()))
                if not in_window("1h", sample.minute, now_minute):
                    continue  # a write that landed after its bucket expired (docs/architecture.md)
                bucket = MinuteBucket(region=sample.region, tag=sample.tag, minute=sample.minute)
                self.minutes[bucket_id] = bucket
            delta = 0
            for shard, value in shards.items():
                delta += value.count - bucket.shards.get(shard, 0)
                bucket.shards[shard] = value.count
            if delta == 0:
                continue
            changed += 1
            bucket.count += delta
            hour = bucket_of("24h", bucket.minute)
            # The minute's write carries the change to both windows' totals; its hour's does not.
            counted_in: tuple[Window, ...] = (("1h", "24h") if in_window("24h", hour, now_minute)
                                              else ("1h",))
            entries.append(Entry(
                write=BucketWrite("1h", bucket_id, {
                    "region": bucket.region, "tag": bucket.tag, "minute": bucket.minute,
                    "spread": spread_of(bucket.tag),
                    "count": bucket.count, "shards": dict(bucket.shards),
                    config.EXPIRES_AT: expiry("1h", bucket.minute)}),
                deltas={TotalKey(scope=scope, window=window, tag=bucket.tag): delta
                        for window in counted_in
                        for scope in (bucket.region, config.GLOBAL_SCOPE)}))
            if "24h" in counted_in:
                entries.append(Entry(
                    write=BucketWrite("24h", hour_id(bucket.region, hour, bucket.tag), {
                        "region": bucket.region, "tag": bucket.tag, "hour": hour,
                        "spread": spread_of(bucket.tag), "count": delta,
                        config.EXPIRES_AT: expiry("24h", hour)}),
                    deltas={}))
        return changed, entries

    # -- step 2: expiry --

    def expiry_due(self, now_minute: int) -> dict[Window, int]:
        """Per window, the last bucket that left it: the expiry queries to run (once per minute
        when they find everything; none when this minute was checked)."""
        if self.expired_through == (now_minute, bucket_of("24h", now_minute)):
            return {}
        return {window: last_expired(window, now_minute) for window in kinds.WINDOWS}

    def expire(self, now_minute: int, found: Mapping[Window, Sequence[ExpiredBucket]]
               ) -> list[Entry]:
        """Subtract and delete the buckets the queries of `expiry_due` found, each up to
        TREND_EXPIRE_CHUNK of them: a full chunk leaves the rest to the next tick."""
        if not found:
            return []
        entries: list[Entry] = []
        for window, buckets in found.items():
            for bucket in sorted(buckets, key=lambda b: b.tag):
                count = bucket.count
                if window == "1h":
                    # Our copy includes what this tick added; the query saw the last commit.
                    cached = self.minutes.pop(bucket.id, None)
                    count = cached.count if cached is not None else count
                entries.append(Entry(
                    write=BucketWrite(window, bucket.id, None),
                    deltas={TotalKey(scope=bucket.region, window=window, tag=bucket.tag): -count,
                            TotalKey(scope=config.GLOBAL_SCOPE, window=window,
                                     tag=bucket.tag): -count}))
        if all(len(buckets) < config.TREND_EXPIRE_CHUNK for buckets in found.values()):
            self.expired_through = (now_minute, bucket_of("24h", now_minute))
        return entries

    # -- step 3: totals, committed with the bucket changes they include --

    def unheld_totals(self, entries: Iterable[Entry]) -> list[TotalKey]:
        """The totals `entries` change that must be read first: every one an entry changes,
        even when the tick's changes to it cancel out (a minute added, an expired one
        subtracted), since `commits` writes each from its value before them."""
        changed = dict.fromkeys(key for entry in entries
                                for key, delta in entry.deltas.items() if delta)
        return [key for key in changed if key not in self.totals]

    def hold_totals(self, counts: Mapping[TotalKey, int]) -> None:
        """Take in totals read (0 for one that does not exist)."""
        self.totals.update(counts)

    def commits(self, entries: Iterable[Entry]) -> list[Commit]:
        """The entries in order, chunked into commits, each with the totals its entries changed
        (their values after those entries). The totals held are those values from now on: a
        commit that fails leaves a ledger to forget."""
        commits: list[Commit] = []
        writes: list[BucketWrite] = []
        changed: set[TotalKey] = set()
        for entry in entries:
            if len(writes) + len(changed) + ENTRY_ROOM >= config.ROLLUP_COMMIT_WRITES:
                if writes:
                    commits.append(self._commit(writes, changed))
                writes, changed = [], set()
            writes.append(entry.write)
            for key, delta in entry.deltas.items():
                if delta:
                    self.totals[key] = self.totals.get(key, 0) + delta
                    changed.add(key)
        if writes:
            commits.append(self._commit(writes, changed))
        return commits

    def _commit(self, writes: list[BucketWrite], changed: set[TotalKey]) -> Commit:
        totals: dict[str, dict[str, Any] | None] = {}
        for key in sorted(changed):
            count = self.totals[key]
            if count > 0:
                totals[total_id(key)] = {"scope": key.scope, "window": key.window,
                                         "tag": key.tag, "home": partitions.tag_home(key.tag),
                                         "count": count}
            else:
                totals[total_id(key)] = None
                self.totals.pop(key)
        return Commit(buckets=writes, totals=totals)

    # -- step 4: the boards --

    def update_boards(self, entries: Iterable[Entry]) -> Touched:
        """Merge the totals `entries` changed (now committed) into the boards."""
        touched = {key for key, delta in net_deltas(entries).items() if delta}
        by_board: dict[tuple[str, Window], dict[str, int]] = defaultdict(dict)
        for key in touched:
            by_board[(key.scope, key.window)][key.tag] = self.totals.get(key, 0)
        read_again = [board for board, values in by_board.items()
                      if not self._merge_board(board, values)]
        return Touched(scopes={scope for scope, _ in by_board}, read_again=read_again)

    def _merge_board(self, board: tuple[str, Window], values: dict[str, int]) -> bool:
        """Merge changed totals into a board; False when it must be read again (it is then no
        longer held)."""
        items = self.boards.get(board)
        if items is None:
            return False
        full = len(items) >= self.top_k
        old_last = rank(items[-1]) if full else None
        merged = dict(items)
        merged.update(values)
        ranked = sorted(((tag, count) for tag, count in merged.items() if count > 0), key=rank)
        if old_last is not None and (len(ranked) < self.top_k
                                     or rank(ranked[self.top_k - 1]) > old_last):
            # A listed tag fell below the old last place: an unlisted one may now rank above it.
            del self.boards[board]
            return False
        self.boards[board] = ranked[:self.top_k]
        return True

    def unheld_boards(self, scope: str) -> list[tuple[str, Window]]:
        """The boards of `scope` to read before its lists are known."""
        return [(scope, window) for window in kinds.WINDOWS if (scope, window) not in self.boards]

    def hold_board(self, scope: str, window: Window, items: list[Item]) -> None:
        """Take in a board read from the totals: their top K, in rank order."""
        self.boards[(scope, window)] = items

    def lists(self, scope: str) -> Lists:
        """The top K of `scope` per window (every board held)."""
        return {window: self.boards[(scope, window)] for window in kinds.WINDOWS}

    # -- step 5: the documents clients read --

    def trends_document(self, lists: Mapping[Window, list[Item]]) -> dict[str, Any]:
        return trends_document(lists, self.thresholds, self.top_k)

    def unpublished(self, contents: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Of the contents of scopes' documents, those that changed since last published."""
        return {scope: content for scope, content in contents.items()
                if self.published.get(scope) != content}

    def remember(self, contents: Mapping[str, dict[str, Any]]) -> None:
        """The contents were published."""
        self.published.update(contents)
