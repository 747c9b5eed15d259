"""The backfill: every watched document's state applied through the same step as an event's, and
records of deleted documents taken back."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.cloud import firestore

from counting.features.collections.applying import Applied, Counting, read_entries
from counting.features.collections.declared import _WILDCARD, match, nanos
from counting.features.collections.planning import Observed
from counting.foundation import config
from counting.foundation.config import Names

if TYPE_CHECKING:
    pass

@dataclass(kw_only=True)
class Backfilled:
    """What one backfill did."""

    documents: int = 0  # watched documents read
    counted: int = 0  # of them, those whose state it applied (the others were counted already)
    removed: int = 0  # documents gone whose deletion no event had applied
    deltas: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # path -> why it was not applied


def watched_documents(
    db: firestore.Client, pattern: str, page: int = config.BACKFILL_PAGE
) -> Iterator[firestore.DocumentSnapshot[Any]]:
    """Every document of `pattern`, a page at a time. Parents are listed with `list_documents`,
    which includes parents that have subcollections but no document of their own."""
    segments = pattern.split("/")

    def walk(parent: firestore.DocumentReference | None,
             depth: int) -> Iterator[firestore.DocumentSnapshot[Any]]:
        name = segments[depth]
        collection = db.collection(name) if parent is None else parent.collection(name)
        if depth + 2 == len(segments):
            yield from paged(collection, page)
            return
        wildcard = _WILDCARD.fullmatch(segments[depth + 1])
        refs = (collection.list_documents(page_size=page) if wildcard
                else [collection.document(segments[depth + 1])])
        for ref in refs:
            yield from walk(ref, depth + 2)

    yield from walk(None, 0)


def backfill(counting: Counting, declarations: Iterable[str] | None = None,
             progress: Callable[[Backfilled], None] | None = None,
             page: int = config.BACKFILL_PAGE) -> Backfilled:
    """Bring the named declarations' counters (default: all of the watch) up to the documents
    as they are, through the triggers' own step, so that nothing is counted twice:

    1. every document that exists is applied as the state just read: one the triggers counted
       already (at that state or a newer one) is skipped, and one written while this runs is
       counted once whichever of the two applies its state first;
    2. every record of the watch that still counts a document which no longer exists (its
       delete event was lost) is applied a deletion versioned at the read that found it gone:
       any later write of the document has a later update time, so it still wins.

    A document that fails (a counter under a declared id made by hand, say) is reported in
    `failed` and the others go on."""
    names = None if declarations is None else list(declarations)
    done = Backfilled()
    totals: dict[str, int] = defaultdict(int)
    db = counting.db

    def present(snapshot: firestore.DocumentSnapshot[Any]) -> Applied | None:
        observed = Observed(path=snapshot.reference.path, data=snapshot.to_dict() or {},
                            version=nanos(snapshot.update_time))
        return counting.apply(observed, event="backfill", only=names)

    def gone(record: firestore.DocumentSnapshot[Any]) -> Applied | None:
        path = str((record.to_dict() or {}).get("path", ""))
        if match(counting.watch.documents, path) is None:
            return None
        entries = read_entries(record)
        if all(entry.deleted for name, entry in entries.items() if names is None or name in names):
            return None
        document = counting.source.document(path).get()
        if document.exists:
            return None  # counted in step 1 (or by its trigger since)
        observed = Observed(path=path, data=None, version=nanos(document.read_time))
        return counting.apply(observed, event="backfill", only=names)

    def safely(step: Callable[[firestore.DocumentSnapshot[Any]], Applied | None],
               snapshot: firestore.DocumentSnapshot[Any]) -> tuple[str, Applied | str | None]:
        try:
            return snapshot.reference.path, step(snapshot)
        except Exception as error:  # one document never stops the others
            return snapshot.reference.path, f"{type(error).__name__}: {error}"

    def run(step: Callable[[firestore.DocumentSnapshot[Any]], Applied | None],
            snapshots: Iterator[firestore.DocumentSnapshot[Any]], *, removal: bool) -> None:
        with counting.ctx.writing.pools(config.BACKFILL_THREADS, "backfill") as pool:
            while found := list(itertools.islice(snapshots, page)):
                for path, outcome in pool.map(lambda s: safely(step, s), found):
                    if isinstance(outcome, str):
                        done.failed[path] = outcome
                        continue
                    if not removal:
                        done.documents += 1
                    if outcome is None or outcome.committed_at is None:
                        continue
                    if removal:
                        done.removed += 1
                    else:
                        done.counted += 1
                    for counter, delta in outcome.deltas.items():
                        totals[counter] += delta
                if progress is not None:
                    progress(done)

    run(present, watched_documents(counting.source, counting.watch.documents, page),
        removal=False)
    run(gone, records(db, counting.ctx.names, page), removal=True)
    done.deltas = {counter: delta for counter, delta in totals.items() if delta}
    return done


def records(db: firestore.Client, names: Names,
            page: int) -> Iterator[firestore.DocumentSnapshot[Any]]:
    """Every record of every watch (their `path` is not indexed)."""
    return paged(db.collection(names.counted_docs), page)


def paged(collection: firestore.CollectionReference | firestore.CollectionGroup,
          page: int) -> Iterator[firestore.DocumentSnapshot[Any]]:
    """Every document of `collection` (or of a collection group), in id order, `page` per
    query."""
    last: firestore.DocumentSnapshot[Any] | None = None
    while True:
        query = collection.limit(page)
        if last is not None:
            query = query.start_after(last)
        found = list(query.stream())
        yield from found
        if len(found) < page:
            return
        last = found[-1]
