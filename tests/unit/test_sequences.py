"""Business-day arithmetic and input parsing for resetting sequences (no emulator)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from counting.features.sequences.days import business_day_for, business_day_start
from counting.foundation import inputs
from counting.foundation.errors import InvalidArgument
from hypothesis import given, settings
from hypothesis import strategies as st

ZONES = sorted(zoneinfo.available_timezones())
zones = st.sampled_from(ZONES).map(zoneinfo.ZoneInfo)
instants = st.datetimes(
    min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2100, 12, 30)
).map(lambda naive: naive.replace(tzinfo=dt.UTC))
reset_times = st.times().map(lambda t: t.replace(second=0, microsecond=0, fold=0))  # as parsed
# Instants near DST changes: hypothesis seldom lands within an hour of one by chance.
DST_ZONES = ["America/New_York", "Europe/Paris", "Australia/Lord_Howe", "America/Santiago",
             "Europe/London", "Pacific/Apia", "America/St_Johns", "Asia/Tehran"]


def transitions(zone: zoneinfo.ZoneInfo, year: int) -> list[dt.datetime]:
    """The UTC instants in `year` at which `zone`'s UTC offset changes (to the hour)."""
    found = []
    hour = dt.datetime(year, 1, 1, tzinfo=dt.UTC)
    end = dt.datetime(year + 1, 1, 1, tzinfo=dt.UTC)
    previous = hour.astimezone(zone).utcoffset()
    while hour < end:
        hour += dt.timedelta(hours=1)
        offset = hour.astimezone(zone).utcoffset()
        if offset != previous:
            found.append(hour)
            previous = offset
    return found


NEAR_DST = [
    (name, at)
    for name in DST_ZONES
    for year in (2011, 2024)
    for at in transitions(zoneinfo.ZoneInfo(name), year)
]


def check_business_day(instant: dt.datetime, reset: dt.time, zone: zoneinfo.ZoneInfo) -> None:
    day = business_day_for(instant, reset, zone)
    start = business_day_start(day, reset, zone)
    following = business_day_start(day + dt.timedelta(days=1), reset, zone)
    assert start <= instant < following
    # A day the zone skips (Samoa, 2011-12-30) stretches the day before it to two dates.
    assert abs(instant.astimezone(zone).date() - day) <= dt.timedelta(days=2)


@settings(max_examples=300)
@given(zone=zones, instant=instants, reset=reset_times)
def test_business_day_contains_the_instant(
    zone: zoneinfo.ZoneInfo, instant: dt.datetime, reset: dt.time
) -> None:
    """The business day of an instant starts at or before it and ends after it."""
    check_business_day(instant, reset, zone)


@settings(max_examples=300)
@given(near=st.sampled_from(NEAR_DST), shift=st.integers(-3 * 3600, 3 * 3600),
       reset=reset_times)
def test_business_day_contains_the_instant_around_dst_changes(
    near: tuple[str, dt.datetime], shift: int, reset: dt.time
) -> None:
    """The containment holds within hours of DST changes, whatever the reset time."""
    name, at = near
    check_business_day(at + dt.timedelta(seconds=shift), reset, zoneinfo.ZoneInfo(name))


@settings(max_examples=200)
@given(zone=zones, first=instants, gap=st.timedeltas(dt.timedelta(0), dt.timedelta(days=3)),
       reset=reset_times)
def test_business_days_never_go_backwards(
    zone: zoneinfo.ZoneInfo, first: dt.datetime, gap: dt.timedelta, reset: dt.time
) -> None:
    """A later instant never falls in an earlier business day."""
    assert business_day_for(first, reset, zone) <= business_day_for(first + gap, reset, zone)


@settings(max_examples=300)
@given(zone=zones, day=st.dates(dt.date(1971, 1, 1), dt.date(2100, 1, 1)), reset=reset_times)
def test_a_day_starts_at_the_reset_time_when_that_time_exists_once(
    zone: zoneinfo.ZoneInfo, day: dt.date, reset: dt.time
) -> None:
    """Where the local reset time occurs exactly once, the day starts at that wall-clock time."""
    wall = dt.datetime.combine(day, reset)
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    start = business_day_start(day, reset, zone)
    round_trip = first.astimezone(dt.UTC).astimezone(zone).replace(tzinfo=None)
    if round_trip == wall:  # the time exists: the earlier of its occurrences
        assert start.astimezone(zone).replace(tzinfo=None) == wall
        assert start == min(first.astimezone(dt.UTC), second.astimezone(dt.UTC))
    else:  # skipped: read with the offset before the gap, so it starts the gap's length later
        assert start == wall.replace(tzinfo=dt.UTC) - first.utcoffset()  # type: ignore[operator]
        assert start.astimezone(zone).replace(tzinfo=None) > wall


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("zone", "reset", "day", "start_utc"),
    [
        # New York springs forward 02:00 -> 03:00: 02:30 does not exist; the day starts 03:30 EDT.
        ("America/New_York", "02:30", "2024-03-10", "2024-03-10T07:30"),
        ("America/New_York", "03:00", "2024-03-10", "2024-03-10T07:00"),
        # New York falls back 02:00 -> 01:00: 01:30 happens twice; the first (EDT) counts.
        ("America/New_York", "01:30", "2024-11-03", "2024-11-03T05:30"),
        ("Europe/Paris", "04:00", "2024-03-31", "2024-03-31T02:00"),
        ("Europe/Paris", "02:15", "2024-10-27", "2024-10-27T00:15"),
        ("Australia/Lord_Howe", "02:15", "2024-10-06", "2024-10-05T15:45"),
    ],
)
def test_dst_rules_on_known_dates(zone: str, reset: str, day: str, start_utc: str) -> None:
    """Skipped reset times start a day late by the gap; repeated ones at their first occurrence."""
    start = business_day_start(dt.date.fromisoformat(day), dt.time.fromisoformat(reset),
                               zoneinfo.ZoneInfo(zone))
    assert start == at(start_utc)


def test_a_day_skipped_by_the_time_zone_is_never_a_business_day() -> None:
    """Samoa skipped 2011-12-30: the instant after 12-29 ends is already in 12-31."""
    zone = zoneinfo.ZoneInfo("Pacific/Apia")
    midnight = dt.time(0, 0)
    end_of_29 = business_day_start(dt.date(2011, 12, 30), midnight, zone)
    assert business_day_for(end_of_29 - dt.timedelta(seconds=1), midnight, zone) == dt.date(
        2011, 12, 29)
    assert business_day_for(end_of_29, midnight, zone) == dt.date(2011, 12, 31)


def test_before_the_reset_time_is_still_the_previous_business_day() -> None:
    """With a 04:00 reset, 03:59 local belongs to the day before."""
    zone = zoneinfo.ZoneInfo("Europe/Paris")
    four = dt.time(4, 0)
    assert business_day_for(at("2024-06-02T01:59"), four, zone) == dt.date(2024, 6, 1)
    assert business_day_for(at("2024-06-02T02:00"), four, zone) == dt.date(2024, 6, 2)


@settings(max_examples=200)
@given(zone=zones, instant=instants)
def test_a_midnight_reset_makes_the_business_day_the_local_date(
    zone: zoneinfo.ZoneInfo, instant: dt.datetime
) -> None:
    """With reset_time 00:00 the business day is the local calendar date (outside skipped days)."""
    local = instant.astimezone(zone).date()
    day = business_day_for(instant, dt.time(0, 0), zone)
    starts_late = business_day_start(local, dt.time(0, 0), zone) > instant
    assert day == local or starts_late


# --- Input parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["org-1", "A", "a.b:c_d-e", "x" * 128])
def test_tenant_ids_accepted(value: str) -> None:
    """Tenant ids follow the counter id rules."""
    assert inputs.tenant_id(value) == value


@pytest.mark.parametrize("value", ["", ".x", "_x", "a/b", "x" * 129, 1, None, "é"])
def test_tenant_ids_rejected(value: object) -> None:
    """Malformed tenant ids are INVALID_ARGUMENT naming the field."""
    with pytest.raises(InvalidArgument, match="^tenant:"):
        inputs.tenant_id(value)


@pytest.mark.parametrize("value", ["Europe/Paris", "UTC", "America/Argentina/Buenos_Aires"])
def test_timezones_accepted(value: str) -> None:
    """IANA names are accepted as given."""
    assert inputs.timezone(value) == value


@pytest.mark.parametrize("value", ["Mars/Olympus", "europe/paris", "", "/etc/passwd",
                                   "../../etc/passwd", 1, None, "+02:00"])
def test_timezones_rejected(value: object) -> None:
    """Unknown zone names, paths and offsets are INVALID_ARGUMENT naming the field."""
    with pytest.raises(InvalidArgument, match="^timezone:"):
        inputs.timezone(value)


@pytest.mark.parametrize(("value", "expected"), [(None, "00:00"), ("04:30", "04:30"),
                                                 ("23:59", "23:59"), ("00:00", "00:00")])
def test_reset_times_accepted(value: str | None, expected: str) -> None:
    """HH:MM within a day is accepted; absent means midnight."""
    assert inputs.reset_time(value) == expected


@pytest.mark.parametrize("value", ["24:00", "4:30", "04:60", "04:30:00", "", 430, "noon"])
def test_reset_times_rejected(value: object) -> None:
    """Anything but HH:MM within a day is INVALID_ARGUMENT naming the field."""
    with pytest.raises(InvalidArgument, match="^reset_time:"):
        inputs.reset_time(value)
