"""Benchmarks of trending tags, run against the Firestore emulator on projects of their own.

- `track_rate`: events/s through the in-process domain `track` (5 tags each, Zipf over 10,000
  tags, 20 regions), with 8 threads.
- `freshness`: from a `track` returning to `trends/global` showing it, with the rollup loop
  running in this process and a Zipf background load; the probe tag is tracked once per probe,
  so probe i is visible once the global list gives it a count >= i.
- `tick_cost`: a rollup tick while 100 tags change, beside 1k, 10k and 50k tags active in the
  window; then the boundary tick that expires all of them.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import itertools
import random
import statistics
import threading
import time
from typing import Any

from counter_bench import own_db, rollup_thread
from counters_cli.load import percentile
from counting.features import trends
from counting.features.context import Context
from counting.foundation import config
from counting.foundation.config import Names
from counting.rollup import trend_step
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Rollup
from counting.writepath.partitions import WHOLE
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

NAMES = Names()  # the collection ids of the default placement, which these run on

REGIONS = [f"region-{n:02d}" for n in range(20)]


class Zipf:
    """Tags t0..t{n-1} with P(t_k) proportional to 1/(k+1)^s."""

    def __init__(self, n: int = 10_000, s: float = 1.0, seed: int = 1) -> None:
        self._rng = random.Random(seed)
        weights = [1 / (k + 1) ** s for k in range(n)]
        self._cumulative = list(itertools.accumulate(weights))
        self._lock = threading.Lock()

    def event(self, tags: int = 5) -> list[str]:
        """Distinct tags for one event (a post does not repeat a tag)."""
        chosen: set[int] = set()
        with self._lock:
            while len(chosen) < tags:
                x = self._rng.random() * self._cumulative[-1]
                chosen.add(bisect.bisect(self._cumulative, x))
            region = self._rng.choice(REGIONS)
        return [region, *(f"t{k}" for k in sorted(chosen))]


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def track_rate(seconds: float = 10.0, threads: int = 8) -> dict[str, Any]:
    ctx = Context.offline()
    db = own_db()
    zipf = Zipf()
    stop = time.monotonic() + seconds
    done = [0] * threads
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def client(n: int) -> None:
        while time.monotonic() < stop:
            region, *tags = zipf.event()
            started = time.monotonic()
            trends.track(ctx, db, region, tags)
            latencies[n].append(time.monotonic() - started)
            done[n] += 1

    started = time.monotonic()
    workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    flat = [x for lat in latencies for x in lat]
    return {"threads": threads, "events": sum(done), "events_per_s": round(sum(done) / elapsed),
            "tags_per_s": round(5 * sum(done) / elapsed),
            "latency_p50_ms": round(1000 * percentile(flat, 50), 1),
            "latency_p99_ms": round(1000 * percentile(flat, 99), 1)}


def freshness(seconds: float = 30.0, background_rate: float = 40.0,
              probe_every_s: float = 0.5) -> dict[str, Any]:
    ctx = Context.offline()
    db = own_db()
    thread, stop_rollup = rollup_thread(db)
    zipf = Zipf(seed=2)
    stop = threading.Event()

    def background() -> None:
        while not stop.is_set():
            region, *tags = zipf.event()
            trends.track(ctx, db, region, tags)
            stop.wait(4 / background_rate)

    loaders = [threading.Thread(target=background) for _ in range(4)]
    for loader in loaders:
        loader.start()
    probe = "probe"
    acked: list[float] = []
    seen: dict[int, float] = {}

    def watch() -> None:
        ref = db.collection(config.TRENDS).document(config.GLOBAL_SCOPE)
        while not stop.is_set() or len(seen) < len(acked):
            data = ref.get().to_dict() or {}
            count = next((int(i["count"]) for i in data.get("items", []) if i["tag"] == probe), 0)
            now = time.monotonic()
            for i in range(1, count + 1):
                seen.setdefault(i, now)
            if stop.is_set() and time.monotonic() > deadline:
                break
            time.sleep(0.05)

    deadline = time.monotonic() + seconds + 15
    watcher = threading.Thread(target=watch)
    watcher.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        trends.track(ctx, db, random.choice(REGIONS), [probe])
        acked.append(time.monotonic())
        time.sleep(probe_every_s)
    stop.set()
    watcher.join()
    for loader in loaders:
        loader.join()
    stop_rollup.set()
    thread.join()
    lags = [seen[i + 1] - at for i, at in enumerate(acked) if i + 1 in seen]
    return {"probes": len(acked), "seen": len(lags), "background_events_per_s": background_rate,
            "lag_p50_s": round(percentile(lags, 50), 2),
            "lag_p99_s": round(percentile(lags, 99), 2),
            "lag_max_s": round(max(lags), 2), "lags_s": [round(x, 3) for x in lags]}


def populate(db: firestore.Client, tags: int, now: dt.datetime) -> None:
    """`tags` distinct tags in one minute bucket, 20 per event, spread over the regions."""
    ctx = Context.offline()
    names = [f"a{n}" for n in range(tags)]
    events = [names[i:i + 20] for i in range(0, tags, 20)]

    def write(chunk: list[list[str]], region: str) -> None:
        for event in chunk:
            trends.track(ctx, db, region, event, now=now)

    workers = [threading.Thread(target=write, args=(events[n::8], REGIONS[n])) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def empty_change_query(db: firestore.Client) -> float:
    """Seconds for the rollup's change query when nothing changed since `now`."""
    started = time.monotonic()
    list(db.collection_group(config.SHARDS)
         .where(filter=FieldFilter("stripe", "in", WHOLE.ticks()))
         .where(filter=FieldFilter("updated_at", ">", dt.datetime.now(dt.UTC))).stream())
    return time.monotonic() - started


def tick_cost(sizes: tuple[int, ...] = (1_000, 10_000, 50_000), ticks: int = 5,
              changed: int = 100) -> dict[str, Any]:
    """Steady ticks (`changed` tags per tick) beside `size` active tags, and the boundary tick."""
    ctx = Context.offline()
    out: dict[str, Any] = {}
    for size in sizes:
        db = own_db()
        now = dt.datetime.now(dt.UTC)
        clock = Clock(now)
        lease = Lease(db, state_ref(db, NAMES), "bench", config.ROLLUP.lease_s * 100)
        assert lease.acquire()
        step = Rollup(db, lease, trends=functools.partial(trend_step.TrendRollup, clock=clock),
                      writing=ctx.writing)
        started = time.monotonic()
        populate(db, size, now)
        populate_s = time.monotonic() - started
        first = step.tick()
        zipf = Zipf(seed=3)
        for region in REGIONS:  # warm up: a holder reads each scope's lists once
            trends.track(ctx, db, region, zipf.event()[1:], now=now)
        step.tick()
        samples = []
        for _ in range(ticks):
            for _ in range(changed // 5):
                region, *tags = zipf.event()
                trends.track(ctx, db, region, tags, now=now)
            stats = step.tick()
            assert stats.trends is not None
            samples.append((stats.seconds, stats.reads + stats.trends.reads,
                            stats.trends.writes, stats.trends.changed_buckets))
        # Control: the rollup's change query alone, matching nothing. The emulator has no
        # indexes and scans the whole `shards` group for it, so its time grows with all tags.
        query_s = statistics.median(empty_change_query(db) for _ in range(3))
        clock.now = now + dt.timedelta(minutes=61)
        boundary = step.tick()
        assert boundary.trends is not None and first.trends is not None
        out[str(size)] = {
            "populate_s": round(populate_s, 1),
            "first_tick_s": round(first.seconds, 2),
            "steady_tick_ms": round(1000 * statistics.median(s[0] for s in samples), 1),
            "steady_reads": round(statistics.median(s[1] for s in samples)),
            "steady_writes": round(statistics.median(s[2] for s in samples)),
            "steady_changed_buckets": round(statistics.median(s[3] for s in samples)),
            "empty_change_query_ms": round(1000 * query_s, 1),
            "boundary_tick_s": round(boundary.seconds, 2),
            "boundary_expired": boundary.trends.expired_buckets,
            "boundary_reads": boundary.reads + boundary.trends.reads,
        }
        print(size, out[str(size)], flush=True)
    return out
