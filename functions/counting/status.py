"""The rollup's status for operators, kept on its lease document: `StatusRecorder` fills it in
as the holder ticks (each renewal writes it; no extra write), `read_status` reads it back
(`counters status`, the dashboard)."""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from google.cloud import firestore

from . import config, partitions
from .lease import Lease, LeaseView, state_ref
from .partitions import WHOLE, Part
from .rollup import TickStats


class StatusRecorder:
    """The last tick's duration and lag, the holder's start and the recent problems, published
    by the holder's next renewal."""

    def __init__(self, lease: Lease, now: Callable[[], dt.datetime]) -> None:
        self._lease = lease
        self._now = now
        self._errors: collections.deque[str] = collections.deque(maxlen=config.ROLLUP_RECENT_ERRORS)
        self._last_as_of: dt.datetime | None = None
        lease.status = {"holder_since": now(), "errors": []}

    def ticked(self, stats: TickStats) -> None:
        for problem in stats.problems:
            self._errors.append(f"{stats.as_of:%Y-%m-%dT%H:%M:%SZ} {problem}")
        # How stale a count can be when it is published: a write waits at most a slot for
        # its tick (less when the previous tick came sooner), plus this tick's work.
        since = (config.TICK_SLOT_S if self._last_as_of is None
                 else (stats.as_of - self._last_as_of).total_seconds())
        lag = stats.seconds + min(since, config.TICK_SLOT_S)
        self._last_as_of = stats.as_of
        self._lease.status.update(tick_s=round(stats.seconds, 3), lag_s=round(lag, 3),
                                  errors=list(self._errors))

    def failed(self, error: Exception) -> None:
        self._errors.append(f"{self._now():%Y-%m-%dT%H:%M:%SZ} tick failed: {error!r}"[:300])
        self._lease.status["errors"] = list(self._errors)


@dataclass(frozen=True, kw_only=True)
class RollupStatus:
    """The rollup's state as one read of its lease document saw it."""

    holder: str | None
    active: bool  # a tick within the lease's TTL: something is being written
    last_tick_at: dt.datetime | None
    last_tick_age_s: float | None
    tick_s: float | None
    lag_s: float | None
    holder_since: dt.datetime | None
    errors: list[str]
    stale: str | None  # why the rollup looks stuck; None while healthy


def read_status(db: firestore.Client, part: Part = WHOLE) -> RollupStatus:
    """One partition's status (one read)."""
    snapshot = state_ref(db, part).get()
    view = LeaseView.of(snapshot, dt.timedelta(seconds=config.ROLLUP.lease_s))
    data = snapshot.to_dict() or {}
    age = None if view.renewed_at is None else (view.read_time - view.renewed_at).total_seconds()
    stale = None
    if age is None:
        stale = "the rollup never ran"
    elif age > config.ROLLUP_STALE_S:
        stale = f"no tick for {age:.0f} s: the scheduled housekeeping has stopped"
    return RollupStatus(holder=view.owner, active=age is not None and age <= config.ROLLUP.lease_s,
                        last_tick_at=view.renewed_at, last_tick_age_s=age,
                        tick_s=data.get("tick_s"), lag_s=data.get("lag_s"),
                        holder_since=data.get("holder_since"),
                        errors=list(data.get("errors") or []), stale=stale)


def read_statuses(db: firestore.Client) -> list[tuple[Part, RollupStatus]]:
    """Every partition's status, for the current P (P + 1 reads)."""
    return [(part, read_status(db, part))
            for part in partitions.parts(partitions.read_count(db))]
