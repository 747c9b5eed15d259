"""The rollup's partitions (`counting.writepath.partitions`): homes and stripes, and changing P
(`counting.rollup.repartition`), on the Firestore model of the simulation (production's commit and
snapshot semantics)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
from collections.abc import Iterator
from typing import cast

import pytest
from counting.features import counter_refs, counters, trends
from counting.features.context import Context
from counting.foundation.clock import Clock
from counting.foundation.config import AutoscaleParams, Names
from counting.rollup import cadence, repartition
from counting.rollup.lease import Lease, LeaseLost, state_ref
from counting.rollup.tick import Rollup
from counting.writepath import partitions
from counting.writepath.context import Writing
from counting.writepath.partitions import CHOICES, HOMES, WHOLE, Part
from google.cloud import firestore

from tests.sim.faults import CALM
from tests.sim.model import Client, Model
from tests.sim.virtual import Sim

NAMES = Names()  # the collection ids of the default placement, which these run on


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def test_a_tag_has_one_home_whatever_names_it() -> None:
    """A trend bucket's id begins with its tag's digest: its home is the tag's, and the buckets'
    `spread` field (the expiry index) is that home too."""
    for tag in ("coffee", "rain/now", "x" * 100):
        home = partitions.home_of(tag)
        assert partitions.home_of_hex(trends.minute_id("eu", 1, tag)) == home
        assert trends.spread_of(tag) == home


@pytest.mark.parametrize("count", CHOICES)
def test_the_partitions_of_p_split_the_stripes_into_one_query_each(count: int) -> None:
    """Each partition reads HOMES / P homes in P spreads: 16 stripes, one `in` filter; together
    they read every stripe a writer that knows P picks, once."""
    seen: list[int] = []
    for part in partitions.parts(count):
        stripes = part.stripes(count)
        assert len(stripes) == HOMES and len(partitions.chunks(stripes)) == 1
        seen += stripes
    rng = random.Random(1)
    picked = {partitions.stripe(home, count, rng) for home in range(HOMES) for _ in range(200)}
    assert sorted(seen) == sorted(picked) == list(range(HOMES * count))


def test_after_a_change_a_partition_also_reads_the_old_spread() -> None:
    """Until `narrow_at`, partition 1 of 2 reads what writers that still know P = 4 pick for
    its homes: more stripes than one `in` takes, in several queries."""
    part = Part(2, 1)
    wide = part.stripes(16)
    assert set(part.stripes(4)) <= set(wide) and len(wide) == 128
    assert [len(chunk) for chunk in partitions.chunks(wide)] == [30, 30, 30, 30, 8]
    rng = random.Random(2)
    for home in part.homes():
        assert all(partitions.stripe(home, 16, rng) in wide for _ in range(100))


def test_counters_spread_evenly_over_homes() -> None:
    found = collections.Counter(partitions.home_of(f"post-{n}:likes") for n in range(16_000))
    assert max(found.values()) / (16_000 / HOMES) < 1.1


class World:
    """Counters on the Firestore model; the clock is stepped by hand."""

    def __init__(self) -> None:
        self.sim = Sim(random.Random(1))
        self.model = Model(self.sim, random.Random(2), CALM)
        self.db = cast(firestore.Client, Client(self.model))
        self.t = 0.0
        self.writing = Writing.offline()  # the holders'

    def step(self, seconds: float = 1.0) -> None:
        self.t += seconds
        self.sim.now_us = max(self.sim.now_us, round(self.t * 1_000_000))

    def holder(self, part: Part, name: str) -> Rollup:
        lease = Lease(self.db, state_ref(self.db, NAMES, part), name, 10.0)
        assert lease.acquire()
        self.step()  # its commit is visible
        return Rollup(self.db, lease, AutoscaleParams(enabled=False), part=part,
                      writing=self.writing)

    def published(self, counter: str) -> int:
        published = counter_refs.counter_ref(self.db, NAMES, counter).get().to_dict() or {}
        return int(published["count"])


IDS = [f"c{n}" for n in range(40)]


def test_changing_p_loses_and_doubles_nothing(ctx: Context) -> None:
    """P goes 1 -> 4 -> 2 while counters are written. The old holders are fenced out (their
    leases retired), the new ones start where the oldest old one was, and every count is
    exact; each partition publishes only the counters it owns."""
    world = World()
    db = world.db
    for name in IDS:
        counters.create_counter(ctx, db, name, shards=2)
    world.step()
    one = world.holder(WHOLE, "one")
    expected = collections.Counter[str]()

    def write(round_: int) -> None:
        for n, name in enumerate(IDS):
            if (n + round_) % 3:
                counters.increment(ctx, db, name, n + 1, admin=True)
                expected[name] += n + 1
        world.step()

    write(0)
    one.tick()
    write(1)  # not yet ticked by `one`
    world.step()
    changed = repartition.change(db, NAMES, 4, known=ctx.writing.known)
    world.step()
    assert (changed.before, changed.after, changed.spread) == (1, 4, 4)
    assert partitions.read_count(db, NAMES) == 4
    with pytest.raises(LeaseLost):
        one.tick()  # fenced: the change wrote its lease
    assert not Lease(db, state_ref(db, NAMES, WHOLE), "late", 10.0).acquire()  # retired
    world.step()
    write(2)  # writers know P = 4 now (the change made their context forget P)
    world.step()
    fours = [world.holder(part, f"four-{part.index}") for part in partitions.parts(4)]
    written = [holder.tick().written for holder in fours]
    world.step()  # their commits are visible
    # Every counter changed since `one` ticked: each is published once, by its partition.
    assert sum(written) == len(IDS)
    assert written == [sum(1 for name in IDS if part.owns(partitions.home_of(name)))
                       for part in partitions.parts(4)]
    assert all(world.published(name) == expected[name] for name in IDS)
    write(3)
    world.step()
    repartition.change(db, NAMES, 2, known=ctx.writing.known)
    world.step()
    for holder in fours:
        with pytest.raises(LeaseLost):
            holder.tick()
    world.step()
    write(4)
    world.step()
    for part in partitions.parts(2):
        world.holder(part, f"two-{part.index}").tick()
    world.step()
    assert all(world.published(name) == expected[name] for name in IDS)


def test_a_change_to_the_current_p_changes_nothing() -> None:
    world = World()
    known = world.writing.known
    before = repartition.change(world.db, NAMES, 1, known=known)
    assert (before.before, before.after) == (1, 1)
    assert not partitions.partitions_ref(world.db, NAMES).get().exists
    with pytest.raises(ValueError, match="not one of"):
        repartition.change(world.db, NAMES, 3, known=known)


def test_a_task_of_a_retired_partition_wakes_the_current_ones(ctx: Context) -> None:
    """A task for a partition of the old P is answered, not retried: its writes belong to the
    new partitions, which it wakes for the same slot."""
    world = World()
    counters.create_counter(ctx, world.db, "c", shards=1)
    world.step()
    woken: list[tuple[Part, int]] = []

    def enqueue(part: Part, slot: int) -> bool:
        woken.append((part, slot))
        return True

    repartition.change(world.db, NAMES, 2, known=ctx.writing.known)
    world.step()
    clock = Clock(monotonic=lambda: world.t, now=world.sim.wall, sleep=world.step)
    holder = cadence.Holder(world.db, part=WHOLE, enqueue=enqueue,
                            writing=dataclasses.replace(world.writing, clock=clock))
    run = holder.tick_slot(41)
    assert run.outcome == cadence.Outcome.RETIRED
    assert woken == [(Part(2, 0), 41), (Part(2, 1), 41)]


def test_a_writer_that_cannot_read_p_takes_one() -> None:
    """Stripe = home (read by every partition of every P) and partition 1 of 1's task (which,
    retired, wakes the current ones): the write goes on, and nothing it writes is missed."""

    class Unreadable:
        project = "p"

        def collection(self, name: str) -> object:
            raise RuntimeError("Firestore unavailable")

    known = partitions.Known()
    assert known.count(cast(firestore.Client, Unreadable()), NAMES) == 1
    for count in CHOICES:
        for part in partitions.parts(count):
            assert set(part.homes()) <= set(part.stripes(1 if count == 1 else count))
