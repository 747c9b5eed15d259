"""A tenant's business-day rule set (`configure_sequence`) and its business day opened: lazily,
by the first call that finds the document on an older day (`ready_for_today`, `open_day`), which
archives the closed day."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features.sequences.caching import SequenceCache
from counting.features.sequences.days import SequenceConfig, business_day_for, business_day_start
from counting.features.sequences.documents import (
    business_day_ref,
    config_from,
    open_marker_ref,
    opening,
    sequence_ref,
)
from counting.foundation import config, writes
from counting.foundation.clock import Clock
from counting.foundation.config import Names
from counting.foundation.errors import FailedPrecondition, OutcomeUnknown
from counting.writepath import shards

if TYPE_CHECKING:
    from counting.features.context import Context

log = logging.getLogger(__name__)


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
    commit applied: opening the day after it is the first number's work too (`ready_for_today`
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
        ctx.sequences.saw(db, found, open_day(db, ctx.names, tenant, today), fresh=True)
    except _NOT_OPENED as error:
        log.warning("tenant %r: configured; opening %s is left to its first number: %r",
                    tenant, today, error)
    return found


# What opening the day after a configuration may raise: logged, the rule is in force.
_NOT_OPENED: tuple[type[Exception], ...] = (*writes.FAILED, FailedPrecondition, OutcomeUnknown)


def ready_for_today(
    db: firestore.Client, names: Names, tenant: str, now: dt.datetime | None,
    cache: SequenceCache, clock: Clock,
) -> SequenceConfig:
    """The tenant's configuration, with its document's open day at least today's (`now`, else
    the clock's)."""
    found, opened = cache.get(db, names, tenant)
    today = business_day_for(now or clock.now(), found.reset_at, found.zone)
    if opened < today.toordinal():
        cache.saw(db, found, open_day(db, names, tenant, today))
    return found


def ready_for_request(
    db: firestore.Client, names: Names, tenant: str, now: dt.datetime | None,
    cache: SequenceCache, clock: Clock, request_id: str | None,
) -> SequenceConfig:
    """`ready_for_today` for an operation that may be a retry of `request_id`: a day that cannot
    be opened (every race lost, or the opening's outcome unknown) is `OutcomeUnknown`, never a
    refusal, since an earlier attempt of the request may still land in the day it read, which a
    refusal would contradict; a retry with the id settles it."""
    try:
        return ready_for_today(db, names, tenant, now, cache, clock)
    except (Contended, OutcomeUnknown) as error:
        if request_id is None:
            raise
        raise OutcomeUnknown(
            f"tenant {tenant!r}: the business day could not be opened ({error}); an earlier "
            "attempt of this request may still apply: retry with the same request_id",
            request_id=request_id) from error


def open_day(db: firestore.Client, names: Names, tenant: str, today: dt.date) -> int:
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
        found = config_from(tenant, data)
        current = int(data.get("day", 0))
        if current >= today.toordinal():
            return current
        batch = db.batch()
        if current:
            closed = dt.date.fromordinal(current)
            batch.set(business_day_ref(db, names, tenant, closed),
                      _closed_day(found, closed, data))
            batch.delete(open_marker_ref(db, names, tenant, closed))
        batch.set(open_marker_ref(db, names, tenant, today), opening(today))
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
    raise Contended(f"tenant: could not open business day {today} (too much contention)")


class Contended(FailedPrecondition):
    """The business day could not be opened: every race for it was lost. Nothing was written;
    for a request with a `request_id` that says nothing of its earlier attempts
    (`issuing.next_number`)."""


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
