"""The rollup's partitions (`counting.writepath.partitions`): homes and stripes, and changing P
(`counting.rollup.repartition`), on the Firestore model of the simulation (production's commit and
snapshot semantics)."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import functools
import itertools
import logging
import random
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from counting.features import counter_refs, counters, trends
from counting.features.context import Context
from counting.foundation.clock import Clock
from counting.foundation.config import AutoscaleParams, Names, Protections
from counting.rollup import cadence, repartition
from counting.rollup.lease import Lease, LeaseLost, Partitioning, state_ref
from counting.rollup.tick import Rollup
from counting.writepath import partitions, waking
from counting.writepath.context import Writing
from counting.writepath.partitions import BASE_HOMES, CHOICES, HOMES, WHOLE, Part
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
    """A trend bucket's id begins with its tag's digest: its home is the tag's (one of the first
    16), and the buckets' `spread` field (the expiry index) is that home too."""
    for tag in ("coffee", "rain/now", "x" * 100):
        home = partitions.tag_home(tag)
        assert home == partitions.home_of(tag) % BASE_HOMES
        assert partitions.tag_home_of_hex(trends.minute_id("eu", 1, tag)) == home
        assert trends.spread_of(tag) == home


@pytest.mark.parametrize("count", CHOICES)
def test_the_partitions_of_p_split_the_stripes_into_one_query_each(count: int) -> None:
    """Each partition reads 16 stripes (29 past P = 16, 30 with a P = 1 writer's), one `in`
    filter; together they read every stripe a writer that knows P picks, once; the index has
    16 P ranges (29 P past 16)."""
    seen: list[int] = []
    spread = BASE_HOMES if count <= BASE_HOMES else partitions.WIDE_SPREAD
    for part in partitions.parts(count):
        stripes = part.stripes_of(count)
        assert len(stripes) == spread and len(partitions.chunks(part.ticks())) == 1
        seen += stripes
    rng = random.Random(1)
    picked = {partitions.stripe(home, count, rng) for home in range(HOMES) for _ in range(600)}
    assert sorted(seen) == sorted(picked) == list(range(spread * count))


@pytest.mark.parametrize("count", CHOICES)
@pytest.mark.parametrize("writers", CHOICES)
def test_a_partition_reads_what_writers_of_any_p_give_it(count: int, writers: int) -> None:
    """Whatever P a writer knows, the stripe it picks for a counter is among those the counter's
    partition reads for that P, and among no other partition's."""
    rng = random.Random(count * writers)
    owned = {part: set(part.stripes_of(writers)) for part in partitions.parts(count)}
    for home in range(HOMES):
        owner = Part(count, home % count)
        for _ in range(20):
            stripe = partitions.stripe(home, writers, rng)
            assert stripe in owned[owner]
            assert stripe % partitions.resolution(writers) == home % partitions.resolution(
                writers)


def test_up_to_16_partitions_the_stripes_are_the_first_designs() -> None:
    """P <= 16: stripe = home mod 16 + 16 r, r below P; a partition reads its homes of 16 in P
    spreads, as before HOMES was 128: data written then reads the same."""
    for count in (1, 2, 4, 8, 16):
        for part in partitions.parts(count):
            first = [home + 16 * r for r in range(count) for home in range(16)
                     if home % count == part.index]
            assert part.stripes_of(count) == first


def test_after_a_change_a_partition_also_reads_the_old_spread() -> None:
    """Until `narrow_at`, partition 2 of 2 reads what writers that still know P = 16 pick for
    its homes: more stripes than one `in` takes, in several queries."""
    part = Part(2, 1)
    wide = part.reads(16)
    assert set(part.stripes_of(2)) <= set(wide) and len(wide) == 128
    assert [len(chunk) for chunk in partitions.chunks(wide)] == [30, 30, 30, 30, 8]
    rng = random.Random(2)
    for home in range(1, HOMES, 2):
        assert all(partitions.stripe(home, 16, rng) in wide for _ in range(20))


def test_past_16_a_partition_reads_one_residue() -> None:
    """P = 128: partition p reads home p's 29 spreads; a sweep that reads every P up to 128 reads
    its residue at each resolution."""
    part = Part(128, 37)
    assert part.stripes_of(128) == [37 + 128 * r for r in range(29)]
    assert part.stripes_of(16) == [5 + 16 * r for r in range(16)]
    assert part.ticks() == sorted([5, *part.stripes_of(128)])  # and a writer's that took P = 1
    # Its residue at each resolution (16 at 16; 21, 15 and 14 more at 32, 64 and 128).
    assert len(part.reads(128)) == 66 and len(partitions.chunks(part.reads(128))) == 3
    assert part.tag_homes() == [] and Part(128, 5).tag_homes() == [5]


def test_the_deploys_tick_functions_bound_p() -> None:
    assert partitions.deployed_max({}) == 16
    assert partitions.deployed_max({partitions.MAX_ENV: "128"}) == 128
    for wrong in ("12", "256", "", "x"):
        with pytest.raises(ValueError, match=partitions.MAX_ENV):
            partitions.deployed_max({partitions.MAX_ENV: wrong})


def test_counters_spread_evenly_over_homes() -> None:
    found = collections.Counter(partitions.home_of(f"post-{n}:likes") for n in range(64_000))
    assert max(found.values()) / (64_000 / HOMES) < 1.2


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


def test_two_changes_in_a_row_keep_the_first_ps_stripes_for_the_sweeps() -> None:
    """128 -> 16, then 16 -> 8 a minute later: a writer that still knew 128 at the first change
    may commit minutes late (MAX_REQUEST_S), after the second. The new leases keep the spread
    of 128 while the first change's sweeps would still read it, so such a write is in the
    stripes of its partition's sweeps; past WIDE_SWEEP_S a change drops it."""
    world = World()
    known = world.writing.known
    repartition.change(world.db, NAMES, 128, known=known)
    world.step(partitions.WIDE_SWEEP_S + 60)  # long past that change
    assert repartition.change(world.db, NAMES, 16, known=known).spread == 128
    world.step(60)
    second = repartition.change(world.db, NAMES, 8, known=known)
    assert second.spread == 128
    home = 100
    late = home % 128 + 128 * 5  # a writer that knew P = 128
    assert late in Part(8, home % 8).reads(max(16, second.spread))
    world.step(partitions.WIDE_SWEEP_S + 60)
    assert repartition.change(world.db, NAMES, 4, known=known).spread == 8


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


def test_a_retired_partition_wakes_only_the_heirs_of_its_homes() -> None:
    """From 16 to 128 a retired partition's homes went to 8 of the new ones; from 128 to 16 to
    one; the one partition of 1 to all."""
    assert Part(16, 3).heirs(128) == [Part(128, 3 + 16 * k) for k in range(8)]
    assert Part(128, 35).heirs(16) == [Part(16, 3)]
    assert WHOLE.heirs(4) == partitions.parts(4)
    for old, new in ((16, 128), (128, 16), (4, 32)):
        for part in partitions.parts(old):
            heirs = part.heirs(new)
            assert all(Part(new, home % new) in heirs for home in range(HOMES)
                       if part.owns(home))


def test_a_writer_that_cannot_read_p_takes_one() -> None:
    """Stripe = home mod 16 (read by its owner's ticks in every P) and partition 1 of 1's task
    (which, retired, wakes the current ones): the write goes on, and nothing it writes is
    missed."""

    class Unreadable:
        project = "p"

        def collection(self, name: str) -> object:
            raise RuntimeError("Firestore unavailable")

    known = partitions.Known()
    assert known.count(cast(firestore.Client, Unreadable()), NAMES) == 1
    for count in CHOICES:
        for home in range(HOMES):
            fallback = partitions.stripe(home, 1, random.Random(home))
            assert fallback in Part(count, home % count).ticks()


def test_past_16_partitions_the_scheduled_run_hands_housekeeping_to_their_queues(
        ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    """P = 32: the scheduled run housekeeps partitions 1 to 16 itself, one after the other, and
    enqueues one task to each of partitions 17 to 32, so that its minute holds whatever P is."""
    world = World()
    repartition.change(world.db, NAMES, 32, known=ctx.writing.known)
    world.step()
    enqueued: list[tuple[str, Part]] = []
    housekept: list[Part] = []

    def enqueue(db: object, placement: object, reason: str, part: Part,
                slot: int | None = None) -> bool:
        enqueued.append((reason, part))
        return True

    def housekeeping(holder: cadence.Holder) -> cadence.Invocation:
        housekept.append(holder.part)
        return cadence.Invocation(trigger="schedule")

    monkeypatch.setattr(waking, "enqueue_tick", enqueue)
    monkeypatch.setattr(cadence.Holder, "housekeeping", housekeeping)
    runs = cadence.Holders(world.writing).housekeeping(world.db)
    assert len(runs) == cadence.HOUSEKEPT_HERE == 16
    assert housekept == [Part(32, index) for index in range(16)]
    assert enqueued == [("housekeeping", Part(32, index)) for index in range(16, 32)]


def test_a_sweep_reads_a_wider_ps_stripes_for_an_hour_after_the_change() -> None:
    """After 128 -> 1: a sweep whose reach starts within WIDE_SWEEP_S of `narrow_at` reads every
    stripe of every P up to 128 (124 queries), however late it runs; a later one those up to 16
    (9 queries); a tick, once narrowed, its own 16."""
    narrow_at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    fake = SimpleNamespace(
        part=WHOLE, writing=SimpleNamespace(protections=Protections()),
        store=SimpleNamespace(lease=SimpleNamespace(record=SimpleNamespace(
            partitioning=Partitioning(spread=128, narrow_at=narrow_at, since=narrow_at)))))
    hour = dt.timedelta(seconds=partitions.WIDE_SWEEP_S)
    late = narrow_at + 3 * hour
    wide = Rollup.stripes(fake, narrow_at + hour / 2, late, sweep=True)  # type: ignore[arg-type]
    assert wide == list(range(128 * 29)) and len(partitions.chunks(wide)) == 124
    later = Rollup.stripes(fake, narrow_at + 2 * hour, late, sweep=True)  # type: ignore[arg-type]
    assert later == list(range(256)) and len(partitions.chunks(later)) == 9
    tick = Rollup.stripes(fake, narrow_at + 2 * hour, late, sweep=False)  # type: ignore[arg-type]
    assert tick == list(range(16))


def test_a_sweeps_cells_cover_its_stripes_and_stamps_in_even_shares() -> None:
    """A sweep's cells (`Rollup.cells`) cover each stripe it reads over its whole range of
    stamps, end to end; the stripes every tick reads, where nearly every shard is, are cut into
    slices spread over the sweep: no tick's share (50 ticks) holds more than 2 of them."""
    since = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    fake = SimpleNamespace(
        part=WHOLE, writing=SimpleNamespace(protections=Protections()),
        store=SimpleNamespace(lease=SimpleNamespace(record=SimpleNamespace(
            partitioning=Partitioning(spread=1, narrow_at=since, since=since)))))
    fake.stripes = functools.partial(Rollup.stripes, fake)  # type: ignore[arg-type]
    start, end = since + dt.timedelta(hours=3), since + dt.timedelta(hours=3, seconds=320)
    cells = Rollup.cells(fake, start, end)  # type: ignore[arg-type]
    stripes = Rollup.stripes(fake, start, end, sweep=True)  # type: ignore[arg-type]
    assert sorted({cell.stripe for cell in cells}) == stripes == list(range(256))
    for stripe in stripes:
        ranges = sorted((cell.start, cell.end) for cell in cells if cell.stripe == stripe)
        assert ranges[0][0] == start and ranges[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    dense = [n for n, cell in enumerate(cells) if cell.stripe < 16]
    assert len(dense) == 64
    shares = [sum(1 for n in dense if len(cells) * k // 50 <= n < len(cells) * (k + 1) // 50)
              for k in range(50)]
    assert max(shares) <= 2 and sum(shares) == 64


def test_the_dashboard_knows_every_p() -> None:
    """web/src/health.js takes a P it does not list for 1, and would watch a retired lease."""
    source = (Path(__file__).resolve().parents[2] / "web/src/health.js").read_text()
    listed = re.search(r"const CHOICES = \[([\d, ]+)\];", source)
    assert listed is not None
    assert tuple(int(n) for n in listed[1].split(",")) == CHOICES
