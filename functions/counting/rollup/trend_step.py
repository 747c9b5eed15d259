"""The trends step of each rollup tick: the I/O around the pure `counting.rollup.trend_ledger`.

`TrendRollup.tick` reads through the `counting.rollup.store` what the ledger needs (the documents of
buckets met for the first time, the buckets that left their window, the totals and boards it
does not hold), hands the values to the ledger, and commits its plans there (every commit
fenced by the lease): the bucket changes with the totals they include, then `trends/{scope}`,
or with P > 1 the parts and their merge (`counting.rollup.trend_merge`). How and why, once:
docs/architecture.md, "Trends".
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from google.cloud import firestore

from counting.features.trends.buckets import minute_of, total_id
from counting.foundation import config
from counting.foundation.kinds import Window
from counting.rollup.store import Store
from counting.rollup.trend_ledger import (
    ExpiredBucket,
    Item,
    Lists,
    ShardCount,
    TrendLedger,
    trends_fields,
)
from counting.rollup.trend_merge import Parts, index_document, part_document, part_fields
from counting.rollup.usage import Usage
from counting.writepath import partitions
from counting.writepath.partitions import WHOLE, Part

Snapshot = firestore.DocumentSnapshot[firestore.DocumentReference]


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


class TrendRollup:
    """The trends step of one lease holder of partition `part`: the tags whose home it owns.
    `clock` (for tests) replaces the tick instant as "now" when deciding which buckets are still
    in their window.

    With P = 1 it publishes `trends/{scope}` itself. With P > 1, partitions 1..P-1 (up to 15:
    the partitions with tags) publish their
    lists of a scope to `trends/{scope}/parts/{P}-{index}`, and in the same commit the scope and
    the tick's instant (the part's version) to their index `internal/trend_parts-{P}-{index}`;
    partition 0 merges: every tick it reads their indexes at the tick's instant, the parts
    whose version changed (same instant: each index and its parts are consistent), and rewrites
    `trends/{scope}` from its own lists and the others' (`merge.merge_lists`). It merges nothing
    while an index is missing: a partition that has not yet published since P changed would be
    left out. A partition's first tick in a P publishes every known scope (the ids of `trends`),
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
        self._part = part
        self._clock = clock
        self._ledger = TrendLedger(thresholds=thresholds)
        self._parts = Parts()  # P > 1

    def forget(self) -> None:
        self._ledger.forget()
        self._parts.forget()

    def tick(self, changes: Mapping[str, Mapping[str, Snapshot]], as_of: dt.datetime, *,
             republish: bool) -> TrendStats:
        """Apply the changed minute-bucket shards (bucket id -> shard id -> snapshot, read at
        `as_of`), expire what left its window, and publish the lists that changed; with
        `republish`, every known scope's too (`TrendStats.republished`). A partition beyond the
        first 16 has no tags (`partitions.tag_home`): nothing to do."""
        if not self._part.tag_homes():
            return TrendStats(changed_buckets=0, expired_buckets=0, changed_totals=0,
                              rebuilt_lists=0, published=0, reads=0, writes=0, deletes=0)
        store, ledger = self._store, self._ledger
        usage = store.usage
        before = Usage(reads=usage.reads, writes=usage.writes, deletes=usage.deletes)
        now_minute = minute_of(self._clock() if self._clock else as_of)
        shards = {bucket: {shard: ShardCount.of(snapshot.to_dict() or {})
                           for shard, snapshot in found.items()}
                  for bucket, found in changes.items()}
        ledger.hold_minutes(store.trend_minutes(ledger.unheld_minutes(shards)))
        changed, entries = ledger.changed(shards, now_minute)
        expiring = ledger.expire(now_minute, self._expired(now_minute))
        entries += expiring
        unheld = {total_id(key): key for key in ledger.unheld_totals(entries)}
        ledger.hold_totals({unheld[total]: count
                            for total, count in store.trend_totals(list(unheld)).items()})
        written = 0
        for commit in ledger.commits(entries):
            store.commit_trend_buckets(commit.buckets, commit.totals)
            written += len(commit.totals)
        touched = ledger.update_boards(entries)
        self._read_boards(touched.read_again)
        scopes = set(touched.scopes)
        # The first holder of the partition that publishes trends/{scope} after a change of P:
        # the old partitions' last lists may not have reached it (a part not merged yet, a
        # publish fenced out by the change), so every scope is published once.
        if republish:
            scopes |= store.trend_scopes()
        parts, parts_at, published = 0, None, 0
        if self._part.count == 1:
            published = self._publish(self._lists(scopes), as_of)
        elif self._part.index == 0:
            published = self._merge(scopes, as_of)
        else:
            parts, parts_at = self._publish_parts(scopes, as_of)
        after = store.usage
        return TrendStats(changed_buckets=changed, expired_buckets=len(expiring),
                          changed_totals=written, rebuilt_lists=len(touched.read_again),
                          published=published, reads=after.reads - before.reads,
                          writes=after.writes - before.writes,
                          deletes=after.deletes - before.deletes, parts=parts, parts_at=parts_at,
                          republished=republish)

    def _expired(self, now_minute: int) -> dict[Window, list[ExpiredBucket]]:
        """The buckets of this partition's tags (their `spread` is the tag's home) that left
        their window, per window, when the ledger has expiry due."""
        return {window: [ExpiredBucket.of(bucket, data) for bucket, data in
                         self._store.expired_trend_buckets(window, last, self._part.tag_homes(),
                                                           config.TREND_EXPIRE_CHUNK)]
                for window, last in self._ledger.expiry_due(now_minute).items()}

    def _read_boards(self, boards: Iterable[tuple[str, Window]]) -> None:
        """Read boards from the totals: the top K of this partition's tags (of all of them with
        P = 1)."""
        homes = self._part.tag_homes() if self._part.count > 1 else None
        for scope, window in boards:
            self._ledger.hold_board(scope, window, self._store.top_trend_totals(
                scope, window, homes, self._ledger.top_k))

    def _lists(self, scopes: Iterable[str]) -> dict[str, Lists]:
        """This partition's lists of each scope, its boards read where not held."""
        lists: dict[str, Lists] = {}
        for scope in scopes:
            self._read_boards(self._ledger.unheld_boards(scope))
            lists[scope] = self._ledger.lists(scope)
        return lists

    def _publish(self, lists: Mapping[str, Mapping[Window, list[Item]]],
                 as_of: dt.datetime) -> int:
        """Write trends/{scope} for each scope whose content changed (P = 1, or the merge)."""
        ledger = self._ledger
        changed = ledger.unpublished({scope: ledger.trends_document(lists[scope])
                                      for scope in sorted(lists)})
        if not changed:
            return 0
        self._store.publish_trends({scope: trends_fields(scope, content, as_of)
                                    for scope, content in changed.items()})
        ledger.remember(changed)
        return len(changed)

    def _publish_parts(self, scopes: set[str], as_of: dt.datetime
                       ) -> tuple[int, dt.datetime | None]:
        """P > 1, partitions other than 0: write the parts of the scopes whose lists changed,
        and their versions to the index, in one commit. When the index does not exist (the
        first tick in this P), every known scope's part is written, and the index created.
        Returns the parts written and the commit's time."""
        fresh = False
        if not self._parts.indexed:
            fresh = self._store.trend_part_index(self._part) is None
            if fresh:
                scopes = scopes | self._store.trend_scopes()
        lists = self._lists(sorted(scopes))
        changed = self._ledger.unpublished({scope: part_document(lists[scope])
                                            for scope in lists})
        if not changed and not fresh:
            self._parts.indexed = True
            return 0, None
        parts_at = self._store.publish_trend_parts(
            self._part, {scope: part_fields(content) for scope, content in changed.items()},
            index_document(self._part, changed, as_of))
        self._ledger.remember(changed)
        self._parts.indexed = True
        return len(changed), parts_at

    def _merge(self, scopes: set[str], as_of: dt.datetime) -> int:
        """P > 1, partition 0: read the other partitions' indexes and the parts whose version
        changed, at `as_of`, and publish the scopes that changed here or there."""
        others = [part for part in partitions.parts(self._part.count)[1:] if part.tag_homes()]
        stale = self._parts.stale(others, self._store.trend_part_indexes(others, as_of))
        if stale is None:
            return 0
        keys = sorted(stale)
        found = self._store.trend_parts(
            [(scope, Part(self._part.count, index)) for scope, index in keys], as_of)
        for key, document in zip(keys, found, strict=True):
            self._parts.take(key, document, stale[key])
        lists = self._lists(scopes | {scope for scope, _ in stale})
        return self._publish({scope: self._parts.merged(scope, own, others, self._ledger.top_k)
                              for scope, own in lists.items()}, as_of)
