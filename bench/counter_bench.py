"""Benchmarks of sharded counters and the rollup, run against the Emulator Suite.

Each function returns a dict of figures; `bench/run.py` prints, saves and plots them. Ratios are
measured side by side in one run (interleaved rounds), because the machine is noisy.
"""

from __future__ import annotations

import cProfile
import math
import os
import pstats
import random
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from callables import Callables, sign_up
from counters_cli.load import percentile
from counting.features import counter_refs, counters
from counting.features.context import Context
from counting.foundation import config, kinds
from counting.foundation.config import AutoscaleParams, Names
from counting.rollup import cadence
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Rollup
from counting.writepath.context import Writing
from counting.writepath.shards import shard_write
from google.cloud import firestore

NAMES = Names()  # the collection ids of the default placement, which these run on


def stack_db() -> firestore.Client:
    return firestore.Client(project=os.environ["GCLOUD_PROJECT"])


def own_db() -> firestore.Client:
    """A project of its own: the stack's rollup loop does not run there."""
    return firestore.Client(project=f"demo-bench-{uuid.uuid4().hex[:8]}")


def lag_figures(lags: list[float], acknowledged: int) -> dict[str, Any]:
    """p50, p99 and max of the lags, and how many acknowledged increments were never seen."""
    return {"lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
            "lag_max_s": max(lags), "unseen": acknowledged - len(lags)}


def rollup_lag(rate: float = 100.0, seconds: float = 20.0, clients: int = 4,
               wake_timeout_s: float = 60.0) -> dict[str, Any]:
    """From increment acknowledged (callable) to the rollup listener showing it, at `rate` on
    one counter, in the steady state: from the first publish the listener sees, the load runs
    `seconds` more, and only the increments acknowledged after that publish are measured. The
    ones before it waited for the partition's wake-up from idle, however long that takes on this
    machine (`first_lag_s`; the cost benchmark's `first_after_idle_s` measures it on its own).
    Increments are +1 each, so increment i (in acknowledgement order) is visible once the
    listener shows a count >= i. `by_second` has the measured lags' p99 and max for each second
    of the load after the first publish, by when they were acknowledged.
    """
    db = stack_db()
    admin = Callables(sign_up({"admin": True}).id_token)
    counter = f"bench-lag-{uuid.uuid4().hex[:8]}"
    admin.call("create_counter", counter=counter, shards=10)
    seen: list[tuple[float, int]] = []
    first_publish = threading.Event()

    def on_snapshot(docs: list[Any], changes: Any, read_time: Any) -> None:
        now = time.monotonic()
        seen.extend((now, int(doc.get("count"))) for doc in docs)
        if seen and seen[-1][1] > 0:
            first_publish.set()

    watch = db.collection(config.COUNTERS).document(counter).on_snapshot(on_snapshot)
    acks: list[float] = []
    lock = threading.Lock()
    interval = clients / rate
    began = time.monotonic()

    def running() -> bool:
        now = time.monotonic()
        if not first_publish.is_set():
            return now < began + wake_timeout_s
        return now < next(t for t, value in seen if value > 0) + seconds

    def client() -> None:
        caller = Callables(admin.token)
        next_at = time.monotonic()
        while running():
            caller.call("increment", counter=counter)
            with lock:
                acks.append(time.monotonic())
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    with ThreadPoolExecutor(clients) as pool:
        for future in [pool.submit(client) for _ in range(clients)]:
            future.result()
    deadline = time.monotonic() + 10
    while (not seen or seen[-1][1] < len(acks)) and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.unsubscribe()  # type: ignore[no-untyped-call]
    if not first_publish.is_set():
        return {"measured": False,
                "reason": f"no publish within {wake_timeout_s:.0f} s of the first increment"}
    published = next(t for t, value in seen if value > 0)
    acks.sort()
    shown = [next((t for t, value in seen if value >= i and t >= acked), None)
             for i, acked in enumerate(acks, start=1)]
    measured = [(acked, t) for acked, t in zip(acks, shown, strict=True) if acked >= published]
    lags = [t - acked for acked, t in measured if t is not None]
    by_second: dict[int, list[float]] = {}
    for acked, t in measured:
        if t is not None:
            by_second.setdefault(int(acked - published), []).append(t - acked)
    return {
        "measured": True,
        "increments": len(measured),
        "achieved_rate": len(measured) / seconds,
        **lag_figures(lags, len(measured)),
        "first_lag_s": None if shown[0] is None else shown[0] - acks[0],
        "wake_s": published - began,
        "by_second": [{"second": n, "lag_p99_s": percentile(values, 99),
                       "lag_max_s": max(values)} for n, values in sorted(by_second.items())],
        "lags_s": lags,
    }


def rollup_cost(active: int = 10, idle: int = 5000, ticks: int = 10) -> dict[str, Any]:
    """Reads and wall time per tick for `active` changing counters, without and with idle ones.
    Ticks are a second apart, as the rollup's are: back to back, each would read again what the
    ticks of the last CHANGE_OVERLAP_S read, as many as fit in it."""
    ctx = Context.offline()
    db = own_db()
    step = Rollup(db, taken_lease(db), writing=ctx.writing)
    names = [f"active-{n}" for n in range(active)]
    for name in names:
        counters.create_counter(ctx, db, name, shards=10)

    def measure() -> dict[str, float]:
        """`ticks` rounds, each a second after the last: every active counter written once,
        then a tick. One round more goes first, unmeasured, so that each measured tick's
        overlap reads what the round before it wrote, as in a steady load."""
        reads, seconds = [], []
        for _ in range(ticks + 1):
            time.sleep(1 - time.time() % 1)  # the next second
            for name in names:
                counters.increment(ctx, db, name, 1)
            stats = step.tick()
            reads.append(stats.reads)
            seconds.append(stats.seconds)
        return {"reads_per_tick": statistics.mean(reads[1:]),
                "seconds_per_tick": statistics.median(seconds[1:])}

    step.tick()
    alone = measure()  # its unmeasured first round reads each active counter whole

    def make_idle(n: int) -> None:
        name = f"idle-{n}"
        counters.create_counter(ctx, db, name, shards=1)
        counters.increment(ctx, db, name, 1)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make_idle, range(idle)))
    # Absorb the idle counters' one change each: their first loads are spread over ticks by
    # the tick's budget (FIRST_LOADS_PER_TICK), so tick until none is owed; from then on they
    # are idle.
    for _ in range(1000):
        if not step.tick().owed:
            break
    # The first round's tick, back to back with the creations, reads the last CHANGE_OVERLAP_S
    # of them again: once, as after any burst, not a cost of idleness (it is not measured).
    beside_idle = measure()
    step.close()
    return {
        "active_counters": active,
        "idle_counters": idle,
        "alone": alone,
        "beside_idle": beside_idle,
        "reads_ratio": beside_idle["reads_per_tick"] / alone["reads_per_tick"],
        "time_ratio": beside_idle["seconds_per_tick"] / alone["seconds_per_tick"],
    }


def rate_of(work: Callable[[], None], clients: int, per_client: int) -> float:
    def client(_: int) -> None:
        for _ in range(per_client):
            work()

    started = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return clients * per_client / (time.monotonic() - started)


def write_path(clients: int = 16, per_client: int = 100, rounds: int = 6) -> dict[str, Any]:
    """Domain `increment` in-process vs a bare Increment on a shard; then the callable.

    The in-process comparison runs on a project of its own: the stack's rollup loop would
    otherwise read and sum the domain's writes (which stamp `updated_at`) but not the bare ones,
    taking the 2 cores from one side only. The rollup's cost is benchmark 2's subject.
    """
    ctx = Context.offline()
    db = own_db()
    counter = f"bench-write-{uuid.uuid4().hex[:8]}"
    counters.create_counter(ctx, db, counter, shards=10)
    rng = random.Random()

    def domain() -> None:
        counters.increment(ctx, db, counter, 1)

    def bare() -> None:
        shard = counter_refs.shard_ref(db, NAMES, counter, rng.randrange(10))
        shard.update({"count": firestore.Increment(1)})

    rate_of(domain, clients, 10)  # warm the connection pool and the config cache
    domain_rates: list[float] = []
    bare_rates: list[float] = []
    for n in range(rounds):  # interleaved, who goes first alternating
        sides = [(domain, domain_rates), (bare, bare_rates)]
        for work, rates in sides if n % 2 == 0 else sides[::-1]:
            rates.append(rate_of(work, clients, per_client))
    domain_rate, bare_rate = statistics.median(domain_rates), statistics.median(bare_rates)

    db = stack_db()
    counters.create_counter(ctx, db, counter, shards=10)
    caller_token = sign_up().id_token
    latencies: list[float] = []
    lock = threading.Lock()

    def through_callable() -> None:
        caller = local.__dict__.setdefault("caller", Callables(caller_token))
        started = time.monotonic()
        caller.call("increment", counter=counter)
        with lock:
            latencies.append(time.monotonic() - started)

    local = threading.local()
    rate_of(through_callable, clients, 5)  # the emulator starts one worker per concurrent call
    latencies.clear()
    callable_rate = rate_of(through_callable, clients, 30)
    return {
        "clients": clients,
        "domain_increments_per_s": domain_rate,
        "bare_increments_per_s": bare_rate,
        "ratio": domain_rate / bare_rate,
        "callable_increments_per_s": callable_rate,
        "callable_p50_ms": 1000 * percentile(latencies, 50),
        "callable_p99_ms": 1000 * percentile(latencies, 99),
    }


def write_profile(increments: int = 1000, top: int = 12) -> dict[str, Any]:
    """Where a domain increment's time goes: cProfile over `increments` sequential increments
    in-process (what the callable's handler calls once its input is checked), against a bare
    `Increment` of a shard the same number of times. The top entries by own time, each with its
    calls per increment and microseconds per increment."""
    ctx = Context.offline()
    db = own_db()
    counter = f"bench-profile-{uuid.uuid4().hex[:8]}"
    counters.create_counter(ctx, db, counter, shards=10)
    rng = random.Random()
    for _ in range(20):  # warm the connection and the caches
        counters.increment(ctx, db, counter, 1)

    def profiled(work: Callable[[], object]) -> tuple[float, list[dict[str, Any]]]:
        profile = cProfile.Profile()
        started = time.perf_counter()
        profile.enable()
        for _ in range(increments):
            work()
        profile.disable()
        elapsed = time.perf_counter() - started
        stats = pstats.Stats(profile)
        rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
        return elapsed, [
            {"function": f"{where[0].rsplit('site-packages/', 1)[-1]}:{where[1]}({where[2]})",
             "calls_per_increment": round(row[1] / increments, 2),
             "own_us_per_increment": round(1e6 * row[2] / increments, 1),
             "cumulative_us_per_increment": round(1e6 * row[3] / increments, 1)}
            for where, row in rows]

    def bare() -> None:
        shard = counter_refs.shard_ref(db, NAMES, counter, rng.randrange(10))
        shard.update({"count": firestore.Increment(1)})

    domain_s, domain_top = profiled(lambda: counters.increment(ctx, db, counter, 1))
    bare_s, bare_top = profiled(bare)
    return {"increments": increments,
            "domain_us_per_increment": round(1e6 * domain_s / increments, 1),
            "bare_us_per_increment": round(1e6 * bare_s / increments, 1),
            "domain_top": domain_top, "bare_top": bare_top}


def read_cost(shards: int = 100) -> dict[str, Any]:
    """Documents a get_count reads, rollup vs strong, on a 100-shard counter."""
    ctx = Context.offline()
    db = stack_db()
    counter = f"bench-read-{uuid.uuid4().hex[:8]}"
    counters.create_counter(ctx, db, counter, shards=shards)
    def timed(consistency: kinds.Consistency) -> float:
        samples = []
        for _ in range(20):
            started = time.monotonic()
            counters.get_count(db, NAMES, counter, consistency)
            samples.append(time.monotonic() - started)
        return 1000 * statistics.median(samples)

    return {
        "shards": shards,
        "rollup_documents_read": counters.get_count(db, NAMES, counter, "rollup").documents_read,
        "strong_documents_read": counters.get_count(db, NAMES, counter, "strong").documents_read,
        "rollup_ms": timed("rollup"),
        "strong_ms": timed("strong"),
    }


def stored_size(value: Any) -> int:
    """Firestore's storage size of a value (firebase.google.com/docs/firestore/storage-size):
    a string its UTF-8 bytes + 1, a number or timestamp 8, a boolean or null 1, a map the sizes
    of its keys (as strings) and values, an array the sizes of its values."""
    if isinstance(value, str):
        return len(value.encode()) + 1
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, dict):
        return sum(stored_size(str(k)) + stored_size(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(stored_size(v) for v in value)
    return 8  # int, float, timestamp


def document_size(snapshot: Any) -> int:
    """A document's storage size: its name (each id's string size, plus 16), its fields, plus
    32: what a listener receives with every update, in Firestore's measure."""
    name = sum(stored_size(part) for part in snapshot.reference.path.split("/")) + 16
    return name + stored_size(snapshot.to_dict() or {}) + 32


def listener_bytes(shards: int = 1000) -> dict[str, Any]:
    """The public document of a counter of `shards` shards after a publish that moved every
    shard's count (a least_loaded counter: its per-shard loads are published too), and the
    memory beside it that listeners do not receive."""
    ctx = Context.offline()
    db = own_db()
    counter = "listened"
    counters.create_counter(ctx, db, counter, shards=shards, strategy="least_loaded")
    step = Rollup(db, taken_lease(db), AutoscaleParams(enabled=False), writing=ctx.writing)
    step.tick()
    for n in range(0, shards, 500):
        batch = db.batch()
        for shard in range(n, min(shards, n + 500)):
            ref = counter_refs.shard_ref(db, NAMES, counter, shard)
            batch.update(ref, shard_write(ctx.writing, db, ref, 1 + shard % 7).fields)
        batch.commit()
    step.tick()
    public = counter_refs.counter_ref(db, NAMES, counter).get()
    memory = counter_refs.memory_ref(db, NAMES, counter).get()
    assert int(public.get("count")) == sum(1 + shard % 7 for shard in range(shards))
    return {"shards": shards, "listener_bytes_per_update": document_size(public),
            "memory_bytes": document_size(memory)}


def taken_lease(db: firestore.Client) -> Lease:
    """The rollup's lease on a project of its own, taken."""
    taken = Lease(db, state_ref(db, NAMES), "bench", config.ROLLUP.lease_s)
    assert taken.acquire()
    return taken


def rollup_thread(db: firestore.Client, scaling: AutoscaleParams | None = None,
                  period_s: float = config.TICK_SLOT_S) -> tuple[threading.Thread,
                                                                threading.Event]:
    """The rollup loop (with autoscaling) on `db`, in a thread of this process."""
    stop = threading.Event()
    thread = threading.Thread(target=cadence.loop, args=(db,),
                              kwargs={"writing": Writing.offline(), "period_s": period_s,
                                      "stop": stop, "scaling": scaling})
    thread.start()
    return thread, stop


def shard_writes(db: firestore.Client, counter: str) -> list[int]:
    shards = counter_refs.counter_ref(db, NAMES, counter).collection(config.SHARDS).stream()
    return [int((s.to_dict() or {}).get("writes") or 0) for s in shards]


def balance(increments: int = 10_000, clients: int = 16, shards: int = 16) -> dict[str, Any]:
    """max/mean writes per shard after `increments` from `clients`, per strategy.

    Each client is its own instance (its own configuration cache and picker), as separate
    function instances are; the shard count is pinned (min = max) and the rollup loop runs with
    autoscaling, publishing the per-shard loads least_loaded uses.
    """
    ctx = Context.offline()
    db = own_db()
    for strategy in kinds.STRATEGIES:  # pinned before the rollup loop can meet them
        counters.create_counter(ctx, db, f"balance-{strategy}", shards=shards, strategy=strategy)
        counter_refs.counter_ref(db, NAMES, f"balance-{strategy}").update({"min_shards": shards,
                                                                 "max_shards": shards})
    thread, stop = rollup_thread(db)
    per_client = increments // clients
    figures: dict[str, Any] = {"increments": per_client * clients, "clients": clients,
                               "shards": shards}
    try:
        for strategy in kinds.STRATEGIES:
            counter = f"balance-{strategy}"

            def client(_: int, counter: str = counter) -> None:
                mine = Context.of(ctx.writing)  # a client's own caches and picker
                for _ in range(per_client):
                    counters.increment(mine, db, counter, 1)

            started = time.monotonic()
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(client, range(clients)))
            seconds = time.monotonic() - started
            writes = shard_writes(db, counter)
            mean = statistics.mean(writes)
            figures[strategy] = {
                "max_over_mean": max(writes) / mean,
                "min_over_mean": min(writes) / mean,
                "stdev_over_mean": statistics.pstdev(writes) / mean,
                "increments_per_s": per_client * clients / seconds,
                "exact": counters.get_count(db, NAMES, counter, "strong").count
                == per_client * clients,
            }
    finally:
        stop.set()
        thread.join()
    return figures


def step_load(rate: float = 50.0, seconds: float = 30.0, clients: int = 5) -> dict[str, Any]:
    """A 1-shard counter suddenly taking `rate` increments/s, with production autoscaling:
    num_shards and the published rate over time, and how long until num_shards reached the size
    the offered load needs."""
    ctx = Context.offline()
    db = own_db()
    counter = "step"
    counters.create_counter(ctx, db, counter, shards=1)
    thread, stop = rollup_thread(db)
    samples: list[tuple[float, int, float]] = []
    done = threading.Event()
    acked = [0] * clients
    t0 = time.monotonic()

    def sample() -> None:
        while not done.is_set():
            data = counter_refs.counter_ref(db, NAMES, counter).get().to_dict() or {}
            samples.append((time.monotonic() - t0, int(data["num_shards"]),
                            float(data.get("rate") or 0.0)))
            done.wait(0.25)

    def client(n: int) -> None:
        mine = Context.of(ctx.writing)  # a client's own caches and picker
        interval = clients / rate
        next_at = t0 + n * interval / clients
        while next_at < t0 + seconds:
            time.sleep(max(0.0, next_at - time.monotonic()))
            counters.increment(mine, db, counter, 1)
            acked[n] += 1
            next_at += interval

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        total = sum(acked)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if counters.get_count(db, NAMES, counter, "rollup").count == total:
                break
            time.sleep(0.2)
        time.sleep(5)  # a few more samples of the rate falling
    finally:
        done.set()
        sampler.join()
        stop.set()
        thread.join()
    achieved = total / seconds
    target = counters.shards_for(achieved)

    def first_time(shards: int) -> float | None:
        return next((t for t, n, _ in samples if n >= shards), None)

    return {
        "offered_rate": rate,
        "achieved_rate": achieved,
        "target_shards": target,
        "seconds_to_90pct_of_target": first_time(math.ceil(0.9 * target)),
        "seconds_to_target": first_time(target),
        "final_shards": samples[-1][1] if samples else None,
        "increments": total,
        "strong_exact": counters.get_count(db, NAMES, counter, "strong").count == total,
        "rollup_exact": counters.get_count(db, NAMES, counter, "rollup").count == total,
        "samples": [list(s) for s in samples],
    }
