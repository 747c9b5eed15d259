"""Resetting a sequence within its business day (`reset_sequence`): numbering restarts at 1
under a new epoch, at most once per request, never in a later day, recorded in the day's
`resets`."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features.sequences.days import SequenceConfig
from counting.features.sequences.documents import (
    RESET_WRITE,
    Reset,
    business_day_ref,
    config_from,
    open_marker_ref,
    opening,
    sequence_ref,
    transformed,
)
from counting.features.sequences.opening import ready_for_request
from counting.foundation import config, encoding, writes
from counting.foundation.config import Names
from counting.foundation.errors import FailedPrecondition
from counting.writepath import shards
from counting.writepath.context import Writing

if TYPE_CHECKING:
    from counting.features.context import Context

Snapshot = firestore.DocumentSnapshot[Any]


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
        found = ready_for_request(db, ctx.names, tenant, now, cache, ctx.writing.clock,
                                  request_id)
        applied = _reset_once(ctx.writing, db, found, marker, request_id=request_id)
    with writes.after_applied(request_id, ctx.writing.protections,
                              what=f"tenant {tenant!r} was reset"):
        if applied is None:  # an attempt of this request applied: read it back
            applied = _read_back_reset(db, ctx.names, tenant, marker[0].get())
        reset = _record_reset(db, ctx.names, tenant, applied, uid=uid)
    cache.saw(db, found, reset.business_day.toordinal())
    return reset


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
    """Commit a reset of the sequence's open day: its write to the sequence (`RESET_WRITE`),
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
        config_from(found.tenant, data)
        day = dt.date.fromordinal(int(data.get("day") or 1))
        opened = open_marker_ref(db, writing.names, found.tenant, day)
        if opened.get().exists:
            break
        # A day opened before open markers: it gets one at the sequence's version read.
        batch = db.batch()
        batch.set(opened, opening(day))
        batch.update(ref, {"day": day.toordinal()},
                     option=db.write_option(last_update_time=snapshot.update_time))
        with contextlib.suppress(gexc.FailedPrecondition, gexc.NotFound):
            batch.commit(retry=writes.IDEMPOTENT)
    else:
        raise FailedPrecondition(f"tenant: could not reset {found.tenant!r} (too much "
                                 "contention); nothing was reset")
    batch = db.batch()
    encoding.update(batch, ref, RESET_WRITE)
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
    after = transformed(RESET_WRITE, results[0])
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
    batch.update(open_marker_ref(db, names, tenant, applied.day), {"recorded": True})
    try:
        batch.commit(retry=writes.IDEMPOTENT)
    except gexc.NotFound:  # the day closed: its archive keeps its resets
        with contextlib.suppress(gexc.NotFound):
            business_day_ref(db, names, tenant, applied.day).update(
                {"resets": entry}, retry=writes.IDEMPOTENT)
    return reset
