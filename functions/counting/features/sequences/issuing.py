"""Issuing numbers (`next_number`): one write with no transaction, and with a `request_id` at
most once (its record created in the number's commit, the number written into it later, or read
back from the sequence as that commit left it)."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.types import WriteResult

from counting.features.sequences.caching import SequenceCache, Unrecorded
from counting.features.sequences.days import SequenceConfig
from counting.features.sequences.documents import (
    LOST,
    NUMBER_WRITE,
    RECORD_SPREAD,
    Ticket,
    expiry,
    request_ref,
    sequence_ref,
    transformed,
    write_configured,
)
from counting.features.sequences.limits import SequenceLimits
from counting.features.sequences.opening import ready_for_request
from counting.foundation import config, encoding, writes
from counting.foundation.clock import instant
from counting.foundation.config import Names
from counting.foundation.errors import FailedPrecondition
from counting.writepath.context import Writing

if TYPE_CHECKING:
    from counting.features.context import Context

Snapshot = firestore.DocumentSnapshot[Any]


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
    found = ready_for_request(db, ctx.names, tenant, now, cache, ctx.writing.clock, request_id)
    if request_id is None:
        batch = db.batch()
        encoding.update(batch, sequence_ref(db, ctx.names, tenant), NUMBER_WRITE)
        # Sent once: a number whose answer was lost is skipped, never issued twice.
        [result] = write_configured(tenant, ctx.writing.commit_once, batch)
        return _ticket(db, found, result, cache)
    return _number_once(ctx.writing, db, found, request_ref(db, ctx.names, tenant, uid,
                                                            request_id),
                        uid=uid, request_id=request_id, cache=cache,
                        unrecorded=ctx.unrecorded, limits=ctx.sequence_limits)


def _ticket(db: firestore.Client, found: SequenceConfig, result: WriteResult,
            cache: SequenceCache) -> Ticket:
    after = transformed(NUMBER_WRITE, result)
    cache.saw(db, found, after["day"])
    return Ticket(tenant=found.tenant, number=after["last_number"],
                  business_day=dt.date.fromordinal(after["day"]), epoch=after["epoch"])


def _number_once(writing: Writing, db: firestore.Client, found: SequenceConfig,
                 record: firestore.DocumentReference, *, uid: str, request_id: str,
                 cache: SequenceCache, unrecorded: Unrecorded,
                 limits: SequenceLimits) -> Ticket:
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
             "spread": int(record.id[:8], 16) % RECORD_SPREAD, config.EXPIRES_AT: expiry()}
    carried = unrecorded.take(limits)
    batch = db.batch()
    encoding.create(batch, record, claim)
    encoding.update(batch, sequence_ref(db, writing.names, found.tenant),
                    {**NUMBER_WRITE, "last_claim": nonce})
    for earlier, ticket in carried:
        encoding.merge(batch, earlier, recorded(ticket))
    try:
        result = write_configured(
            found.tenant, writing.resending, functools.partial(writing.send, batch),
            request_id=request_id)[1]  # the claim's, the number's, the records carried
    except gexc.AlreadyExists as error:
        unrecorded.add(limits, *carried)
        with writes.finding_out(error, request_id=request_id):
            return _issued(db, writing.names, found, record, cache)
    except BaseException:
        unrecorded.add(limits, *carried)
        raise
    ticket = _ticket(db, found, result, cache)
    unrecorded.add(limits, (record, ticket))
    return ticket


def recorded(ticket: Ticket) -> dict[str, Any]:
    """A record's fields once its number is in it (merged: a record gone by TTL or with its
    tenant comes back holding its number, and expires again)."""
    return {"state": "issued", "number": ticket.number, "epoch": ticket.epoch,
            "business_day": ticket.business_day.isoformat(), config.EXPIRES_AT: expiry()}


def _issued(db: firestore.Client, names: Names, found: SequenceConfig,
            record: firestore.DocumentReference, cache: SequenceCache) -> Ticket:
    """The number a request_id's record stands for. Written into it once its call has it; until
    then (that call's answer was lost, or it died, or it is about to write it) the sequence as
    the record's own commit left it holds it (`read_back`), for an hour (longer with
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
    ticket = read_back(db, names, found.tenant, snapshot)
    cache.saw(db, found, ticket.business_day.toordinal())
    _record(db, record, ticket)
    return ticket


class Unreadable(FailedPrecondition):
    """A record's number cannot be read back, and never will be: past Firestore's read window,
    or the sequence as read is not its commit's (an import or a restore re-created the record
    at a later time). Refused rather than guessed."""


def read_back(db: firestore.Client, names: Names, tenant: str, record: Snapshot) -> Ticket:
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
        encoding.merge(batch, record, recorded(ticket))
        batch.commit(retry=writes.IDEMPOTENT)
