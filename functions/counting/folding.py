"""Folding: moving the surplus shards of a counter that shrank into the shards that remain.

Folding never loses or doubles a count. Each surplus shard is read, then one commit deletes it,
with a precondition on the update time it was read with, and adds the count read to a remaining
shard (Increment). The precondition means the amount moved is exactly what the
shard held when it disappeared: an increment that lands in between fails the commit, which moves
nothing and is retried next tick; an increment from a writer with a stale `num_shards` that comes
after fails NOT_FOUND, and the write path redoes it on a current shard. At every instant the
shards that exist sum to the counter's value. The same commit makes the same moves in the
counter document's `shard_counts` (when it has them), so a new holder reading it is right too.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from . import config, partitions

if TYPE_CHECKING:
    from .store import Store

@dataclass(kw_only=True)
class Folded:
    """What one fold committed: the rollup applies the same moves to the values it remembers."""

    complete: bool = True  # every surplus shard is gone (False: fold again next tick)
    deleted: list[str] = field(default_factory=list)  # surplus shard ids
    moved: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # survivor -> added


def fold_surplus(store: Store, counter_ref: firestore.DocumentReference,
                 num_shards: int, *, with_counts: bool) -> Folded:
    """Move every shard >= num_shards into shard (n mod num_shards), through the rollup's
    store: its commits are fenced (FailedPrecondition for a shard's precondition, LeaseLost
    when the lease is gone). `with_counts`: the counter document has `shard_counts`, to move
    likewise (a document without them stays so: a partial map would be taken for the whole)."""
    shards = counter_ref.collection(config.SHARDS)
    snapshots = store.query(shards)
    surplus = [s for s in snapshots if s.id.isdigit() and int(s.id) >= num_shards]
    result = Folded()
    for start in range(0, len(surplus), config.FOLD_CHUNK):
        chunk = surplus[start:start + config.FOLD_CHUNK]
        moved: dict[str, int] = defaultdict(int)
        batch = store.db.batch()
        for snapshot in chunk:
            option = store.db.write_option(last_update_time=snapshot.update_time)
            batch.delete(snapshot.reference, option=option)
            moved[str(int(snapshot.id) % num_shards)] += int(snapshot.get("count") or 0)
        for survivor, amount in moved.items():
            if amount:
                # Stamped like a write: a sweep then tells the fold's version from a straddling
                # write nobody touched (and skips it), and the stamp is a touch of whatever the
                # survivor held. The holder applies the move to the values it remembers, so the
                # next tick finds the survivor unchanged: a fold wakes nothing.
                batch.update(shards.document(survivor), {
                    "count": firestore.Increment(amount),
                    "updated_at": firestore.SERVER_TIMESTAMP,
                    "stripe": partitions.shard_stripe(store.db, shards.document(survivor),
                                                      random.Random())})
        if with_counts:
            batch.update(counter_ref, {
                **{shard_count(snapshot.id): firestore.DELETE_FIELD for snapshot in chunk},
                **{shard_count(survivor): firestore.Increment(amount)
                   for survivor, amount in moved.items()}})
        try:
            store.commit(batch, deletes=len(chunk))
        except gexc.FailedPrecondition:
            result.complete = False  # a late increment hit one of them: fold again next tick
            continue
        result.deleted += [snapshot.id for snapshot in chunk]
        for survivor, amount in moved.items():
            result.moved[survivor] += amount
    return result


def shard_count(shard: str) -> str:
    """The field path of a shard's entry in `shard_counts` (ids are digits: quoted)."""
    return FieldPath(config.SHARD_COUNTS_FIELD, shard).to_api_repr()
