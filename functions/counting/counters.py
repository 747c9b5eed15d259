"""Sharded counters: creation, the lock-free increment path, reads and resets.

A counter is `counters/{id}` (the rollup clients read, plus its configuration) and the shards
`counters/{id}/shards/{n}` whose sum is its value. An increment is one blind `Increment` on one
shard, chosen without reading anything but a per-instance cache of the configuration; with a
`request_id` it is committed together with the creation of a marker document, so a retry fails
on the marker and counts nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from . import config
from .errors import NotFound


@dataclass(frozen=True, kw_only=True)
class CounterConfig:
    """What the write path needs to know about a counter."""

    counter: str
    num_shards: int
    strategy: str


@dataclass(frozen=True, kw_only=True)
class Created:
    counter: str
    shards: int
    created: bool


@dataclass(frozen=True, kw_only=True)
class Count:
    counter: str
    count: int
    as_of: dt.datetime
    consistency: str
    documents_read: int


def shards_for(expected_rate: float | None) -> int:
    """Shards for a load: ceil(rate / (per-shard rate x target utilisation)), in 1..1000."""
    rate = config.DEFAULT_EXPECTED_RATE if expected_rate is None else expected_rate
    wanted = math.ceil(rate / (config.SHARD_WRITE_RATE * config.TARGET_UTILISATION))
    return max(config.MIN_SHARDS, min(config.MAX_SHARDS, wanted))


def counter_ref(db: firestore.Client, counter: str) -> Any:
    return db.collection(config.COUNTERS).document(counter)


def shard_ref(db: firestore.Client, counter: str, shard: int) -> Any:
    return counter_ref(db, counter).collection(config.SHARDS).document(str(shard))


def shard_write(by: int, rng: random.Random) -> dict[str, Any]:
    """The fields every write to a shard sets; `updated_at` and `stripe` feed the rollup query."""
    return {
        "count": firestore.Increment(by),
        "updated_at": firestore.SERVER_TIMESTAMP,
        "stripe": rng.randrange(config.STRIPES),
    }


class ConfigCache:
    """Per-instance cache of counter configurations, each entry kept for `ttl_s` seconds.

    Unknown counters are not cached: a counter created a moment ago must be usable at once.
    """

    def __init__(self, ttl_s: float = config.CONFIG_CACHE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, tuple[float, CounterConfig]] = {}
        self._lock = threading.Lock()

    def get(self, db: firestore.Client, counter: str) -> CounterConfig:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(counter)
        if entry is not None and now - entry[0] < self._ttl_s:
            return entry[1]
        snapshot = counter_ref(db, counter).get()
        if not snapshot.exists:
            raise NotFound(f"counter: {counter!r} does not exist")
        data = snapshot.to_dict() or {}
        found = CounterConfig(
            counter=counter,
            num_shards=int(data["num_shards"]),
            strategy=str(data.get("strategy", config.DEFAULT_STRATEGY)),
        )
        with self._lock:
            self._entries[counter] = (now, found)
        return found


class ShardPicker:
    """Chooses the shard an increment goes to, per the counter's strategy.

    `round_robin` keeps one cursor per counter and instance, starting at a random offset so that
    instances do not march in lockstep. `least_loaded` needs the per-shard load that adaptive
    sharding publishes; until then it picks like `random`.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self._cursors: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def pick(self, counter: CounterConfig) -> int:
        if counter.strategy == "round_robin":
            with self._lock:
                cursor = self._cursors.get(counter.counter)
                if cursor is None:
                    cursor = itertools.count(self.rng.randrange(counter.num_shards))
                    self._cursors[counter.counter] = cursor
                return next(cursor) % counter.num_shards
        return self.rng.randrange(counter.num_shards)


_CONFIGS = ConfigCache()
_PICKER = ShardPicker()


def create_counter(
    db: firestore.Client,
    counter: str,
    *,
    shards: int | None = None,
    expected_rate: float | None = None,
    strategy: str = config.DEFAULT_STRATEGY,
) -> Created:
    """Create the counter and all its shards in one commit; an existing counter is left as is."""
    num_shards = shards if shards is not None else shards_for(expected_rate)
    batch = db.batch()
    batch.create(
        counter_ref(db, counter),
        {
            "count": 0,
            "num_shards": num_shards,
            "strategy": strategy,
            "created_at": firestore.SERVER_TIMESTAMP,
            "updated_at": firestore.SERVER_TIMESTAMP,
        },
    )
    for n in range(num_shards):
        batch.create(shard_ref(db, counter, n), {"count": 0})
    try:
        batch.commit()
    except gexc.AlreadyExists:
        existing = counter_ref(db, counter).get().to_dict() or {}
        return Created(counter=counter, shards=int(existing["num_shards"]), created=False)
    return Created(counter=counter, shards=num_shards, created=True)


def increment(
    db: firestore.Client,
    counter: str,
    by: int = 1,
    *,
    request_id: str | None = None,
    uid: str = "",
    configs: ConfigCache = _CONFIGS,
    picker: ShardPicker = _PICKER,
) -> bool:
    """Add `by` to one shard; False when `request_id` was already applied for this user."""
    target = configs.get(db, counter)
    ref = shard_ref(db, counter, picker.pick(target))
    if request_id is None:
        ref.update(shard_write(by, picker.rng))
        return True
    batch = db.batch()
    batch.create(*request_marker(db, uid, request_id, counters=[counter]))
    batch.update(ref, shard_write(by, picker.rng))
    return commit_once(batch)


def increment_many(
    db: firestore.Client,
    increments: Iterable[tuple[str, int]],
    *,
    request_id: str | None = None,
    uid: str = "",
    configs: ConfigCache = _CONFIGS,
    picker: ShardPicker = _PICKER,
) -> int:
    """Apply a batch atomically (one shard write per distinct counter); 0 when already applied."""
    items = list(increments)
    totals: dict[str, int] = {}
    for counter, by in items:
        totals[counter] = totals.get(counter, 0) + by
    targets = [configs.get(db, counter) for counter in totals]  # NotFound before any write
    batch = db.batch()
    if request_id is not None:
        batch.create(*request_marker(db, uid, request_id, counters=sorted(totals)))
    for target in targets:
        ref = shard_ref(db, target.counter, picker.pick(target))
        batch.update(ref, shard_write(totals[target.counter], picker.rng))
    return len(items) if commit_once(batch) else 0


def request_marker(
    db: firestore.Client, uid: str, request_id: str, *, counters: list[str]
) -> tuple[Any, dict[str, Any]]:
    """The marker document that makes a request id count once per user.

    Its id hashes (uid, request_id): uids may hold characters a document id cannot.
    """
    key = hashlib.sha256(f"{uid}\0{request_id}".encode()).hexdigest()
    expires_at = dt.datetime.now(dt.UTC) + config.REQUEST_MARKER_TTL
    fields = {"uid": uid, "request_id": request_id, "counters": counters,
              config.EXPIRES_AT: expires_at}
    return db.collection(config.REQUESTS).document(key), fields


def commit_once(batch: Any) -> bool:
    """Commit a batch that creates a marker; False when the marker already exists."""
    try:
        batch.commit()
    except gexc.AlreadyExists:
        return False
    return True


def get_count(db: firestore.Client, counter: str, consistency: str = "rollup") -> Count:
    """The rollup (one document read) or the strong value (all shards, one consistent read)."""
    if consistency == "strong":
        snapshots = list(counter_ref(db, counter).collection(config.SHARDS).stream())
        if not snapshots:
            raise NotFound(f"counter: {counter!r} does not exist")
        total = sum(int((s.to_dict() or {}).get("count", 0)) for s in snapshots)
        return Count(counter=counter, count=total, as_of=snapshots[0].read_time,
                     consistency=consistency, documents_read=len(snapshots))
    snapshot = counter_ref(db, counter).get()
    if not snapshot.exists:
        raise NotFound(f"counter: {counter!r} does not exist")
    data = snapshot.to_dict() or {}
    return Count(counter=counter, count=int(data.get("count", 0)),
                 as_of=data.get("updated_at") or snapshot.update_time, consistency=consistency,
                 documents_read=1)


def reset_counter(db: firestore.Client, counter: str) -> None:
    """Zero every shard and the rollup in one commit."""
    ref = counter_ref(db, counter)
    if not ref.get().exists:
        raise NotFound(f"counter: {counter!r} does not exist")
    rng = random.Random()
    batch = db.batch()
    for shard in ref.collection(config.SHARDS).list_documents():
        batch.set(shard, {"count": 0, "updated_at": firestore.SERVER_TIMESTAMP,
                          "stripe": rng.randrange(config.STRIPES)})
    batch.update(ref, {"count": 0, "updated_at": firestore.SERVER_TIMESTAMP})
    batch.commit()
