"""Where a counter's documents are: `counters/{id}` (what clients read, and its configuration),
its shards, the rollup's memory, the reset record, and the per-user markers of its policy; each
in the collections `names` gives (a context's `names`: its placement's)."""

from __future__ import annotations

import datetime as dt
import hashlib

from google.cloud import firestore

from counting.foundation import config
from counting.foundation.config import Names

# On a collection counter's document: the name of the declaration that maintains it.
COLLECTION_FIELD = "collection"


def counter_ref(db: firestore.Client, names: Names, counter: str) -> firestore.DocumentReference:
    return db.collection(names.counters).document(counter)


def shard_ref(db: firestore.Client, names: Names, counter: str,
              shard: int) -> firestore.DocumentReference:
    return db.collection(names.counters, counter, names.shards).document(str(shard))


def memory_ref(db: firestore.Client, names: Names, counter: str) -> firestore.DocumentReference:
    """What the rollup remembers of the counter (`names.memory`): server-only, read by a new
    holder and, for least_loaded counters, by the write path."""
    return db.collection(names.counters, counter, names.memory).document(config.MEMORY_DOC)


def user_key(uid: str) -> str:
    """A document id for a user (uids may hold characters an id cannot)."""
    return hashlib.sha256(uid.encode()).hexdigest()[:32]


def voter_ref(db: firestore.Client, names: Names, counter: str,
              uid: str) -> firestore.DocumentReference:
    return db.collection(names.counters, counter, names.voters).document(user_key(uid))


def paced_ref(db: firestore.Client, names: Names, counter: str,
              uid: str) -> firestore.DocumentReference:
    return db.collection(names.counters, counter, names.paced).document(user_key(uid))


def reset_ref(db: firestore.Client, names: Names, counter: str) -> firestore.DocumentReference:
    """The counter's reset record: the last reset's nonce and the shards it moved."""
    return db.collection(names.counters, counter, names.memory).document(config.RESET_DOC)


def shard_sum(db: firestore.Client, names: Names, counter: str, read_time: dt.datetime) -> int:
    """The sum of a counter's shards at `read_time` (one aggregation query)."""
    shards = db.collection(names.counters, counter, names.shards)
    [[result]] = shards.sum("count", alias="total").get(read_time=read_time)
    return int(result.value or 0)
