"""Trends with P rollup partitions, on the Firestore model: each partition keeps the totals and
lists of its own tags, partition 0 merges the lists into trends/{scope}, which stays exact
through expiry and changes of P."""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable
from typing import TypeVar, cast

import pytest
from counting.features import trends
from counting.features.context import Context
from counting.foundation import config, kinds
from counting.foundation.clock import Clock
from counting.foundation.config import AutoscaleParams, Names
from counting.foundation.kinds import Window
from counting.rollup import cadence, repartition, trend_ledger, trend_merge
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Rollup, TickStats
from counting.writepath import partitions, waking
from counting.writepath.context import Writing
from counting.writepath.partitions import Part
from google.cloud import firestore

from tests.sim.faults import CALM
from tests.sim.model import Client, Model
from tests.sim.virtual import Sim

NAMES = Names()  # the collection ids of the default placement, which these run on

REGIONS = ("eu", "us")
TAGS = [f"tag{n:03d}" for n in range(300)]  # more than TOP_K in every scope
WEIGHTS = [1 / (n + 1) for n in range(len(TAGS))]

Tally = Counter[tuple[str, str]]  # (scope, tag) -> events
R = TypeVar("R")


class Scene:
    """One actor at a time, each step run to its end: requests take time, as in production."""

    def __init__(self) -> None:
        self.sim = Sim(random.Random(1))
        self.model = Model(self.sim, random.Random(2), CALM)
        self.db = cast(firestore.Client, Client(self.model))
        self.rng = random.Random(3)
        self.clock = Clock(monotonic=self.sim.monotonic, now=self.sim.wall, sleep=self.sim.wait)
        # The scene's one process: its writes and its holders, on the virtual clock.
        self.ctx = Context.of(Writing(known=partitions.Known(monotonic=self.sim.monotonic),
                                      waker=waking.Never(), rng=random.Random(4),
                                      clock=self.clock))

    def act(self, step: Callable[[], R]) -> R:
        done: list[R] = []
        actor = self.sim.spawn("step", lambda: done.append(step()))
        while not actor.done:
            self.sim.run_until(self.sim.monotonic() + 1.0)
        assert not self.sim.crashes, self.sim.crashes
        return done[0]

    def later(self, seconds: float = 1.0) -> None:
        self.sim.run_until(self.sim.monotonic() + seconds)

    def holders(self, count: int, name: str) -> list[Rollup]:
        """P = count (changed if it is not), and a holder of each partition."""
        self.act(lambda: repartition.change(self.db, NAMES, count, known=self.ctx.writing.known))
        held = []
        for part in partitions.parts(count):
            lease = Lease(self.db, state_ref(self.db, NAMES, part), f"{name}-{part.index}", 10.0)
            assert self.act(lease.acquire)
            held.append(Rollup(self.db, lease, AutoscaleParams(enabled=False), part=part,
                               writing=self.ctx.writing))
        return held

    def track(self, events: int, tally: Tally) -> None:
        for _ in range(events):
            region = self.rng.choice(REGIONS)
            tags = sorted(set(self.rng.choices(TAGS, WEIGHTS, k=self.rng.randint(1, 6))))
            self.act(functools.partial(trends.track, self.ctx, self.db, region, tags,
                                       now=self.sim.wall()))
            for tag in tags:
                tally[(region, tag)] += 1
                tally[(config.GLOBAL_SCOPE, tag)] += 1

    def tick(self, held: list[Rollup]) -> list[TickStats]:
        """Every partition ticks once (a new holder until it has caught up), a second apart,
        partition 0 (the merger) last: as its task for the slot of the others' part commits runs
        after them."""
        stats = []
        for holder in [*held[1:], held[0]]:
            self.later()
            stats.append(self.act(holder.tick))
            while holder.catching_up:
                self.later()
                stats.append(self.act(holder.tick))
        self.later()
        return stats

    def published(self, scope: str, window: Window) -> list[tuple[str, int]]:
        data = self.db.collection(config.TRENDS).document(scope).get().to_dict() or {}
        items = ((data.get("windows") or {}).get(window) or {}).get("items") or []
        return [(str(item["tag"]), int(item["count"])) for item in items]

    def assert_exact(self, tallies: dict[Window, Tally]) -> None:
        for scope in (*REGIONS, config.GLOBAL_SCOPE):
            for window in kinds.WINDOWS:
                expected = sorted(((tag, n) for (s, tag), n in tallies[window].items()
                                   if s == scope and n > 0), key=trend_ledger.rank)[:config.TOP_K]
                assert self.published(scope, window) == expected, (scope, window)


def both(tally: Tally) -> dict[Window, Tally]:
    return {window: tally for window in kinds.WINDOWS}


@pytest.mark.parametrize("count", [4, 32])
def test_the_partitions_publish_the_exact_top_of_all_tags(count: int) -> None:
    """Tracks of 300 tags in two regions, rolled up by 4 (or 32) partitions: trends/{scope} is
    the exact top 100 of all of them, though each partition lists only its own tags. Tags live
    in the first 16 partitions: past them a partition writes no part."""
    scene = Scene()
    held = scene.holders(count, "a")
    tally: Tally = Counter()
    for _ in range(4):
        scene.track(100, tally)
        scene.tick(held)
    scene.assert_exact(both(tally))
    parts = scene.db.collection(config.TRENDS).document(config.GLOBAL_SCOPE).collection(
        config.TREND_PARTS)
    listed = trend_merge.lists_of(parts.document(f"{count}-1").get().to_dict() or {})["24h"]
    assert listed and all(Part(count, 1).owns(partitions.tag_home(tag)) for tag, _ in listed)
    written = {doc.id for doc in parts.list_documents()}
    assert written == {f"{count}-{index}" for index in range(1, min(count, 16))}


def test_expiry_subtracts_each_bucket_once() -> None:
    """Buckets that leave the hour are subtracted by their tag's partition alone: the 1 h lists
    keep exactly the later tracks, the 24 h lists all of them."""
    scene = Scene()
    held = scene.holders(4, "a")
    early: Tally = Counter()
    scene.track(150, early)
    scene.tick(held)
    buckets = len(list(scene.db.collection(config.TREND_MINUTES).list_documents()))
    scene.later(1800)
    late: Tally = Counter()
    scene.track(150, late)
    scene.tick(held)
    scene.later(3600 - 1800 + 120)  # the early minute has left the hour, the late not
    expired = sum(stats.trends.expired_buckets for stats in scene.tick(held)
                  if stats.trends is not None)
    assert expired == buckets
    scene.tick(held)
    scene.assert_exact({"1h": late, "24h": early + late})


def test_a_change_of_p_gives_the_exact_lists_again() -> None:
    """From 4 partitions to 2, to 1 and back to 4 (whose earlier parts are stale): after the new
    partitions tick, trends/{scope} is exact again; the merger publishes nothing until every
    partition has published its parts."""
    scene = Scene()
    tally: Tally = Counter()
    held = scene.holders(4, "a")
    scene.track(200, tally)
    scene.tick(held)
    scene.assert_exact(both(tally))
    for count, name in ((2, "b"), (1, "c"), (4, "d")):
        held = scene.holders(count, name)
        scene.track(100, tally)
        if count > 1:
            merger = scene.act(held[0].tick)
            assert merger.trends is not None and merger.trends.published == 0
        scene.tick(held)
        scene.assert_exact(both(tally))


def test_a_partition_that_wrote_parts_wakes_the_merger() -> None:
    """After a tick that wrote trend parts, the holder enqueues partition 0's task for the slot
    of their commit."""
    scene = Scene()
    scene.act(lambda: repartition.change(scene.db, NAMES, 4, known=scene.ctx.writing.known))
    tag = next(tag for tag in TAGS if Part(4, 1).owns(partitions.tag_home(tag)))
    scene.act(lambda: trends.track(scene.ctx, scene.db, "eu", [tag], now=scene.sim.wall()))
    scene.later()
    enqueued: list[tuple[Part, int]] = []
    ticked: list[TickStats] = []

    def enqueue(part: Part, slot: int) -> bool:
        enqueued.append((part, slot))
        return True

    holder = cadence.Holder(scene.db, writing=scene.ctx.writing, part=Part(4, 1),
                            enqueue=enqueue, owner="one", on_tick=ticked.append)
    scene.act(lambda: holder.tick_slot(None))
    parts_at = ticked[0].trends.parts_at if ticked[0].trends is not None else None
    assert parts_at is not None
    assert enqueued == [(Part(4, 0), waking.slot_of(parts_at))]


def test_a_part_the_merger_never_took_in_is_published_after_a_change_to_one() -> None:
    """Partition 2 of 4 publishes its part, then P goes to 1 before partition 1 of 4 merged it.
    The one partition re-reads those buckets unchanged (their documents already hold them), so
    no total moves: its first tick publishes every scope anyway (`republish` on its lease)."""
    scene = Scene()
    held = scene.holders(4, "a")
    tally: Tally = Counter()
    scene.track(50, tally)
    scene.tick(held)
    tag = next(f"solo{n}" for n in range(1000) if Part(4, 1).owns(partitions.tag_home(f"solo{n}")))
    for _ in range(500):
        scene.act(lambda: trends.track(scene.ctx, scene.db, "eu", [tag], now=scene.sim.wall()))
    tally[("eu", tag)] += 500
    tally[(config.GLOBAL_SCOPE, tag)] += 500
    scene.later()
    stats = scene.act(held[1].tick)
    assert stats.trends is not None and stats.trends.parts > 0
    scene.later()
    one = scene.holders(1, "b")
    scene.later(2)
    scene.act(one[0].tick)
    scene.later(2)
    assert (tag, 500) in scene.published("eu", "24h")
    scene.assert_exact(both(tally))
