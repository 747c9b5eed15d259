"""Sharded counters: creation, the lock-free increment path, reads and resets.

A counter is `counters/{id}` (the rollup clients read, plus its configuration) and the shards
`counters/{id}/shards/{n}` whose sum is its value. An increment is one blind `Increment` on one
shard, chosen without reading anything but a per-instance cache of the configuration (which also
brings the per-shard load the rollup publishes, for `least_loaded`); with a `request_id` it is
committed together with the creation of a marker document, so a retry fails on the marker and
counts nothing. The rollup (`counting.rollup.tick`) changes `num_shards` as the load changes.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features.counter_refs import (
    COLLECTION_FIELD,
    counter_ref,
    memory_ref,
    paced_ref,
    reset_ref,
    shard_ref,
    voter_ref,
)
from counting.features.shard_choice import with_fresh_config
from counting.foundation import config, encoding, kinds, writes
from counting.foundation.config import Names
from counting.foundation.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from counting.foundation.kinds import Consistency, Strategy
from counting.writepath import autoscale, partitions
from counting.writepath.context import Writing
from counting.writepath.policy import Policy
from counting.writepath.shards import (
    REFUSALS,
    Landed,
    ShardWrite,
    Snapshot,
    admin_marker,
    answer_again,
    answer_final,
    answered,
    commit_marked,
    configure,
    landed,
    marker_landed,
    nonce_of,
    nonces_of,
    recent_nonces,
    request_marker_fields,
    request_marker_ref,
    settle,
    shard_write,
    write_at_version,
)

if TYPE_CHECKING:
    from counting.features.context import Context

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Created:
    counter: str
    shards: int
    created: bool
    policy: Policy


@dataclass(frozen=True, kw_only=True)
class Count:
    counter: str
    count: int
    as_of: dt.datetime
    consistency: Consistency
    documents_read: int
    mine: bool | None = None  # on a `unique` counter: whether it counts the caller


def shards_for(expected_rate: float | None) -> int:
    """Shards for a load: ceil(rate / (per-shard rate x target utilisation)), in 1..1000."""
    rate = config.DEFAULT_EXPECTED_RATE if expected_rate is None else expected_rate
    return autoscale.shards_for_rate(rate)


def create_counter(
    ctx: Context,
    db: firestore.Client,
    counter: str,
    *,
    shards: int | None = None,
    expected_rate: float | None = None,
    strategy: Strategy = kinds.DEFAULT_STRATEGY,
    policy: Policy | None = None,
    collection: str | None = None,
) -> Created:
    """Create the counter and all its shards in one commit; an existing counter is left as is
    (so of two racing creators, one creates and the other finds it).

    Autoscaling starts from this size and keeps it within `min_shards`..`max_shards` (defaults
    from config.py; the fields can be changed server-side, min == max pins the count).
    `collection` names the declaration that maintains a collection counter.
    """
    num_shards = shards if shards is not None else shards_for(expected_rate)
    min_shards, max_shards = config.DEFAULT_MIN_SHARDS, config.DEFAULT_MAX_SHARDS
    batch = db.batch()
    batch.create(
        counter_ref(db, ctx.names, counter),
        {
            "count": 0,
            "num_shards": num_shards,
            "strategy": strategy,
            "rate": 0.0,
            "min_shards": min_shards,
            "max_shards": max_shards,
            **partitions.watched(counter, num_shards > min_shards),
            "policy": (policy or Policy()).to_document(),
            "created_at": firestore.SERVER_TIMESTAMP,
            "updated_at": firestore.SERVER_TIMESTAMP,
            **({} if collection is None else {COLLECTION_FIELD: collection}),
        },
    )
    # Every shard holds 0: the rollup's first read of this counter is its memory.
    batch.create(memory_ref(db, ctx.names, counter), {config.SHARD_COUNTS_FIELD: {}})
    # Shard 0 (never folded away) says which request created the counter: an attempt whose
    # answer was lost, sent again, fails on the documents it created and finds its nonce there.
    writing = ctx.writing
    nonce = writing.nonce()
    born = {"at": firestore.SERVER_TIMESTAMP, "num_shards": num_shards, "strategy": strategy,
            "min_shards": min_shards, "max_shards": max_shards}
    for n in range(num_shards):
        batch.create(shard_ref(db, ctx.names, counter, n),
                     {"count": 0, config.SHARD_BORN_FIELD: born,
                      **({writes.NONCE: nonce} if n == 0 else {})})
    try:
        writing.resending(functools.partial(writing.send, batch), request_id=None)
    except gexc.AlreadyExists:
        first = shard_ref(db, ctx.names, counter, 0).get()
        existing = counter_ref(db, ctx.names, counter).get().to_dict() or {}
        return Created(counter=counter, shards=int(existing["num_shards"]),
                       created=first.exists and first.get(writes.NONCE) == nonce,
                       policy=Policy.from_document(existing.get("policy")))
    return Created(counter=counter, shards=num_shards, created=True, policy=policy or Policy())


def configure_counter(ctx: Context, db: firestore.Client, counter: str, policy: Policy, *,
                      uid: str = "", request_id: str | None = None) -> Policy:
    """Replace a counter's write policy, at the version of the counter's document read (no
    earlier configuration can land over it: `shards.configure`); every instance applies it
    within CONFIG_CACHE_TTL_S. A retry of a `request_id` that applied writes nothing."""
    configure(ctx.writing, db, counter_ref(db, ctx.names, counter),
              {"policy": policy.to_document()},
              missing=NotFound(f"counter: {counter!r} does not exist"), what=f"counter {counter!r}",
              marker=admin_marker(db, ctx.names, uid, "configure_counter", counter, request_id))
    return policy


def increment(
    ctx: Context,
    db: firestore.Client,
    counter: str,
    by: int = 1,
    *,
    request_id: str | None = None,
    uid: str = "",
    admin: bool = True,
) -> dt.datetime | None:
    """Add `by` to one shard, as the counter's write policy allows this caller (`admin`: the
    operator CLI and tests act as admins). Returns the commit time, which a client compares with
    the rollup's `updated_at` to tell whether the rollup includes this increment; None when
    `request_id` was already applied for this user, or a `unique` counter already counts (or
    does not count) them. `OutcomeUnknown` when Firestore's answer was lost and nothing could
    tell whether the write applied (docs/architecture.md, "Exactly once")."""
    writing = ctx.writing
    request_id = request_id if writing.protections.request_markers else None
    nonce = writing.nonce()

    def attempt() -> dt.datetime | None:
        target = ctx.configs.get(db, ctx.names, counter)
        policy = target.policy
        try:
            target.check_writable()
            policy.check(by, admin=admin, counter=counter)
        except REFUSALS as refusal:
            if answer_final(writing, db, uid, request_id, nonce, refusal):
                return None
            raise
        shard = shard_ref(db, ctx.names, counter, ctx.picker.pick(target))
        write = shard_write(writing, db, shard, by)
        paced = bool(policy.min_interval_s) and not admin
        if request_id is None and not policy.unique and not paced:
            batch = db.batch()
            write.add_to(batch)
            results = writing.commit_once(batch)
            settle(writing, db, landed([write], results))
            committed: dt.datetime = results[-1].update_time
            return committed
        guarded = Guarded(writing, db, counter, write, by=by, uid=uid, request_id=request_id,
                          nonce=nonce, unique=policy.unique,
                          interval_s=policy.min_interval_s if paced else 0)
        if not paced:
            return guarded.apply()
        # A paced counter's users mostly come back, or mostly come once: the last request
        # here tells which, so that a returning user's marker is read first (a read and a
        # commit) rather than found by a failed create (a commit, a read and a commit).
        try:
            return guarded.apply(read_first=ctx.returning.get(counter) is True)
        except ResourceExhausted as refusal:
            # Too soon by the marker read first, which this very request may have set: a retry
            # of an applied request is answered as applied, as a failed create would find.
            if answer_final(writing, db, uid, request_id, nonce, refusal):
                return None
            raise
        finally:
            if guarded.pacing is not None or guarded.created_pacing:
                ctx.returning.put(counter, guarded.pacing is not None and guarded.pacing.exists)

    return with_fresh_config(attempt, ctx.configs, [counter])


class Guarded:
    """One increment whose commit carries markers: a request marker (`request_id`), a voter
    (`unique`: created by a like, rewritten by an unlike), a pacing marker (`min_interval_s`).
    Each marker is written with a precondition (created, or rewritten at the version read) and
    the request's nonce, so the commit may be sent again after a lost answer: at most one attempt
    applies, and one that fails its precondition reads the markers to tell an earlier attempt of
    its own (applied: its shard is touched if it straddled) from another request (this one is a
    no-op, or is planned again on what it read)."""

    def __init__(self, writing: Writing, db: firestore.Client, counter: str, write: ShardWrite,
                 *, by: int, uid: str, request_id: str | None, nonce: str, unique: bool,
                 interval_s: int) -> None:
        self.writing, self.db, self.counter, self.write, self.by = writing, db, counter, write, by
        self.uid, self.request_id, self.nonce = uid, request_id, nonce
        self.unique, self.interval_s = unique, interval_s
        self.marker = None if request_id is None else request_marker_ref(db, writing.names, uid,
                                                                         request_id)
        self.voter: Snapshot | None = None  # the voter as last read (None: not read)
        self.pacing: Snapshot | None = None  # the pacing marker as last read (None: not read)
        self.created_pacing = False  # a commit created the pacing marker, unread

    def apply(self, *, read_first: bool = False) -> dt.datetime | None:
        """The increment; `read_first`: read the pacing marker before the first attempt (the
        user is probably returning)."""
        if self.interval_s and read_first:
            # The batched read, not the unary one: its read time is Firestore's clock, which
            # the interval is measured on (`_pace`).
            self.pacing = paced_ref(self.db, self.writing.names, self.counter, self.uid).get()
        if self.unique and self.by < 0:
            # An un-like rewrites the voter at the version read: a like must be there to take.
            self.voter = encoding.get(
                voter_ref(self.db, self.writing.names, self.counter, self.uid))
            if not counts(self.voter):
                self._not_applied()
                return None
        for _ in range(GUARDED_ATTEMPTS):
            try:
                results = self.writing.resending(self._commit, request_id=self.request_id)
            except writes.PRECONDITIONS as error:
                with writes.finding_out(error, request_id=self.request_id):
                    done, answer = self._found(after_unknown=getattr(error, "after_unknown",
                                                                     False))
                if done:
                    return answer
                if isinstance(error, gexc.NotFound):
                    raise  # the shard was folded away: `with_fresh_config` writes once more
                continue
            self.created_pacing = bool(self.interval_s) and self.pacing is None
            settle(self.writing, self.db, landed([self.write], results))
            committed: dt.datetime = results[-1].update_time
            return committed
        raise Aborted(f"counter: {self.counter!r}: concurrent requests of this user got in the "
                      "way; retry")

    def _not_applied(self) -> None:
        """A no-op (the voter already as asked): with a request_id, that answer is made final
        (`answer_final`: no attempt of this request still in flight can count, nor a retry of
        it after the user's vote changed); a retry of an applied request touches what that
        request wrote, as any retry that finds its marker does."""
        if self.request_id is not None:
            answer_final(self.writing, self.db, self.uid, self.request_id, self.nonce)

    def _commit(self) -> list[Any]:
        """One attempt: the markers as last read, then the shard (last: `landed`). A voter or
        pacing marker, rewritten by this user's later requests too, keeps the nonces of the
        requests that wrote it in the last NONCE_KEEP_S (`recent_nonces`), so that an attempt
        whose answer was lost still finds its own after other requests of the user came."""
        batch, now = self.db.batch(), self.writing.clock.now()
        mark = {"uid": self.uid, "at": firestore.SERVER_TIMESTAMP, writes.NONCE: self.nonce,
                "shards": [self.write.ref.path]}
        if self.marker is not None:
            encoding.create(batch, self.marker, request_marker_fields(
                self.uid, self.request_id or "", [self.counter], mark))
        if self.unique:
            voter = voter_ref(self.db, self.writing.names, self.counter, self.uid)
            write_at_version(self.db, batch, voter,
                             {**mark, "counted": self.by > 0,
                              **recent_nonces(self.voter, self.nonce, now)}, self.voter)
        if self.interval_s:
            self._pace(batch, {**mark, **recent_nonces(self.pacing, self.nonce, now)})
        self.write.add_to(batch)
        return self.writing.send(batch)

    def _pace(self, batch: firestore.WriteBatch, mark: dict[str, Any]) -> None:
        """The caller's pacing marker: created when it was not read (a first visit: one round
        trip), else rewritten at the version read once `at`, the stamp of the last applied
        visit, is `interval_s` old; too soon: RESOURCE_EXHAUSTED."""
        ref = paced_ref(self.db, self.writing.names, self.counter, self.uid)
        fields = {**mark, config.EXPIRES_AT: dt.datetime.now(dt.UTC)
                  + dt.timedelta(seconds=self.interval_s) + config.REQUEST_MARKER_TTL}
        found = self.pacing
        if found is not None and found.exists:
            last = found.get("at") if "at" in (found.to_dict() or {}) else found.update_time
            wait = last + dt.timedelta(seconds=self.interval_s) - found.read_time
            if wait > dt.timedelta(0):
                raise ResourceExhausted(
                    f"counter: {self.counter!r} takes one increment per user every "
                    f"{self.interval_s} s; retry in {wait.total_seconds():.0f} s")
        write_at_version(self.db, batch, ref, fields, found)

    def _found(self, *, after_unknown: bool) -> tuple[bool, dt.datetime | None]:
        """After a failed precondition, from the markers read afresh: (True, the commit time of
        an earlier attempt of this request that applied), (True, None) when there is nothing to
        do (the request_id applied before, or the voter already as asked), or (False, None):
        plan again on what was read. When an earlier attempt's outcome was unknown
        (`after_unknown`) and no marker holds this request's nonce, it may have applied and been
        rewritten past what a marker keeps: `OutcomeUnknown`, never a plan on what was read."""
        guards = [ref for ref in (self.marker,) if ref is not None]
        if self.unique:
            guards.append(voter_ref(self.db, self.writing.names, self.counter, self.uid))
        if self.interval_s:
            guards.append(paced_ref(self.db, self.writing.names, self.counter, self.uid))
        found = {snapshot.reference.path: snapshot for snapshot in self.db.get_all(guards)}
        if self.marker is not None and answered(found[self.marker.path]) is not None:
            answer_again(found[self.marker.path])  # this request was answered before
            return True, None
        for snapshot in found.values():
            if nonce_of(snapshot) == self.nonce:
                settle(self.writing, self.db, marker_landed(self.db, self.writing.names, snapshot))
                return True, snapshot.update_time
        for snapshot in found.values():
            if self.nonce in nonces_of(snapshot):
                # Applied, and rewritten since by another request of the user: when is not
                # known, so the shard is touched whatever its write's delay was; the answer's
                # commit time is the marker's later version, never too early for a client.
                settle(self.writing, self.db, [Landed(self.write.ref, self.write.home, None,
                                                      snapshot.update_time)])
                return True, snapshot.update_time
        if self.marker is not None and found[self.marker.path].exists:
            settle(self.writing, self.db,
                   marker_landed(self.db, self.writing.names, found[self.marker.path]))
            return True, None
        if after_unknown:
            raise writes.lost(self.request_id)
        if self.unique:
            self.voter = found[voter_ref(self.db, self.writing.names, self.counter, self.uid).path]
            if counts(self.voter) == (self.by > 0):
                self._not_applied()
                return True, None
        if self.interval_s:
            self.pacing = found[paced_ref(self.db, self.writing.names, self.counter, self.uid).path]
        return False, None


GUARDED_ATTEMPTS = 5  # plans of one guarded increment, each on markers read afresh


def counts(voter: Snapshot) -> bool:
    """Whether a `unique` counter's voter marker counts its user: a like's (`counted`), or one
    written before un-likes kept their marker (it has a `uid`)."""
    if not voter.exists:
        return False
    data = voter.to_dict() or {}
    return bool(data.get("counted", "uid" in data))


def increment_many(
    ctx: Context,
    db: firestore.Client,
    increments: Iterable[tuple[str, int]],
    *,
    request_id: str | None = None,
    uid: str = "",
    admin: bool = True,
) -> int:
    """Apply a batch atomically (one shard write per distinct counter); 0 when already applied.
    Each counter's summed `by` must pass its policy as one increment would; a counter whose
    policy keeps per-user markers (`unique`, `min_interval_s`) cannot be in a batch."""
    writing = ctx.writing
    request_id = request_id if writing.protections.request_markers else None
    items = list(increments)
    totals: dict[str, int] = {}
    for counter, by in items:
        totals[counter] = totals.get(counter, 0) + by
    nonce = writing.nonce()

    def attempt() -> int:
        targets = [ctx.configs.get(db, ctx.names, counter)  # NotFound before any write
                   for counter in totals]
        try:
            for target in targets:
                target.check_writable()
                if target.policy.limits_batches:
                    raise InvalidArgument(f"increments: {target.counter!r} counts each user once "
                                          "or paces them: increment it on its own")
                target.policy.check(totals[target.counter], admin=admin, counter=target.counter)
        except REFUSALS as refusal:
            if answer_final(writing, db, uid, request_id, nonce, refusal):
                return 0
            raise
        shard_writes = [shard_write(writing, db,
                                    shard_ref(db, ctx.names, target.counter,
                                              ctx.picker.pick(target)),
                                    totals[target.counter]) for target in targets]
        applied = commit_marked(writing, db, shard_writes, uid=uid, request_id=request_id,
                                counters=sorted(totals), nonce=nonce)
        return len(items) if applied else 0

    return with_fresh_config(attempt, ctx.configs, totals)


def get_count(db: firestore.Client, names: Names, counter: str,
              consistency: Consistency = "rollup", uid: str | None = None) -> Count:
    """The rollup (one document read) or the strong value (all shards, one consistent read);
    with `uid`, on a `unique` counter, whether it counts that user (one more read; the strong
    value then reads the counter's document too)."""
    if consistency == "strong":
        snapshots = list(counter_ref(db, names, counter).collection(names.shards).stream())
        if not snapshots:
            raise NotFound(f"counter: {counter!r} does not exist")
        total = sum(int((s.to_dict() or {}).get("count", 0)) for s in snapshots)
        mine = None if uid is None else counted(db, names, counter, uid)
        return Count(counter=counter, count=total, as_of=snapshots[0].read_time,
                     consistency=consistency, documents_read=len(snapshots), mine=mine)
    snapshot = counter_ref(db, names, counter).get()
    if not snapshot.exists:
        raise NotFound(f"counter: {counter!r} does not exist")
    data = snapshot.to_dict() or {}
    mine = None
    if uid is not None and Policy.from_document(data.get("policy")).unique:
        mine = counts(voter_ref(db, names, counter, uid).get())
    return Count(counter=counter, count=int(data.get("count", 0)),
                 as_of=data.get("updated_at") or snapshot.update_time, consistency=consistency,
                 documents_read=1, mine=mine)


def counted(db: firestore.Client, names: Names, counter: str, uid: str) -> bool | None:
    """On a `unique` counter, whether it counts the user; None on any other counter."""
    data = counter_ref(db, names, counter).get().to_dict() or {}
    if not Policy.from_document(data.get("policy")).unique:
        return None
    return counts(voter_ref(db, names, counter, uid).get())


def reset_counter(ctx: Context, db: firestore.Client, counter: str, *, uid: str = "",
                  request_id: str | None = None) -> None:
    """Take every shard back by what it held at one instant, in one commit, then forget who a
    `unique` counter counts and when a `min_interval_s` counter last counted each user.

    The reset writes shards only, as increments do: the rollup's holder finds them changed and
    publishes their new sum, so nothing it remembers (its ledger, the published count and
    `shard_counts`) can hide the reset, and an increment that lands between the read and the
    commit counts after the reset. The commit rewrites the counter's reset record
    (`counters/{id}/memory/reset`) at the version read before the shards: of two resets racing
    (two admins, a retry), one commits and the other reads the shards again, so none subtracts
    what the other did; and a commit sent again after a lost answer finds its nonce there. The
    record keeps the read time of the shards it took back (`read_at`): the users forgotten after
    it (`forget_users`) are those whose markers were last written by then, whose increments the
    reset took back; a like that lands after that read counts after the reset, and is kept. An
    un-like in between still takes the count to -1 (docs/api.md, reset_counter).

    With a `request_id` the commit also creates the request's marker (`admin_marker`, holding
    `read_at`): a retry finds it and only forgets again, never takes the shards back twice. Once
    the shards are taken back, a failure of the forgetting is `OutcomeUnknown`."""
    marker = admin_marker(db, ctx.names, uid, "reset_counter", counter, request_id)
    earlier = marker[0].get() if marker is not None else None
    if earlier is not None and earlier.exists:  # this request reset the counter before
        read_at = _read_at(earlier)
    else:
        read_at = _take_back(ctx, db, counter, marker, request_id)
    with writes.after_applied(request_id, ctx.writing.protections,
                              what=f"counter {counter!r} was reset"):
        forget_users(db, ctx.names, counter, read_at,
                     versioned=ctx.writing.protections.versioned_overwrites)


def _take_back(ctx: Context, db: firestore.Client, counter: str,
               marker: tuple[firestore.DocumentReference, dict[str, Any]] | None,
               request_id: str | None) -> dt.datetime:
    """A reset's commit (`reset_counter`), creating `marker` (`request_id`'s) too: the read time
    of the shards it took back."""
    ref = counter_ref(db, ctx.names, counter)
    snapshot = ref.get()
    if not snapshot.exists:
        raise NotFound(f"counter: {counter!r} does not exist")
    collection = (snapshot.to_dict() or {}).get(COLLECTION_FIELD)
    if collection is not None:
        raise FailedPrecondition(f"counter: {counter!r} is a collection counter (declaration "
                                 f"{collection!r}): it counts documents, it cannot be reset")
    writing = ctx.writing
    nonce = writing.nonce()
    record = reset_ref(db, ctx.names, counter)
    for _ in range(RESET_ATTEMPTS):
        found = record.get()  # before the shards: a reset committed since fails our commit
        snapshots = list(ref.collection(ctx.names.shards).stream())  # one instant: a query's
        held = {s.reference: int((s.to_dict() or {}).get("count") or 0) for s in snapshots}
        read_at: dt.datetime = snapshots[0].read_time if snapshots else found.read_time
        moved = [taken_back(writing, db, shard, count) for shard, count in held.items()
                 if count]
        mark = {"at": firestore.SERVER_TIMESTAMP, writes.NONCE: nonce, "read_at": read_at,
                "shards": [write.ref.path for write in moved]}
        batch = db.batch()
        write_at_version(db, batch, record, mark, found)
        if marker is not None:
            encoding.create(batch, marker[0], {**marker[1], **mark})
        if not writing.protections.reset_through_rollup:
            # What resets did before: the rollup's count and memory zeroed outside its lease.
            batch.update(ref, {"count": 0, "updated_at": firestore.SERVER_TIMESTAMP})
            batch.update(memory_ref(db, ctx.names, counter),
                         {config.SHARD_COUNTS_FIELD: {s.id: 0 for s in held}})
        for write in moved:
            write.add_to(batch)
        try:
            results = writing.resending(functools.partial(writing.send, batch),
                                        request_id=request_id)
        except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound) as error:
            with writes.finding_out(error, request_id=request_id):
                again = record.get()
                twin = marker[0].get() if marker is not None else None
            if twin is not None and twin.exists:  # an attempt of this request applied
                settle(writing, db, marker_landed(db, ctx.names, twin))
                return _read_at(twin)
            if nonce_of(again) == nonce:  # an earlier attempt of this reset applied
                settle(writing, db, marker_landed(db, ctx.names, again))
                return _read_at(again)  # our own record keeps it
            if getattr(error, "after_unknown", False):
                # An attempt whose answer was lost may have applied, its nonce since
                # overwritten by another reset: taking the shards back again could undo
                # increments made in between.
                raise writes.lost(request_id) from error
            if isinstance(error, gexc.NotFound) or nonce_of(again) != nonce_of(found):
                continue  # a shard folded away, or another reset committed: read again
            raise
        settle(writing, db, landed(moved, results))
        return read_at
    raise Aborted(f"counter: {counter!r}: other resets or folds kept getting in the way; retry")


def _read_at(applied: Snapshot) -> dt.datetime:
    """The read time of the shards a reset took back, from its record or request marker."""
    read_at: dt.datetime = (applied.to_dict() or {})["read_at"]
    return read_at


def taken_back(writing: Writing, db: firestore.Client, shard: firestore.DocumentReference,
               held: int) -> ShardWrite:
    """A reset's write to a shard: what it held taken back. Not a write of the load (`writes`
    stays), so the rollup's measured rate does not move."""
    home = partitions.home_of_shard(shard, writing.names)
    return ShardWrite(shard, home, {"count": firestore.Increment(-held),
                                    "updated_at": firestore.SERVER_TIMESTAMP,
                                    "stripe": writing.stripe(db, home)})


def forget_users(db: firestore.Client, names: Names, counter: str, as_of: dt.datetime, *,
                 versioned: bool = True) -> None:
    """After a reset whose shards were read at `as_of`: nobody counted, nobody paced, as of
    then. Each marker last written by `as_of` (its user's increment was taken back) is rewritten
    at the version read (a voter uncounted, a pacing marker's last visit at the epoch), so that
    no attempt of it can land over a newer write: a like or a visit after the reset's read
    counts after the reset and is kept, and a resend of this commit that lands late fails its
    precondition. Rewritten, not deleted: the markers keep the nonces of their last requests, so
    that a request whose answer was lost before the reset still finds its own instead of
    applying again (a deleted marker could be created afresh). A batch that fails on a marker
    written since is sent again without that marker. (`versioned` off, as before: every
    marker merged blindly, the commit resent by the library.)"""
    for markers, forgotten in ((names.voters, {"counted": False}),
                               (names.paced, {"at": EPOCH})):
        if not versioned:
            refs = list(counter_ref(db, names, counter).collection(markers).list_documents())
            for start in range(0, len(refs), config.ROLLUP_COMMIT_WRITES):
                batch = db.batch()
                for ref in refs[start:start + config.ROLLUP_COMMIT_WRITES]:
                    batch.set(ref, forgotten, merge=True)
                batch.commit(retry=writes.IDEMPOTENT)
            continue
        due = [marker for marker in counter_ref(db, names, counter).collection(markers).stream()
               if marker.update_time <= as_of]
        for start in range(0, len(due), config.ROLLUP_COMMIT_WRITES):
            chunk = due[start:start + config.ROLLUP_COMMIT_WRITES]
            while chunk:
                batch = db.batch()
                for marker in chunk:
                    encoding.update_at(batch, db, marker.reference, forgotten, marker.update_time)
                try:
                    batch.commit(retry=writes.IDEMPOTENT)
                    break
                except (gexc.FailedPrecondition, gexc.NotFound) as refused:
                    # Written since (after the reset: kept), or this very commit applied and
                    # its answer was lost: each marker is read again and kept out when so.
                    fresh = {snapshot.reference.path: snapshot for snapshot in
                             db.get_all([marker.reference for marker in chunk])}
                    kept = [marker for marker in chunk if fresh[marker.reference.path]
                            .update_time == marker.update_time]
                    if len(kept) == len(chunk):
                        raise Aborted(f"counter: {counter!r} was reset, but forgetting who it "
                                      "counted met a refusal it cannot explain: reset it again"
                                      ) from refused
                    chunk = kept


EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


RESET_ATTEMPTS = 5  # reads of the shards by one reset, each after a race lost


