"""Extension counters: the Distributed Counter extension's layout, kept by this backend
(docs/architecture.md, "Extension counters").

The extension's clients write `{doc}/_counter_shards_/{their id}` and show the document's field
plus their own shard's, so the amounts in everyone's shards must reach the document. A move is
one commit, sent once, that takes shards' amounts out of them, each write guarded by the version
it read (a delete when the shard holds nothing else, else an `Increment` of minus the amount;
for a partial, an `_updates_` entry of minus its sum), adds their sum to the document's field,
and adds the same sum to a shard of the counter `visits:{page}`. So every move keeps
document + shards + partials equal, and keeps the counter equal to the document's field (once
`backfill` has added what the field held before the declaration): the counter is the total less
what the shards hold until their move, about a second.

However often a move applies it keeps both: every take applies at most once, and only to the
version it read (its precondition), so two movers never take one amount; the document's and
the counter's increments follow the takes. A move may land late, twice or never: no amount is
lost or doubled, and no device, reading the document and its own shard, sees more than was
written.

Amounts are whole numbers: integers, and doubles with no fraction (the Android and iOS clients
send `1.0`), counted as integers; the document's field stays an integer, as the extension's own
aggregator leaves it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from counting.features import counter_refs
from counting.features.collections import (
    MAX_EXTENSION_AMOUNT,
    SHARDS,
    UPDATE_DATA,
    UPDATE_ID,
    UPDATES,
    Declaration,
    Extension,
    ensure_counter,
    is_partial,
    match,
    nanos,
    paged,
    watched_documents,
    whole,
)
from counting.foundation import config
from counting.foundation.clock import instant
from counting.foundation.errors import Aborted, FailedPrecondition
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
# many times: no take applies to a version it did not read, so no amount is taken twice.
MOVE_ATTEMPTS = 5
# One process moves a document's shards at most this often (its callers wait for the next move).
MOVE_EVERY_S = 1.0
# After a move that left shards (its attempts all met clients' writes) or read a full page, the
# trigger moves again, every MOVE_EVERY_S, until none is left or this long has passed; then the
# scheduled sweep takes what is left.
MOVE_FOR_S = 30.0
WAITED_IN_BACKGROUND = "waited in the background for a move"
MOVED = "moved: shards read"  # logged by each move with what it read (the benchmark bills it)
SWEEP_MAX_SHARDS = 1000  # shards the scheduled sweep's query reads per run (and per document)
# A run's time for its moves: it shares the scheduled function (timeout ROLLUP_TIMEOUT_S) with
# the housekeeping and the audit.
SWEEP_BUDGET_S = 20.0
SWEEP_BACKOFF_MAX = 4  # a run that moves nothing waits at most 2**4 minutes for the next
SWEEP_CURSOR = "extension_sweep"  # in `internal`: the path after which the next sweep reads


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
    for attempt in range(1, MOVE_ATTEMPTS + 1):
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
                done.undeclared |= _numbers(_stripped(declared, data), "")
            # A shard holding only other fields is none of this one's.
            if any(amounts.values()) or only:
                takes.append(_Take(shard.reference, amounts, instant(shard.update_time),
                                   only, partial))
        try:
            return _commit(ctx, db, document, declared, takes, done)
        except gexc.FailedPrecondition:
            continue  # a client wrote a shard since the read: read them again
    # Every attempt met a client's write: the caller's loop (or the sweep) moves them later.
    return Moved(read=read, queries=MOVE_ATTEMPTS, full=full, last=done.last,
                 left=sum(any(t.amounts.values()) for t in takes))


def _commit(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
            declared: list[Declaration], takes: list[_Take], done: Moved) -> Moved:
    """One commit of the takes, the document's increments and the counters' shard writes."""
    if not takes:
        return done
    batch = db.batch()
    totals: dict[str, int] = defaultdict(int)
    for take in takes:
        for name, amount in take.amounts.items():
            totals[name] += amount
        guard = db.write_option(last_update_time=take.update_time) \
            if ctx.writing.protections.guarded_takes else None
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


def sweep(ctx: Context, db: firestore.Client, declared: Iterable[Declaration], *,
          budget_s: float = SWEEP_BUDGET_S) -> Moved:
    """The scheduled backstop (every minute): move the shards no trigger's moves took (an
    instance killed mid-move, a shard written at every attempt). One collection-group query per
    run, of at most SWEEP_MAX_SHARDS shards in path order from where the last run stopped; the
    documents they belong to are moved, each by every declaration over it, from the first
    shard the query found of it (shards that stay, holding what no declaration counts, never
    hide those after them), each reading at most SWEEP_MAX_SHARDS of its shards. It moves
    documents for `budget_s` at most, and the next run starts at the first it did not reach. A
    round of runs over every shard that read shards and moved none (they hold what cannot be
    counted: a fraction, another app's fields) is logged, and the next round waits 2, 4, 8, then
    16 minutes: shards that never move are not read every minute. A document that fails is
    logged and stops no other."""
    by_documents: dict[str, list[Declaration]] = defaultdict(list)  # likes and views of posts
    for declaration in declared:
        if declaration.extension is not None:
            by_documents[declaration.documents].append(declaration)
    if not by_documents:
        return Moved()
    clock = ctx.writing.clock
    until = clock.monotonic() + budget_s
    cursor_ref = db.collection(ctx.names.internal).document(SWEEP_CURSOR)
    cursor = cursor_ref.get()
    state = cursor.to_dict() or {}
    now = instant(cursor.read_time)
    waiting = state.get("wait_until")
    if isinstance(waiting, dt.datetime) and now < waiting:
        return Moved()
    after = state.get("after")
    query = db.collection_group(SHARDS).order_by(FieldPath.document_id()).limit(SWEEP_MAX_SHARDS)
    if isinstance(after, str):
        query = query.start_after({FieldPath.document_id(): db.document(after)})
    found = list(query.stream())
    following = found[-1].reference.path if len(found) == SWEEP_MAX_SHARDS else None
    firsts: dict[str, tuple[str, list[Declaration]]] = {}  # parent -> its first shard found
    before: dict[str, str | None] = {}  # parent -> the path of the shard found before it
    previous: str | None = after if isinstance(after, str) else None
    for shard in found:
        parent = shard.reference.parent.parent
        if parent is not None and parent.path not in firsts:
            owners = [d for pattern, each in by_documents.items()
                      if match(pattern, parent.path) for d in each]
            if owners:
                firsts[parent.path] = (shard.id, owners)
                before[parent.path] = previous
        previous = shard.reference.path
    total = Moved()
    ends = len(found) < SWEEP_MAX_SHARDS  # the round, from the first shard to the last
    for path, (first, owners) in firsts.items():
        if clock.monotonic() >= until:  # the next run starts at this document
            following, ends = before[path], False
            log.warning("the sweep stopped after %.0f s: %s and after wait for the next run",
                        budget_s, path)
            break
        try:
            read, last = 0, None
            start: str | None = first
            while read < SWEEP_MAX_SHARDS:
                done = move(ctx, db, db.document(path), owners, after=last, start_at=start)
                total.add(done)
                read, last, start = read + done.read, done.last, None
                if not done.full:
                    break
        except Exception:
            log.exception("%s: the sweep could not move its shards", path)
    # A round that read shards and moved none waits before the next.
    read = int(state.get("round_read") or 0) + len(found)
    moved = int(state.get("round_moved") or 0) + total.shards
    quiet = int(state.get("quiet") or 0)
    update: dict[str, Any] = {"after": following, "round_read": read, "round_moved": moved,
                              "quiet": quiet, "wait_until": None}
    if ends:
        quiet = min(quiet + 1, SWEEP_BACKOFF_MAX) if read and not moved else 0
        update.update(round_read=0, round_moved=0, quiet=quiet,
                      wait_until=now + dt.timedelta(minutes=2**quiet) if quiet else None)
        if quiet:
            log.warning("the sweep read %d shards round the collection group and could move "
                        "none (they hold what cannot be counted: a fraction, another app's "
                        "fields): the next round in %d minutes", read, 2**quiet)
    if update != {k: state.get(k) for k in update}:
        cursor_ref.set(update)  # a late landing only moves where, or when, one starts
    return total


@dataclass(kw_only=True)
class Backfilled:
    """What one backfill of an extension counter did."""

    documents: int = 0  # documents read
    counted: int = 0  # of them, those whose field it added to the counter (or took out)
    deltas: dict[str, int] = field(default_factory=dict)  # counter -> amount it added (moves too)
    moved: Moved = field(default_factory=Moved)  # its `undeclared`: the shards' other numbers
    failed: dict[str, str] = field(default_factory=dict)  # path -> why


def backfill(ctx: Context, db: firestore.Client, declaration: Declaration,
             page: int = config.BACKFILL_PAGE) -> Backfilled:
    """Count what the layout held before the declaration, once, while clients write: for each
    document (with a field, or shards), move its shards and partials (which adds them to the
    counter), then add to the counter what the document's field holds beyond it: read both at
    one instant and commit the difference with the document rewritten at the version read, so a
    move in between fails it (and it is read again). Safe to run again: a counter that equals
    its field gets nothing."""
    done = Backfilled()
    for document in _documents(db, declaration, page):
        counter = declaration.counter_id(document.id)
        try:
            moved = move_until_clear(ctx, db, document, [declaration], for_s=0.0)
            added = _baseline(ctx, db, document, declaration)
        except Exception as error:  # one document never stops the others
            done.failed[document.path] = f"{type(error).__name__}: {error}"
            continue
        done.moved.add(moved)
        done.documents += 1
        done.counted += bool(added)
        delta = added + moved.amounts.get(counter, 0)
        if delta:
            done.deltas[counter] = done.deltas.get(counter, 0) + delta
    return done


def _documents(db: firestore.Client, declaration: Declaration,
               page: int) -> Iterator[firestore.DocumentReference]:
    """The declaration's documents: those that exist, and those that only have shards."""
    seen: set[str] = set()
    for snapshot in watched_documents(db, declaration.documents, page):
        seen.add(snapshot.reference.path)
        yield snapshot.reference
    for shard in paged(db.collection_group(SHARDS), page):
        parent = shard.reference.parent.parent
        if parent is not None and parent.path not in seen \
                and match(declaration.documents, parent.path) is not None:
            seen.add(parent.path)
            yield parent


def _baseline(ctx: Context, db: firestore.Client, document: firestore.DocumentReference,
              declaration: Declaration) -> int:
    """Add to the counter what the document's field holds beyond it (see `backfill`)."""
    assert declaration.extension is not None
    counter = declaration.counter_id(document.id)
    field_name = declaration.extension.field
    for _ in range(config.COLLECTION_APPLY_ATTEMPTS):
        snapshot = document.get()
        if not snapshot.exists:
            return 0
        raw = declaration.extension.raw(snapshot.to_dict() or {})
        value = 0 if raw is None else whole(raw)
        if value is None:  # never rewritten: what it holds is the app's to mend
            raise FailedPrecondition(f"{document.path}: {field_name} holds {raw!r}, not a whole "
                                     f"number of at most {MAX_EXTENSION_AMOUNT}: not counted")
        target = ensure_counter(ctx, db, counter, declaration)
        held = counter_refs.shard_sum(db, ctx.names, counter, instant(snapshot.read_time))
        # A whole double (10.0) is written back as the integer the extension's aggregator
        # would leave there (the Admin SDK sends a safe integer as one).
        if value == held and type(raw) is not float:
            return 0
        batch = db.batch()
        batch.update(document, {field_name: value},
                     option=db.write_option(last_update_time=instant(snapshot.update_time)))
        written = []
        if value != held:
            # A rewrite that changes nothing keeps the version: a baseline run again at the same
            # version would pass the precondition too. One marker per version, created.
            marker = f"baseline {counter} {nanos(instant(snapshot.update_time))}"
            batch.create(shards.request_marker_ref(db, ctx.names, "", marker),
                         shards.request_marker_fields("", marker, [counter], {}))
            written.append(shards.shard_write(ctx.writing, db, counter_refs.shard_ref(
                db, ctx.names, counter, ctx.picker.pick(target)), value - held))
            written[0].add_to(batch)
        try:
            results = ctx.writing.commit_once(batch)
        except (gexc.FailedPrecondition, gexc.AlreadyExists):
            continue  # moved (or written) since the read, or this version's baseline counted
        shards.settle(ctx.writing, db, shards.landed(written, results))
        return value - held
    raise Aborted(f"{document.path}: kept changing while its field was counted")


class Movers:
    """A process's moves, one document at a time and at most one per `every_s` each. A caller
    hands in the shard state its event told of and returns once a move took it: moves take every
    state handed in before they begin (one commit for a burst of events, which production
    delivers concurrently), and a state a move of this process read already needs none.

    `background`: the caller returns at once and a thread of the process waits in its place. The
    Functions emulator delivers a function's events one at a time, so a waiting caller would
    hold every later event behind it (production delivers them to concurrent requests, which
    wait together)."""

    def __init__(self, do: Callable[[str, list[Written], Callable[[Moved], None]], Moved], *,
                 every_s: float = MOVE_EVERY_S, background: bool = False,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._do = do
        self._every_s = every_s
        self._background = background
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Condition()
        self._pages: dict[str, _Page] = {}

    def after_write(self, path: str, written: Written | None = None) -> None:
        """Return once a move of the document at `path` has taken `written` (or read its shards
        after this call began) and then committed, or failed (logged: the amounts stay where
        they are, counted once they move). In the background: at once."""
        if self._background:
            threading.Thread(target=self._wait_in_background, args=(path, written),
                             daemon=True).start()
        else:
            self._wait_for_move(path, written)

    def _wait_in_background(self, path: str, written: Written | None) -> None:
        began = self._monotonic()
        self._wait_for_move(path, written)
        # The request's time in production (the extension benchmark bills it).
        log.info("%s: %s %.1f ms", path, WAITED_IN_BACKGROUND, (self._monotonic() - began) * 1000)

    def _wait_for_move(self, path: str, written: Written | None) -> None:
        with self._lock:
            page = self._pages.setdefault(path, _Page())
            at = written.update_time if written is not None else None
            if written is not None:
                page.pending.append(written)
            need = page.started_moves + 1
            while page.done < need:
                if at is not None and page.read_at is not None and at <= page.read_at:
                    if written in page.pending:
                        page.pending.remove(written)
                    return  # a move read it (and committed, or failed and was logged)
                if page.busy:
                    self._lock.wait()
                    continue
                page.busy = True
                wait = page.started + self._every_s - self._monotonic()
                self._lock.release()
                try:
                    if wait > 0:
                        self._sleep(wait)
                finally:
                    self._lock.acquire()
                page.started_moves += 1
                generation, page.started = page.started_moves, self._monotonic()
                taken, page.pending = page.pending, []
                self._lock.release()
                moved: Moved | None = None
                try:
                    moved = self._do(path, taken, lambda each: self._read(page, each))
                except Exception:
                    log.exception("%s: could not move its shards into it", path)
                finally:
                    self._lock.acquire()
                    page.done, page.busy = generation, False
                    if moved is not None:
                        self._read(page, moved)
                    self._lock.notify_all()
            if not page.busy and not page.pending and len(self._pages) > 1000:
                del self._pages[path]

    def _read(self, page: _Page, moved: Moved) -> None:
        """A move (of a loop still running, or the last) committed: callers whose states it
        read need wait no longer."""
        if moved.read_at is None:
            return
        with self._lock:
            page.read_at = max(page.read_at or moved.read_at, moved.read_at)
            self._lock.notify_all()


@dataclass
class _Page:
    started_moves: int = 0  # moves that began
    done: int = 0  # the last of them that ended
    busy: bool = False
    started: float = float("-inf")
    pending: list[Written] = field(default_factory=list)  # handed in, not taken yet
    read_at: dt.datetime | None = None  # the latest read of a move that ended
