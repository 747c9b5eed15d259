"""Where a sequence's data lives and what its writes are: the tenant's document, its business
days (closed days' archives and the open day's marker), its request records; the transforms of
a number and of a reset, and what their results read."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.types import WriteResult

from counting.features.sequences.days import SequenceConfig
from counting.foundation import config
from counting.foundation.config import Names
from counting.foundation.errors import FailedPrecondition

# The transforms of one number and of a reset; `transformed` reads their results back. Every
# write that moves `last_number` also sets `last_claim`: the nonce of the request id's record
# created in the same commit, or "" (`read_back`).
NUMBER_WRITE = {
    "day": firestore.Increment(0),
    "epoch": firestore.Increment(0),
    "issued": firestore.Increment(1),
    "last_claim": "",
    "last_number": firestore.Increment(1),
}
RESET_WRITE = {
    "day": firestore.Increment(0),
    "epoch": firestore.Increment(1),
    "issued": firestore.Increment(0),
    "last_claim": "",
    "last_number": 0,
}


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


# A business day's open marker, `business_days/{YYYY-MM-DD}.open`: it exists while that day is
# the sequence's open day (`open_day` creates the new day's and deletes the closed one's).
_OPEN = ".open"


def open_marker_ref(db: firestore.Client, names: Names, tenant: str, day: dt.date
                     ) -> firestore.DocumentReference:
    return db.collection(names.sequences, tenant, names.business_days).document(
        day.isoformat() + _OPEN)


def opening(day: dt.date) -> dict[str, Any]:
    return {"business_day": day.isoformat(), config.EXPIRES_AT: expiry()}


def config_from(tenant: str, data: dict[str, Any]) -> SequenceConfig:
    if not data.get("timezone"):
        raise FailedPrecondition(f"tenant: {tenant!r} has no sequence; configure_sequence first")
    return SequenceConfig(tenant=tenant, timezone=str(data["timezone"]),
                          reset_time=str(data.get("reset_time", config.DEFAULT_RESET_TIME)))


_P = ParamSpec("_P")
_R = TypeVar("_R")


def write_configured(tenant: str, write: Callable[_P, _R], *args: _P.args,
                     **kwargs: _P.kwargs) -> _R:
    """Run one write to the tenant's document; a document deleted meanwhile is unconfigured."""
    try:
        return write(*args, **kwargs)
    except gexc.NotFound as error:
        raise FailedPrecondition(
            f"tenant: {tenant!r} has no sequence; configure_sequence first") from error


def transformed(write: dict[str, Any], result: WriteResult) -> dict[str, int]:
    """The value after `result`'s write of each field that `write` increments (the client sends
    transforms sorted by field path, and their results come back in that order)."""
    fields = sorted(name for name, value in write.items() if isinstance(value, firestore.Increment))
    values = (value.integer_value for value in result.transform_results)
    return dict(zip(fields, values, strict=True))


def expiry() -> dt.datetime:
    return utcnow() + dt.timedelta(days=config.SEQUENCE_RETENTION_DAYS)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# Records are spread over this many values of their `spread` field (from their id), the head of
# the housekeeping's index: `claimed_at` increases with time, and an index range written in
# order takes about 500 writes a second.
RECORD_SPREAD = 10
LOST = "lost"  # the state of a record whose number can never be read back
