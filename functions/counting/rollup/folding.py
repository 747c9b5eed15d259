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

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc

from counting.foundation import config

if TYPE_CHECKING:
    from counting.rollup.store import Store

@dataclass(kw_only=True)
class Folded:
    """What one fold committed: the rollup applies the same moves to the values it remembers."""

    complete: bool = True  # every surplus shard is gone (False: fold again next tick)
    deleted: list[str] = field(default_factory=list)  # surplus shard ids
    moved: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # survivor -> added


def fold_surplus(store: Store, counter: str, num_shards: int, *,
                 counts_kept: str | None) -> Folded:
    """Move every shard >= num_shards into shard (n mod num_shards), through the rollup's
    store: its commits are fenced (FailedPrecondition for a shard's precondition, LeaseLost
    when the lease is gone). `counts_kept`: where the counter's `shard_counts` are ("memory", or
    "document" for a counter from before the memory), to move likewise; None: it has none (a
    partial map would be taken for the whole)."""
    surplus = [s for s in store.shards(counter) if s.id.isdigit() and int(s.id) >= num_shards]
    result = Folded()
    for start in range(0, len(surplus), config.FOLD_CHUNK):
        chunk = surplus[start:start + config.FOLD_CHUNK]
        moved: dict[str, int] = defaultdict(int)
        for snapshot in chunk:
            moved[str(int(snapshot.id) % num_shards)] += int(snapshot.get("count") or 0)
        try:
            store.fold(counter, chunk, moved, counts_kept=counts_kept)
        except gexc.FailedPrecondition:
            result.complete = False  # a late increment hit one of them: fold again next tick
            continue
        result.deleted += [snapshot.id for snapshot in chunk]
        for survivor, amount in moved.items():
            result.moved[survivor] += amount
    return result

