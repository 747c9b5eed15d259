"""Resetting sequences: per-tenant ticket numbers that restart at 1 every business day.

`sequences/{tenant}` is both the live counter and the document "now serving" screens listen to:
`business_day` (`YYYY-MM-DD`), `last_number`, `timezone`, `reset_time`, plus server fields
`day` (the business day as a proleptic ordinal), `epoch` (resets so far this day) and `issued`
(numbers issued this day, across resets). A number is one write with no transaction:

    update({"last_number": Increment(1), "issued": Increment(1),
            "epoch": Increment(0), "day": Increment(0)})

and its `transform_results` give the new `last_number` together with the `day` and `epoch` it
was counted in, read atomically by the same write (`Increment(0)` returns the current value).
So `(day, epoch, number)` is unique under any concurrency: within one `(day, epoch)` the
document's `last_number` only ever grows by one per write.

A reset is one write too (`last_number: 0`, `epoch: Increment(1)`); every number whose write
commits after it counts from 1 again under the new epoch. A new business day is opened lazily by
the first request that finds the document on an older day: a compare-and-set on the document's
update time (so exactly one writer opens the day) that also archives the closed day under
`business_days/{YYYY-MM-DD}` with a TTL field. Nothing expires at the boundary.

A `request_id` is claimed by creating its record in the same batch as the number's write. The
number, known once that commit answers, goes into the record with the process's next such
commit (`Unrecorded`: no round trip of its own); what no later commit carries (the process went
idle, or died) the scheduled housekeeping writes (`record_issued`). Until then a retry reads it
back from the sequence as the record's commit left it (a snapshot read at its create time).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib
import logging
import threading
import time
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.types import WriteResult

from counting.foundation import config, encoding, writes
from counting.foundation.clock import Clock, instant
from counting.foundation.config import Names
from counting.foundation.errors import FailedPrecondition, OutcomeUnknown
from counting.writepath import shards
from counting.writepath.caching import TtlCache
from counting.writepath.context import Writing

if TYPE_CHECKING:
    from counting.features.context import Context

log = logging.getLogger(__name__)
Snapshot = firestore.DocumentSnapshot[Any]

# The transforms of one number and of a reset; `_transformed` reads their results back. Every
# write that moves `last_number` also sets `last_claim`: the nonce of the request id's record
# created in the same commit, or "" (`_read_back`).
_NUMBER_WRITE = {
    "day": firestore.Increment(0),
    "epoch": firestore.Increment(0),
    "issued": firestore.Increment(1),
    "last_claim": "",
    "last_number": firestore.Increment(1),
}
_RESET_WRITE = {
    "day": firestore.Increment(0),
    "epoch": firestore.Increment(1),
    "issued": firestore.Increment(0),
    "last_claim": "",
    "last_number": 0,
}


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


@dataclass(frozen=True, kw_only=True)
class Ticket:
    """One issued number: unique per (tenant, business_day, epoch)."""

    tenant: str
    number: int
    business_day: dt.date
    epoch: int


@dataclass(frozen=True, kw_only=True)
class Reset:
    tenant: str
    business_day: dt.date
    epoch: int


# --- The business day ---------------------------------------------------------------------------


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


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --- Documents ----------------------------------------------------------------------------------


def sequence_ref(db: firestore.Client, names: Names, tenant: str) -> firestore.DocumentReference:
    return db.collection(names.sequences).document(tenant)


def business_day_ref(db: firestore.Client, names: Names, tenant: str, day: dt.date
                     ) -> firestore.DocumentReference:
    return db.collection(names.sequences, tenant, names.business_days).document(day.isoformat())


def request_ref(db: firestore.Client, names: Names, tenant: str, uid: str, request_id: str
                ) -> firestore.DocumentReference:
    """The record of one request_id, per tenant and user (uids may hold any character)."""
    key = hashlib.sha256(f"{tenant}\0{uid}\0{request_id}".encode()).hexdigest()
    return db.collection(names.sequences, tenant, names.number_requests).document(key)


def _config_from(tenant: str, data: dict[str, Any]) -> SequenceConfig:
    if not data.get("timezone"):
        raise FailedPrecondition(f"tenant: {tenant!r} has no sequence; configure_sequence first")
    return SequenceConfig(tenant=tenant, timezone=str(data["timezone"]),
                          reset_time=str(data.get("reset_time", config.DEFAULT_RESET_TIME)))


@dataclass(frozen=True, kw_only=True)
class _Known:
    config: SequenceConfig
    day: int  # a lower bound of the document's open day (0: none yet)


class SequenceCache:
    """Per-instance cache of each tenant's configuration and the latest day seen open.

    The day is a lower bound (a document's day only moves forward), so a number requested for
    that day needs no read at all. The configuration is trusted for `ttl_s` seconds: a changed
    timezone or reset_time reaches every instance within that time.
    """

    def __init__(self, ttl_s: float = config.SEQUENCE_CONFIG_CACHE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: TtlCache[tuple[str, str], _Known] = TtlCache(ttl_s, clock)

    def get(self, db: firestore.Client, names: Names, tenant: str) -> tuple[SequenceConfig, int]:
        """The tenant's configuration and a lower bound of its open day (0: none yet)."""
        known = self._entries.get((db.project, tenant))
        if known is not None:
            return known.config, known.day
        snapshot = sequence_ref(db, names, tenant).get()
        data = (snapshot.to_dict() or {}) if snapshot.exists else {}
        found = _config_from(tenant, data)
        return found, self.saw(db, found, int(data.get("day", 0)), fresh=True)

    def saw(self, db: firestore.Client, found: SequenceConfig, day: int, *,
            fresh: bool = False) -> int:
        """Record that `found.tenant`'s document was on `day` (or later); the best bound known.

        `fresh` says `found` was just read (or written), which restarts its time in the cache.
        """
        def change(known: _Known | None) -> tuple[_Known, bool]:
            best = day if known is None else max(day, known.day)
            same = known is not None and known.config == found and not fresh
            return _Known(config=found, day=best), not same

        return self._entries.update((db.project, found.tenant), change).day


# --- Operations ---------------------------------------------------------------------------------


def configure_sequence(
    ctx: Context,
    db: firestore.Client,
    tenant: str,
    *,
    timezone: str,
    reset_time: str = config.DEFAULT_RESET_TIME,
    uid: str = "",
    request_id: str | None = None,
    now: dt.datetime | None = None,
) -> SequenceConfig:
    """Set the tenant's business-day rule and open its current business day if it is new.

    Numbers already issued today keep counting unless the new rule puts `now` in a later
    business day; a rule never moves the open day backwards. The rule is in force once its
    commit applied: opening the day after it is the first number's work too (`_ready_for_today`
    opens it lazily), so a failure there is logged, never answered. A retry of a `request_id`
    that applied writes nothing.
    """
    found = SequenceConfig(tenant=tenant, timezone=timezone, reset_time=reset_time)
    # At the version read: no attempt of an earlier configuration lands over this one.
    written = shards.configure(ctx.writing, db, sequence_ref(db, ctx.names, tenant),
                     {"timezone": timezone, "reset_time": reset_time,
                      "configured_at": firestore.SERVER_TIMESTAMP},
                     missing=None, what=f"tenant {tenant!r}",
                     marker=shards.admin_marker(db, ctx.names, uid, "configure_sequence", tenant,
                                                request_id))
    if not written:  # a retry of a request that applied: the rule in force may be newer
        return found
    today = business_day_for(now or ctx.writing.clock.now(), found.reset_at, found.zone)
    try:
        ctx.sequences.saw(db, found, _open_day(db, ctx.names, tenant, today), fresh=True)
    except _NOT_OPENED as error:
        log.warning("tenant %r: configured; opening %s is left to its first number: %r",
                    tenant, today, error)
    return found


# What opening the day after a configuration may raise: logged, the rule is in force.
_NOT_OPENED: tuple[type[Exception], ...] = (*writes.FAILED, FailedPrecondition, OutcomeUnknown)


def next_number(
    ctx: Context,
    db: firestore.Client,
    tenant: str,
    *,
    request_id: str | None = None,
    uid: str = "",
    now: dt.datetime | None = None,
) -> Ticket:
    """Issue the tenant's next number of the business day `now` (server time) falls in."""
    cache = ctx.sequences
    found = _ready_for_today(db, ctx.names, tenant, now, cache, ctx.writing.clock)
    if request_id is None:
        batch = db.batch()
        encoding.update(batch, sequence_ref(db, ctx.names, tenant), _NUMBER_WRITE)
        # Sent once: a number whose answer was lost is skipped, never issued twice.
        [result] = _write_configured(tenant, ctx.writing.commit_once, batch)
        return _ticket(db, found, result, cache)
    return _number_once(ctx.writing, db, found, request_ref(db, ctx.names, tenant, uid,
                                                            request_id),
                        uid=uid, request_id=request_id, cache=cache,
                        unrecorded=ctx.unrecorded)


def reset_sequence(
    ctx: Context,
    db: firestore.Client,
    tenant: str,
    *,
    uid: str = "",
    request_id: str | None = None,
    now: dt.datetime | None = None,
) -> Reset:
    """Restart numbering at 1 within the current business day (a shift change).

    Numbers issued before stay valid: they belong to the previous epoch, and the document's
    `resets` list records how many numbers had been issued when each epoch began. The reset's
    commit creates a request marker (`admin_marker`, named by the `request_id`, else by a nonce
    of this call) and needs the business day it read still open, so that of its attempts at
    most one applies, never in a later day (`_reset_once`); a retry of a `request_id` finds the
    marker and only records the reset again. Once the reset applied, a failure to record it (or
    to read it back) is `OutcomeUnknown`.
    """
    marker = shards.admin_marker(db, ctx.names, uid, "reset_sequence", tenant,
                                 request_id or ctx.writing.nonce())
    assert marker is not None
    earlier = marker[0].get() if request_id is not None else None
    cache = ctx.sequences
    if earlier is not None and earlier.exists:  # this request reset the sequence before
        applied: _Applied | None = None
        found = cache.get(db, ctx.names, tenant)[0]
    else:
        found = _ready_for_today(db, ctx.names, tenant, now, cache, ctx.writing.clock)
        applied = _reset_once(ctx.writing, db, found, marker, request_id=request_id)
    with writes.after_applied(request_id, ctx.writing.protections,
                              what=f"tenant {tenant!r} was reset"):
        if applied is None:  # an attempt of this request applied: read it back
            applied = _read_back_reset(db, ctx.names, tenant, marker[0].get())
        reset = _record_reset(db, ctx.names, tenant, applied, uid=uid)
    cache.saw(db, found, reset.business_day.toordinal())
    return reset


# A business day's open marker, `business_days/{YYYY-MM-DD}.open`: it exists while that day is
# the sequence's open day (`_open_day` creates the new day's and deletes the closed one's).
_OPEN = ".open"


def _open_marker_ref(db: firestore.Client, names: Names, tenant: str, day: dt.date
                     ) -> firestore.DocumentReference:
    return db.collection(names.sequences, tenant, names.business_days).document(
        day.isoformat() + _OPEN)


def _opening(day: dt.date) -> dict[str, Any]:
    return {"business_day": day.isoformat(), config.EXPIRES_AT: _expiry()}


@dataclass(frozen=True)
class _Applied:
    """A reset that applied: its business day, its commit time, and (when known) the epoch it
    began and the numbers issued that day before it."""

    day: dt.date
    at: dt.datetime
    epoch: int | None
    issued: int | None


def _reset_once(writing: Writing, db: firestore.Client, found: SequenceConfig,
                marker: tuple[firestore.DocumentReference, dict[str, Any]], *,
                request_id: str | None) -> _Applied | None:
    """Commit a reset of the sequence's open day: its write to the sequence (`_RESET_WRITE`),
    the creation of the request's `marker` (so of its attempts at most one applies, and one
    that fails on it finds it applied) and an update of the day's open marker (which fails once
    the day closed, so no attempt restarts a later day). Returns what the commit applied, from
    its own results; None when an attempt of this request applied before (its marker was
    there). A day that closed since its read is FAILED_PRECONDITION: nothing was reset, and the
    new day is not reset in its place."""
    ref = sequence_ref(db, writing.names, found.tenant)
    for _ in range(config.SEQUENCE_OPEN_DAY_ATTEMPTS):
        snapshot = ref.get()
        data = (snapshot.to_dict() or {}) if snapshot.exists else {}
        _config_from(found.tenant, data)
        day = dt.date.fromordinal(int(data.get("day") or 1))
        opened = _open_marker_ref(db, writing.names, found.tenant, day)
        if opened.get().exists:
            break
        # A day opened before open markers: it gets one at the sequence's version read.
        batch = db.batch()
        batch.set(opened, _opening(day))
        batch.update(ref, {"day": day.toordinal()},
                     option=db.write_option(last_update_time=snapshot.update_time))
        with contextlib.suppress(gexc.FailedPrecondition, gexc.NotFound):
            batch.commit(retry=writes.IDEMPOTENT)
    else:
        raise FailedPrecondition(f"tenant: could not reset {found.tenant!r} (too much "
                                 "contention); nothing was reset")
    batch = db.batch()
    encoding.update(batch, ref, _RESET_WRITE)
    batch.update(opened, {"last_reset": marker[0].id})  # needs the day open
    encoding.create(batch, marker[0], {**marker[1], "reset_day": day.isoformat()})
    try:
        results = writing.resending(functools.partial(writing.send, batch),
                                    request_id=request_id)
    except gexc.AlreadyExists:
        return None  # the marker: an attempt of this request applied
    except gexc.NotFound as error:
        with writes.finding_out(error, request_id=request_id):
            mine = marker[0].get().exists  # an earlier attempt applied before the day closed
        if mine:
            return None
        raise FailedPrecondition(f"tenant: {found.tenant!r}: business day {day} closed while "
                                 "it was being reset; nothing was reset") from error
    after = _transformed(_RESET_WRITE, results[0])
    return _Applied(day=dt.date.fromordinal(after["day"]), at=results[0].update_time,
                    epoch=after["epoch"], issued=after["issued"])


def _read_back_reset(db: firestore.Client, names: Names, tenant: str,
                     marker: Snapshot) -> _Applied:
    """A reset of an earlier attempt, from its request marker (created by the reset's commit)
    and the sequence as that commit left it (read at the marker's create time; past the hour a
    snapshot read reaches, without its epoch)."""
    day = dt.date.fromisoformat(str((marker.to_dict() or {})["reset_day"]))
    at = marker.create_time
    try:
        after = sequence_ref(db, names, tenant).get(read_time=at).to_dict() or {}
    except (gexc.FailedPrecondition, gexc.InvalidArgument):
        return _Applied(day=day, at=at, epoch=None, issued=None)
    if int(after.get("day", 0)) != day.toordinal():
        return _Applied(day=day, at=at, epoch=None, issued=None)
    return _Applied(day=day, at=at, epoch=int(after.get("epoch", 0)),
                    issued=int(after.get("issued", 0)))


def _record_reset(db: firestore.Client, names: Names, tenant: str, applied: _Applied, *,
                  uid: str) -> Reset:
    """Record a reset that applied in its day's `resets`: the sequence's while the day is open
    (with its open marker, so never in a later day's), else the closed day's archive. An
    ArrayUnion of the same entry (its commit time is in it), so recording it again changes
    nothing."""
    reset = Reset(tenant=tenant, business_day=applied.day, epoch=applied.epoch or 0)
    if applied.epoch is None or applied.issued is None:
        return reset  # read back past the hour: recorded long ago, or archived without it
    entry = firestore.ArrayUnion([{
        "business_day": applied.day.isoformat(), "epoch": applied.epoch,
        "issued_before": applied.issued, "at": applied.at, "by": uid}])
    batch = db.batch()
    batch.update(sequence_ref(db, names, tenant), {"resets": entry})
    batch.update(_open_marker_ref(db, names, tenant, applied.day), {"recorded": True})
    try:
        batch.commit(retry=writes.IDEMPOTENT)
    except gexc.NotFound:  # the day closed: its archive keeps its resets
        with contextlib.suppress(gexc.NotFound):
            business_day_ref(db, names, tenant, applied.day).update(
                {"resets": entry}, retry=writes.IDEMPOTENT)
    return reset


# --- Internals ----------------------------------------------------------------------------------


def _ready_for_today(
    db: firestore.Client, names: Names, tenant: str, now: dt.datetime | None,
    cache: SequenceCache, clock: Clock,
) -> SequenceConfig:
    """The tenant's configuration, with its document's open day at least today's (`now`, else
    the clock's)."""
    found, open_day = cache.get(db, names, tenant)
    today = business_day_for(now or clock.now(), found.reset_at, found.zone)
    if open_day < today.toordinal():
        cache.saw(db, found, _open_day(db, names, tenant, today))
    return found


def _open_day(db: firestore.Client, names: Names, tenant: str, today: dt.date) -> int:
    """Move the tenant's document to business day `today` unless it is there (or later) already.

    A compare-and-set on the document's update time, so that one writer opens the day while
    numbers of the closing day may still be landing: the closed day's figures it reads are final
    once its write commits, and it archives them in the same batch. A commit whose answer was
    lost is found out by the next read (the day open, or not yet); a read that fails then is
    `OutcomeUnknown`, never an error that says nothing was written.
    """
    ref = sequence_ref(db, names, tenant)
    uncertain = False  # an attempt's answer was lost: it may have opened the day
    for _ in range(config.SEQUENCE_OPEN_DAY_ATTEMPTS):
        try:
            snapshot = ref.get()
        except writes.FAILED as error:
            if uncertain:
                raise writes.lost(None) from error
            raise
        data = (snapshot.to_dict() or {}) if snapshot.exists else {}
        found = _config_from(tenant, data)
        current = int(data.get("day", 0))
        if current >= today.toordinal():
            return current
        batch = db.batch()
        if current:
            closed = dt.date.fromordinal(current)
            batch.set(business_day_ref(db, names, tenant, closed),
                      _closed_day(found, closed, data))
            batch.delete(_open_marker_ref(db, names, tenant, closed))
        batch.set(_open_marker_ref(db, names, tenant, today), _opening(today))
        batch.update(
            ref,
            {"business_day": today.isoformat(), "day": today.toordinal(), "epoch": 0,
             "last_number": 0, "last_claim": "", "issued": 0, "resets": [],
             "opened_at": firestore.SERVER_TIMESTAMP},
            option=db.write_option(last_update_time=snapshot.update_time),
        )
        try:
            # A compare-and-set: sent again, an attempt fails unless none applied before it.
            batch.commit(retry=writes.IDEMPOTENT)
        except (gexc.FailedPrecondition, gexc.NotFound):
            continue  # another writer (or our own earlier attempt) changed it: look again
        except writes.FAILED as error:
            if writes.refused(error):
                if uncertain:
                    raise writes.lost(None) from error
                raise
            uncertain = True  # it may have applied: the next read finds out
            continue
        return today.toordinal()
    if uncertain:
        raise writes.lost(None)
    raise FailedPrecondition(f"tenant: could not open business day {today} (too much contention)")


def _closed_day(found: SequenceConfig, day: dt.date, data: dict[str, Any]) -> dict[str, Any]:
    """The audit record of a finished business day, deleted by the TTL policy later."""
    ends = business_day_start(day + dt.timedelta(days=1), found.reset_at, found.zone)
    return {
        "business_day": day.isoformat(),
        "timezone": found.timezone,
        "reset_time": found.reset_time,
        "last_number": int(data.get("last_number", 0)),
        "epoch": int(data.get("epoch", 0)),
        "issued": int(data.get("issued", 0)),
        "resets": list(data.get("resets", [])),
        "closed_at": firestore.SERVER_TIMESTAMP,
        config.EXPIRES_AT: ends + dt.timedelta(days=config.SEQUENCE_RETENTION_DAYS),
    }


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _write_configured(tenant: str, write: Callable[_P, _R], *args: _P.args,
                      **kwargs: _P.kwargs) -> _R:
    """Run one write to the tenant's document; a document deleted meanwhile is unconfigured."""
    try:
        return write(*args, **kwargs)
    except gexc.NotFound as error:
        raise FailedPrecondition(
            f"tenant: {tenant!r} has no sequence; configure_sequence first") from error


def _transformed(write: dict[str, Any], result: WriteResult) -> dict[str, int]:
    """The value after `result`'s write of each field that `write` increments (the client sends
    transforms sorted by field path, and their results come back in that order)."""
    fields = sorted(name for name, value in write.items() if isinstance(value, firestore.Increment))
    values = (value.integer_value for value in result.transform_results)
    return dict(zip(fields, values, strict=True))


def _ticket(db: firestore.Client, found: SequenceConfig, result: WriteResult,
            cache: SequenceCache) -> Ticket:
    after = _transformed(_NUMBER_WRITE, result)
    cache.saw(db, found, after["day"])
    return Ticket(tenant=found.tenant, number=after["last_number"],
                  business_day=dt.date.fromordinal(after["day"]), epoch=after["epoch"])


class Unrecorded:
    """The numbers a process issued for request ids whose records do not hold them yet: its
    next commit of a number for a request id writes up to RECORDS_PER_COMMIT of them into their
    records, so that a record costs no round trip of its own. Writing a number into its record
    twice writes the same values: a commit whose outcome is not known gives them back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers: list[tuple[firestore.DocumentReference, Ticket]] = []

    def take(self) -> list[tuple[firestore.DocumentReference, Ticket]]:
        with self._lock:
            taken = self._numbers[:RECORDS_PER_COMMIT]
            del self._numbers[:RECORDS_PER_COMMIT]
        return taken

    def add(self, *numbers: tuple[firestore.DocumentReference, Ticket]) -> None:
        with self._lock:
            self._numbers.extend(numbers)
            del self._numbers[:-MAX_UNRECORDED]  # the housekeeping records what is dropped


RECORDS_PER_COMMIT = 8  # numbers carried into their records by one commit of a number
MAX_UNRECORDED = 1000  # numbers a process holds for its next commits, at most


def _number_once(writing: Writing, db: firestore.Client, found: SequenceConfig,
                 record: firestore.DocumentReference, *, uid: str, request_id: str,
                 cache: SequenceCache, unrecorded: Unrecorded) -> Ticket:
    """Issue a number for a request_id at most once, or return the one it was given.

    The record is created in the same commit as the number's write, so a record exists exactly
    when its number was issued, and the commit may be sent again after a lost answer: an attempt
    that finds the record (an earlier attempt's, or another call's with the same id) takes the
    number from it (`_issued`). The number goes into the record with a later commit
    (`Unrecorded`), or the housekeeping's (`record_issued`).
    """
    nonce = writing.nonce()
    claim = {"uid": uid, "request_id": request_id, "state": "issuing",
             "claimed_at": firestore.SERVER_TIMESTAMP, writes.NONCE: nonce,
             "spread": int(record.id[:8], 16) % RECORD_SPREAD, config.EXPIRES_AT: _expiry()}
    carried = unrecorded.take()
    batch = db.batch()
    encoding.create(batch, record, claim)
    encoding.update(batch, sequence_ref(db, writing.names, found.tenant),
                    {**_NUMBER_WRITE, "last_claim": nonce})
    for earlier, ticket in carried:
        encoding.merge(batch, earlier, _recorded(ticket))
    try:
        result = _write_configured(
            found.tenant, writing.resending, functools.partial(writing.send, batch),
            request_id=request_id)[1]  # the claim's, the number's, the records carried
    except gexc.AlreadyExists as error:
        unrecorded.add(*carried)
        with writes.finding_out(error, request_id=request_id):
            return _issued(db, writing.names, found, record, cache)
    except BaseException:
        unrecorded.add(*carried)
        raise
    ticket = _ticket(db, found, result, cache)
    unrecorded.add((record, ticket))
    return ticket


def _expiry() -> dt.datetime:
    return _utcnow() + dt.timedelta(days=config.SEQUENCE_RETENTION_DAYS)


def _recorded(ticket: Ticket) -> dict[str, Any]:
    """A record's fields once its number is in it (merged: a record gone by TTL or with its
    tenant comes back holding its number, and expires again)."""
    return {"state": "issued", "number": ticket.number, "epoch": ticket.epoch,
            "business_day": ticket.business_day.isoformat(),
            "issued_at": firestore.SERVER_TIMESTAMP, config.EXPIRES_AT: _expiry()}


def _issued(db: firestore.Client, names: Names, found: SequenceConfig,
            record: firestore.DocumentReference, cache: SequenceCache) -> Ticket:
    """The number a request_id's record stands for. Written into it once its call has it; until
    then (that call's answer was lost, or it died, or it is about to write it) the sequence as
    the record's own commit left it holds it (`_read_back`), for an hour (longer with
    point-in-time recovery). The record's call writes the number within milliseconds, and the
    housekeeping within a minute or two, so a retry an hour later finds it there, unless
    neither could: then FAILED_PRECONDITION, never a second number."""
    snapshot = record.get()
    data = snapshot.to_dict() or {}
    if data.get("state") == "issued":
        return Ticket(tenant=found.tenant, number=int(data["number"]),
                      business_day=dt.date.fromisoformat(data["business_day"]),
                      epoch=int(data["epoch"]))
    if data.get("state") == LOST:
        raise Unreadable(f"request_id: {data.get('request_id')!r} was given a number that can "
                         f"no longer be read back ({data.get('lost_reason')})")
    ticket = _read_back(db, names, found.tenant, snapshot)
    cache.saw(db, found, ticket.business_day.toordinal())
    _record(db, record, ticket)
    return ticket


class Unreadable(FailedPrecondition):
    """A record's number cannot be read back, and never will be: past Firestore's read window,
    or the sequence as read is not its commit's (an import or a restore re-created the record
    at a later time). Refused rather than guessed."""


def _read_back(db: firestore.Client, names: Names, tenant: str, record: Snapshot) -> Ticket:
    """The number an unrecorded record stands for: the sequence as the record's own commit left
    it, read at the record's create time. Taken only when that version of the sequence names the
    record's claim (`last_claim`, the record's nonce, set by the same commit): a create time
    that is not the commit's (an import re-creates every document, fields unchanged, at the
    import time) reads a version of some other commit, whose `last_claim` is not this record's.
    The one exception is harmless: the last claim before an import reads its own number, which
    the version imported still holds. `Unreadable` once that is out of reach or undecidable."""
    data = record.to_dict() or {}
    claim, request_id = data.get(writes.NONCE), data.get("request_id")
    try:
        created = instant(record.create_time)
        then = sequence_ref(db, names, tenant).get(read_time=created).to_dict() or {}
    except (gexc.FailedPrecondition, gexc.InvalidArgument) as error:
        raise Unreadable(f"request_id: {request_id!r} was given a number that can no longer "
                         "be read back (past the read window)") from error
    if not claim or then.get("last_claim") != claim:
        raise Unreadable(f"request_id: {request_id!r} was given a number that cannot be told "
                         "from its record (its create time is not its commit's: an import?)")
    return Ticket(tenant=tenant, number=int(then["last_number"]),
                  business_day=dt.date.fromordinal(int(then["day"])), epoch=int(then["epoch"]))


def _record(db: firestore.Client, record: firestore.DocumentReference, ticket: Ticket) -> None:
    """Write the number into its request's record (best effort: `_issued` can read it back)."""
    with contextlib.suppress(gexc.GoogleAPICallError, gexc.RetryError):
        batch = db.batch()
        encoding.merge(batch, record, _recorded(ticket))
        batch.commit(retry=writes.IDEMPOTENT)


RECORD_AFTER_S = 10.0  # an unrecorded number younger than this is left to its process's commits
RECORDS_PER_RUN = 300  # unrecorded numbers one housekeeping run reads, at most
# Records are spread over this many values of their `spread` field (from their id), the head of
# the housekeeping's index: `claimed_at` increases with time, and an index range written in
# order takes about 500 writes a second.
RECORD_SPREAD = 10
# A record still unreadable this long after its claim, for whatever reason, is given up on.
RECORD_GIVE_UP_S = 7200.0
LOST = "lost"  # the state of a record whose number can never be read back
LOST_LOG_PREFIX = "sequences: number lost"  # logged at ERROR once per record (an alert matches)


@dataclass(frozen=True, kw_only=True)
class Housekept:
    """What one run of `record_issued` did."""

    recorded: int = 0  # numbers written into their records
    lost: int = 0  # records marked `lost`
    failed: tuple[str, ...] = ()  # tenants whose records it left for the next run (logged)


def record_issued(db: firestore.Client, names: Names, now: dt.datetime) -> Housekept:
    """The housekeeping's part (every minute): write into their records the numbers no later
    commit of their process carried (it went idle, or died), while the sequences can still be
    read at the records' create times (an hour).

    It always makes progress. A run reads at most RECORDS_PER_RUN records, the oldest claimed
    RECORD_AFTER_S ago or more (younger ones are their process's to carry: they do not take the
    page). A record it can never read back (`Unreadable`, or still failing RECORD_GIVE_UP_S
    after its claim) is marked `lost` (a compare-and-set: never over its number), logged at
    ERROR once with LOST_LOG_PREFIX, and counted (`lost_records`): it leaves the query. Any
    other error is logged with its tenant and leaves that tenant's records for the next run;
    no other tenant's."""
    cutoff = now - dt.timedelta(seconds=RECORD_AFTER_S)
    query = (db.collection_group(names.number_requests)
             .where(filter=FieldFilter("spread", "in", list(range(RECORD_SPREAD))))
             .where(filter=FieldFilter("state", "==", "issuing"))
             .where(filter=FieldFilter("claimed_at", "<", cutoff))
             .order_by("claimed_at").limit(RECORDS_PER_RUN))
    by_tenant: dict[str, list[Snapshot]] = {}
    for snapshot in query.stream():
        by_tenant.setdefault(snapshot.reference.parent.parent.id, []).append(snapshot)
    recorded = lost = 0
    failed: list[str] = []
    for tenant, records in by_tenant.items():
        try:
            tickets, marked = _housekeep_tenant(db, names, tenant, records, now)
        except Exception:
            log.exception("sequence records of tenant %r left for the next run", tenant)
            failed.append(tenant)
            continue
        recorded, lost = recorded + tickets, lost + marked
    return Housekept(recorded=recorded, lost=lost, failed=tuple(failed))


def _housekeep_tenant(db: firestore.Client, names: Names, tenant: str, records: list[Snapshot],
                      now: dt.datetime) -> tuple[int, int]:
    """One tenant's part of a run: its numbers read back and written in one commit, the
    records it can never read marked. Returns how many of each."""
    tickets: list[tuple[firestore.DocumentReference, Ticket]] = []
    marked = 0
    for record in records:
        try:
            tickets.append((record.reference, _read_back(db, names, tenant, record)))
        except Unreadable as error:
            marked += _mark_lost(db, tenant, record, str(error))
        except Exception as error:
            claimed = (record.to_dict() or {}).get("claimed_at")
            if not isinstance(claimed, dt.datetime) or \
                    (now - claimed).total_seconds() < RECORD_GIVE_UP_S:
                raise
            marked += _mark_lost(db, tenant, record, f"still unreadable: {error!r}"[:300])
    if tickets:
        batch = db.batch()
        for ref, ticket in tickets:
            encoding.merge(batch, ref, _recorded(ticket))
        batch.commit(retry=writes.IDEMPOTENT)  # the same values, however often they land
    return len(tickets), marked


def _mark_lost(db: firestore.Client, tenant: str, record: Snapshot, reason: str) -> int:
    """Mark a record whose number can never be read back: a compare-and-set on the version
    read, so it never lands over the number written meanwhile (a resend of it fails its
    precondition). 1 if this call marked it."""
    batch = db.batch()
    batch.update(record.reference, {"state": LOST, "lost_reason": reason},
                 option=db.write_option(last_update_time=instant(record.update_time)))
    try:
        batch.commit(retry=writes.IDEMPOTENT)
    except (gexc.FailedPrecondition, gexc.NotFound):
        return 0  # its number was written meanwhile, or it expired
    log.error("%s: tenant %r, record %s (request_id %r): %s", LOST_LOG_PREFIX, tenant,
              record.reference.path, (record.to_dict() or {}).get("request_id"), reason)
    return 1


def lost_records(db: firestore.Client, names: Names) -> int:
    """How many records are marked `lost`, of every tenant, until their TTL deletes them
    (SEQUENCE_RETENTION_DAYS): one count aggregation (`counters status`)."""
    # Typed Any: the library declares count() as returning a class, not an instance.
    query: Any = db.collection_group(names.number_requests).where(
        filter=FieldFilter("state", "==", LOST))
    [[result]] = query.count(alias="lost").get()
    return int(result.value or 0)
