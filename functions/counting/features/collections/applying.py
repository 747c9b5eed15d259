"""The trigger's I/O: a document's record read, its plan committed with the counters' shard writes
(`Counting`), and a declaration's counter created on first use."""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features import counter_refs, counters
from counting.features.collections.declared import Declaration, Watch, match
from counting.features.collections.planning import Entries, Entry, Observed, Plan, plan
from counting.foundation import config, writes
from counting.foundation.config import Names
from counting.foundation.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from counting.writepath import shards

if TYPE_CHECKING:
    from counting.features.context import Context
    from counting.features.shard_choice import CounterConfig

def record_ref(db: firestore.Client, names: Names, path: str) -> firestore.DocumentReference:
    return db.collection(names.counted_docs).document(hashlib.sha256(path.encode()).hexdigest())


def read_entries(snapshot: firestore.DocumentSnapshot[Any]) -> Entries:
    if not snapshot.exists:
        return {}
    data = snapshot.to_dict() or {}
    return {str(e["declaration"]): Entry.from_document(e) for e in data.get("entries", [])}


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What applying one observed state did."""

    deltas: dict[str, int] = field(default_factory=dict)  # the counters it moved
    committed_at: dt.datetime | None = None  # None: nothing was written
    attempts: int = 1


class Counting:
    """Applies observed states of watched documents: the triggers' and the backfill's one step,
    with the process's context (its configuration cache and shard picker among it)."""

    def __init__(self, ctx: Context, db: firestore.Client, watch: Watch, *,
                 source: firestore.Client | None = None) -> None:
        self.ctx = ctx
        self.db = db
        # The watched documents' database (the backend's own unless it lives in another one).
        self.source = source or db
        self.watch = watch

    def apply(self, observed: Observed, *, event: str,
              only: Iterable[str] | None = None) -> Applied:
        """Bring the document's record (and so the counters) up to `observed`, at most once:
        `event` names the cause (an event id, or the backfill), kept on the record."""
        params = match(self.watch.documents, observed.path)
        if params is None:
            raise InvalidArgument(f"{observed.path!r} is not a document of "
                                  f"{self.watch.documents!r}")
        chosen = set(only) if only is not None else None
        declarations = [d for d in self.watch.declarations
                        if chosen is None or d.name in chosen]
        ref = record_ref(self.db, self.ctx.names, observed.path)
        # Each commit writes the nonce into the record: a commit sent again after a lost answer
        # fails its precondition when an earlier attempt applied, and the record says so.
        nonce = self.ctx.writing.nonce()
        planned: Plan | None = None
        for attempt in range(1, config.COLLECTION_APPLY_ATTEMPTS + 1):
            snapshot = ref.get()
            if planned is not None and shards.nonce_of(snapshot) == nonce:
                shards.settle(self.ctx.writing, self.db,
                              shards.marker_landed(self.db, self.ctx.names, snapshot))
                return Applied(deltas=planned.deltas, committed_at=snapshot.update_time,
                               attempts=attempt)
            change = planned = plan(declarations, read_entries(snapshot), observed, params)
            if change is None:
                return Applied(attempts=attempt)
            try:
                committed = self._commit(ref, snapshot, change, observed, event, nonce)
            except (gexc.AlreadyExists, gexc.FailedPrecondition):
                continue  # the record changed since it was read: plan again
            except gexc.NotFound:
                # A shard folded away since the configuration was cached (or the record
                # expired): nothing was written; read afresh.
                for counter in change.deltas:
                    self.ctx.configs.forget(counter)
                continue
            return Applied(deltas=change.deltas, committed_at=committed, attempts=attempt)
        raise Aborted(f"{observed.path}: its record kept changing; "
                      f"{config.COLLECTION_APPLY_ATTEMPTS} attempts lost the race")

    def _commit(self, ref: firestore.DocumentReference, snapshot: firestore.DocumentSnapshot[Any],
                change: Plan, observed: Observed, event: str, nonce: str) -> dt.datetime:
        """One commit of the record (with a precondition: created, or unchanged since read)
        and the shard writes of its deltas; sent again while its answers are lost."""
        self._ensure_counters(change.counters)
        gone = all(entry.deleted for entry in change.entries.values())
        written = []
        for counter, delta in sorted(change.deltas.items()):
            target = self.ctx.configs.get(self.db, self.ctx.names, counter)
            shard = counter_refs.shard_ref(self.db, self.ctx.names, counter,
                                           self.ctx.picker.pick(target))
            written.append(shards.shard_write(self.ctx.writing, self.db, shard, delta))
        record = {
            "path": observed.path,
            "entries": [e.to_document(name) for name, e in sorted(change.entries.items())],
            "event": event,
            config.EXPIRES_AT: (dt.datetime.now(dt.UTC) + config.COUNTED_TOMBSTONE_TTL
                                if gone else None),
            writes.NONCE: nonce, "at": firestore.SERVER_TIMESTAMP,
            "shards": [write.ref.path for write in written],
        }
        batch = self.db.batch()
        if snapshot.exists:
            batch.update(ref, record,
                         option=self.db.write_option(last_update_time=snapshot.update_time))
        else:
            batch.create(ref, record)
        for write in written:
            write.add_to(batch)
        writing = self.ctx.writing
        results = writing.resending(functools.partial(writing.send, batch), request_id=None)
        shards.settle(writing, self.db, shards.landed(written, results))
        committed: dt.datetime = results[0].update_time
        return committed

    def _ensure_counters(self, named: Mapping[str, str]) -> None:
        declared = {d.name: d for d in self.watch.declarations}
        for counter, declaration in named.items():
            ensure_counter(self.ctx, self.db, counter, declared[declaration])


def ensure_counter(ctx: Context, db: firestore.Client, counter: str,
                   declaration: Declaration) -> CounterConfig:
    """The counter's configuration, the counter created if it does not exist yet (two writers
    racing to create one: one creates it, the other finds it); refuse to count into a counter
    the declaration does not keep."""
    try:
        found = ctx.configs.get(db, ctx.names, counter)
    except NotFound:
        counters.create_counter(ctx, db, counter, expected_rate=declaration.initial_rate,
                                collection=declaration.name)
        found = ctx.configs.get(db, ctx.names, counter)
    if found.collection != declaration.name:
        raise FailedPrecondition(
            f"counter: {counter!r} exists and is not maintained by declaration "
            f"{declaration.name!r}: rename one of them")
    return found
