"""Extension counters: the Distributed Counter extension's layout, kept by this backend
(docs/architecture.md, "Extension counters").

The counter `visits:{page}` is a collection counter over two path patterns: the documents
(`pages/{page}`, field `visits`) and their shards and partials (`pages/{page}/_counter_shards_/
{id}`), each document counted at its latest state through its record (`collections.Counting`),
so `counters/visits:{page}` holds the extension's total exactly, whatever order events come in.

What this module adds is the move that the extension's clients need: they show the document's
field plus their own shard's, so the amounts in everyone else's shards must reach the document.
A move is one commit, sent once, that takes each shard's amount out of it (a delete guarded by
the shard's update time when it holds nothing else and has been quiet, else an `Increment` of
minus the amount; for a partial, an `_updates_` entry of minus its sum) and adds their sum to the
document's field. Every commit of it keeps document + shards + partials the same, however often
it applies: the deletes apply at most once (their precondition), the increments in pairs whose
sum is zero. So a move can land late, twice or never and no amount is lost or doubled: the
records count whatever states the documents pass through.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features.collections import (
    SHARDS,
    UPDATE_DATA,
    UPDATE_ID,
    UPDATES,
    Declaration,
    Extension,
    is_partial,
)
from counting.foundation.clock import instant
from counting.writepath.context import Writing

log = logging.getLogger(__name__)

# Shards one move reads and writes (a commit holds at most 500 writes: these and the document).
MOVE_MAX_SHARDS = 400
# A shard is deleted (rather than zeroed) once it has not been written for this long: a client
# writing it meanwhile would fail the delete's precondition, and with it the whole move.
QUIET_S = 2.0
# One process moves a document's shards at most this often (its callers wait for the next move).
MOVE_EVERY_S = 1.0


@dataclass(kw_only=True)
class Moved:
    """What one move did."""

    shards: int = 0  # shards and partials whose amounts it took
    deleted: int = 0  # of them, deleted
    amounts: dict[str, int] = field(default_factory=dict)  # field -> amount added to the document
    full: bool = False  # it read MOVE_MAX_SHARDS: there may be more
    read_at: dt.datetime | None = None  # when it read the shards (None: it found none)


def move(writing: Writing, db: firestore.Client, document: firestore.DocumentReference,
         declarations: Iterable[Declaration], *, guarded: bool = True) -> Moved:
    """Move the amounts of `document`'s shards and partials into its fields (one commit, sent
    once). `guarded`: delete quiet shards that hold nothing else (a delete guarded by the shard's
    update time); without it (after such a delete failed), zero every shard instead."""
    extensions = [d.extension for d in declarations if d.extension is not None]
    found = list(document.collection(SHARDS).limit(MOVE_MAX_SHARDS).stream())
    done = Moved(full=len(found) == MOVE_MAX_SHARDS,
                 read_at=min((instant(s.read_time) for s in found), default=None))
    batch = db.batch()
    totals: dict[str, int] = defaultdict(int)
    for shard in found:
        data = shard.to_dict() or {}
        partial = is_partial(shard.id)
        amounts = {e.field: e.amount(data, partial=partial) for e in extensions}
        if not any(amounts.values()):
            continue
        done.shards += 1
        for name, amount in amounts.items():
            totals[name] += amount
        if guarded and _only(extensions, data, partial) and _quiet(shard):
            batch.delete(shard.reference,
                         option=db.write_option(last_update_time=shard.update_time))
            done.deleted += 1
        elif partial:
            batch.set(shard.reference, {UPDATES: firestore.ArrayUnion([{
                UPDATE_ID: str(uuid.uuid4()),
                UPDATE_DATA: _merged(e.nested(-amounts[e.field]) for e in extensions)}])},
                merge=True)
        else:
            batch.set(shard.reference, _merged(
                e.nested(firestore.Increment(-amounts[e.field])) for e in extensions
                if amounts[e.field]), merge=True)
    moved = {name: amount for name, amount in totals.items() if amount}
    if not done.shards:
        return done
    if moved:
        batch.set(document, _merged(e.nested(firestore.Increment(moved[e.field]))
                                    for e in extensions if e.field in moved), merge=True)
    try:
        writing.commit_once(batch)
    except gexc.FailedPrecondition:
        if not guarded:
            raise
        again = move(writing, db, document, declarations, guarded=False)  # a shard was written
        again.read_at = done.read_at if again.read_at is None else again.read_at
        return again
    done.amounts = moved
    return done


def move_all(writing: Writing, db: firestore.Client, document: firestore.DocumentReference,
             declarations: Iterable[Declaration], rounds: int = 5) -> Moved:
    """Moves until one reads fewer than MOVE_MAX_SHARDS (at most `rounds`): what they did."""
    declared = list(declarations)
    total = Moved()
    for _ in range(rounds):
        done = move(writing, db, document, declared)
        total.shards += done.shards
        total.deleted += done.deleted
        for name, amount in done.amounts.items():
            total.amounts[name] = total.amounts.get(name, 0) + amount
        total.full = done.full
        total.read_at = total.read_at or done.read_at
        if not done.full:
            break
    return total


def _only(extensions: list[Extension], data: dict[str, Any], partial: bool) -> bool:
    """The shard holds the counters' fields and nothing else (deleting it loses nothing)."""
    if partial:
        updates = data.get(UPDATES)
        return data.keys() == {UPDATES} and isinstance(updates, list) and all(
            isinstance(u, dict) and _holds_only(extensions, u.get(UPDATE_DATA)) for u in updates)
    return _holds_only(extensions, data)


def _holds_only(extensions: list[Extension], data: Any) -> bool:
    """Every leaf of `data` is one of the fields, holding an amount the counters count."""
    if not isinstance(data, dict):
        return False
    stripped = dict(data)
    for extension in extensions:
        _drop(stripped, extension.path)
    return not _leaves(stripped)


def _drop(data: dict[str, Any], path: list[str]) -> None:
    """Remove the integer at `path` (a copy of each map on the way)."""
    head, *rest = path
    if rest and isinstance(data.get(head), dict):
        data[head] = dict(data[head])
        _drop(data[head], rest)
    elif not rest and type(data.get(head)) is int:
        del data[head]


def _leaves(data: dict[str, Any]) -> bool:
    return any(not isinstance(v, dict) or _leaves(v) for v in data.values())


def _quiet(shard: firestore.DocumentSnapshot[Any]) -> bool:
    read_time, update_time = shard.read_time, shard.update_time
    return (read_time is not None and update_time is not None
            and (read_time - update_time).total_seconds() >= QUIET_S)


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


class Movers:
    """A process's moves, one document at a time and at most one per MOVE_EVERY_S each: a caller
    whose shard write a move of this process read already returns at once; any other waits for a
    move that reads the shards after it called (joining one that has not read yet). So every
    shard written before the call is moved by the time it returns, and a burst of events makes
    one move a second, not one each."""

    def __init__(self, do: Callable[[str], Moved], *,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._do = do
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Condition()
        self._pages: dict[str, _Page] = {}

    def after_write(self, path: str, written_at: dt.datetime | None = None) -> None:
        """Return once a move of the document at `path` has read its shards after a shard write
        committed at `written_at` (or after this call began) and then committed (or failed:
        logged, the amounts stay counted where they are)."""
        with self._lock:
            page = self._pages.setdefault(path, _Page())
            need = page.reading + 1
            while page.done < need:
                if written_at is not None and page.read_at is not None \
                        and written_at <= page.read_at:
                    return  # a move read it (and committed, or failed and was logged)
                if page.busy:
                    self._lock.wait()
                    continue
                page.busy = True
                wait = page.started + MOVE_EVERY_S - self._monotonic()
                self._lock.release()
                try:
                    if wait > 0:
                        self._sleep(wait)
                finally:
                    self._lock.acquire()
                page.reading += 1
                generation, page.started = page.reading, self._monotonic()
                self._lock.release()
                moved: Moved | None = None
                try:
                    moved = self._do(path)
                except Exception:
                    log.exception("%s: could not move its shards into it", path)
                finally:
                    self._lock.acquire()
                    page.done, page.busy = generation, False
                    if moved is not None and moved.read_at is not None:
                        page.read_at = max(page.read_at or moved.read_at, moved.read_at)
                    self._lock.notify_all()
            if not page.busy and page.done == page.reading and len(self._pages) > 1000:
                del self._pages[path]


@dataclass
class _Page:
    reading: int = 0  # moves that began reading
    done: int = 0  # the last of them that ended
    busy: bool = False
    started: float = float("-inf")
    read_at: dt.datetime | None = None  # the latest read of a move that ended


# --- Rules ---------------------------------------------------------------------------------------

RULES_BEGIN = "    // extension counters: begin (generated: `counters extension-rules`)"
RULES_END = "    // extension counters: end"
# A shard id as the extension's clients make them (a UUID); partials (a tab first) are the
# server's.
SHARD_ID = "[A-Za-z0-9-]{1,64}"


def rules(declarations: Iterable[Declaration]) -> str:
    """The rules of the extension counters' shards: a signed-in user writes a shard of a declared
    document, holding the declared fields only, each an integer changed by its declared `by` (or
    not at all); nobody deletes one, and partials are server-only. Their documents are the app's:
    its own rules say who reads (the extension's clients do) and writes them."""
    grouped: dict[str, list[Extension]] = defaultdict(list)
    for declaration in declarations:
        if declaration.extension is not None:
            grouped[declaration.documents].append(declaration.extension)
    lines = [RULES_BEGIN]
    if grouped:
        lines += [
            "    // A field of an extension counter in a client's write of its shard: an integer, "
            "as it was",
            "    // or changed by low..high.",
            "    function extensionField(path, low, high) {",
            "      let after = request.resource.data.get(path, 0);",
            "      let before = resource == null ? 0 : resource.data.get(path, 0);",
            "      return after is int && (after == before",
            "        || (after - before >= low && after - before <= high));",
            "    }",
        ]
    for documents, extensions in grouped.items():
        path = documents
        roots = sorted({e.path[0] for e in extensions})
        checks = [f"request.resource.data.keys().hasOnly({_list(roots)})"]
        for e in extensions:
            for depth in range(1, len(e.path)):
                checks.append(f"request.resource.data.get({_list(e.path[:depth])}, {{}})"
                              f".keys().hasOnly({_list([e.path[depth]])})")
            checks.append(f"extensionField({_list(e.path)}, {e.by[0]}, {e.by[1]})")
        fields = ", ".join(f"{e.field} ({e.by[0]}..{e.by[1]})" for e in extensions)
        lines += [
            f"    // {path}: the Distributed Counter extension's shards of {fields}.",
            f"    match /{path}/{SHARDS}/{{extensionShard}} {{",
            "      allow read: if true;",
            "      allow create, update: if request.auth != null",
            f"        && extensionShard.matches('{SHARD_ID}')",
            *(f"        && {check}" for check in checks[:-1]),
            f"        && {checks[-1]};",
            "      allow delete: if false;",
            "    }",
        ]
    lines.append(RULES_END)
    return "\n".join(lines) + "\n"


def _list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"
