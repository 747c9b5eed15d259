"""Shard writes as the write path makes them, straight to one shard (tests that need a given
shard's value)."""

from __future__ import annotations

from counting.features import counter_refs
from counting.writepath import shards
from counting.writepath.context import Writing
from google.cloud import firestore


def write_shard(db: firestore.Client, counter: str, shard: int, by: int) -> None:
    ref = counter_refs.shard_ref(db, counter, shard)
    ref.update(shards.shard_write(Writing.offline(), db, ref, by).fields)
