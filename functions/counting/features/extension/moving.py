"""Moves: one commit, sent once, takes shards' and partials' amounts (each take guarded by the
version it read), adds their sum to the document's field and to a shard of the document's
counter (docs/architecture.md, "Extension counters"); and the loop of moves a trigger's caller
waits on."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from counting.features import counter_refs
from counting.features.collections.applying import ensure_counter
from counting.features.collections.declared import Declaration, nanos
from counting.features.collections.layout import (
    SHARDS,
    UPDATE_DATA,
    UPDATE_ID,
    UPDATES,
    Extension,
    is_partial,
    whole,
)
from counting.foundation.clock import instant
from counting.writepath import shards

if TYPE_CHECKING:
    from counting.features.context import Context

log = logging.getLogger(__name__)

# Shards one move reads and writes (a commit holds at most 500 writes: these, the document and
# a shard of each counter).
MOVE_MAX_SHARDS = 400
# Every take is guarded by the update time its shard had when it was read (or as an event told):
# a shard holding the declared fields alone is deleted, so that its device's next write creates
# it again and fires a trigger, however busy the device; one holding other fields too gives its
# amounts by an increment of minus them. A client's write between the read and the commit fails
# the commit (nothing of it applies), and the move reads and commits again at once, up to this
# many times: no take applies to a version it did not read, so no amount is taken twice. When
# every one of them met a client's write (shards written faster than a read and a commit take),
# MARKED_ATTEMPTS more take the amounts by `Increment(-amount)` with no precondition on the
# shard, each with a marker named for the shard and the version read, created in the same commit:
# another mover (or a late landing) that read the same version fails on the marker. Such a shard
# stays, zeroed, and its device's writes are updates that fire no trigger: the caller's loop
# moves again every MOVE_EVERY_S for MOVE_FOR_S, then the sweep.
MOVE_ATTEMPTS = 2
MARKED_ATTEMPTS = 2  # each fails only on another mover's marker, or a shard it deleted
# A marked take is two writes (the take and its marker): a marked move takes this many shards at
# most (the rest are left for the next), so that its commit stays within 500 writes.
MARKED_MAX_SHARDS = 240
# One process moves a document's shards at most this often (its callers wait for the next move).
MOVE_EVERY_S = 1.0
# After a move that left shards (its attempts all met clients' writes) or read a full page, the
# trigger moves again, every MOVE_EVERY_S, until none is left or this long has passed; then the
# scheduled sweep takes what is left.
MOVE_FOR_S = 30.0
MOVED = "moved: shards read"  # logged by each move with what it read (the benchmark bills it)


@dataclass(frozen=True, kw_only=True)
class Written:
    """A shard's state an event told of (its creation)."""

    ref: firestore.DocumentReference
    data: dict[str, Any]
    update_time: dt.datetime


@dataclass(kw_only=True)
class Moved:
    """What one move did."""

    shards: int = 0  # shards and partials whose amounts it took
    deleted: int = 0  # of them, deleted
    left: int = 0  # shards holding amounts it could not take (written at every attempt)
    amounts: dict[str, int] = field(default_factory=dict)  # counter -> amount moved
    read: int = 0  # shards and partials it read
    queries: int = 0  # the queries that read them (Firestore bills one read for an empty one)
    # It read MOVE_MAX_SHARDS: there may be more, after `last` (the id of the last it read).
    full: bool = False
    last: str | None = None
    # When it read every shard of the document (None: it read none, or not all of them).
    read_at: dt.datetime | None = None
    # Numeric fields (dotted) the shards it read hold that no declaration names: counted by the
    # extension before, perhaps, and left where they are (`counters backfill` names them).
    undeclared: set[str] = field(default_factory=set)

    def add(self, other: Moved) -> None:
        self.shards += other.shards
        self.deleted += other.deleted
        self.read += other.read
        self.queries += other.queries
        self.left = other.left
        self.full, self.last = other.full, other.last
        self.read_at = other.read_at or self.read_at
        self.undeclared |= other.undeclared
        for counter, amount in other.amounts.items():
            self.amounts[counter] = self.amounts.get(counter, 0) + amount


@dataclass(frozen=True)
class _Take:
    """One shard's part of a move: what it holds per field, and how it is taken (each write
    guarded by `update_time`, the version read)."""

    ref: firestore.DocumentReference
    amounts: dict[str, int]  # field -> amount
    update_time: dt.datetime
    delete: bool  # it holds these amounts alone: deleted
    partial: bool


def move(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
         declarations: Iterable[Declaration], *, written: Iterable[Written] = (),
         after: str | None = None, start_at: str | None = None) -> Moved:
    """Move the amounts of `document`'s shards and partials into its fields and the counters
    (one commit, sent once). With `written` (states events told of), those shards are taken
    as told, without reading them: each delete is guarded by the told update time, so a shard
    written since fails the commit, and the move is made again from a read. A read takes the
    first MOVE_MAX_SHARDS shards in id order, those after the id `after`, or those from the id
    `start_at`."""
    done = _move(ctx, db, document, [d for d in declarations if d.extension is not None],
                 written, after, start_at)
    log.info("%s: %s %d in %d queries, taken %d", document.path, MOVED, done.read,
             done.queries, done.shards)
    return done


def _move(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
          declared: list[Declaration], written: Iterable[Written], after: str | None,
          start_at: str | None = None) -> Moved:
    latest: dict[str, Written] = {}  # one state per shard (an event told twice), the newest
    for state in written:
        if state.ref.path not in latest or state.update_time > latest[state.ref.path].update_time:
            latest[state.ref.path] = state
    told = list(latest.values())
    if told and len(told) <= MOVE_MAX_SHARDS and all(_holds_only(declared, w.data) for w in told):
        takes = [_Take(w.ref, _amounts(declared, w.data, partial=False), w.update_time,
                       True, False) for w in told]
        try:
            return _commit(ctx, db, document, declared, takes, Moved())
        except gexc.FailedPrecondition:
            pass  # written since: read them
    return _read_and_move(ctx, db, document, declared, after=after, start_at=start_at)


def _read_and_move(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
                   declared: list[Declaration], *, after: str | None,
                   start_at: str | None) -> Moved:
    shards_of = document.collection(SHARDS)
    query = shards_of.order_by(FieldPath.document_id()).limit(MOVE_MAX_SHARDS)
    if after is not None:
        query = query.start_after({FieldPath.document_id(): shards_of.document(after)})
    elif start_at is not None:
        query = query.start_at({FieldPath.document_id(): shards_of.document(start_at)})
    takes: list[_Take] = []
    read = 0  # by every attempt
    for attempt in range(1, MOVE_ATTEMPTS + MARKED_ATTEMPTS + 1):
        marked = attempt > MOVE_ATTEMPTS  # the guarded attempts all met clients' writes
        found = list(query.stream())
        read += len(found)
        full = len(found) == MOVE_MAX_SHARDS
        done = Moved(read=read, queries=attempt, full=full, last=found[-1].id if full else None,
                     read_at=None if full or after or start_at else min(
                         (instant(s.read_time) for s in found), default=None))
        takes = []
        for shard in found:
            data = shard.to_dict() or {}
            partial = is_partial(shard.id)
            amounts = _amounts(declared, data, partial=partial)
            only = _only(declared, data, partial)
            if not only:
                done.undeclared |= _numbers(_stripped(declared, data), "") - {
                    e.field for e in _extensions(declared)}
            # A shard holding only other fields is none of this one's; marked, one holding
            # nothing is left as it is.
            if any(amounts.values()) or (only and not marked):
                takes.append(_Take(shard.reference, amounts, instant(shard.update_time),
                                   only and not marked, partial))
        if marked:  # every shard it takes or leaves stays: the caller's loop comes back
            done.left = len(takes)
            takes = takes[:MARKED_MAX_SHARDS]
        try:
            return _commit(ctx, db, document, declared, takes, done, marked=marked)
        except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound):
            # A client wrote a shard since the read, or (marked) another mover took a version
            # read here or deleted a shard: read them again.
            continue
    # Every attempt met another's write: the caller's loop (or the sweep) moves them later.
    return Moved(read=read, queries=MOVE_ATTEMPTS + MARKED_ATTEMPTS, full=full, last=done.last,
                 left=sum(any(t.amounts.values()) for t in takes))


def _commit(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
            declared: list[Declaration], takes: list[_Take], done: Moved, *,
            marked: bool = False) -> Moved:
    """One commit of the takes, the document's increments and the counters' shard writes.
    `marked`: each take is guarded by a marker of the version it read, created in the commit,
    rather than by a precondition on its shard (see MOVE_ATTEMPTS)."""
    if not takes:
        return done
    batch = db.batch()
    totals: dict[str, int] = defaultdict(int)
    guarded = ctx.writing.protections.guarded_takes
    for take in takes:
        for name, amount in take.amounts.items():
            totals[name] += amount
        guard = db.write_option(last_update_time=take.update_time) \
            if guarded and not marked else None
        if guarded and marked:
            taken = f"extension take {take.ref.path} {nanos(take.update_time)}"
            batch.create(shards.request_marker_ref(db, ctx.names, "", taken),
                         shards.request_marker_fields("", taken, [], {}))
        if take.delete:
            batch.delete(take.ref, option=guard)
            done.deleted += 1
        elif take.partial:
            batch.update(take.ref, {UPDATES: firestore.ArrayUnion([{
                UPDATE_ID: str(uuid.uuid4()), UPDATE_DATA: _merged(
                    e.nested(-take.amounts[e.field]) for e in _extensions(declared)
                    if take.amounts.get(e.field))}])}, option=guard)
        else:
            batch.update(take.ref, {e.field: firestore.Increment(-take.amounts[e.field])
                                    for e in _extensions(declared)
                                    if take.amounts.get(e.field)}, option=guard)
        done.shards += bool(any(take.amounts.values()))
    moved = {d: totals[d.extension.field] for d in declared
             if d.extension is not None and totals.get(d.extension.field)}
    if moved:
        batch.set(document, _merged(d.extension.nested(firestore.Increment(amount))
                                    for d, amount in moved.items() if d.extension), merge=True)
    written = []
    for declaration, amount in moved.items():  # the counters' shard writes come last
        counter = declaration.counter_id(document.id)
        target = ensure_counter(ctx, db, counter, declaration)
        shard = counter_refs.shard_ref(db, ctx.names, counter, ctx.picker.pick(target))
        written.append(shards.shard_write(ctx.writing, db, shard, amount))
        done.amounts[counter] = done.amounts.get(counter, 0) + amount
    for write in written:
        write.add_to(batch)
    try:
        results = ctx.writing.commit_once(batch)
    except gexc.NotFound:
        for declaration in moved:  # a counter's shard folded away since its configuration
            ctx.configs.forget(declaration.counter_id(document.id))
        raise
    shards.settle(ctx.writing, db, shards.landed(written, results))
    return done


def _extensions(declared: list[Declaration]) -> list[Extension]:
    return [d.extension for d in declared if d.extension is not None]


def _amounts(declared: list[Declaration], data: dict[str, Any], *,
             partial: bool) -> dict[str, int]:
    return {e.field: e.amount(data, partial=partial) for e in _extensions(declared)}


def _only(declared: list[Declaration], data: dict[str, Any], partial: bool) -> bool:
    """The shard holds the counters' fields and nothing else (deleting it loses nothing)."""
    if partial:
        updates = data.get(UPDATES)
        return data.keys() == {UPDATES} and isinstance(updates, list) and all(
            isinstance(u, dict) and _holds_only(declared, u.get(UPDATE_DATA)) for u in updates)
    return _holds_only(declared, data)


def _holds_only(declared: list[Declaration], data: Any) -> bool:
    """Every leaf of `data` is one of the fields, holding a whole number."""
    return isinstance(data, dict) and not _leaves(_stripped(declared, data))


def _stripped(declared: list[Declaration], data: dict[str, Any]) -> dict[str, Any]:
    """`data` without the whole numbers the fields count."""
    stripped = dict(data)
    for extension in _extensions(declared):
        _drop(stripped, extension.path)
    return stripped


def _numbers(data: dict[str, Any], prefix: str) -> set[str]:
    """The dotted paths of the numbers in `data`."""
    found = set()
    for key, value in data.items():
        if isinstance(value, dict):
            found |= _numbers(value, f"{prefix}{key}.")
        elif type(value) in (int, float):
            found.add(prefix + key)
    return found


def _drop(data: dict[str, Any], path: list[str]) -> None:
    """Remove the whole number at `path` that the field counts (a copy of each map on the way):
    one it cannot count (a fraction, beyond MAX_EXTENSION_AMOUNT) stays, and keeps its shard from
    being deleted."""
    head, *rest = path
    if rest and isinstance(data.get(head), dict):
        data[head] = dict(data[head])
        _drop(data[head], rest)
    elif not rest and whole(data.get(head)) is not None:
        del data[head]


def _leaves(data: dict[str, Any]) -> bool:
    return any(not isinstance(v, dict) or _leaves(v) for v in data.values())


def _merged(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Nested maps merged into one (fields `a.b` and `a.c` make `{a: {b, c}}`)."""
    merged: dict[str, Any] = {}
    for part in parts:
        target, source = merged, part
        while True:
            (key, value), = source.items()
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                target, source = target[key], value
                continue
            target[key] = value
            break
    return merged


def move_until_clear(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
                     declarations: Iterable[Declaration], *, written: Iterable[Written] = (),
                     for_s: float = MOVE_FOR_S,
                     on_move: Callable[[Moved], None] = lambda moved: None) -> Moved:
    """Moves until one leaves no shard (and reads fewer than MOVE_MAX_SHARDS), or `for_s`
    passes: what they did (`on_move` is told of each). A full read is followed at once by a
    read of the shards after it."""
    declared = list(declarations)
    clock = ctx.writing.clock
    until = clock.monotonic() + for_s
    total = Moved()
    done = move(ctx, db, document, declared, written=written)
    while True:
        on_move(done)
        total.add(done)
        if not (done.left or done.full) or clock.monotonic() >= until:
            return total
        if not done.full:
            clock.sleep(MOVE_EVERY_S)
        done = move(ctx, db, document, declared, after=done.last)
