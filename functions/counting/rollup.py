"""The rollup: about once a second, sum the shards of every counter that changed into its rollup.

One tick, under the lease (`counting.lease`):

1. Renew the lease; its commit time T is the instant of every read in this tick.
2. Find the shards written since the last tick's instant W: one query,
   `stripe in [0..STRIPES-1] and updated_at > W`, read at T. A shard's `updated_at` is the
   commit time of its last write, so a write is in exactly one (W, T] window: exact, with no
   lock on the write path. Idle counters match nothing and cost nothing.
3. For each changed counter, the sum of its shards at T: the changed shards plus the values of
   the others as of W, remembered from earlier ticks (a counter met for the first time in
   this process is read whole, at T).
4. Write `count` and `updated_at = T` to the counters whose sum changed.

Every step is a read or an absolute write, so a tick that dies half-way is simply done again
from the persisted watermark (at-least-once delivery is harmless).

`python -m counting.rollup` runs the same loop forever against the emulator (the local stand-in
for the scheduled function, which the Functions emulator never fires).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from . import config
from .lease import Lease, LeaseLost

log = logging.getLogger(__name__)

# A counter not changed for this many ticks is dropped from the in-memory sums.
IDLE_TICKS_KEPT = 120
WRITE_CHUNK = 500
# Counters read whole (first met in this process) are read this many at a time.
READ_THREADS = 8


@dataclass(frozen=True, kw_only=True)
class TickStats:
    as_of: dt.datetime
    changed_shards: int
    changed_counters: int
    written: int
    reads: int  # billed document reads: results, or 1 for a query that matched nothing
    seconds: float


def state_ref(db: firestore.Client) -> Any:
    return db.collection(config.INTERNAL).document(config.ROLLUP_STATE_DOC)


def to_micros(instant: dt.datetime) -> dt.datetime:
    """Snapshot reads take microsecond read times."""
    return dt.datetime(instant.year, instant.month, instant.day, instant.hour, instant.minute,
                       instant.second, instant.microsecond, tzinfo=dt.UTC)


class Rollup:
    """The state of one lease holder: the watermark and the shard values it has seen."""

    def __init__(self, db: firestore.Client, lease: Lease) -> None:
        self._db = db
        self._lease = lease
        self.watermark = lease.watermark
        self._shards: dict[str, dict[str, int]] = {}
        self._written: dict[str, int | None] = {}  # None: the counter document does not exist
        self._last_changed: dict[str, int] = {}
        self._ticks = 0
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="rollup")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def forget(self) -> None:
        """Drop what this holder remembers; the next ticks read the changed counters whole."""
        self._shards.clear()
        self._written.clear()
        self._last_changed.clear()

    def tick(self) -> TickStats:
        started = time.monotonic()
        as_of = to_micros(self._lease.renew(self.watermark))
        changes, reads = self._changed_shards(self.watermark, as_of)
        try:
            reads += self._load_unseen(list(changes), as_of)
            written = self._write_sums(changes, as_of)
        except BaseException:
            self.forget()
            raise
        self.watermark = as_of
        self._evict_idle(changes)
        return TickStats(
            as_of=as_of,
            changed_shards=sum(len(shards) for shards in changes.values()),
            changed_counters=len(changes),
            written=written,
            reads=reads,
            seconds=time.monotonic() - started,
        )

    def _changed_shards(
        self, since: dt.datetime, as_of: dt.datetime
    ) -> tuple[dict[str, dict[str, int]], int]:
        # `stripe in [all]` is one query that the (stripe, updated_at) index serves as one range
        # scan per stripe.
        query = (
            self._db.collection_group(config.SHARDS)
            .where(filter=FieldFilter("stripe", "in", list(range(config.STRIPES))))
            .where(filter=FieldFilter("updated_at", ">", since))
        )
        snapshots = list(query.stream(read_time=as_of))
        changes: dict[str, dict[str, int]] = defaultdict(dict)
        for snapshot in snapshots:
            parent = snapshot.reference.parent.parent
            if parent is None or parent.parent.id != config.COUNTERS:
                continue
            changes[parent.id][snapshot.id] = int(snapshot.get("count") or 0)
        return changes, max(1, len(snapshots))

    def _load_unseen(self, counters: list[str], as_of: dt.datetime) -> int:
        """Read, at `as_of`, every shard and the rollup of counters this holder has not seen."""
        unseen = [c for c in counters if c not in self._written]
        if not unseen:
            return 0
        coll = self._db.collection(config.COUNTERS)

        def shards(counter: str) -> dict[str, int]:
            stream = coll.document(counter).collection(config.SHARDS).stream(read_time=as_of)
            return {s.id: int(s.get("count") or 0) for s in stream}

        reads = 0
        for counter, values in zip(unseen, self._pool.map(shards, unseen), strict=True):
            self._shards[counter] = values
            reads += max(1, len(values))
        refs = [coll.document(counter) for counter in unseen]
        for snapshot in self._db.get_all(refs, field_paths=["count"], read_time=as_of):
            exists = snapshot.exists
            self._written[snapshot.id] = int(snapshot.get("count") or 0) if exists else None
            reads += 1
        return reads

    def _write_sums(self, changes: dict[str, dict[str, int]], as_of: dt.datetime) -> int:
        updates: list[tuple[str, int]] = []
        for counter, shards in changes.items():
            self._shards[counter].update(shards)
            total = sum(self._shards[counter].values())
            if self._written.get(counter) is not None and self._written[counter] != total:
                updates.append((counter, total))
        coll = self._db.collection(config.COUNTERS)
        for start in range(0, len(updates), WRITE_CHUNK):
            chunk = updates[start:start + WRITE_CHUNK]
            batch = self._db.batch()
            for counter, total in chunk:
                batch.update(coll.document(counter), {"count": total, "updated_at": as_of})
            batch.commit()
            self._written.update(chunk)
        return len(updates)

    def _evict_idle(self, changes: dict[str, dict[str, int]]) -> None:
        self._ticks += 1
        for counter in changes:
            self._last_changed[counter] = self._ticks
        idle = [c for c, t in self._last_changed.items() if self._ticks - t > IDLE_TICKS_KEPT]
        for counter in idle:
            del self._last_changed[counter]
            self._shards.pop(counter, None)
            self._written.pop(counter, None)


def new_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def run(
    db: firestore.Client,
    *,
    seconds: float | None = None,
    stop: threading.Event | None = None,
    owner: str | None = None,
    period_s: float = config.ROLLUP_PERIOD_S,
) -> None:
    """Tick every `period_s` for `seconds` (forever when None) or until `stop` is set.

    A loop that finds the lease held waits for it (polling) rather than running beside it.
    """
    stop = stop or threading.Event()
    lease = Lease(db, state_ref(db), owner or new_owner(), config.ROLLUP_LEASE_S)
    deadline = None if seconds is None else time.monotonic() + seconds
    rollup: Rollup | None = None
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            started = time.monotonic()
            wait_s = period_s / 4
            if rollup is None:
                if lease.acquire():
                    log.info("rollup lease acquired by %s", lease.owner)
                    rollup = Rollup(db, lease)
                    continue
            else:
                wait_s = period_s
                try:
                    stats = rollup.tick()
                    if stats.changed_counters:
                        log.info("tick: %s", stats)
                except LeaseLost:
                    log.warning("rollup lease lost; waiting to take it back")
                    rollup.close()
                    rollup = None
                except gexc.GoogleAPICallError:
                    log.exception("tick failed; it will be done again")
            remaining = wait_s - (time.monotonic() - started)
            if deadline is not None:
                remaining = min(remaining, deadline - time.monotonic())
            stop.wait(max(0.0, remaining))
    finally:
        if rollup is not None:
            lease.release(rollup.watermark)
            rollup.close()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    db = firestore.Client(project=os.environ.get("GCLOUD_PROJECT", "demo-counters"))
    target = os.environ.get("FIRESTORE_EMULATOR_HOST", "production Firestore")
    log.info("rollup loop started against %s", target)
    run(db, stop=stop)


if __name__ == "__main__":
    main()
