"""What the write path records: tags and regions as clients send them, normalised, and the
minute and hour buckets an event counts in (`counting.features.trends.buckets`).
The rollup step's core is tests/unit/test_trend_ledger.py's."""

from __future__ import annotations

import datetime as dt

import pytest
from counting.features import trends
from counting.foundation import config, inputs, kinds
from counting.foundation.errors import InvalidArgument
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
        bucket_s, buckets = config.WINDOW_BUCKETS[window]
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
        bucket_s, buckets = config.WINDOW_BUCKETS[window]
        bucket = trends.bucket_of(window, minute)
        last_counted = dt.datetime.fromtimestamp((bucket + buckets) * bucket_s - 1, dt.UTC)
        assert trends.in_window(window, bucket, trends.minute_of(last_counted))
        assert trends.expiry(window, bucket) > last_counted + config.TREND_TTL_GRACE / 2


def test_tag_length_is_checked_on_the_stored_form() -> None:
    """A '#' and spaces do not count; a tag that case folding lengthens past 100 is refused."""
    assert inputs.tag("#" + "a" * config.MAX_TAG_CHARS + "  ") == "a" * config.MAX_TAG_CHARS
    with pytest.raises(InvalidArgument, match="once normalised"):
        inputs.tag("ß" * 60)  # folds to 120 characters
    with pytest.raises(InvalidArgument):
        inputs.tag("a" * (inputs.MAX_TAG_INPUT_CHARS + 1))
