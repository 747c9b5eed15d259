"""`counters backfill` of an extension counter: what the layout held before the declaration,
counted once while clients write."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features import counter_refs
from counting.features.collections.applying import ensure_counter
from counting.features.collections.backfilling import paged, watched_documents
from counting.features.collections.declared import Declaration, match, nanos
from counting.features.collections.layout import MAX_EXTENSION_AMOUNT, SHARDS, whole
from counting.features.extension.moving import Moved, move_until_clear
from counting.foundation import config
from counting.foundation.clock import instant
from counting.foundation.errors import Aborted, FailedPrecondition
from counting.writepath import shards

if TYPE_CHECKING:
    from counting.features.context import Context


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
