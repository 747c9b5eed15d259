"""The housekeeping of request records (`record_issued`, every minute): the numbers no commit
of their process carried are written into their records, a record that can never be read back
is marked lost (`lost_records` counts them)."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from counting.features.sequences.documents import LOST, RECORD_SPREAD, Ticket
from counting.features.sequences.issuing import Unreadable, read_back, recorded
from counting.features.sequences.limits import LIMITS, SequenceLimits
from counting.foundation import encoding, writes
from counting.foundation.clock import instant
from counting.foundation.config import Names

log = logging.getLogger(__name__)
Snapshot = firestore.DocumentSnapshot[Any]

LOST_LOG_PREFIX = "sequences: number lost"  # logged at ERROR once per record (an alert matches)


@dataclass(frozen=True, kw_only=True)
class Housekept:
    """What one run of `record_issued` did."""

    recorded: int = 0  # numbers written into their records
    lost: int = 0  # records marked `lost`
    failed: tuple[str, ...] = ()  # tenants whose records it left for the next run (logged)


def record_issued(db: firestore.Client, names: Names, now: dt.datetime,
                  limits: SequenceLimits = LIMITS) -> Housekept:
    """The housekeeping's part (every minute): write into their records the numbers no later
    commit of their process carried (it went idle, or died), while the sequences can still be
    read at the records' create times (an hour).

    It always makes progress. A run reads at most `records_per_run` records, the oldest claimed
    `record_after_s` ago or more (younger ones are their process's to carry: they do not take
    the page). A record it can never read back (`Unreadable`, or still failing
    `record_give_up_s` after its claim) is marked `lost` (a compare-and-set: never over its
    number), logged at ERROR once with LOST_LOG_PREFIX, and counted (`lost_records`): it leaves
    the query. Any other error is logged with its tenant and leaves that tenant's records for
    the next run; no other tenant's."""
    cutoff = now - dt.timedelta(seconds=limits.record_after_s)
    query = (db.collection_group(names.number_requests)
             .where(filter=FieldFilter("spread", "in", list(range(RECORD_SPREAD))))
             .where(filter=FieldFilter("state", "==", "issuing"))
             .where(filter=FieldFilter("claimed_at", "<", cutoff))
             .order_by("claimed_at").limit(limits.records_per_run))
    by_tenant: dict[str, list[Snapshot]] = {}
    for snapshot in query.stream():
        by_tenant.setdefault(snapshot.reference.parent.parent.id, []).append(snapshot)
    recorded = lost = 0
    failed: list[str] = []
    for tenant, records in by_tenant.items():
        try:
            tickets, marked = _housekeep_tenant(db, names, tenant, records, now,
                                               limits.record_give_up_s)
        except Exception:
            log.exception("sequence records of tenant %r left for the next run", tenant)
            failed.append(tenant)
            continue
        recorded, lost = recorded + tickets, lost + marked
    return Housekept(recorded=recorded, lost=lost, failed=tuple(failed))


def _housekeep_tenant(db: firestore.Client, names: Names, tenant: str, records: list[Snapshot],
                      now: dt.datetime, give_up_s: float) -> tuple[int, int]:
    """One tenant's part of a run: its numbers read back and written in one commit, the
    records it can never read marked. Returns how many of each."""
    tickets: list[tuple[firestore.DocumentReference, Ticket]] = []
    marked = 0
    for record in records:
        try:
            tickets.append((record.reference, read_back(db, names, tenant, record)))
        except Unreadable as error:
            marked += _mark_lost(db, tenant, record, str(error))
        except Exception as error:
            claimed = (record.to_dict() or {}).get("claimed_at")
            if not isinstance(claimed, dt.datetime) or \
                    (now - claimed).total_seconds() < give_up_s:
                raise
            marked += _mark_lost(db, tenant, record, f"still unreadable: {error!r}"[:300])
    if tickets:
        batch = db.batch()
        for ref, ticket in tickets:
            encoding.merge(batch, ref, recorded(ticket))
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
