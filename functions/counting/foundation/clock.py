"""Where the domain reads the time and waits: the system's clock, or a simulation's virtual one."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, kw_only=True)
class Clock:
    """`monotonic` measures intervals (caches, leases, resends), `now` is the wall time, `sleep`
    waits."""

    monotonic: Callable[[], float] = time.monotonic
    now: Callable[[], dt.datetime] = field(default=_utcnow)
    sleep: Callable[[float], None] = time.sleep


SYSTEM = Clock()


def instant(value: Any) -> dt.datetime:
    """A snapshot's time as a datetime: the client gives a query's results (read at a read
    time) protobuf Timestamps, a document read's datetimes."""
    if hasattr(value, "ToDatetime"):
        converted: dt.datetime = value.ToDatetime(tzinfo=dt.UTC)
        return converted
    result: dt.datetime = value
    return result
