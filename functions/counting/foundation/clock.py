"""Where the domain reads the time and waits: the system's clock, or a simulation's virtual one."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field


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
