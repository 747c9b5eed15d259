"""The shard write every write path shares (counters, trends, collection counters, resets), and
what makes it count once (docs/architecture.md, "Exactly once").

A write to a shard sets the fields the rollup reads (`ShardWrite`): its key's home is computed
once, from the shard's reference, and carried by the write through its commit (`Landed`), the
touch after a slow commit and the wake-up of the partition that owns it (`settle`). A write sent
again after a lost answer is made safe by a marker committed with it (`commit_marked`: a request
marker; a counter's voter and pacing markers and a collection's record are the features' own),
which carries the request's nonce and the shards it wrote, so that whoever finds the marker can
tell whose commit made it and settle what it wrote (`marker_landed`).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.foundation import config, encoding, writes
from counting.foundation.config import Names
from counting.foundation.errors import (
    Aborted,
    CounterError,
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    refusal_named,
)
from counting.writepath import partitions
from counting.writepath.context import Writing

log = logging.getLogger(__name__)
Snapshot = firestore.DocumentSnapshot[Any]
# On voter and pacing markers: the nonces of the requests that wrote them in the last
# NONCE_KEEP_S (`nonces`, as before), and beside them when each was written (`nonces_ms`: its
# writer's clock when it planned the write, in ms since the epoch). A request checks for its
# own nonce only while its call runs (its resends for RESEND_FOR_S, the last attempt's wait, the
# reads after: within a callable's 60 s); twice that keeps it there whenever its request looks,
# with instances' clocks a minute apart. A nonce whose time is not known (written before times
# were kept, or by a version that kept 8 without them) is kept. At most MAX_NONCES (a user
# rewriting their marker faster than that makes their own lost answers UNKNOWN:
# `Guarded._found`).
NONCES = "nonces"
NONCES_MS = "nonces_ms"
NONCE_KEEP_S = 120
MAX_NONCES = 64


@dataclass(frozen=True)
class ShardWrite:
    """One shard's part of a commit: `fields` updated into it, or merged (`creates`: a trend
    bucket's shards come into being with their first write; a counter's exist, and one folded
    away must fail the write rather than come back). `home` is its key's home."""

    ref: firestore.DocumentReference
    home: int
    fields: dict[str, Any]
    creates: bool = False

    def add_to(self, batch: firestore.WriteBatch) -> None:
        if self.creates:
            encoding.merge(batch, self.ref, self.fields)
        else:
            encoding.update(batch, self.ref, self.fields)


def shard_write(writing: Writing, db: firestore.Client, shard: firestore.DocumentReference,
                by: int, *, creates: bool = False, **extra: Any) -> ShardWrite:
    """A write adding `by` to `shard`, with `extra` fields. `updated_at` and `stripe` feed the
    rollup query of the partition that owns it (`counting.writepath.partitions`), `writes` (one
    more per write, whatever `by`) is how the rollup measures the write rate."""
    home = partitions.home_of_shard(shard, writing.names)
    return ShardWrite(shard, home, {
        "count": firestore.Increment(by),
        "writes": firestore.Increment(1),
        "updated_at": firestore.SERVER_TIMESTAMP,
        "stripe": writing.stripe(db, home),
        **extra,
    }, creates)


@dataclass(frozen=True)
class Landed:
    """A shard write that committed: its key's home, its server timestamp (taken when its
    request started; None if it stored none) and its commit time."""

    ref: firestore.DocumentReference
    home: int
    stamped: dt.datetime | None
    committed: dt.datetime

    @classmethod
    def of(cls, ref: firestore.DocumentReference, home: int, result: Any) -> Landed:
        """From a commit's WriteResult: Firestore returns the timestamp it stored among the
        write's transform results."""
        pb = type(result).pb(result)
        stamped = next((value.timestamp_value.ToDatetime(tzinfo=dt.UTC)
                        for value in pb.transform_results
                        if value.WhichOneof("value_type") == "timestamp_value"), None)
        return cls(ref, home, stamped, result.update_time)

    @property
    def straddles(self) -> bool:
        """Whether the rollup's change query could miss this write: its `updated_at` lies
        further before its commit than the query's overlap allows for. A write that stored no
        timestamp counts as one."""
        return self.stamped is None or (self.committed - self.stamped).total_seconds() >= \
            config.SHARD_TOUCH_AFTER_S


def landed(shard_writes: Iterable[ShardWrite], results: list[Any]) -> list[Landed]:
    """The shard writes among a commit's last results (shard writes come last in every commit
    of the write paths, after their markers)."""
    shard_writes = list(shard_writes)
    return [Landed.of(write.ref, write.home, result) for write, result in
            zip(shard_writes, results[len(results) - len(shard_writes):], strict=True)]


def settle(writing: Writing, db: firestore.Client, written: Iterable[Landed]) -> None:
    """After a commit of shard writes: touch every shard whose write straddles, so that the
    rollup finds it within a tick. A touch is a write of a fresh `updated_at` alone, sent after
    the commit was acknowledged, so its server timestamp is later than that commit; it is itself
    checked, up to SHARD_TOUCH_ATTEMPTS times. A write left untouched (this instance died,
    Firestore stayed slow) is found by the rollup's sweep (docs/architecture.md, "Exact on real
    Firestore"). Then make sure a rollup tick follows the last of these commits
    (`Writing.after_write`): every write path of the domain ends here, and a commit that wrote no
    shard (a document change that moves no count) asks for no tick."""
    written = list(written)
    last: dt.datetime | None = None
    for write in written:
        touches = 0
        while writing.protections.touch and write.straddles \
                and touches < config.SHARD_TOUCH_ATTEMPTS:
            touches += 1
            try:
                result = write.ref.update(
                    {"updated_at": firestore.SERVER_TIMESTAMP,
                     "stripe": writing.stripe(db, write.home)},
                    retry=writes.IDEMPOTENT)
            except gexc.NotFound:
                break  # folded away: the fold moved its count, which the rollup mirrors
            except Exception as error:  # the write itself is done; the sweep will find it
                log.warning("could not touch %s after a slow write: %r", write.ref.path, error)
                break
            write = Landed.of(write.ref, write.home, result)
        last = write.committed if last is None else max(last, write.committed)
    if last is not None:
        writing.after_write(db, last, {write.home for write in written})


def marker_landed(db: firestore.Client, names: Names, marker: Snapshot) -> list[Landed]:
    """The shard writes a marker's commit made, as `settle` takes them: each marker records its
    shards and its commit's server timestamp; the commit time is its version (a marker is
    created, or rewritten at a version, by the commit that wrote its shards)."""
    data = marker.to_dict() or {}
    stamped, committed = data.get("at"), marker.update_time
    if committed is None:
        return []
    refs = [db.document(path) for path in data.get("shards") or ()]
    return [Landed(ref, partitions.home_of_shard(ref, names), stamped, committed) for ref in refs]


# What a request's checks refuse before it writes (bounds, writers, a counter that took a
# declaration): a retry may meet them after its first attempt counted and the counter changed.
REFUSALS = (InvalidArgument, PermissionDenied, FailedPrecondition)
# On a request marker that no attempt of its request may ever make (a tombstone): the answer its
# request was given, the name of a domain error (a refusal) or NOT_APPLIED.
ANSWERED = "answered"
NOT_APPLIED = "NOT_APPLIED"


def answer_final(writing: Writing, db: firestore.Client, uid: str, request_id: str | None,
                 nonce: str, refusal: CounterError | None = None) -> bool:
    """Before a request with a `request_id` is answered `refusal` (or "not applied", None): make
    that answer final. The request's marker is created as a tombstone naming the answer, so that
    every attempt of this request still in flight (a commit that lands late, a resend) fails on
    it, and a retry with the same id is answered the same. Returns True when the request is to
    be answered "not applied" whatever it meant to answer: its marker was there as the request's
    own, applied before (its first answer was lost, or the client retried, and the counter's
    policy changed since: answered as a retry, its shards settled as any retry that finds its
    marker does), or as a tombstone that answered "not applied"; a tombstone that answered a
    refusal raises that refusal again. False: the caller's refusal or "not applied" stands, for
    good. `OutcomeUnknown` when the tombstone's commit could not be known
    to apply: then the answer cannot be promised."""
    if request_id is None:
        return False
    marker = request_marker_ref(db, writing.names, uid, request_id)
    if not writing.protections.final_answers:  # as before tombstones: a read, nothing fenced
        found = marker.get()
        if not found.exists or answered(found) is not None:
            return False
        settle(writing, db, marker_landed(db, writing.names, found))
        return True
    batch = db.batch()
    encoding.create(batch, marker, request_marker_fields(uid, request_id, [], {
        writes.NONCE: nonce,
        ANSWERED: NOT_APPLIED if refusal is None else type(refusal).__name__,
        "message": "" if refusal is None else str(refusal)[:MESSAGE_CHARS]}))
    try:
        writing.resending(functools.partial(writing.send, batch), request_id=request_id)
    except gexc.AlreadyExists as error:
        with writes.finding_out(error, request_id=request_id):
            found = marker.get()
        if answered(found) is not None:  # answered before, by any of its calls: the same again
            answer_again(found)  # a refusal raised as it was given
            return True  # "not applied", as it was given
        settle(writing, db, marker_landed(db, writing.names, found))
        return True
    return False


MESSAGE_CHARS = 500  # of a refusal's message kept in its tombstone


def answered(marker: Snapshot) -> str | None:
    """A tombstone's answer (`answer_final`); None for the marker of an applied request."""
    if not marker.exists:
        return None
    found = (marker.to_dict() or {}).get(ANSWERED)
    return found if isinstance(found, str) else None


def answer_again(marker: Snapshot) -> None:
    """A request whose marker is a tombstone gets the answer it was given: its refusal raised
    again (None: it was answered "not applied")."""
    name = answered(marker)
    if name is None or name == NOT_APPLIED:
        return
    raise refusal_named(name, str((marker.to_dict() or {}).get("message") or ""))


def commit_marked(writing: Writing, db: firestore.Client, shard_writes: list[ShardWrite], *,
                  uid: str, request_id: str | None, counters: list[str], nonce: str,
                  marker_id: str | None = None) -> bool:
    """Commit shard writes with the request's marker when there is a `request_id`, and settle
    them; False when the request_id was applied before. Without one the commit is sent once
    (`OutcomeUnknown` when its answer is lost); with one it is sent again after a lost answer,
    and an attempt that finds the marker there reads its nonce: an earlier attempt of this
    request made it (applied), or another request did (False). Either way the marker's shard
    writes are touched if they straddled: whoever made them may have lost the answer before
    touching. A marker that is a tombstone (`answer_final`) gives its answer again. `marker_id`:
    the id the marker is keyed by, when not `request_id` (a kind of request of its own)."""
    batch = db.batch()
    marker = None if request_id is None else request_marker_ref(db, writing.names, uid,
                                                                marker_id or request_id)
    if marker is not None:
        encoding.create(batch, marker, request_marker_fields(
            uid, marker_id or request_id or "", counters,
            {"at": firestore.SERVER_TIMESTAMP, writes.NONCE: nonce,
             "shards": [write.ref.path for write in shard_writes]}))
    for write in shard_writes:
        write.add_to(batch)
    if marker is None:
        results = writing.commit_once(batch)
    else:
        try:
            results = writing.resending(functools.partial(writing.send, batch),
                                        request_id=request_id)
        except gexc.AlreadyExists as error:
            with writes.finding_out(error, request_id=request_id):
                found = marker.get()
            answer_again(found)
            if answered(found) is not None:
                return False
            settle(writing, db, marker_landed(db, writing.names, found))
            return nonce_of(found) == nonce
    settle(writing, db, landed(shard_writes, results))
    return True


def request_marker_ref(db: firestore.Client, names: Names, uid: str,
                       request_id: str) -> firestore.DocumentReference:
    """The marker document that makes a request id count once per user: its id hashes (uid,
    request_id), since uids may hold characters a document id cannot."""
    key = hashlib.sha256(f"{uid}\0{request_id}".encode()).hexdigest()
    return db.collection(names.requests).document(key)


def admin_marker(db: firestore.Client, names: Names, uid: str, operation: str, target: str,
                 request_id: str | None, **extra: Any
                 ) -> tuple[firestore.DocumentReference, dict[str, Any]] | None:
    """The request marker of an admin operation (`operation` on `target`: a reset, a
    configuration) with a `request_id`, and its fields (`extra` besides): None without one. The
    commit that applies the operation creates it, so that a retry finds it applied and only
    finishes its later steps. Named apart from the increments' markers (a request_id holds no
    `:`)."""
    if request_id is None:
        return None
    ref = request_marker_ref(db, names, uid, f"{operation}:{target}:{request_id}")
    return ref, request_marker_fields(uid, request_id, [target], {
        "operation": operation, "at": firestore.SERVER_TIMESTAMP, **extra})


def request_marker_fields(uid: str, request_id: str, counters: list[str],
                          mark: dict[str, Any]) -> dict[str, Any]:
    """A request marker: created in the same commit as the request's shard writes. `mark` holds
    the nonce, the shards written and `at`, the commit's server timestamp, which outlives a copy
    of the database (`commit_time_of`). Expired by TTL on EXPIRES_AT."""
    return {"uid": uid, "request_id": request_id, "counters": counters, **mark,
            config.EXPIRES_AT: dt.datetime.now(dt.UTC) + config.REQUEST_MARKER_TTL}


def applied_at(db: firestore.Client, names: Names, uid: str,
               request_id: str) -> dt.datetime | None:
    """When this user's request was applied (its marker was created in the same commit as the
    shard write), or None if it was not (or has expired)."""
    snapshot = request_marker_ref(db, names, uid, request_id).get()
    if not snapshot.exists or answered(snapshot) is not None:
        return None
    return commit_time_of(snapshot.create_time, (snapshot.to_dict() or {}).get("at"))


# How long after the server timestamp a marker's commit stored its create time may come and
# still be taken as that commit's (`commit_time_of`): a commit is far quicker, an import later.
MARKER_COMMIT_SLACK_S = 1.0


def commit_time_of(created: dt.datetime, stamped: dt.datetime | None) -> dt.datetime:
    """The commit time of a marker's creation: its create time, unless that is more than
    MARKER_COMMIT_SLACK_S after the server timestamp the commit stored in it (taken as the
    commit's request started). Then the create time may not be the commit's: an import
    re-creates each document, fields unchanged, at the import time (the emulator's, on a
    `make dev` restart).
    The stored timestamp stands in, earlier than the commit by the commit's delay (docs/api.md,
    `increment`). A marker from before markers stored it has its create time only."""
    if stamped is None or created - stamped <= dt.timedelta(seconds=MARKER_COMMIT_SLACK_S):
        return created
    return stamped


def nonce_of(marker: Snapshot) -> str | None:
    """The nonce of the request whose commit last wrote a marker."""
    nonce = (marker.to_dict() or {}).get(writes.NONCE) if marker.exists else None
    return nonce if isinstance(nonce, str) else None


def recent_nonces(found: Snapshot | None, nonce: str, now: dt.datetime) -> dict[str, Any]:
    """A marker's nonce fields after this request's write, planned at `now` (the writer's
    clock): the nonces of `found` written in the NONCE_KEEP_S before (or when, unknown), then
    this one, the newest MAX_NONCES."""
    at = round(now.timestamp() * 1000)
    kept = [(n, ms) for n, ms in _timed(found)
            if ms is None or ms >= at - NONCE_KEEP_S * 1000][-(MAX_NONCES - 1):]
    return {NONCES: [*(n for n, _ in kept), nonce],
            NONCES_MS: [*(ms if ms is not None else 0 for _, ms in kept), at]}


def nonces_of(marker: Snapshot | None) -> list[str]:
    """The nonces a marker keeps (`recent_nonces`)."""
    return [n for n, _ in _timed(marker)]


def _timed(marker: Snapshot | None) -> list[tuple[str, int | None]]:
    """A marker's nonces with the times they were written (None: not known)."""
    if marker is None or not marker.exists:
        return []
    data = marker.to_dict() or {}
    kept, times = data.get(NONCES), data.get(NONCES_MS)
    nonces = [str(n) for n in kept] if isinstance(kept, list) else []
    if not isinstance(times, list) or len(times) != len(nonces) \
            or not all(isinstance(t, int) and not isinstance(t, bool) for t in times):
        return [(n, None) for n in nonces]  # written without times, or by a version without
    return [(n, t if t > 0 else None) for n, t in zip(nonces, times, strict=True)]


def write_at_version(db: firestore.Client, batch: firestore.WriteBatch,
                     ref: firestore.DocumentReference, fields: dict[str, Any],
                     found: Snapshot | None) -> None:
    """Add a marker's write to `batch`: created when it was not read or did not exist (fails if
    it exists), else rewritten at the version read (fails if it changed since)."""
    if found is None or not found.exists:
        encoding.create(batch, ref, fields)
    else:
        encoding.update_at(batch, db, ref, fields, found.update_time)


# On a document a configuration is written into (a counter's policy, a sequence's rule): the
# nonce of the request whose commit wrote it last.
CONFIGURED_BY = "configured_by"
CONFIGURE_ATTEMPTS = 5  # reads of one configuration's document, each after a write got in first


def configure(writing: Writing, db: firestore.Client, ref: firestore.DocumentReference,
              fields: dict[str, Any], *, missing: Exception | None, what: str,
              marker: tuple[firestore.DocumentReference, dict[str, Any]] | None = None) -> bool:
    """Write a configuration's `fields` into `ref` at the version read (created when missing,
    unless `missing` is raised then), so that no attempt of it can land over a newer write: a
    resend after a lost answer, or a commit that lands late, fails its precondition once anything
    (another configuration, the rollup, a number issued) wrote the document since its read. An
    attempt that fails it reads the document again: its own nonce there means an earlier attempt
    applied; anything else, it is written again at the new version. Aborted after
    CONFIGURE_ATTEMPTS reads. With `marker` (an admin request's marker and its fields,
    `admin_marker`), the commit creates it too: a retry of that request_id finds it and writes
    nothing, even after another configuration. True when this call wrote it, False when that
    retry found it."""
    if marker is not None and marker[0].get().exists:
        return False  # this request applied before
    request_id = marker[1]["request_id"] if marker is not None else None
    if not writing.protections.versioned_overwrites:  # as before: a blind merge, resent
        if missing is not None and not ref.get().exists:
            raise missing
        ref.set(fields, merge=True, retry=writes.IDEMPOTENT)
        return True
    nonce = writing.nonce()
    for _ in range(CONFIGURE_ATTEMPTS):
        found = ref.get()
        if not found.exists and missing is not None:
            raise missing
        batch = db.batch()
        # The client's own writes, not `encoding`'s: a configuration holds maps (a policy),
        # each replaced whole.
        if found.exists:
            batch.update(ref, {**fields, CONFIGURED_BY: nonce},
                         option=db.write_option(last_update_time=found.update_time))
        else:
            batch.create(ref, {**fields, CONFIGURED_BY: nonce})
        if marker is not None:
            encoding.create(batch, marker[0], {**marker[1], writes.NONCE: nonce})
        try:
            writing.resending(functools.partial(writing.send, batch), request_id=request_id)
            return True
        except writes.PRECONDITIONS as error:
            with writes.finding_out(error, request_id=request_id):
                again = ref.get()
                mine = marker is not None and marker[0].get().exists  # or a twin attempt's
            if mine or (again.exists and (again.to_dict() or {}).get(CONFIGURED_BY) == nonce):
                return True
            if getattr(error, "after_unknown", False):
                raise writes.lost(request_id) from error
    raise Aborted(f"{what}: other writes kept getting in the way; retry")
