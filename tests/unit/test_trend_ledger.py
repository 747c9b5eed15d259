"""The trends step's pure core (`counting.rollup.trend_ledger`) and the merge of partitions'
lists (`counting.rollup.trend_merge`), driven with values alone: bucket changes, expiry, totals
and their commits, the boards, what is published."""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter
from collections.abc import Mapping
from typing import Any

from counting.features.trends.buckets import (
    TotalKey,
    bucket_of,
    hour_id,
    in_window,
    minute_id,
    minute_of,
    total_id,
)
from counting.foundation import config, kinds
from counting.foundation.kinds import Window
from counting.rollup import trend_merge
from counting.rollup.trend_ledger import (
    BucketWrite,
    Commit,
    Entry,
    ExpiredBucket,
    Item,
    ShardCount,
    TrendLedger,
    rank,
    trends_document,
    trends_fields,
)
from counting.writepath import partitions
from counting.writepath.partitions import Part
from hypothesis import given, settings
from hypothesis import strategies as st

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
NOW = minute_of(T0)
GLOBAL = config.GLOBAL_SCOPE


def shard(tag: str, count: int, *, region: str = "eu", minute: int = NOW) -> ShardCount:
    return ShardCount(region=region, tag=tag, minute=minute, count=count)


def key(scope: str, window: Window, tag: str) -> TotalKey:
    return TotalKey(scope=scope, window=window, tag=tag)


class Documents:
    """What the ledger's commits leave in Firestore, and the reads the step makes of them: the
    tests' stand-in for the step and the store."""

    def __init__(self) -> None:
        self.minutes: dict[str, dict[str, Any]] = {}
        self.hours: dict[str, dict[str, Any]] = {}
        self.totals: dict[str, dict[str, Any]] = {}
        self.deleted: Counter[str] = Counter()  # bucket id -> deletes

    def apply(self, commit: Commit) -> None:
        for window, bucket, fields in commit.buckets:
            found = self.minutes if window == "1h" else self.hours
            if fields is None:
                assert found.pop(bucket, None) is not None, f"{bucket} deleted twice"
                self.deleted[bucket] += 1
            elif window == "1h":
                found[bucket] = dict(fields)
            else:
                before = found.get(bucket, {}).get("count", 0)
                found[bucket] = {**found.get(bucket, {}), **fields,
                                 "count": before + fields["count"]}
        for total, fields in commit.totals.items():
            if fields is None:
                self.totals.pop(total, None)
            else:
                self.totals[total] = dict(fields)

    def expired(self, window: Window, last: int) -> list[ExpiredBucket]:
        found, field = (self.minutes, "minute") if window == "1h" else (self.hours, "hour")
        return [ExpiredBucket.of(bucket, data) for bucket, data in found.items()
                if data[field] <= last][:config.TREND_EXPIRE_CHUNK]

    def top(self, scope: str, window: Window, k: int) -> list[Item]:
        return sorted(((d["tag"], d["count"]) for d in self.totals.values()
                       if d["scope"] == scope and d["window"] == window), key=rank)[:k]

    def count(self, total: TotalKey) -> int:
        return int(self.totals.get(total_id(total), {}).get("count", 0))


def tick(book: TrendLedger, docs: Documents, changes: Mapping[str, Mapping[str, ShardCount]],
         now_minute: int) -> list[Entry]:
    """One trends step as `counting.rollup.trend_step` runs it, on `docs`."""
    book.hold_minutes({bucket: docs.minutes[bucket] for bucket in book.unheld_minutes(changes)
                       if bucket in docs.minutes})
    _, entries = book.changed(changes, now_minute)
    entries += book.expire(now_minute, {window: docs.expired(window, last)
                                        for window, last in book.expiry_due(now_minute).items()})
    book.hold_totals({total: docs.count(total) for total in book.unheld_totals(entries)})
    for commit in book.commits(entries):
        docs.apply(commit)
    for scope, window in book.update_boards(entries).read_again:
        book.hold_board(scope, window, docs.top(scope, window, book.top_k))
    return entries


# --- changed buckets ---------------------------------------------------------------------------


def test_a_changed_shard_goes_to_its_minute_its_hour_and_four_totals() -> None:
    """A new bucket's count is written whole to the minute, added to its hour, and to both
    windows' totals in its region and in global."""
    book = TrendLedger()
    bucket = minute_id("eu", NOW, "x")
    changed, entries = book.changed({bucket: {"0": shard("x", 3)}}, NOW)
    minute, hour = entries
    assert changed == 1
    assert minute.write.window == "1h" and minute.write.id == bucket
    assert minute.write.fields is not None
    assert minute.write.fields["count"] == 3 and minute.write.fields["shards"] == {"0": 3}
    assert minute.deltas == {key(scope, window, "x"): 3 for scope in ("eu", GLOBAL)
                             for window in kinds.WINDOWS}
    assert hour.write == BucketWrite("24h", hour_id("eu", bucket_of("24h", NOW), "x"),
                                     hour.write.fields)
    assert hour.write.fields is not None and hour.write.fields["count"] == 3
    assert hour.deltas == {}


def test_only_a_shards_growth_counts() -> None:
    """Against the bucket document read, a shard read again adds its growth only, and one read
    unchanged adds nothing."""
    book = TrendLedger()
    bucket = minute_id("eu", NOW, "x")
    book.hold_minutes({bucket: {"region": "eu", "tag": "x", "minute": NOW, "count": 5,
                                "shards": {"0": 3, "1": 2}}})
    assert book.unheld_minutes([bucket, "other"]) == ["other"]
    assert book.changed({bucket: {"0": shard("x", 3)}}, NOW) == (0, [])
    changed, entries = book.changed({bucket: {"0": shard("x", 3), "1": shard("x", 4)}}, NOW)
    assert changed == 1 and entries[0].write.fields is not None
    assert entries[0].write.fields["count"] == 7
    assert set(entries[0].deltas.values()) == {2}


def test_a_write_that_lands_after_its_bucket_left_the_hour_is_not_counted() -> None:
    """A new bucket whose minute is no longer in the 1 h window changes nothing."""
    book = TrendLedger()
    late = NOW - 60
    assert not in_window("1h", late, NOW)
    assert book.changed({minute_id("eu", late, "x"): {"0": shard("x", 1, minute=late)}},
                        NOW) == (0, [])


# --- expiry ------------------------------------------------------------------------------------


def test_expiry_is_checked_once_a_minute_unless_a_chunk_was_full() -> None:
    """After queries that found everything, expiry waits for the next minute; a full chunk
    means more are left, and the next tick queries again."""
    book = TrendLedger()
    due = book.expiry_due(NOW)
    assert due == {"1h": NOW - 60, "24h": bucket_of("24h", NOW) - 24}
    assert book.expire(NOW, {"1h": [], "24h": []}) == []
    assert book.expiry_due(NOW) == {} and book.expiry_due(NOW + 1) != {}
    full = [ExpiredBucket(id=f"b{n}", region="eu", tag=f"t{n}", count=1)
            for n in range(config.TREND_EXPIRE_CHUNK)]
    assert len(book.expire(NOW + 1, {"1h": full, "24h": []})) == len(full)
    assert book.expiry_due(NOW + 1) != {}


def test_an_expired_minute_subtracts_the_count_the_ledger_holds() -> None:
    """The query saw the last commit; the ledger's copy holds this tick's change too, and that
    is what the totals include."""
    book = TrendLedger()
    bucket = minute_id("eu", NOW, "x")
    book.changed({bucket: {"0": shard("x", 2)}}, NOW)
    later = NOW + 60
    book.changed({bucket: {"0": shard("x", 5)}}, later)  # held: taken in, then expired
    (entry,) = book.expire(later, {"1h": [ExpiredBucket(id=bucket, region="eu", tag="x",
                                                        count=2)], "24h": []})
    assert entry.write == BucketWrite("1h", bucket, None)
    assert entry.deltas == {key("eu", "1h", "x"): -5, key(GLOBAL, "1h", "x"): -5}
    assert book.unheld_minutes([bucket]) == [bucket]


# --- totals and commits ------------------------------------------------------------------------


def test_commits_carry_their_entries_and_the_totals_after_them() -> None:
    """Entries go in order, chunked so that each commit (with the lease's write) fits; each
    commit writes the totals its entries changed, at their values after them; a total that
    reaches 0 is deleted and no longer held."""
    book = TrendLedger()
    tags = [f"t{n:03d}" for n in range(150)]
    changes = {minute_id("eu", NOW, tag): {"0": shard(tag, 1)} for tag in tags}
    _, entries = book.changed(changes, NOW)
    book.hold_totals(dict.fromkeys(book.unheld_totals(entries), 0))
    commits = book.commits(entries)
    assert len(commits) > 1
    assert [w for commit in commits for w in commit.buckets] == [e.write for e in entries]
    for commit in commits:
        assert len(commit.buckets) + len(commit.totals) + 1 <= config.ROLLUP_COMMIT_WRITES
    first = key("eu", "1h", tags[0])
    assert commits[0].totals[total_id(first)] == {
        "scope": "eu", "window": "1h", "tag": tags[0], "home": partitions.tag_home(tags[0]),
        "count": 1}
    (gone,) = book.commits([Entry(write=BucketWrite("1h", "b", None), deltas={first: -1})])
    assert gone.totals == {total_id(first): None} and first not in book.totals


def test_only_totals_not_held_are_read() -> None:
    """Totals the ledger holds are not read again; those a tick does not change are not read."""
    book = TrendLedger()
    held, new = key("eu", "1h", "a"), key("eu", "1h", "b")
    book.hold_totals({held: 4})
    entries = [Entry(write=BucketWrite("1h", "m", {}), deltas={held: 1, new: 2,
                                                               key("eu", "24h", "c"): 0})]
    assert book.unheld_totals(entries) == [new]


def test_a_total_whose_changes_cancel_out_is_read_all_the_same() -> None:
    """A new holder that adds a minute to a total and subtracts an expired one in one tick reads
    the total: its commits write it from its value, not from 0."""
    book, docs = TrendLedger(), Documents()
    earlier = NOW - 61
    tick(book, docs, {minute_id("eu", earlier, "x"): {"0": shard("x", 1, minute=earlier)}},
         earlier)
    tick(book, docs, {minute_id("eu", NOW - 30, "x"): {"0": shard("x", 4, minute=NOW - 30)}},
         NOW - 30)
    book.forget()
    tick(book, docs, {minute_id("eu", NOW, "x"): {"0": shard("x", 1)}}, NOW)
    assert docs.count(key("eu", "1h", "x")) == 5 and docs.count(key(GLOBAL, "1h", "x")) == 5


# --- boards ------------------------------------------------------------------------------------


def changed_totals(book: TrendLedger, deltas: dict[TotalKey, int]) -> list[Entry]:
    """Entries that change totals by `deltas`, committed."""
    entries = [Entry(write=BucketWrite("1h", "m", {}), deltas=deltas)]
    book.hold_totals({total: 0 for total in book.unheld_totals(entries)})
    book.commits(entries)
    return entries


def test_a_board_takes_in_changes_until_a_listed_tag_falls_below_the_last_place() -> None:
    """Changed totals are merged into a held board; once a listed tag falls below the old
    last place, an unlisted tag may rank above it: the board is read again."""
    book = TrendLedger(top_k=3)
    book.hold_totals({key("eu", "1h", tag): n for tag, n in (("a", 5), ("b", 4), ("c", 3))})
    for window in kinds.WINDOWS:
        book.hold_board("eu", window, [("a", 5), ("b", 4), ("c", 3)])
    touched = book.update_boards(changed_totals(book, {key("eu", "1h", "d"): 6}))
    assert touched.scopes == {"eu"} and touched.read_again == []
    assert book.lists("eu")["1h"] == [("d", 6), ("a", 5), ("b", 4)]
    touched = book.update_boards(changed_totals(book, {key("eu", "1h", "a"): -4}))
    assert touched.read_again == [("eu", "1h")]
    assert book.unheld_boards("eu") == [("eu", "1h")]


def test_a_board_not_held_is_read() -> None:
    """A scope's first change reads its board; its other window's is read for its lists."""
    book = TrendLedger()
    touched = book.update_boards(changed_totals(book, {key("us", "24h", "x"): 1}))
    assert touched.read_again == [("us", "24h")]
    assert book.unheld_boards("us") == [("us", "1h"), ("us", "24h")]


# --- what is published -------------------------------------------------------------------------


def test_a_scope_is_published_when_its_content_changes() -> None:
    """A scope's document is written when its content differs from the last one published."""
    book = TrendLedger(thresholds={"1h": 2, "24h": 5})
    lists: dict[Window, list[Item]] = {"1h": [("x", 2), ("y", 1)], "24h": [("x", 2)]}
    content = book.trends_document(lists)
    assert content["windows"]["1h"]["trending"] == ["x"] and content["trending"] == []
    assert content["items"] == [{"tag": "x", "count": 2}] and content["window"] == "24h"
    assert book.unpublished({"eu": content}) == {"eu": content}
    book.remember({"eu": content})
    assert book.unpublished({"eu": content}) == {}
    assert book.unpublished({"eu": book.trends_document({**lists, "24h": []})}) != {}


def test_a_region_without_events_goes_and_global_stays() -> None:
    """An empty region's document is deleted; `global` is written with empty lists."""
    empty = trends_document({window: [] for window in kinds.WINDOWS},
                            config.TRENDING_THRESHOLDS)
    assert trends_fields("eu", empty, T0) is None
    assert trends_fields(GLOBAL, empty, T0) == {**empty, "updated_at": T0}


def firestore_size(value: object) -> int:
    """Firestore's storage size of a value (string: UTF-8 bytes + 1, integer: 8, map: field
    names + 1 plus values), as its document size limit counts it."""
    if isinstance(value, str):
        return len(value.encode()) + 1
    if isinstance(value, bool | int | float) or value is None:
        return 8
    if isinstance(value, list):
        return sum(firestore_size(item) for item in value)
    assert isinstance(value, dict)
    return sum(len(str(k).encode()) + 1 + firestore_size(v) for k, v in value.items())


def test_a_trends_document_stays_far_below_one_mib() -> None:
    """Whatever clients send, trends/{scope} holds at most 100 tags of 100 four-byte characters
    per window, each in `items` and `trending` (24 h twice): under 1/4 of Firestore's 1 MiB."""
    widest = [(f"{n:03d}" + "\U0001f600" * (config.MAX_TAG_CHARS - 3), 2**63 - 1)
              for n in range(5 * config.TOP_K)]  # more tags than listed, all trending
    lists: dict[Window, list[Item]] = {w: widest for w in kinds.WINDOWS}
    document = trends_document(lists, {w: 0 for w in kinds.WINDOWS})
    assert all(len(document["windows"][w]["trending"]) == config.TOP_K for w in kinds.WINDOWS)
    assert firestore_size(document) < 1024 * 1024 // 4


@given(st.lists(st.tuples(st.text(min_size=1, max_size=5), st.integers(1, 50)), max_size=30))
def test_rank_orders_count_desc_then_tag_asc(items: list[tuple[str, int]]) -> None:
    ranked = sorted(items, key=rank)
    for (tag_a, count_a), (tag_b, count_b) in itertools.pairwise(ranked):
        assert count_a > count_b or (count_a == count_b and tag_a <= tag_b)


# --- the ledger over time: invariants ------------------------------------------------------------

REGIONS = ("eu", "us")
TAGS = [f"t{n}" for n in range(8)]
# A step: minutes to advance (a day and more now and then), the events at the new minute
# (region, tag, shard), and whether the holder is replaced (forgets everything) before it ticks.
steps = st.lists(st.tuples(
    st.one_of(st.integers(0, 3), st.integers(4, 70), st.integers(1400, 1500)),
    st.lists(st.tuples(st.sampled_from(REGIONS), st.sampled_from(TAGS), st.integers(0, 2)),
             max_size=12),
    st.booleans()), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_totals_equal_the_events_in_their_window_and_boards_their_exact_top(
    run: list[tuple[int, list[tuple[str, str, int]], bool]]
) -> None:
    """Whatever the events, the time between ticks and the holders: after each tick every
    total equals the events of its window, the ledger holds what the documents hold, each board
    held is the exact top K of its totals, and every bucket is deleted once, when it left its
    window."""
    book, docs = TrendLedger(top_k=3), Documents()
    shards: dict[tuple[str, str], ShardCount] = {}
    events: list[tuple[int, str, str]] = []  # (minute, region, tag)
    now = NOW
    for advance, written, replaced in run:
        now += advance
        changes: dict[str, dict[str, ShardCount]] = {}
        for region, tag, n in written:
            bucket = minute_id(region, now, tag)
            old = shards.get((bucket, str(n)))
            shards[(bucket, str(n))] = changes.setdefault(bucket, {})[str(n)] = shard(
                tag, (old.count if old else 0) + 1, region=region, minute=now)
            events.append((now, region, tag))
        if replaced:
            book.forget()
        tick(book, docs, changes, now)
        for window in kinds.WINDOWS:
            tally = Counter((scope, tag) for minute, region, tag in events
                            for scope in (region, GLOBAL)
                            if in_window(window, bucket_of(window, minute), now))
            for scope, tag in itertools.product((*REGIONS, GLOBAL), TAGS):
                total = key(scope, window, tag)
                assert docs.count(total) == tally[(scope, tag)], total
                assert book.totals.get(total, docs.count(total)) == docs.count(total), total
        for (scope, window), items in book.boards.items():
            assert items == docs.top(scope, window, book.top_k), (scope, window)
    assert max(docs.deleted.values(), default=1) == 1
    left = {bucket for (bucket, _), value in shards.items()
            if not in_window("1h", value.minute, now)}
    assert left <= set(docs.deleted) and not left & set(docs.minutes)


# --- the merge of partitions' lists --------------------------------------------------------------


@given(st.dictionaries(st.text(min_size=1, max_size=4), st.integers(1, 30), max_size=300),
       st.sampled_from(partitions.CHOICES))
def test_the_merge_of_each_partitions_top_is_the_exact_top(counts: dict[str, int],
                                                           count: int) -> None:
    """Each partition lists the top 100 of its own tags (a tag lives in its home's partition
    only): the top 100 of their union is the top 100 of all tags."""
    def top(items: list[tuple[str, int]]) -> list[tuple[str, int]]:
        return sorted(items, key=rank)[:config.TOP_K]

    lists = [{window: top([(tag, n) for tag, n in counts.items()
                           if part.owns(partitions.home_of(tag))]) for window in kinds.WINDOWS}
             for part in partitions.parts(count)]
    assert trend_merge.merge_lists(lists) == {window: top(list(counts.items()))
                                        for window in kinds.WINDOWS}


def test_a_part_reads_back_as_its_lists_and_an_empty_one_is_deleted() -> None:
    """A part document holds its lists; one with no tags is deleted, read as empty lists."""
    lists: dict[Window, list[Item]] = {"1h": [("a", 2)], "24h": [("a", 3), ("b", 1)]}
    content = trend_merge.part_document(lists)
    assert trend_merge.lists_of(trend_merge.part_fields(content)) == lists
    empty = trend_merge.part_document({window: [] for window in kinds.WINDOWS})
    assert trend_merge.part_fields(empty) is None
    assert trend_merge.lists_of(None) == {window: [] for window in kinds.WINDOWS}


def test_the_merger_reads_the_parts_whose_version_changed_once_every_index_exists() -> None:
    """Partition 0 merges nothing while a partition's index is missing; then it reads the parts
    whose version differs from the one it last read, and merges them with its own lists."""
    parts = trend_merge.Parts()
    others = [Part(3, 1), Part(3, 2)]
    v1, v2 = T0, T0 + dt.timedelta(seconds=1)
    assert parts.stale(others, [{"scopes": {"eu": v1}}, None]) is None
    stale = parts.stale(others, [{"scopes": {"eu": v1}}, {"scopes": {"eu": v1, "us": v1}}])
    assert stale == {("eu", 1): v1, ("eu", 2): v1, ("us", 2): v1}
    parts.take(("eu", 1), trend_merge.part_document({"1h": [("a", 5)], "24h": [("a", 5)]}), v1)
    parts.take(("eu", 2), None, v1)
    parts.take(("us", 2), None, v1)
    assert parts.stale(others, [{"scopes": {"eu": v2}}, {"scopes": {"eu": v1, "us": v1}}]
                       ) == {("eu", 1): v2}
    own: dict[Window, list[Item]] = {"1h": [("b", 7)], "24h": []}
    assert parts.merged("eu", own, others, config.TOP_K) == {"1h": [("b", 7), ("a", 5)],
                                                            "24h": [("a", 5)]}
    assert trend_merge.index_document(Part(3, 1), ["eu"], v2) == {"count": 3, "index": 1,
                                                            "scopes": {"eu": v2}}
