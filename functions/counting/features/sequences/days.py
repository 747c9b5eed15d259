"""The business day: a tenant's rule (`SequenceConfig`) and which day an instant falls in."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SequenceConfig:
    """A tenant's business-day rule."""

    tenant: str
    timezone: str
    reset_time: str

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.timezone)

    @property
    def reset_at(self) -> dt.time:
        return dt.time.fromisoformat(self.reset_time)


def business_day_start(day: dt.date, reset_at: dt.time, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    """The UTC instant business day `day` starts: `reset_at` local time on local date `day`.

    The rule of RFC 5545 (iCalendar) for local times a DST change makes ambiguous: a time that
    occurs twice (clocks go back) means its first occurrence; a time that does not occur (clocks
    go forward) is read with the UTC offset in force before the gap, so it lands the gap's length
    later (02:30 on a night that jumps 02:00 -> 03:00 starts the day at 03:30). That is `fold=0`.
    """
    return dt.datetime.combine(day, reset_at, tzinfo=zone).astimezone(dt.UTC)


def business_day_for(instant: dt.datetime, reset_at: dt.time, zone: zoneinfo.ZoneInfo) -> dt.date:
    """The business day `instant` falls in: the latest day whose start is at or before it.

    Starts never decrease from one day to the next, so this is the day with
    `start(day) <= instant < start(day + 1)`. A day whose start coincides with the next one's
    (a date a time zone skips altogether) is empty and never returned.
    """
    local = instant.astimezone(zone).date()
    one = dt.timedelta(days=1)
    for day in (local + one, local, local - one):
        if business_day_start(day, reset_at, zone) <= instant:
            return day
    return local - 2 * one
