"""Shard writes as the write path makes them, straight to one shard (tests that need a given
shard's value)."""

from __future__ import annotations

from counting.features import counter_refs
from counting.foundation.config import Names
from counting.writepath import shards
from counting.writepath.context import Writing
from google.cloud import firestore

NAMES = Names()  # the collection ids of the default placement, which these run on


def write_shard(db: firestore.Client, counter: str, shard: int, by: int) -> None:
    ref = counter_refs.shard_ref(db, NAMES, counter, shard)
    ref.update(shards.shard_write(Writing.offline(), db, ref, by).fields)
