"""Adaptive sharding: shard choice strategies through the callables, and growing, shrinking and
folding shards under load, driven in-process on a project of its own (short autoscale settings).
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from callables import Callables
from counting.features import counter_refs, counters, shard_choice
from counting.features.context import Context
from counting.foundation import config
from counting.foundation.config import AutoscaleParams, Names
from counting.rollup import cadence
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Rollup
from counting.writepath import partitions
from counting.writepath.context import Writing
from google.cloud import firestore

from ..waiting import eventually
from .shards import write_shard

NAMES = Names()  # the collection ids of the default placement, which these run on

# 1 shard carries 5 writes/s at the target utilisation; rates fall with a 2 s time constant.
FAST = AutoscaleParams(shard_write_rate=10.0, rise_tau_s=1.0, fall_tau_s=2.0, cool_down_s=2.0,
                       fold_grace_s=2.0)


def counter_doc(db: firestore.Client, counter: str) -> dict[str, object]:
    return counter_refs.counter_ref(db, NAMES, counter).get().to_dict() or {}


def num_shards(db: firestore.Client, counter: str) -> int:
    return int(str(counter_doc(db, counter)["num_shards"]))


def shard_documents(db: firestore.Client, counter: str) -> int:
    shards = counter_refs.counter_ref(db, NAMES, counter).collection(NAMES.shards)
    return len(list(shards.stream()))


def shard_counts(db: firestore.Client, counter: str) -> list[int]:
    shards = counter_refs.counter_ref(db, NAMES, counter).collection(config.SHARDS).stream()
    return [int(s.get("count") or 0) for s in shards]


def rollup_count(db: firestore.Client, counter: str) -> int:
    return int(str(counter_doc(db, counter)["count"]))


def strong_count(db: firestore.Client, counter: str) -> int:
    return counters.get_count(db, NAMES, counter, "strong").count


@pytest.fixture
def loop(isolated_db: firestore.Client) -> Iterator[None]:
    """The rollup loop with FAST autoscaling, ticking every 0.3 s, for the test's duration."""
    stop = threading.Event()
    thread = threading.Thread(target=cadence.loop, args=(isolated_db,),
                              kwargs={"writing": Writing.offline(), "period_s": 0.3,
                                      "stop": stop, "scaling": FAST})
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)


def test_least_loaded_spreads_writes_at_least_as_evenly_as_random(
    admin: Callables, user_token: str, db: firestore.Client, suffix: str
) -> None:
    """1,600 increments from 16 warm clients over 8 pinned shards: least_loaded's per-shard
    counts deviate no more than a random choice's would (multinomial standard deviation, +25%)."""
    shards, clients, per_client = 8, 16, 100
    counter = f"spread-{suffix}"
    admin.call("create_counter", counter=counter, shards=shards, strategy="least_loaded")
    # Pin the shard count (an operator's setting) so that the stack's rollup does not grow it.
    counter_refs.counter_ref(db, NAMES, counter).update({"min_shards": shards,
                                                         "max_shards": shards})

    def client(calls: int) -> None:
        caller = Callables(user_token)
        for _ in range(calls):
            caller.call("increment", counter=counter)

    # Warm up first: 16 function workers start and the rollup wakes (it sleeps between tests)
    # and publishes loads; the spread is measured on the increments that follow.
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, [10] * clients))
    eventually(lambda: len((counter_refs.memory_ref(db, NAMES, counter).get().to_dict() or {})
                           .get("shard_load") or []) == shards)
    before = shard_counts(db, counter)
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, [per_client] * clients))
    hits = [after - was for after, was in zip(shard_counts(db, counter), before, strict=True)]
    total = clients * per_client
    assert sum(hits) == total and len(hits) == shards
    random_sd = math.sqrt(total / shards * (1 - 1 / shards))
    assert statistics.pstdev(hits) <= 1.25 * random_sd, hits


def test_a_loaded_counter_grows_then_shrinks_back_to_min(
    isolated_db: firestore.Client, loop: None, ctx: Context
) -> None:
    """A 1-shard counter under ~40 writes/s grows; once the load stops it shrinks to 1 shard,
    its surplus shards are folded away, and the count is exact throughout."""
    db = isolated_db
    counters.create_counter(ctx, db, "hot", shards=1)
    stop = threading.Event()
    totals = [0] * 4

    def writer(n: int) -> None:
        mine = dataclasses.replace(ctx, configs=shard_choice.ConfigCache())  # a writer's own cache
        while not stop.is_set():
            counters.increment(mine, db, "hot", 1)
            totals[n] += 1
            time.sleep(0.1)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: num_shards(db, "hot") >= 4, timeout_s=30)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    total = sum(totals)
    assert strong_count(db, "hot") == total
    eventually(lambda: num_shards(db, "hot") == 1, timeout_s=60, every_s=0.5)
    eventually(lambda: shard_documents(db, "hot") == 1, timeout_s=30, every_s=0.5)
    assert strong_count(db, "hot") == total
    eventually(lambda: rollup_count(db, "hot") == total)
    eventually(lambda: counter_doc(db, "hot")["above_min"] is False)
    assert counter_doc(db, "hot").get("shrunk_at") is None


def test_no_increment_is_lost_while_shards_grow_and_shrink(
    isolated_db: firestore.Client, loop: None, ctx: Context
) -> None:
    """Writers keep going through a grow, a shrink and the folds: the total stays exact. Two of
    them read the grown configuration as the load drops and keep it for a minute, so they write
    to shards that are being folded or already gone."""
    db = isolated_db
    counters.create_counter(ctx, db, "busy", shards=1)
    stop, calm = threading.Event(), threading.Event()
    totals = [0] * 4
    writes = [0] * 4
    peak = [1]

    def writer(n: int) -> None:
        rng = random.Random(n)
        cache = shard_choice.ConfigCache(ttl_s=config.CONFIG_CACHE_TTL_S if n < 2 else 60.0)
        mine = dataclasses.replace(ctx, configs=cache)
        stale = False
        while not stop.is_set():
            if n >= 2 and calm.is_set() and not stale:
                cache.forget("busy")  # read the grown num_shards now, then keep it
                stale = True
            by = rng.randint(-3, 9)
            if n == 0 and rng.random() < 0.2:
                counters.increment(mine, db, "busy", by, request_id=f"w{n}-{rng.random()}")
            else:
                counters.increment(mine, db, "busy", by)
            totals[n] += by
            writes[n] += 1
            if calm.is_set():
                time.sleep(0.2 if n == 0 else 2.0)  # about 6 writes/s in all: 2 shards
            else:
                time.sleep(0.01)

    def shards_now() -> int:
        peak[0] = max(peak[0], num_shards(db, "busy"))
        return num_shards(db, "busy")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: shards_now() >= 8, timeout_s=30)
        calm.set()
        eventually(lambda: shards_now() <= 3, timeout_s=60, every_s=0.5)
        assert peak[0] >= 8
        eventually(lambda: shard_documents(db, "busy") == num_shards(db, "busy"),
                   timeout_s=30, every_s=0.5)
        # The writers that keep the grown configuration write a few times more into the folded
        # shards' place: each such write is redone once with a fresh configuration.
        folded = list(writes)
        eventually(lambda: all(writes[n] >= folded[n] + 3 for n in (2, 3)), timeout_s=60)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    total = sum(totals)
    assert strong_count(db, "busy") == total
    eventually(lambda: rollup_count(db, "busy") == total)


def test_fold_moves_late_increments_exactly(isolated_db: firestore.Client, ctx: Context) -> None:
    """Ticks by hand: a shrink lowers num_shards at once; a late write to a surplus shard in the
    grace period is folded with the rest; nothing is lost, and the rollup never double counts."""
    db = isolated_db
    counters.create_counter(ctx, db, "c", shards=8)
    stale = shard_choice.ConfigCache(ttl_s=600)  # a writer that will miss the shrink
    stale.get(db, NAMES, "c")
    for n in range(8):
        write_shard(db, "c", n, n + 1)
    lease = Lease(db, state_ref(db, NAMES), "test", config.ROLLUP.lease_s)
    assert lease.acquire()
    # No grow from the few writes here; shrink as soon as the rate is low.
    params = AutoscaleParams(shard_write_rate=1000.0, cool_down_s=0.0, fold_grace_s=0.5)
    step = Rollup(db, lease, params, writing=ctx.writing)
    step.tick()  # meets the counter (36), measures no load: shrinks to 1 at once
    assert (num_shards(db, "c"), rollup_count(db, "c")) == (1, 36)
    write_shard(db, "c", 5, 100)
    step.tick()
    assert rollup_count(db, "c") == 136 and shard_documents(db, "c") == 8  # still in grace
    # Ticks fold nothing until the grace has passed; then one folds the seven at once.
    assert eventually(lambda: step.tick().folded, timeout_s=10) == 7
    assert shard_documents(db, "c") == 1 and strong_count(db, "c") == 136
    step.tick()
    assert rollup_count(db, "c") == 136
    # A writer whose cache still says 8 shards: writes that hit a folded shard are redone.
    for _ in range(8):
        counters.increment(dataclasses.replace(ctx, configs=stale), db, "c", 1)
    step.tick()
    assert strong_count(db, "c") == rollup_count(db, "c") == 144


def test_each_partition_watches_only_its_own_counters_above_their_minimum(
    isolated_db: firestore.Client, ctx: Context
) -> None:
    """A counter created above its minimum carries its home (`shrink_home`); a partition's watch
    finds the idle ones of its own homes, and shrinks them, and no other; one shrunk and folded
    back to its minimum no longer carries it."""
    db = isolated_db
    part = partitions.Part(4, 1)
    names = [f"w{n}" for n in range(40)]
    mine = {name for name in names if part.owns(partitions.home_of(name))}
    assert 3 <= len(mine) <= len(names) - 3
    for name in names:
        counters.create_counter(ctx, db, name, shards=4)
    assert {counter_doc(db, name)["shrink_home"] for name in names} \
        == {partitions.home_of(name) for name in names}
    lease = Lease(db, state_ref(db, NAMES, part), "test", config.ROLLUP.lease_s)
    assert lease.acquire()
    params = AutoscaleParams(shard_write_rate=1000.0, cool_down_s=0.0, fold_grace_s=0.5)
    step = Rollup(db, lease, params, part=part, writing=ctx.writing)
    step.tick()  # its first tick watches: nobody wrote, the rate is 0, the cool-down 0
    assert {name for name in names if num_shards(db, name) == 1} == mine
    assert eventually(lambda: step.tick().folded, timeout_s=10) == 3 * len(mine)
    assert all(counter_doc(db, name)["shrink_home"] is None for name in mine)
    assert all(counter_doc(db, name)["above_min"] is False for name in mine)


def test_an_increment_racing_a_fold_is_not_lost(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch, ctx: Context
) -> None:
    """An increment that lands on a shard between the fold's read and its commit fails the fold
    (precondition), which moves nothing; the next tick folds the shard with it."""
    db = isolated_db
    counters.create_counter(ctx, db, "r", shards=4)
    for n in range(4):
        write_shard(db, "r", n, 10)
    lease = Lease(db, state_ref(db, NAMES), "test", config.ROLLUP.lease_s)
    assert lease.acquire()
    params = AutoscaleParams(shard_write_rate=1000.0, cool_down_s=0.0, fold_grace_s=0.3)
    step = Rollup(db, lease, params, writing=ctx.writing)
    step.tick()  # shrinks to 1; the fold comes on the first tick after the grace
    real_option = db.write_option
    raced: list[bool] = []

    def option_after_a_racing_increment(**kwargs: object) -> object:
        # The fold asks for its precondition after reading the shards, before committing (the
        # lease renewal asks for one too).
        if not raced and sys._getframe(1).f_code.co_name == "fold":  # Store.fold
            raced.append(True)
            write_shard(db, "r", 3, 1000)
        return real_option(**kwargs)

    monkeypatch.setattr(db, "write_option", option_after_a_racing_increment)
    # Ticks until the fold runs, past the grace: its commit fails on the precondition.
    assert eventually(lambda: (lambda stats: stats if raced else None)(step.tick()),
                      timeout_s=10).folded == 0
    assert raced and shard_documents(db, "r") == 4 and strong_count(db, "r") == 1040
    assert step.tick().folded == 3
    assert shard_documents(db, "r") == 1 and strong_count(db, "r") == 1040
    step.tick()
    assert rollup_count(db, "r") == 1040
