"""Tag normalisation and window arithmetic."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from counting import config, inputs, kinds, partitions, trends
from counting.errors import InvalidArgument
from hypothesis import given
from hypothesis import strategies as st

instants = st.datetimes(min_value=dt.datetime(2001, 1, 1), max_value=dt.datetime(2099, 1, 1),
                        timezones=st.just(dt.UTC))


@pytest.mark.parametrize(("raw", "tag"), [
    ("#Python", "python"), ("python", "python"), ("  PyThOn ", "python"), ("##x", "#x"),
    ("# spaced ", "spaced"), ("Straße", "strasse"), ("Cafe\u0301", "café"), ("🔥", "🔥"),
    ("a/b", "a/b"),
])
def test_tags_normalise(raw: str, tag: str) -> None:
    """One leading # goes, case folds, spaces trim, composed and decomposed forms agree."""
    assert inputs.tag(raw) == tag


@pytest.mark.parametrize("raw", ["", "#", "  ", " # ", "x" * 101, "a\nb", 5, None])
def test_bad_tags_are_rejected(raw: object) -> None:
    """Empty, oversized, non-string or control-character tags are INVALID_ARGUMENT."""
    with pytest.raises(InvalidArgument):
        inputs.tag(raw)


def test_an_event_counts_each_spelling_once() -> None:
    """Variants of one tag collapse to its first normalised form, in first-seen order."""
    assert inputs.tags(["#B", "a", "b", " A", "#c"]) == ["b", "a", "c"]


@pytest.mark.parametrize("raw", [[], ["a"] * 21, "a", None, [1]])
def test_bad_tag_lists_are_rejected(raw: object) -> None:
    with pytest.raises(InvalidArgument):
        inputs.tags(raw)


@pytest.mark.parametrize("raw", ["eu-west-1", "a", "0" * 64])
def test_regions(raw: str) -> None:
    assert inputs.region(raw) == raw


@pytest.mark.parametrize("raw", ["", "EU", "eu_west", "a" * 65, "global", 3, None])
def test_bad_regions_are_rejected(raw: object) -> None:
    """Regions are 1..64 of a-z 0-9 -, and `global` is reserved."""
    with pytest.raises(InvalidArgument):
        inputs.region(raw)


@given(event=instants, age_s=st.floats(min_value=0, max_value=3 * 86400))
def test_an_event_counts_for_at_most_a_window_and_at_least_a_window_less_a_bucket(
    event: dt.datetime, age_s: float
) -> None:
    """In a window of n buckets of b seconds, an event counts while it is younger than
    (n - 1) * b seconds and never once it is n * b seconds old."""
    now = event + dt.timedelta(seconds=age_s)
    for window in kinds.WINDOWS:
        bucket_s, buckets = config.WINDOWS[window]
        bucket = trends.bucket_of(window, trends.minute_of(event))
        counted = trends.in_window(window, bucket, trends.minute_of(now))
        if age_s < (buckets - 1) * bucket_s:
            assert counted
        if age_s >= buckets * bucket_s:
            assert not counted


@given(instant=instants)
def test_buckets_nest(instant: dt.datetime) -> None:
    """A minute falls in the hour bucket that holds its instant, and buckets start on boundaries."""
    minute = trends.minute_of(instant)
    assert trends.bucket_of("1h", minute) == minute
    assert trends.bucket_of("24h", minute) == int(instant.timestamp() // 3600)
    assert minute * 60 <= instant.timestamp() < (minute + 1) * 60


@given(instant=instants)
def test_buckets_expire_by_ttl_only_after_leaving_their_window(instant: dt.datetime) -> None:
    """The TTL deadline of a bucket comes after the last instant the bucket still counts."""
    minute = trends.minute_of(instant)
    for window in kinds.WINDOWS:
        bucket_s, buckets = config.WINDOWS[window]
        bucket = trends.bucket_of(window, minute)
        last_counted = dt.datetime.fromtimestamp((bucket + buckets) * bucket_s - 1, dt.UTC)
        assert trends.in_window(window, bucket, trends.minute_of(last_counted))
        assert trends.expiry(window, bucket) > last_counted + config.TREND_TTL_GRACE / 2


@given(st.lists(st.tuples(st.text(min_size=1, max_size=5), st.integers(1, 50)), max_size=30))
def test_rank_orders_count_desc_then_tag_asc(items: list[tuple[str, int]]) -> None:
    ranked = sorted(items, key=trends.rank)
    for (tag_a, count_a), (tag_b, count_b) in itertools.pairwise(ranked):
        assert count_a > count_b or (count_a == count_b and tag_a <= tag_b)


@given(st.dictionaries(st.text(min_size=1, max_size=4), st.integers(1, 30), max_size=300),
       st.sampled_from(partitions.CHOICES))
def test_the_merge_of_each_partitions_top_is_the_exact_top(counts: dict[str, int],
                                                           count: int) -> None:
    """Each partition lists the top 100 of its own tags (a tag lives in its home's partition
    only): the top 100 of their union is the top 100 of all tags."""
    def top(items: list[tuple[str, int]]) -> list[tuple[str, int]]:
        return sorted(items, key=trends.rank)[:config.TOP_K]

    lists = [{window: top([(tag, n) for tag, n in counts.items()
                           if part.owns(partitions.home_of(tag))]) for window in kinds.WINDOWS}
             for part in partitions.parts(count)]
    assert trends.merge_lists(lists) == {window: top(list(counts.items()))
                                         for window in kinds.WINDOWS}


def test_tag_length_is_checked_on_the_stored_form() -> None:
    """A '#' and spaces do not count; a tag that case folding lengthens past 100 is refused."""
    assert inputs.tag("#" + "a" * config.MAX_TAG_CHARS + "  ") == "a" * config.MAX_TAG_CHARS
    with pytest.raises(InvalidArgument, match="once normalised"):
        inputs.tag("ß" * 60)  # folds to 120 characters
    with pytest.raises(InvalidArgument):
        inputs.tag("a" * (inputs.MAX_TAG_INPUT_CHARS + 1))


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
    lists: dict[kinds.Window, list[tuple[str, int]]] = {w: widest for w in kinds.WINDOWS}
    document = trends.trends_document(lists, {w: 0 for w in kinds.WINDOWS})
    assert all(len(document["windows"][w]["trending"]) == config.TOP_K for w in kinds.WINDOWS)
    assert firestore_size(document) < 1024 * 1024 // 4
