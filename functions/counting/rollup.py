"""The rollup: about once a second, sum the shards of every counter that changed into its rollup,
measure each counter's write rate, and scale its shards to it; then the trending tags.

One tick, under the lease (`counting.lease`):

1. Renew the lease; its commit time T is the instant of every read in this tick.
2. Find the shards written since the last tick's instant W: one query,
   `stripe in [0..STRIPES-1] and updated_at > W`, read at T. A shard's `updated_at` is the
   commit time of its last write, so a write is in exactly one (W, T] window: exact, with no
   lock on the write path. Idle counters match nothing and cost nothing.
3. For each changed counter, the sum of its shards at T: the changed shards plus the values of
   the others as of W, remembered from earlier ticks (a counter met for the first time in
   this process is read whole, at T).
4. Measure: a shard's `writes` field grows by one per write, so its growth over (W, T] is the
   number of writes it took. Per counter their sum over T - W feeds the rate EWMA
   (`counting.autoscale`); per shard, for `least_loaded` counters, the same feeds its load.
5. Write `count` and `updated_at = T` to the counters whose sum changed, with `rate` (and
   `shard_load`), and `rate` alone when it moved noticeably.
6. Scale every counter held in memory (`autoscale.decide`): grow = create the new shards, then
   raise `num_shards`; shrink = lower `num_shards` and stamp `shrunk_at`; FOLD_GRACE_S later (the
   write paths' caches have all seen the lower count by then) fold the surplus shards.

7. Trending tags (`counting.trends`): the same query returned the changed shards of the trend
   minute buckets; their changes go into the window totals, the Top-K lists and `trends/{scope}`.

Folding never loses or doubles a count. Each surplus shard is read, then one commit deletes it,
with a precondition on the update time it was read with, and adds the count read to a remaining
shard (Increment, with `updated_at`). The precondition means the amount moved is exactly what the
shard held when it disappeared: an increment that lands in between fails the commit, which moves
nothing and is retried next tick; an increment from a writer with a stale `num_shards` that comes
after fails NOT_FOUND, and the write path redoes it on a current shard. At every instant the
shards that exist sum to the counter's value. The rollup applies the same move to the values it
remembers (drop the shard, add its count to the survivor), so its sums stay the sums of the
shards that exist at T; if anything fails mid-tick it forgets everything and reads afresh.

Every other step is a read or an absolute write, so a tick that dies half-way is simply done again
from the persisted watermark (at-least-once delivery is harmless). The autoscale state that must
outlive a lease holder (`rate`, `low_since`, `shrunk_at`, `above_min`) is on the counter
document; counters above their minimum are found again with one query on `above_min`.

`python -m counting.rollup` runs the same loop forever against the emulator (the local stand-in
for the scheduled function, which the Functions emulator never fires).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from . import autoscale, config
from .autoscale import AutoscaleParams
from .lease import Lease, LeaseLost
from .trends import TrendRollup, TrendStats

log = logging.getLogger(__name__)

# A counter not changed for this many ticks is dropped from the in-memory sums (unless it still
# has shards to shed).
IDLE_TICKS_KEPT = 120
WRITE_CHUNK = 500
# Surplus shards folded per commit.
FOLD_CHUNK = 200
# Counters read whole (first met in this process) are read this many at a time.
READ_THREADS = 8
# A rate sample never spans more than this (the first tick after a long pause).
MAX_SAMPLE_S = 60.0
COUNTER_FIELDS = ["count", "num_shards", "strategy", "min_shards", "max_shards", "rate",
                  "low_since", "shrunk_at", "updated_at"]

Shard = tuple[int, int]  # (count, writes)


@dataclass(frozen=True, kw_only=True)
class TickStats:
    as_of: dt.datetime
    changed_shards: int
    changed_counters: int
    written: int  # counters whose count was written
    reads: int  # billed document reads: results, or 1 for a query that matched nothing
    seconds: float
    published: int = 0  # counter documents written (count, rate or scaling state)
    rescaled: int = 0  # counters whose num_shards changed
    folded: int = 0  # surplus shards folded away
    trends: TrendStats | None = None


@dataclass(kw_only=True)
class Scaling:
    """What the rollup knows of one counter's configuration and load."""

    num_shards: int
    min_shards: int
    max_shards: int
    strategy: str
    rate: float
    published_rate: float
    low_since: float | None  # epoch seconds
    shrunk_at: float | None  # epoch seconds; surplus shards are folded FOLD_GRACE_S later
    shard_load: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_document(cls, data: dict[str, Any]) -> Scaling:
        def seconds(value: Any) -> float | None:
            return value.timestamp() if isinstance(value, dt.datetime) else None

        rate = float(data.get("rate") or 0.0)
        low_since = seconds(data.get("low_since"))
        if low_since is None and rate == 0.0:
            # Idle since at least its last count change (low_since is only ever written along
            # with other fields, so a counter nobody writes to has none).
            low_since = seconds(data.get("updated_at"))
        return cls(
            num_shards=int(data.get("num_shards") or 1),
            min_shards=int(data.get("min_shards") or config.DEFAULT_MIN_SHARDS),
            max_shards=int(data.get("max_shards") or config.DEFAULT_MAX_SHARDS),
            strategy=str(data.get("strategy") or config.DEFAULT_STRATEGY),
            rate=rate,
            published_rate=rate,
            low_since=low_since,
            shrunk_at=seconds(data.get("shrunk_at")),
        )

    @property
    def above_min(self) -> bool:
        return self.num_shards > self.min_shards or self.shrunk_at is not None

    def published_load(self) -> list[float]:
        return [round(self.shard_load.get(str(n), 0.0), 3) for n in range(self.num_shards)]


def state_ref(db: firestore.Client) -> Any:
    return db.collection(config.INTERNAL).document(config.ROLLUP_STATE_DOC)


def to_micros(instant: dt.datetime) -> dt.datetime:
    """Snapshot reads take microsecond read times."""
    return dt.datetime(instant.year, instant.month, instant.day, instant.hour, instant.minute,
                       instant.second, instant.microsecond, tzinfo=dt.UTC)


def timestamp(seconds: float | None) -> dt.datetime | None:
    return None if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)


def publishable(rate: float) -> float:
    return 0.0 if rate < config.RATE_PUBLISH_ABS else round(rate, 3)


def rate_moved(rate: float, published: float) -> bool:
    value = publishable(rate)
    if value == published:
        return False
    margin = max(config.RATE_PUBLISH_ABS, config.RATE_PUBLISH_REL * published)
    return value == 0.0 or abs(value - published) > margin


def change_query(db: firestore.Client, since: dt.datetime) -> Any:
    """Every shard (counters' and trend buckets') written after `since`."""
    return (
        db.collection_group(config.SHARDS)
        .where(filter=FieldFilter("stripe", "in", list(range(config.STRIPES))))
        .where(filter=FieldFilter("updated_at", ">", since))
    )


def shard_of(snapshot: Any) -> Shard:
    return int(snapshot.get("count") or 0), int((snapshot.to_dict() or {}).get("writes") or 0)


class Rollup:
    """The state of one lease holder: the watermark, the shard values it has seen, the loads."""

    def __init__(self, db: firestore.Client, lease: Lease,
                 scaling: AutoscaleParams | None = None,
                 trends: TrendRollup | None = None) -> None:
        self._db = db
        self._lease = lease
        self._params = scaling or AutoscaleParams()
        self._trends = trends or TrendRollup(db, lease)
        self.watermark = lease.watermark
        self._shards: dict[str, dict[str, int]] = {}
        self._writes: dict[str, dict[str, int]] = {}
        self._written: dict[str, int | None] = {}  # None: the counter document does not exist
        self._scaling: dict[str, Scaling] = {}
        self._last_changed: dict[str, int] = {}
        self._ticks = 0
        self._rng = random.Random()
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="rollup")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    def forget(self) -> None:
        """Drop what this holder remembers; the next ticks read the changed counters whole."""
        self._shards.clear()
        self._writes.clear()
        self._written.clear()
        self._scaling.clear()
        self._last_changed.clear()
        self._trends.forget()

    def tick(self) -> TickStats:
        started = time.monotonic()
        since = self.watermark
        as_of = to_micros(self._lease.renew(since))
        changes, trend_changes, reads = self._changed_shards(since, as_of)
        try:
            watched: list[str] = []
            if self._params.enabled and self._ticks % config.ROLLUP_WATCH_EVERY_TICKS == 0:
                watched, watch_reads = self._above_min(as_of)
                reads += watch_reads
            reads += self._load_unseen(list(dict.fromkeys([*changes, *watched])), as_of)
            sums = self._apply(changes, since, as_of)
            updates, grows = self._plan(sums, as_of)
            self._commit(updates)
            for counter, old, new in grows:
                self._grow(counter, old, new)
            folded, fold_reads = self._fold_due(as_of)
            reads += fold_reads
            trends = self._trends.tick(trend_changes, as_of)
        except BaseException:
            self.forget()
            raise
        self.watermark = as_of
        self._evict_idle(changes)
        return TickStats(
            as_of=as_of,
            changed_shards=sum(len(shards) for shards in changes.values()),
            changed_counters=len(changes),
            written=sum(1 for fields in updates.values() if "count" in fields),
            reads=reads,
            seconds=time.monotonic() - started,
            published=len(updates),
            rescaled=len(grows) + sum(1 for fields in updates.values() if "num_shards" in fields),
            folded=folded,
            trends=trends,
        )

    def _changed_shards(
        self, since: dt.datetime, as_of: dt.datetime
    ) -> tuple[dict[str, dict[str, Shard]], dict[str, dict[str, Any]], int]:
        """Counter shards and trend minute-bucket shards written in (since, as_of].

        `stripe in [all]` is one query that the (stripe, updated_at) index serves as one range
        scan per stripe."""
        snapshots = list(change_query(self._db, since).stream(read_time=as_of))
        changes: dict[str, dict[str, Shard]] = defaultdict(dict)
        trend_changes: dict[str, dict[str, Any]] = defaultdict(dict)
        for snapshot in snapshots:
            parent = snapshot.reference.parent.parent
            if parent is None:
                continue
            if parent.parent.id == config.COUNTERS:
                changes[parent.id][snapshot.id] = shard_of(snapshot)
            elif parent.parent.id == config.TREND_MINUTES:
                trend_changes[parent.id][snapshot.id] = snapshot
        return changes, trend_changes, max(1, len(snapshots))

    def _above_min(self, as_of: dt.datetime) -> tuple[list[str], int]:
        """Counters that may have shards to shed, whether or not anyone writes to them."""
        query = (
            self._db.collection(config.COUNTERS)
            .where(filter=FieldFilter("above_min", "==", True))
            .select(["above_min"])
        )
        found = [snapshot.id for snapshot in query.stream(read_time=as_of)]
        return found, max(1, len(found))

    def _load_unseen(self, counters: list[str], as_of: dt.datetime) -> int:
        """Read, at `as_of`, every shard and the rollup of counters this holder has not seen."""
        unseen = [c for c in counters if c not in self._written]
        if not unseen:
            return 0
        coll = self._db.collection(config.COUNTERS)

        def shards(counter: str) -> dict[str, Shard]:
            stream = coll.document(counter).collection(config.SHARDS).stream(read_time=as_of)
            return {s.id: shard_of(s) for s in stream}

        reads = 0
        for counter, values in zip(unseen, self._pool.map(shards, unseen), strict=True):
            self._shards[counter] = {shard: count for shard, (count, _) in values.items()}
            self._writes[counter] = {shard: writes for shard, (_, writes) in values.items()}
            reads += max(1, len(values))
        refs = [coll.document(counter) for counter in unseen]
        for snapshot in self._db.get_all(refs, field_paths=COUNTER_FIELDS, read_time=as_of):
            reads += 1
            if not snapshot.exists:
                self._written[snapshot.id] = None
                continue
            data = snapshot.to_dict() or {}
            self._written[snapshot.id] = int(data.get("count") or 0)
            self._scaling[snapshot.id] = Scaling.from_document(data)
        return reads

    def _apply(
        self, changes: dict[str, dict[str, Shard]], since: dt.datetime, as_of: dt.datetime
    ) -> dict[str, int]:
        """Take in the changed shards; measure every held counter's rate. Returns the new sums."""
        dt_s = min(MAX_SAMPLE_S, (as_of - since).total_seconds())
        sums: dict[str, int] = {}
        for counter, shards in changes.items():
            counts, writes = self._shards[counter], self._writes[counter]
            per_shard: dict[str, int] = {}
            for shard, (count, wrote) in shards.items():
                # A shard created afresh (after a fold) restarts its write counter.
                per_shard[shard] = wrote - writes.get(shard, 0)
                if per_shard[shard] < 0:
                    per_shard[shard] = wrote
                counts[shard], writes[shard] = count, wrote
            sums[counter] = sum(counts.values())
            state = self._scaling.get(counter)
            if state is not None and dt_s > 0:
                self._measure(state, per_shard, dt_s)
        if dt_s > 0:
            for counter, state in self._scaling.items():
                if counter not in changes:
                    self._measure(state, {}, dt_s)
        return sums

    def _measure(self, state: Scaling, writes: dict[str, int], dt_s: float) -> None:
        params = self._params
        state.rate = autoscale.measured_rate(state.rate, sum(writes.values()) / dt_s, dt_s, params)
        if state.strategy != "least_loaded":
            return
        # Per-shard loads are compared with each other, so they use one (the longer) time
        # constant both ways: less noise, and no bias against shards that had a burst.
        for n in range(state.num_shards):
            shard = str(n)
            sample = writes.get(shard, 0) / dt_s
            load = state.shard_load.get(shard, 0.0)
            if load or sample:
                state.shard_load[shard] = autoscale.ewma(load, sample, dt_s, params.fall_tau_s)

    def _plan(
        self, sums: dict[str, int], as_of: dt.datetime
    ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, int, int]]]:
        """The counter document updates of this tick, and the grows to commit after them."""
        now = as_of.timestamp()
        updates: dict[str, dict[str, Any]] = defaultdict(dict)
        grows: list[tuple[str, int, int]] = []
        for counter, total in sums.items():
            if self._written.get(counter) is not None and self._written[counter] != total:
                updates[counter].update({"count": total, "updated_at": as_of})
        for counter, state in self._scaling.items():
            fields = updates.get(counter, {})
            if self._params.enabled:
                decision = autoscale.decide(
                    state.num_shards, state.rate, now, state.low_since,
                    min_shards=state.min_shards, max_shards=state.max_shards, params=self._params)
                if decision.num_shards > state.num_shards:
                    grows.append((counter, state.num_shards, decision.num_shards))
                elif decision.num_shards < state.num_shards:
                    state.num_shards, state.shrunk_at = decision.num_shards, now
                    fields.update({"num_shards": state.num_shards, "shrunk_at": as_of,
                                   "above_min": True})
                state.low_since = decision.low_since
            if fields or rate_moved(state.rate, state.published_rate):
                # The cool-down's start rides along (an idle counter derives it on loading).
                fields["low_since"] = timestamp(state.low_since)
                state.published_rate = publishable(state.rate)
                fields["rate"] = state.published_rate
                if state.strategy == "least_loaded":
                    fields["shard_load"] = state.published_load()
                updates[counter] = fields
        return {counter: fields for counter, fields in updates.items() if fields}, grows

    def _commit(self, updates: dict[str, dict[str, Any]]) -> None:
        coll = self._db.collection(config.COUNTERS)
        items = list(updates.items())
        for start in range(0, len(items), WRITE_CHUNK):
            chunk = items[start:start + WRITE_CHUNK]
            batch = self._db.batch()
            for counter, fields in chunk:
                batch.update(coll.document(counter), fields)
            batch.commit()
            for counter, fields in chunk:
                if "count" in fields:
                    self._written[counter] = fields["count"]

    def _grow(self, counter: str, old: int, new: int) -> None:
        """Create shards old..new-1 (count 0, or kept if a fold left one), then raise num_shards:
        a writer never picks a shard that does not exist."""
        ref = self._db.collection(config.COUNTERS).document(counter)
        created = {"count": firestore.Increment(0), "writes": firestore.Increment(0)}
        for start in range(old, new, WRITE_CHUNK):
            batch = self._db.batch()
            for n in range(start, min(new, start + WRITE_CHUNK)):
                batch.set(ref.collection(config.SHARDS).document(str(n)), created, merge=True)
            batch.commit()
        state = self._scaling[counter]
        state.num_shards = new
        ref.update({"num_shards": new, "above_min": state.above_min})
        log.info("grew %s from %d to %d shards (rate %.1f/s)", counter, old, new, state.rate)

    def _fold_due(self, as_of: dt.datetime) -> tuple[int, int]:
        """Fold the surplus shards of counters whose shrink is older than the grace period."""
        now = as_of.timestamp()
        folded = reads = 0
        for counter, state in self._scaling.items():
            if state.shrunk_at is None or now < state.shrunk_at + self._params.fold_grace_s:
                continue
            done, moved, read = self._fold(counter, state)
            folded, reads = folded + moved, reads + read
            if done:
                state.shrunk_at = None
                self._db.collection(config.COUNTERS).document(counter).update(
                    {"shrunk_at": None, "above_min": state.above_min})
                log.info("folded %s down to %d shards", counter, state.num_shards)
        return folded, reads

    def _fold(self, counter: str, state: Scaling) -> tuple[bool, int, int]:
        """Move every shard >= num_shards into shard (n mod num_shards); see the module doc.

        Returns (all folded, shards folded, documents read)."""
        shards = self._db.collection(config.COUNTERS).document(counter).collection(config.SHARDS)
        snapshots = list(shards.stream())
        surplus = [s for s in snapshots if s.id.isdigit() and int(s.id) >= state.num_shards]
        done, folded = True, 0
        for start in range(0, len(surplus), FOLD_CHUNK):
            chunk = surplus[start:start + FOLD_CHUNK]
            moved: dict[str, int] = defaultdict(int)
            batch = self._db.batch()
            for snapshot in chunk:
                option = self._db.write_option(last_update_time=snapshot.update_time)
                batch.delete(snapshot.reference, option=option)
                moved[str(int(snapshot.id) % state.num_shards)] += shard_of(snapshot)[0]
            for survivor, amount in moved.items():
                if amount:
                    batch.update(shards.document(survivor), {
                        "count": firestore.Increment(amount),
                        "updated_at": firestore.SERVER_TIMESTAMP,
                        "stripe": self._rng.randrange(config.STRIPES),
                    })
            try:
                batch.commit()
            except gexc.FailedPrecondition:
                done = False  # a late increment hit one of them: fold again next tick
                continue
            folded += len(chunk)
            counts, writes = self._shards.get(counter), self._writes.get(counter)
            if counts is None or writes is None:
                continue
            for snapshot in chunk:
                counts.pop(snapshot.id, None)
                writes.pop(snapshot.id, None)
                state.shard_load.pop(snapshot.id, None)
            for survivor, amount in moved.items():
                counts[survivor] = counts.get(survivor, 0) + amount
        return done, folded, max(1, len(snapshots))

    def _evict_idle(self, changes: dict[str, dict[str, Shard]]) -> None:
        self._ticks += 1
        for counter in changes:
            self._last_changed[counter] = self._ticks
        idle = [c for c, t in self._last_changed.items() if self._ticks - t > IDLE_TICKS_KEPT]
        for counter in idle:
            state = self._scaling.get(counter)
            if state is not None and (state.above_min or state.published_rate):
                continue  # it still has shards to shed, or a rate to bring down to 0
            del self._last_changed[counter]
            self._shards.pop(counter, None)
            self._writes.pop(counter, None)
            self._written.pop(counter, None)
            self._scaling.pop(counter, None)


def new_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def run(
    db: firestore.Client,
    *,
    seconds: float | None = None,
    stop: threading.Event | None = None,
    owner: str | None = None,
    period_s: float = config.ROLLUP_PERIOD_S,
    scaling: AutoscaleParams | None = None,
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
                    rollup = Rollup(db, lease, scaling)
                    continue
            else:
                wait_s = period_s
                try:
                    stats = rollup.tick()
                    trends = stats.trends
                    if stats.changed_counters or (trends and (trends.changed_buckets
                                                              or trends.expired_buckets)):
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
