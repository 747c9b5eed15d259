"""The rollup's health for operators, a part of each partition's record (`lease.Health`):
`ticked` and `failed` give the health after a tick, which the holder hands to its lease (each
write of the record carries it; no extra write); `read_status` reads it back (`counters
status`, the dashboard)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

from google.cloud import firestore

from counting.foundation import config
from counting.foundation.config import Names
from counting.rollup.lease import Health, LeaseView, state_ref
from counting.rollup.tick import TickStats
from counting.writepath import partitions
from counting.writepath.partitions import WHOLE, Part


def ticked(health: Health, stats: TickStats, last_as_of: dt.datetime | None) -> Health:
    """The health after a tick (`last_as_of`: the holding's previous tick, None at its first):
    its duration and lag, and its problems among the recent ones."""
    # How stale a count can be when it is published: a write waits at most a slot for its tick
    # (less when the previous tick came sooner), plus this tick's work.
    since = (config.TICK_SLOT_S if last_as_of is None
             else (stats.as_of - last_as_of).total_seconds())
    lag = stats.seconds + min(since, config.TICK_SLOT_S)
    return dataclasses.replace(
        health, tick_s=round(stats.seconds, 3), lag_s=round(lag, 3),
        errors=recent(health.errors, [f"{stats.as_of:%Y-%m-%dT%H:%M:%SZ} {problem}"
                                      for problem in stats.problems]))


def failed(health: Health, error: Exception, now: dt.datetime) -> Health:
    """The health after a tick that failed."""
    return dataclasses.replace(health, errors=recent(
        health.errors, [f"{now:%Y-%m-%dT%H:%M:%SZ} tick failed: {error!r}"[:300]]))


def recent(errors: tuple[str, ...], more: list[str]) -> tuple[str, ...]:
    return (*errors, *more)[-config.ROLLUP_RECENT_ERRORS:]


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


def read_status(db: firestore.Client, names: Names, part: Part = WHOLE) -> RollupStatus:
    """One partition's status (one read)."""
    snapshot = state_ref(db, names, part).get()
    view = LeaseView.of(snapshot, dt.timedelta(seconds=config.ROLLUP.lease_s))
    health = view.record.health
    age = None if view.renewed_at is None else (view.read_time - view.renewed_at).total_seconds()
    stale = None
    if age is None:
        stale = "the rollup never ran"
    elif age > config.ROLLUP_STALE_S:
        stale = f"no tick for {age:.0f} s: the scheduled housekeeping has stopped"
    return RollupStatus(holder=view.owner, active=age is not None and age <= config.ROLLUP.lease_s,
                        last_tick_at=view.renewed_at, last_tick_age_s=age,
                        tick_s=health.tick_s, lag_s=health.lag_s,
                        holder_since=health.holder_since, errors=list(health.errors),
                        stale=stale)


def read_statuses(db: firestore.Client, names: Names) -> list[tuple[Part, RollupStatus]]:
    """Every partition's status, for the current P (P + 1 reads)."""
    return [(part, read_status(db, names, part))
            for part in partitions.parts(partitions.read_count(db, names))]
