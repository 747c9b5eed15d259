"""Directed scenarios on the Firestore model, without actors: one thread steps the clock by
hand, so each scenario is exactly the interleaving it names."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import random
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest
from counting.features import counter_refs, counters
from counting.features.context import Context
from counting.features.sequences import caching, documents, housekeeping, issuing, limits, opening
from counting.foundation.clock import Clock
from counting.foundation.config import AutoscaleParams, Names, Protections
from counting.foundation.errors import FailedPrecondition, PermissionDenied, ResourceExhausted
from counting.rollup import audit, folding, repartition
from counting.rollup import ledger as ledger_module
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Limits, Rollup, TickStats
from counting.writepath import partitions, shards
from counting.writepath.partitions import WHOLE
from counting.writepath.policy import Policy
from google.api_core import exceptions as gexc
from google.cloud import firestore

from tests.sim import checkers, protections
from tests.sim.faults import CALM, Fate, Requests
from tests.sim.model import Client, Model, Write
from tests.sim.virtual import Sim

NAMES = Names()  # the collection ids of the default placement, which these run on

T = TypeVar("T")

class Scene:
    def __init__(self, requests: Requests = CALM, *, protected: Protections = protections.ALL,
                 limits: Limits | None = None) -> None:
        """Writers write with `ctx` (the system's clock: a scene's writes take no virtual time);
        holders hold with `holding`, on the virtual clock, within `limits`."""
        self.sim = Sim(random.Random(1))
        self.model = Model(self.sim, random.Random(2), requests)
        self.db = cast(firestore.Client, Client(self.model))
        self.ctx = Context.offline(protections=protected)
        self.holding = dataclasses.replace(self.ctx.writing, clock=Clock(
            monotonic=self.sim.monotonic, now=self.sim.wall))
        self.limits = limits

    def at(self, seconds: float) -> None:
        self.sim.now_us = max(self.sim.now_us, round(seconds * 1_000_000))

    def ticked(self, holder: Rollup, t: float, ticks: int) -> float:
        """`holder` ticks `ticks` times, a second apart, after `t`; returns the last instant."""
        for _ in range(ticks):
            t += 1
            self.at(t)
            holder.tick()
        return t

    def holder(self, name: str) -> Rollup:
        lease = Lease(self.db, state_ref(self.db, NAMES), name, 10.0)
        assert lease.acquire()
        return Rollup(self.db, lease, AutoscaleParams(enabled=False), writing=self.holding,
                      limits=self.limits)

    def holder_of(self, part: partitions.Part, at: float | None = None) -> Rollup:
        """A holder of `part` (taking its lease at `at`, if given)."""
        if at is not None:
            self.at(at)
        lease = Lease(self.db, state_ref(self.db, NAMES, part), f"holder-{part}", 10.0)
        assert lease.acquire()
        return Rollup(self.db, lease, AutoscaleParams(enabled=False), part=part,
                      writing=self.holding, limits=self.limits)

    def hand_over(self, holder: Rollup, t: float) -> Rollup:
        """`holder` lets the lease go at `t`; a successor (an empty ledger) takes it."""
        self.at(t)
        holder.store.lease.release(holder.durable_progress)
        self.at(t + 1)
        return self.holder("successor")

    def handed_over_publishes(self, holder: Rollup, t: float, counter: str, ticks: int) -> None:
        """`holder` hands over at `t`; its successor ticks `ticks` times, then `counter`'s shard 1
        is written once more and it ticks 3 times: it has published every write (2)."""
        successor = self.hand_over(holder, t)
        t = self.ticked(successor, t + 1, ticks)  # (the lease taken a second after)
        self.write_shard(counter, 1, 1)
        t = self.ticked(successor, t, 3)
        self.at(t + 1)
        assert self.published(counter) == self.shards(counter) == 2

    def write_shard(self, counter: str, shard: int, by: int) -> None:
        ref = counter_refs.shard_ref(self.db, NAMES, counter, shard)
        ref.update(shards.shard_write(self.ctx.writing, self.db, ref, by).fields)

    def twenty_counters(self) -> tuple[list[str], Rollup]:
        """Counters c0..c19 of 10 shards, and a first holder that took the lease after them."""
        names = [f"c{n}" for n in range(20)]
        for name in names:
            counters.create_counter(self.ctx, self.db, name, shards=10)
        self.at(1)
        return names, self.holder("first")

    def wide_counter(self, holder: str) -> Rollup:
        """The counter `wide`: 8 shards, 8 increments, and a holder that has met it."""
        counters.create_counter(self.ctx, self.db, "wide", shards=8)
        self.at(1)
        first = self.holder(holder)
        for _ in range(8):
            counters.increment(self.ctx, self.db, "wide", 1)
        return first

    def slow_write(self, counter: str, stamped_s: float) -> None:
        """A shard write whose request started at `stamped_s` and commits now, whose writer
        died before it could touch the shard."""
        self.model.commit([Write("update", ("counters", counter, "shards", "0"), {
            "count": firestore.Increment(1), "writes": firestore.Increment(1),
            "updated_at": self.sim.instant(round(stamped_s * 1_000_000)), "stripe": 0})])

    def hand_over_until_a_sweep(self, holder: Rollup, t: float) -> tuple[list[str], list[str]]:
        """`holder` hands over at `t`; its successor ticks every second until a sweep has found
        every commit up to then. Returns the counters the successor met (read their documents)
        and those it read whole meanwhile, with the clock past its commits."""
        holder.store.lease.release(holder.durable_progress)
        self.at(t + 1)  # the release has committed
        successor = self.holder("successor")
        met: list[str] = []
        whole: list[str] = []
        store = successor.store
        meet, each = store.counters, store.each_counters_shards

        def met_too(ids: list[str], as_of: dt.datetime) -> list[Any]:
            met.extend(ids)
            return meet(ids, as_of)

        def whole_too(ids: list[str], as_of: dt.datetime) -> list[list[Any]]:
            whole.extend(ids)
            return each(ids, as_of)

        store.counters = met_too  # type: ignore[method-assign]
        store.each_counters_shards = whole_too  # type: ignore[method-assign,assignment]
        for second in range(2, 240):
            self.at(t + second)
            swept = successor.tick().swept
            if swept is not None and swept >= self.sim.instant(round(t * 1_000_000)):
                self.at(t + second + 1)  # its commits are done
                return met, whole
        raise AssertionError("the successor never swept")

    def published(self, counter: str) -> int:
        published = counter_refs.counter_ref(self.db, NAMES, counter).get().to_dict() or {}
        return int(published["count"])

    def shards(self, counter: str) -> int:
        return counters.get_count(self.db, NAMES, counter, "strong").count

    def shard_counts(self, counter: str) -> dict[str, int] | None:
        data = counter_refs.memory_ref(self.db, NAMES, counter).get().to_dict() or {}
        counts: dict[str, int] | None = data.get("shard_counts")
        return counts


def test_a_counter_a_sweep_deferred_survives_a_handover() -> None:
    """After a gap with no tick, the first tick reads every cell of the sweep under way, which
    finds an untouched slow write, but defers its counter (past the first-load budget) and
    hands over: the successor still publishes it, because the watermark it starts from is the
    sweep's reach."""
    scene = Scene(limits=Limits(document_loads_per_tick=1, first_loads_per_tick=1))
    for name in ("a-other", "b-slow"):
        counters.create_counter(scene.ctx, scene.db, name, shards=1)
    # A counter from before shard_counts: read whole, it takes the tick's budget of whole reads,
    # which would otherwise catch `b-slow` up at once.
    counter_refs.memory_ref(scene.db, NAMES, "a-other").update(
        {"shard_counts": firestore.DELETE_FIELD})
    t = 1.0
    scene.at(t)
    first = scene.holder("first")
    while True:
        t += 1
        scene.at(t)
        if first.tick().swept is not None and t >= 60:
            break
    swept_at = t
    for _ in range(50):
        t += 1
        scene.at(t)
        first.tick()
    scene.at(swept_at + 100)  # no tick for 250 s; meanwhile a write that took 80 s commits
    scene.slow_write("b-slow", swept_at + 20)
    scene.at(swept_at + 299)
    counters.increment(scene.ctx, scene.db, "a-other", 1)
    t = swept_at + 301
    scene.at(t)
    first.tick()
    assert list(first.ledger.waiting) == ["b-slow"]  # (past the budget of meetings)
    first.store.lease.release(first.durable_progress)
    t += 1
    scene.at(t)  # the release has committed
    successor = scene.holder("successor")
    for _ in range(120):
        t += 1
        scene.at(t)
        successor.tick()
    assert scene.published("b-slow") == scene.shards("b-slow") == 1


def test_what_a_sweeps_cell_finds_reaches_the_memory_with_its_publish() -> None:
    """A write committed seconds after its stamp and never touched is found by a sweep's cell
    and published; handed over before the next round of memories, the successor reads back
    from the checkpoint only, which is after the write's stamp, and meets the counter through
    a write to its other shard: its memory already holds what the sweep found (`Ledger.apply`'s
    `swept`), so the successor publishes what the shards hold (with the finding left to the
    next round, it publishes 1 where they hold 2)."""
    scene = Scene()
    counters.create_counter(scene.ctx, scene.db, "late", shards=2)
    first = scene.holder_of(WHOLE, at=1)
    t = 1.0
    for _ in range(3):
        t += 1
        scene.at(t)
        first.tick()
    scene.slow_write("late", 0.5)
    while scene.published("late") == 0:
        t += 1
        scene.at(t)
        first.tick()
        assert t < 60 and first.checkpoint < scene.sim.instant(round(0.5 * 1_000_000)) \
            + dt.timedelta(seconds=30), "found before the next round of memories"
    successor = scene.hand_over(first, t + 1)
    scene.write_shard("late", 1, 1)
    for second in range(3, 6):
        scene.at(t + second)
        successor.tick()
    scene.at(t + 7)
    assert scene.published("late") == scene.shards("late") == 2


def test_a_counter_a_sweeps_cell_deferred_is_found_again_by_the_successor() -> None:
    """A write committed 269 s after its stamp, after the cells of the sweep under way that
    cover it were read, is returned by the next sweep's first cell; its counter is deferred
    (past the first-load budget) and the holder hands over: the cell counts as read, so the
    watermark persisted goes back to the sweep's reach, not the tick's, and the successor
    finds the write (with the tick's reach it publishes 1 where the shards hold 2)."""
    scene = Scene(limits=Limits(document_loads_per_tick=1, first_loads_per_tick=1))
    for name in ("a-other", "b-slow"):
        counters.create_counter(scene.ctx, scene.db, name, shards=2)
    counter_refs.memory_ref(scene.db, NAMES, "a-other").update(
        {"shard_counts": firestore.DELETE_FIELD})
    t = 1.0
    first = scene.holder_of(WHOLE, at=t)

    def until_swept() -> None:
        nonlocal t
        while True:
            t += 1
            scene.at(t)
            if first.tick().swept is not None and t >= 300:
                return

    until_swept()
    began = t
    while t < began + 20:
        t += 1
        scene.at(t)
        first.tick()
    scene.slow_write("b-slow", began - 249)
    until_swept()
    counters.increment(scene.ctx, scene.db, "a-other", 1)
    t += 1
    scene.at(t)
    first.tick()
    assert list(first.ledger.waiting) == ["b-slow"]
    scene.handed_over_publishes(first, t + 1, "b-slow", 10)


def test_what_a_successor_took_in_from_before_the_checkpoint_is_read_again_by_the_next() -> None:
    """A holder defers `b` (past the budget) right after a round of memories: its watermark is
    before `b`'s write, its checkpoint after. Its successor reads back to the watermark, takes
    `b` in from its memory and the changed shard and publishes it, and hands over before its
    own round writes that memory: the checkpoint it persists is no later than where it read
    back from, so the next holder finds the write too (with the predecessor's checkpoint it
    meets `b` later from the memory alone: published 1 where the shards hold 2)."""
    scene = Scene(limits=Limits(document_loads_per_tick=1, first_loads_per_tick=1))
    for name in ("a", "b"):
        counters.create_counter(scene.ctx, scene.db, name, shards=2)
    t = 1.0
    first = scene.holder_of(WHOLE, at=t)
    for _ in range(130):  # a and b leave its ledger (idle)
        t += 1
        scene.at(t)
        first.tick()
    while (scene.sim.instant(round((t + 1) * 1_000_000)) - first.checkpoint).total_seconds() \
            < ledger_module.FLUSH_S:
        t += 1
        scene.at(t)
        first.tick()
    # `a` takes the tick's one whole read (it has no shard_counts), so `b` is deferred.
    counter_refs.memory_ref(scene.db, NAMES, "a").update({"shard_counts": firestore.DELETE_FIELD})
    scene.at(t + 0.3)
    scene.write_shard("a", 0, 1)
    scene.write_shard("b", 0, 1)
    t += 1
    scene.at(t)
    first.tick()
    progress = first.durable_progress
    assert list(first.ledger.waiting) == ["b"] and progress.watermark < progress.checkpoint
    t += 1
    scene.limits = None  # the next holders' budgets are production's
    successor = scene.hand_over(first, t)
    t += 2  # the lease taken a second ago
    scene.at(t)
    successor.tick()
    t += 1
    scene.at(t)  # its commits are done
    assert scene.published("b") == 1
    scene.handed_over_publishes(successor, t, "b", 3)


def test_holders_of_one_tick_each_move_the_checkpoint() -> None:
    """With no warm holder (the scheduled runs only, each a holder of one tick), 300 counters
    written each minute: each run writes every memory due at once (its checkpoint is a minute
    old), so the checkpoint follows the runs and a run reads back one minute, not to the
    first."""
    scene = Scene()
    names = [f"c{n:03d}" for n in range(300)]
    for name in names:
        counters.create_counter(scene.ctx, scene.db, name, shards=1)
    checkpoints = []
    for minute in range(1, 5):
        scene.at(60.0 * minute - 10)
        for name in names:
            counters.increment(scene.ctx, scene.db, name, 1)
        run = scene.holder_of(WHOLE, at=60.0 * minute)
        scene.at(60.0 * minute + 0.5)
        run.tick()
        scene.at(60.0 * minute + 1)
        run.store.lease.release(run.durable_progress)
        checkpoints.append(run.checkpoint)
    assert checkpoints == [scene.sim.instant(round((60 * m + 0.5) * 1_000_000))
                           for m in range(1, 5)], checkpoints


def ticked_until_the_checkpoint_is_due(scene: Scene, first: Rollup, t: float) -> float:
    """Tick `first` until its next tick starts a round of memories (after 130 ticks: what it
    met before has left its ledger); returns the clock."""
    t = scene.ticked(first, t, 130)
    while (scene.sim.instant(round((t + 1) * 1_000_000)) - first.checkpoint).total_seconds() \
            < ledger_module.FLUSH_S:
        t += 1
        scene.at(t)
        first.tick()
    return t


def test_a_waiting_counter_met_after_a_round_goes_to_its_memory_with_its_publish() -> None:
    """`b` waits (past the budget of meetings) on the tick whose round of memories completes
    (the checkpoint moves to that tick's instant, after `b`'s write); the next tick meets and
    publishes it, and lets the watermark go. Handed over before the next round, the successor
    reads back from the checkpoint only, and meets `b` through its other shard: `b`'s memory
    holds the write (with it left to the next round: published 1, shards 2)."""
    scene = Scene(limits=Limits(document_loads_per_tick=1))
    for name in ("a", "b"):
        counters.create_counter(scene.ctx, scene.db, name, shards=2)
    first = scene.holder_of(WHOLE, at=1)
    t = ticked_until_the_checkpoint_is_due(scene, first, 1.0)
    scene.at(t + 0.3)
    scene.write_shard("a", 0, 1)
    scene.write_shard("b", 0, 1)
    t += 1
    scene.at(t)
    first.tick()
    assert list(first.ledger.waiting) == ["b"]
    assert first.checkpoint == scene.sim.instant(round(t * 1_000_000))
    t += 1
    scene.at(t)
    first.tick()
    assert not first.ledger.owed and first.ledger.deferred_since is None
    scene.limits = None
    scene.handed_over_publishes(first, t + 1, "b", 3)


def test_a_waiting_counter_met_by_a_tick_that_fails_is_read_whole_later() -> None:
    """`b` waits (past the budget of meetings); the next tick meets it and fails reading the
    documents: `b`'s values read a tick earlier are gone with it, so it is deferred (read whole
    later), not dropped; the ticks after query from a watermark after its write."""
    scene = Scene(limits=Limits(document_loads_per_tick=1))
    for name in ("a", "b"):
        counters.create_counter(scene.ctx, scene.db, name, shards=2)
    t = 1.0
    first = scene.holder_of(WHOLE, at=t)
    t = scene.ticked(first, t, 5)
    scene.at(t + 0.3)
    scene.write_shard("a", 0, 1)
    scene.write_shard("b", 0, 1)
    t += 1
    scene.at(t)
    first.tick()
    assert list(first.ledger.waiting) == ["b"]
    store = first.store
    meet = store.counters

    def unavailable(ids: list[str], as_of: dt.datetime) -> list[Any]:
        store.counters = meet  # type: ignore[method-assign]
        raise gexc.ServiceUnavailable("injected")  # type: ignore[no-untyped-call]

    store.counters = unavailable  # type: ignore[method-assign]
    t += 1
    scene.at(t)
    with pytest.raises(gexc.ServiceUnavailable):
        first.tick()
    assert first.ledger.deferred == {"b"}
    t = scene.ticked(first, t, 10)
    scene.at(t + 1)
    assert scene.published("b") == scene.shards("b") == 1


def test_a_cells_finding_that_waits_goes_to_its_memory_with_its_publish() -> None:
    """As test_what_a_sweeps_cell_finds_reaches_the_memory_with_its_publish, but the tick whose
    cell finds the slow write also meets a new counter, so `late` waits (a budget of 1) and is
    met the next tick, by no cell: its counts go with its publish all the same (with them left
    to the round, the successor publishes 1 where the shards hold 2)."""
    scene = Scene(limits=Limits(document_loads_per_tick=1))
    counters.create_counter(scene.ctx, scene.db, "late", shards=2)
    others = [f"a{n:03d}" for n in range(60)]
    for name in others:
        counters.create_counter(scene.ctx, scene.db, name, shards=1)
    first = scene.holder_of(WHOLE, at=1)
    t = 1.0
    t = scene.ticked(first, t, 3)
    scene.slow_write("late", 0.5)
    for other in others:
        scene.at(t + 0.3)
        counters.increment(scene.ctx, scene.db, other, 1)  # a new counter, met first
        t += 1
        scene.at(t)
        first.tick()
        if "late" in first.ledger.waiting:
            break
    assert "late" in first.ledger.waiting
    t += 1
    scene.at(t)
    first.tick()
    assert not first.ledger.owed
    scene.at(t + 0.5)
    assert scene.published("late") == 1
    scene.limits = None
    successor = scene.hand_over(first, t + 1)
    scene.write_shard("late", 1, 1)
    for second in range(3, 6):
        scene.at(t + second)
        successor.tick()
    scene.at(t + 7)
    assert scene.published("late") == scene.shards("late") == 2


def test_a_new_holders_sweep_reads_whole_only_what_no_tick_took_in() -> None:
    """Counters written minutes ago and published are returned by a new holder's sweep, which
    does not read them whole again (1 + shards reads each); an untouched slow write is."""
    scene = Scene()
    names, first = scene.twenty_counters()
    for name in names:
        counters.increment(scene.ctx, scene.db, name, 1)
    t = 1.0
    for _ in range(30):
        t += 1
        scene.at(t)
        first.tick()
    assert all(scene.published(name) == 1 for name in names)
    scene.slow_write("c0", t - 5.0)  # its writer died before touching the shard
    met, whole = scene.hand_over_until_a_sweep(first, t)
    assert scene.published("c0") == 2
    # The sweep returns each of the 20 shards written; only c0 is met, from its memory.
    assert (met, whole) == (["c0"], []), (met, whole)


def test_a_fold_is_not_read_whole_by_the_next_holders_sweep() -> None:
    """A fold stamps its survivor like a write: the counter stays exact, and a new holder's
    sweep skips the folded counter instead of reading it whole as a possible straddler."""
    scene = Scene()
    first = scene.wide_counter("first")
    t = 1.0
    for _ in range(5):
        t += 1
        scene.at(t)
        first.tick()
    counter_refs.counter_ref(scene.db, NAMES, "wide").update({"num_shards": 4})
    folded = folding.fold_surplus(first.store, "wide", 4, counts_kept="memory")
    assert folded.complete and folded.deleted
    first.ledger.folded("wide", folded.deleted, folded.moved, folded.complete)  # as a tick does
    for _ in range(5):
        t += 1
        scene.at(t)
        first.tick()
    _, whole = scene.hand_over_until_a_sweep(first, t)
    assert scene.published("wide") == scene.shards("wide") == 8
    assert whole == [], whole  # (met from its memory and the survivors, the checkpoint's reach)


def test_a_fold_bills_its_deletes_apart() -> None:
    """Deletes are priced apart from writes: the store counts a fold's deleted shards as deletes,
    and its survivors' stamps (each survivor, whatever it takes), the move in the counter's
    shard_counts and the fencing write as writes."""
    scene = Scene()
    holder = scene.wide_counter("holder")
    scene.at(2)
    holder.tick()
    counter_refs.counter_ref(scene.db, NAMES, "wide").update({"num_shards": 4})
    holder.store.take_usage()
    folded = folding.fold_surplus(holder.store, "wide", 4, counts_kept="memory")
    usage = holder.store.take_usage()
    assert folded.complete and sorted(folded.deleted) == ["4", "5", "6", "7"]
    assert (usage.deletes, usage.writes) == (4, len(folded.moved) + 2)



def handover_reads(*, legacy: bool) -> int:
    """20 counters of 10 shards, written and published by a first holder, whose next sweep
    writes their shard counts to their memories; after a handover each is written once more.
    What the successor's tick reads (each sum checked exact). `legacy`: the memories lack
    shard_counts, as after a publish that failed."""
    scene = Scene()
    names, first = scene.twenty_counters()
    for n, name in enumerate(names):
        for shard in range(10):
            scene.write_shard(name, shard, n + shard)
    for t in (2, 3, 4, 5, 60):  # 60: a sweep
        scene.at(t)
        first.tick()
    for name in names:
        assert sum((scene.shard_counts(name) or {}).values()) == scene.published(name), name
    if legacy:
        for name in names:
            counter_refs.memory_ref(scene.db, NAMES, name).update(
                {"shard_counts": firestore.DELETE_FIELD})
    successor = scene.hand_over(first, 62)
    for name in names:
        counters.increment(scene.ctx, scene.db, name, 1)
    scene.at(65)
    stats = successor.tick()
    scene.at(66)
    for name in names:
        assert scene.published(name) == scene.shards(name), name
    return counter_reads(stats)


def counter_reads(stats: TickStats) -> int:
    """A tick's reads but the trends step's and its sweep's cells'."""
    return stats.reads - (stats.trends.reads if stats.trends else 0) - stats.sweep_reads


def test_a_successor_reads_each_changed_counters_document_not_its_shards() -> None:
    """After a handover, a changed counter costs the read of its document and its memory (its
    shard_counts, written by the last sweep, stand for the shards that did not change since),
    not a query of all its shards; a counter without shard_counts is still read whole, summed
    exactly, and given them."""
    # The lease, the 20 changed shards, the 20 documents and their 20 memories.
    assert handover_reads(legacy=False) == 1 + 20 + 20 * 2
    # ... and 20 queries of 10 shards.
    assert handover_reads(legacy=True) == 1 + 20 + 20 * 2 + 20 * 10


def test_a_successor_right_after_a_fold_is_exact() -> None:
    """A fold moves the counter's shard_counts in its own commit: a successor that takes the
    lease right after reads the document and its memory only, and is exact."""
    scene = Scene()
    first = scene.wide_counter("first")
    scene.at(2)
    first.tick()
    ref = counter_refs.counter_ref(scene.db, NAMES, "wide")
    ref.update({"num_shards": 4})
    folded = folding.fold_surplus(first.store, "wide", 4, counts_kept="memory")
    assert folded.complete and folded.deleted
    assert set(scene.shard_counts("wide") or {}) <= {"0", "1", "2", "3"}
    successor = scene.hand_over(first, 3)
    counters.increment(scene.ctx, scene.db, "wide", 1)
    scene.at(5)
    stats = successor.tick()
    scene.at(6)
    assert scene.published("wide") == scene.shards("wide") == 9
    # The lease, the changed shards, the document and its memory.
    assert counter_reads(stats) <= 1 + 4 + 2, stats


def test_a_successor_after_a_reset_is_exact() -> None:
    """A reset zeroes shard_counts with the shards: a successor, whether or not the first
    holder ticked after the reset, is exact."""
    for first_ticks in (False, True):
        scene = Scene()
        first = scene.wide_counter("first")
        scene.at(2)
        first.tick()
        counters.reset_counter(scene.ctx, scene.db, "wide")
        if first_ticks:
            scene.at(3)
            first.tick()
        successor = scene.hand_over(first, 4)
        counters.increment(scene.ctx, scene.db, "wide", 1)
        scene.at(6)
        successor.tick()
        scene.at(7)
        assert scene.published("wide") == scene.shards("wide") == 1


def test_a_change_that_nets_to_zero_is_handed_over() -> None:
    """+1 on one shard and -1 on another leave the count alone, yet move shard_counts: the
    holder publishes them, so a successor's sum after the next write is exact."""
    scene = Scene()
    counters.create_counter(scene.ctx, scene.db, "flat", shards=2)
    scene.at(1)
    first = scene.holder("first")
    scene.write_shard("flat", 0, 1)
    scene.write_shard("flat", 1, -1)
    scene.at(2)
    first.tick()
    scene.at(3)
    assert scene.published("flat") == 0 and scene.shard_counts("flat") == {"0": 1, "1": -1}
    successor = scene.hand_over(first, 3)
    scene.write_shard("flat", 0, 1)
    scene.at(5)
    successor.tick()
    scene.at(6)
    assert scene.published("flat") == scene.shards("flat") == 1


def test_a_tick_reading_longer_than_the_lease_keeps_it() -> None:
    """Reads of 6 s each: a first tick reads the lease, the changes and the counters to watch
    for 18 s before its first commit, past the 10 s lease. The store renews the lease between
    the reads, so a second holder trying to take it meanwhile is refused, and the tick
    publishes."""
    scene = Scene(dataclasses.replace(CALM, read=(6.0, 6.0)))
    counters.create_counter(scene.ctx, scene.db, "c", shards=2)
    scene.at(1)
    counters.increment(scene.ctx, scene.db, "c", 1)
    scene.at(2)
    lease = Lease(scene.db, state_ref(scene.db, NAMES), "holder", 10.0)
    assert lease.acquire()
    holder = Rollup(scene.db, lease, AutoscaleParams(), writing=scene.holding)
    outcome: dict[str, object] = {}

    def tick() -> None:
        outcome["tick"] = holder.tick()

    def take() -> None:
        outcome["taken"] = Lease(scene.db, state_ref(scene.db, NAMES), "taker", 10.0).acquire()

    scene.sim.spawn("holder", tick)
    scene.sim.spawn("taker", take, after_s=9.0)  # reads the lease after it would expire
    scene.sim.run_until(120.0)
    scene.sim.shutdown()
    assert outcome["taken"] is False
    assert isinstance(outcome["tick"], TickStats)
    assert scene.published("c") == 1


# -- issue 31: three ways a count was lost or doubled, each shown again with its protection off --


@pytest.mark.parametrize("protected", [True, False])
def test_a_blind_increment_whose_answer_was_lost_counts_once(protected: bool) -> None:
    """The first attempt of a blind increment applies and its answer is lost (UNAVAILABLE): the
    client library sends the Commit again unless told not to. The caller may be told the
    outcome is unknown, but the shard holds the increment once; with the library's resend
    (`single_attempt` off), twice."""
    scene = Scene(protected=protections.ALL if protected
                  else protections.alone_off("single_attempt"))
    counters.create_counter(scene.ctx, scene.db, "blind", shards=1)
    scene.at(1)
    scene.model.draws.script.append(Fate(delay_us=20_000, lost=gexc.ServiceUnavailable))
    with contextlib.suppress(Exception):  # unknown outcome: the caller may be told so
        counters.increment(scene.ctx, scene.db, "blind", 1)
    scene.at(2)
    assert scene.shards("blind") == (1 if protected else 2)


def reset_beside_a_warm_holder(values: dict[int, int],
                               protected: Protections) -> tuple[Scene, Rollup]:
    """Create, write the shards `values`, publish (a warm holder), reset, write the same values
    again: the shards are back to what the holder last read."""
    scene = Scene(protected=protected)
    counters.create_counter(scene.ctx, scene.db, "reset", shards=len(values))
    scene.at(1)
    holder = scene.holder("warm")
    for shard, value in values.items():
        scene.write_shard("reset", shard, value)
    scene.at(2)
    holder.tick()
    scene.at(3)
    assert scene.published("reset") == sum(values.values())
    counters.reset_counter(scene.ctx, scene.db, "reset")
    scene.at(4)
    for shard, value in values.items():
        scene.write_shard("reset", shard, value)
    return scene, holder


@pytest.mark.parametrize("protected", [True, False])
def test_a_reset_beside_a_warm_holder_is_published(protected: bool) -> None:
    """The holder's ledger still holds shard 0 at 1, as the shard is again. A reset that moves
    shards only is published by the holder; the old reset (`reset_through_rollup` off) wrote 0
    on the counter document outside the lease, and the holder, seeing no change, left it."""
    scene, holder = reset_beside_a_warm_holder(
        {0: 1}, protections.ALL if protected else protections.alone_off("reset_through_rollup"))
    for t in range(5, 30):
        scene.at(t)
        holder.tick()
    scene.at(31)
    assert scene.shards("reset") == 1
    assert scene.published("reset") == (1 if protected else 0)


def test_a_successor_after_a_reset_beside_a_warm_holder_is_exact() -> None:
    """As above with two shards, and the holder ticks on, then hands over; shard 1 is written
    again. (With the old reset, the successor trusted the per-shard counts the reset zeroed for
    the shards written before its watermark: published 11, shards 12. Since memories are written
    by sweeps, a successor reads back to the last sweep, before the reset here.)"""
    scene, holder = reset_beside_a_warm_holder({0: 1, 1: 5}, protections.ALL)
    for t in range(5, 8):
        scene.at(t)
        holder.tick()
    successor = scene.hand_over(holder, 8)
    scene.write_shard("reset", 1, 6)
    for t in range(10, 130):
        scene.at(t)
        successor.tick()
    scene.at(131)
    assert scene.shards("reset") == 12
    assert scene.published("reset") == 12


@pytest.mark.parametrize(("first", "then"), [(4, 2), (128, 1)])
@pytest.mark.parametrize("protected", [True, False])
def test_a_write_with_an_old_stripe_is_published_after_narrowing(protected: bool, first: int,
                                                                  then: int) -> None:
    """P goes 4 -> 2 (or 128 -> 1); a writer that still knows the first P writes its shard with
    that P's last spread (home mod 16 + 48; home + 128 x 15), which the counter's partition of the
    new P reads only until `narrow_at`. That partition first ticks after `narrow_at` (not a
    sweep: the old partitions swept a moment ago), and then every second: the write is published
    by a sweep, which reads every stripe of every P up to 16 and of the wider P for
    `WIDE_SWEEP_S`; with `every_stripe_sweep` off, never."""
    published = old_stripe_after_narrowing(
        protections.ALL if protected else protections.alone_off("every_stripe_sweep"),
        first, then)
    assert published == (1 if protected else 0)


def old_stripe_after_narrowing(protected: Protections, first: int = 4, then: int = 2) -> int:
    """The scenario above: what the rollup publishes of the one write (the shard holds 1)."""
    scene = Scene(protected=protected)
    owner_part = partitions.Part(then, then - 1)
    name = next(f"old-{n}" for n in range(100)
                if owner_part.owns(partitions.home_of(f"old-{n}")))
    counters.create_counter(scene.ctx, scene.db, name, shards=1)
    scene.at(1)
    repartition.change(scene.db, NAMES, first, known=scene.ctx.writing.known)
    scene.at(2)
    olds = [scene.holder_of(part) for part in partitions.parts(first)]
    for t in range(3, 10):
        scene.at(t)
        for holder in olds:
            holder.tick()
    scene.at(10)
    changed = repartition.change(scene.db, NAMES, then, known=scene.ctx.writing.known)
    scene.at(12)
    ref = counter_refs.shard_ref(scene.db, NAMES, name, 0)
    size = partitions.resolution(first)
    stripe = partitions.home_of(name) % size + size * (partitions.spread_of(first) - 1)
    assert stripe not in owner_part.ticks()
    ref.update({**shards.shard_write(scene.ctx.writing, scene.db, ref, 1).fields,
                "stripe": stripe})
    narrow_at = (changed.narrow_at - scene.sim.instant(0)).total_seconds()
    owner = scene.holder_of(owner_part, at=narrow_at + 5)
    for t in range(int(narrow_at) + 6, int(narrow_at) + 130):
        scene.at(t)
        owner.tick()
    scene.at(narrow_at + 131)
    assert scene.shards(name) == 1
    return scene.published(name)


def deferred_across_a_sweep() -> tuple[Scene, Rollup]:
    """`c` (2 shards, no shard_counts) is written at 10 and deferred (whole-read budget) by the
    tick at 11; the sweep at 52 spends the whole-read budget on `x2` (no shard_counts), so `c`
    is caught up (read whole, published) only at 53, after that sweep. Its memory must hold
    that write: no later change query reaches it (a review found it waiting for the next
    sweep)."""
    scene = Scene(limits=Limits(first_loads_per_tick=1))
    counters.create_counter(scene.ctx, scene.db, "c", shards=2)
    for name in ("a1", "x2"):
        counters.create_counter(scene.ctx, scene.db, name, shards=1)
    for name in ("a1", "x2", "c"):  # no shard_counts: each takes the whole-read budget of a tick
        counter_refs.memory_ref(scene.db, NAMES, name).update(
            {"shard_counts": firestore.DELETE_FIELD})
    scene.at(1)
    first = scene.holder("first")
    scene.at(2)
    first.tick()  # a sweep (swept: the epoch)
    scene.at(10)
    scene.write_shard("a1", 0, 1)
    scene.write_shard("c", 0, 5)
    scene.at(11)
    first.tick()
    assert first.ledger.deferred == {"c"}, first.ledger.deferred
    scene.at(50)
    scene.write_shard("x2", 0, 1)
    scene.at(52)
    first.tick()  # a sweep; x2 takes the one whole read
    assert first.ledger.deferred == {"c"}
    scene.at(53)
    first.tick()  # c caught up: read whole, published
    assert not first.ledger.deferred
    scene.at(54)
    assert scene.published("c") == 5
    assert scene.shard_counts("c") == {"0": 5, "1": 0}  # written with the catch-up's publish
    return scene, first


def test_a_counter_deferred_across_a_sweep_then_caught_up_then_handed_over() -> None:
    """The holder hands over before its next sweep; the successor reads back to the sweep at
    52, so c's write at 10 is in no change query, only in its memory (without it: published 1,
    shards 6)."""
    scene, first = deferred_across_a_sweep()
    first.tick()
    successor = scene.hand_over(first, 55)
    scene.at(57)
    scene.write_shard("c", 1, 1)
    for t in range(58, 200):
        scene.at(t)
        successor.tick()
    scene.at(201)
    assert scene.published("c") == scene.shards("c") == 6


def test_the_same_holder_after_forgetting() -> None:
    """As above, but no handover: the holder's tick after the catch-up fails (forget, as
    `Rollup.tick` does on any exception), and its next tick reads back to its own last sweep."""
    scene, first = deferred_across_a_sweep()
    first.forget()  # a tick failed
    scene.write_shard("c", 1, 1)
    for t in range(57, 200):
        scene.at(t)
        first.tick()
    scene.at(201)
    assert scene.published("c") == scene.shards("c") == 6


def test_a_retry_after_the_policy_narrowed_is_not_refused() -> None:
    """A request that counted, retried with its request_id after an admin narrowed the
    counter's policy (its first answer lost, or the client retried): it is answered as a retry
    that changes nothing, not refused for a write that counted. A new request is refused."""
    scene = Scene()
    counters.create_counter(scene.ctx, scene.db, "bounded", shards=2,
                            policy=Policy(by=(1, 10)))
    t = 1.0

    def then(step: Callable[[], T]) -> T:
        nonlocal t
        t += 1
        scene.at(t)
        scene.ctx.configs.forget("bounded")
        return step()

    for call in (functools.partial(counters.increment, scene.ctx, scene.db, "bounded", 5,
                                   request_id="r1", uid="u", admin=False),
                 functools.partial(counters.increment_many, scene.ctx, scene.db,
                                   [("bounded", 5)], request_id="r2", uid="u", admin=False)):
        assert then(call)
        then(lambda: counters.configure_counter(scene.ctx, scene.db, "bounded", Policy(by=(1, 1))))
        assert not then(call)
        then(lambda: counters.configure_counter(scene.ctx, scene.db, "bounded", Policy(by=(1, 10))))
    then(lambda: counters.configure_counter(scene.ctx, scene.db, "bounded", Policy(by=(1, 1))))
    with pytest.raises(PermissionDenied):
        then(lambda: counters.increment(scene.ctx, scene.db, "bounded", 5, request_id="r3",
                                        uid="u", admin=False))
    scene.at(t + 1)
    assert scene.shards("bounded") == 10


@pytest.mark.parametrize("returning", [False, True])
def test_a_retry_of_an_applied_paced_request_is_not_too_soon(returning: bool) -> None:
    """A paced counter's user whose request counted retries it (its answer was lost): a retry
    that changes nothing, not RESOURCE_EXHAUSTED, whether the process reads the user's marker
    first (`returning`: its last request here found one) or creates it blind."""
    scene = Scene()
    counters.create_counter(scene.ctx, scene.db, "views", shards=2,
                            policy=Policy(min_interval_s=60))
    scene.at(1)
    applied = counters.increment(scene.ctx, scene.db, "views", 1, request_id="r1", uid="u",
                                 admin=False)
    assert applied is not None
    scene.at(2)
    if returning:  # another request of the user, too soon: the process now reads first
        with pytest.raises(ResourceExhausted):
            counters.increment(scene.ctx, scene.db, "views", 1, request_id="r2", uid="u",
                               admin=False)
        assert scene.ctx.returning.get("views") is True
    scene.at(3)
    assert counters.increment(scene.ctx, scene.db, "views", 1, request_id="r1", uid="u",
                              admin=False) is None
    with pytest.raises(ResourceExhausted):
        counters.increment(scene.ctx, scene.db, "views", 1, request_id="r3", uid="u",
                           admin=False)


def sequence_t(scene: Scene) -> None:
    """Tenant t's sequence, configured and open for TODAY (as `configure_sequence` leaves it,
    a step at a time: a scene's reads at an instant do not see that instant's commits)."""
    documents.sequence_ref(scene.db, NAMES, "t").set({"timezone": "UTC", "reset_time": "00:00"})
    scene.at(1)
    opening.open_day(scene.db, NAMES, "t", TODAY.date())
    scene.at(2)


TODAY = dt.datetime(2026, 11, 27, 12, tzinfo=dt.UTC)  # the business day the numbers are in


def number(scene: Scene, request_id: str) -> int:
    return issuing.next_number(scene.ctx, scene.db, "t", request_id=request_id, uid="u",
                               now=TODAY).number


def recorded_number(scene: Scene, request_id: str) -> int | None:
    record = documents.request_ref(scene.db, NAMES, "t", "u", request_id).get().to_dict() or {}
    return record.get("number") if record.get("state") == "issued" else None


def test_a_refused_commit_gives_back_the_records_it_carried() -> None:
    """A number issued for a request id goes into its record with the process's next commit
    of a number. When that commit is refused (nothing applied), the records it carried go back
    to the process, and the commit after it writes them; a retry of the first request id
    finds its number."""
    scene = Scene()
    sequence_t(scene)
    first = number(scene, "a")
    scene.at(3)
    assert recorded_number(scene, "a") is None  # carried by the next commit, not its own
    scene.model.draws.script.append(Fate(delay_us=20_000, refused=gexc.PermissionDenied))
    with pytest.raises(gexc.PermissionDenied):
        number(scene, "b")
    scene.at(4)
    assert recorded_number(scene, "a") is None
    third = number(scene, "c")
    scene.at(5)
    assert recorded_number(scene, "a") == first
    assert third == first + 1  # the refused commit issued nothing
    assert number(scene, "a") == first


def test_a_process_holds_at_most_max_unrecorded_numbers_and_the_housekeeping_records_the_rest(
) -> None:
    """Past `max_unrecorded`, a process drops its oldest unrecorded numbers (memory is bounded
    however its commits fail); the housekeeping writes them once they are `record_after_s`
    old. Here no commit carries any (`records_per_commit` 0), so they pile up."""
    scene = Scene()
    scene.ctx = dataclasses.replace(scene.ctx, sequence_limits=limits.SequenceLimits(
        max_unrecorded=3, records_per_commit=0))
    sequence_t(scene)
    numbers = {f"r{n}": number(scene, f"r{n}") for n in range(6)}
    held = [ref.id for ref, _ in scene.ctx.unrecorded.take(limits.LIMITS)]
    assert held == [documents.request_ref(scene.db, NAMES, "t", "u", f"r{n}").id
                    for n in (3, 4, 5)]  # the newest three
    scene.at(3 + limits.LIMITS.record_after_s)
    assert housekeeping.record_issued(scene.db, NAMES, scene.sim.wall()).recorded == 6
    scene.at(4 + limits.LIMITS.record_after_s)
    assert {request_id: recorded_number(scene, request_id) for request_id in numbers} == numbers


# -- The sequences' housekeeping and read-backs (issue 41) ---------------------------------------


def open_sequence(scene: Scene, tenant: str) -> None:
    """`tenant`'s sequence, configured and open for TODAY (as `sequence_t`)."""
    documents.sequence_ref(scene.db, NAMES, tenant).set({"timezone": "UTC",
                                                         "reset_time": "00:00"})
    scene.at(scene.sim.monotonic() + 1)
    opening.open_day(scene.db, NAMES, tenant, TODAY.date())
    scene.at(scene.sim.monotonic() + 1)


def died(scene: Scene, tenant: str, request_id: str) -> int:
    """A number for `request_id` from a process that dies once it has it: no later commit of
    its own carries the number into its record."""
    process = dataclasses.replace(scene.ctx, unrecorded=caching.Unrecorded())
    return issuing.next_number(process, scene.db, tenant, request_id=request_id, uid="u",
                               now=TODAY).number


def retried(scene: Scene, tenant: str, request_id: str) -> int:
    return issuing.next_number(scene.ctx, scene.db, tenant, request_id=request_id, uid="u",
                               now=TODAY).number


def record_of(scene: Scene, tenant: str, request_id: str) -> dict[str, object]:
    return documents.request_ref(scene.db, NAMES, tenant, "u", request_id).get().to_dict() or {}


def housekeep(scene: Scene, at: float) -> housekeeping.Housekept:
    """A run of `record_issued` at `at`, then the clock a second on (its commits seen)."""
    scene.at(at)
    done = housekeeping.record_issued(scene.db, NAMES, scene.sim.wall())
    scene.at(at + 1)
    return done


def test_records_past_the_read_window_are_marked_lost_and_keep_no_other_tenant_waiting() -> None:
    """After a housekeeping outage of over an hour, a page's worth of records of tenant t can
    no longer be read back. The next run marks them lost (once, counted) instead of reading the
    same page again at every run; t2's record, of after the outage, is written by the run
    after. A retry of a lost one is refused, never given a number."""
    scene = Scene()
    open_sequence(scene, "t")
    open_sequence(scene, "t2")
    for n in range(limits.LIMITS.records_per_run):
        died(scene, "t", f"s{n}")
    scene.at(3700)  # the housekeeping was down for over an hour
    fresh = died(scene, "t2", "f")
    first = housekeep(scene, 3760)
    housekeep(scene, 3820)
    assert record_of(scene, "t2", "f").get("number") == fresh
    assert retried(scene, "t2", "f") == fresh
    assert first.lost == limits.LIMITS.records_per_run
    assert housekeep(scene, 3880) == housekeeping.Housekept()  # each marked once: nothing left
    assert housekeeping.lost_records(scene.db, NAMES) == limits.LIMITS.records_per_run
    with pytest.raises(FailedPrecondition):
        retried(scene, "t", "s0")


def test_records_younger_than_the_grace_do_not_fill_the_housekeepings_page() -> None:
    """A page's worth of records still in their process's hands (younger than
    `record_after_s`) does not keep an older record of another tenant from being written."""
    scene = Scene()
    open_sequence(scene, "t")
    open_sequence(scene, "t2")
    old = died(scene, "t2", "old")
    scene.at(scene.sim.monotonic() + limits.LIMITS.record_after_s + 5)
    for n in range(limits.LIMITS.records_per_run):
        died(scene, "t", f"y{n}")
    done = housekeep(scene, scene.sim.monotonic() + 1)
    assert (done.recorded, done.lost) == (1, 0)
    assert record_of(scene, "t2", "old").get("number") == old
    assert record_of(scene, "t", "y0").get("state") == "issuing"  # its process's to carry


def test_a_record_whose_sequence_is_missing_is_marked_lost_and_stops_no_other_tenant() -> None:
    """A record whose tenant's sequence is not there at its create time (a partial import) is
    marked lost, not a failure of the run: the next tenant's record is written."""
    scene = Scene()
    open_sequence(scene, "t")
    scene.model.commit([Write("create", ("sequences", "gone", "number_requests", "0" * 64), {
        "uid": "u", "request_id": "stray", "state": "issuing", "nonce": "n", "spread": 0,
        "claimed_at": scene.sim.wall()})])
    number = died(scene, "t", "a")
    done = housekeep(scene, scene.sim.monotonic() + limits.LIMITS.record_after_s + 1)
    assert (done.recorded, done.lost, done.failed) == (1, 1, ())
    assert record_of(scene, "t", "a").get("number") == number


def test_an_error_for_one_tenant_leaves_its_records_for_the_next_run_and_no_other() -> None:
    """The commit of tenant t's numbers is refused: t is left for the next run (logged with its
    id), t2's are written; the next run writes t's."""
    scene = Scene()
    open_sequence(scene, "t")
    open_sequence(scene, "t2")
    numbers = {"t": died(scene, "t", "a"), "t2": died(scene, "t2", "b")}
    scene.model.draws.script.append(Fate(delay_us=1_000, refused=gexc.PermissionDenied))
    done = housekeep(scene, scene.sim.monotonic() + limits.LIMITS.record_after_s + 1)
    assert (done.recorded, done.failed) == (1, ("t",))
    assert record_of(scene, "t2", "b").get("number") == numbers["t2"]
    assert housekeep(scene, scene.sim.monotonic() + 60).recorded == 1
    assert record_of(scene, "t", "a").get("number") == numbers["t"]


def test_an_import_never_hands_a_request_another_requests_number() -> None:
    """Three requests are given 1, 2 and 3 by processes that die; an import re-creates the
    records and the sequence at its own time, where the sequence holds 3. A retry of the first
    two is refused (their records cannot tell their numbers any more), never answered 3; the
    third's reads back its own 3. The housekeeping marks the two lost and writes the third."""
    scene = Scene()
    open_sequence(scene, "t")
    given = {request_id: died(scene, "t", request_id) for request_id in ("a", "b", "c")}
    assert list(given.values()) == [1, 2, 3]
    scene.at(scene.sim.monotonic() + 1)
    scene.model.reimport("sequences")
    scene.at(scene.sim.monotonic() + 1)
    for request_id in ("a", "b"):
        with pytest.raises(FailedPrecondition):
            retried(scene, "t", request_id)
    done = housekeep(scene, scene.sim.monotonic() + limits.LIMITS.record_after_s + 1)
    assert (done.recorded, done.lost) == (1, 2)
    assert retried(scene, "t", "c") == 3
    assert [record_of(scene, "t", r).get("state") for r in "abc"] == ["lost", "lost", "issued"]


def test_a_counter_the_audit_cannot_check_keeps_no_other_from_its_check() -> None:
    """A counter whose check fails (here a shard Firestore cannot serve) is logged and passed
    over: the run checks the others and records its progress, so the rotation moves on instead
    of failing at that counter every minute."""
    scene = Scene()
    for name in ("a", "b", "c"):
        counters.create_counter(scene.ctx, scene.db, name, shards=1)
    scene.at(1)
    holder = scene.holder("first")
    for name in ("a", "b", "c"):
        counters.increment(scene.ctx, scene.db, name, 1)
    scene.at(2)
    holder.tick()
    scene.at(3)
    scene.model.unreadable.add(("counters", "a", "shards", "0"))
    scene.at(4)
    done = audit.run(scene.holding, scene.db, size=3)
    assert sorted(found.counter for found in done.checked) == ["b", "c"]
    scene.at(5)
    assert (audit.audit_ref(scene.db, NAMES).get().to_dict() or {})["cursor"] == "c"


def test_the_extension_checker_finds_an_amount_taken_twice() -> None:
    """Two moves that read a shard at 5 and each took 5 (the second after a client's +1): the
    second took what the shard no longer held (flagged); a take that left a client's write in
    place, and a delete, took what it held."""
    shard = ("pages", "p", "_counter_shards_", "s")
    takes = checkers.Takes()
    assert takes.seen(shard, 0, 5, took=False) is None  # a client writes 5
    assert takes.seen(shard, 5, 6, took=False) is None  # and 1 more, after a move read 5
    assert takes.seen(shard, 6, 1, took=True) is None  # the move takes the 5 it read
    assert takes.seen(shard, 1, 2, took=False) is None
    assert takes.seen(shard, 2, -3, took=True) == 5  # a second mover takes the same 5
    assert takes.seen(shard, -3, 0, took=True) is None  # a delete takes what it holds
    other = ("pages", "p", "_counter_shards_", "t")
    assert takes.seen(other, 0, 2, took=False) is None
    assert takes.seen(other, 2, 0, took=True) is None  # a delete of what it held


def test_the_audit_sizes_its_runs_for_a_rotation_a_day_and_counts_once_a_rotation() -> None:
    """The first run counts the counters (one aggregation) and checks `per_run` of them; the
    runs of a rotation use that count; the run that begins the rotation again counts anew, so
    counters created since size the next one. 4,400 counters: 4 a run (a day: 1,440 runs)."""
    assert [audit.per_run(n) for n in (0, 4320, 4321, 1_000_000, 5_000_000)] == \
        [3, 3, 4, 695, 1000]
    scene = Scene()

    def made(names: range) -> None:
        for start in range(names.start, names.stop, 500):
            batch = scene.db.batch()
            for n in range(start, min(start + 500, names.stop)):
                batch.set(scene.db.collection("counters").document(f"c{n:05}"), {"count": 0})
            batch.commit()

    made(range(4400))
    scene.at(1)
    first = audit.run(scene.holding, scene.db)
    scene.at(2)
    state = audit.audit_ref(scene.db, NAMES).get().to_dict() or {}
    assert (state["counters"], state["cursor"], len(first.checked)) == (4400, "c00003", 0)
    made(range(4400, 8700))  # more counters: this rotation keeps its size
    scene.at(3)
    audit.run(scene.holding, scene.db)
    scene.at(4)
    state = audit.audit_ref(scene.db, NAMES).get().to_dict() or {}
    assert (state["counters"], state["cursor"]) == (4400, "c00007")
    audit.audit_ref(scene.db, NAMES).update({"cursor": "c08698"})  # the rotation's end
    scene.at(5)
    audit.run(scene.holding, scene.db)  # c08699, then the first three again: counted anew
    scene.at(6)
    state = audit.audit_ref(scene.db, NAMES).get().to_dict() or {}
    assert (state["counters"], state["cursor"]) == (8700, "c00002")
    scene.at(7)
    audit.run(scene.holding, scene.db)
    scene.at(8)
    assert (audit.audit_ref(scene.db, NAMES).get().to_dict() or {})["cursor"] == "c00009"


def test_a_counter_born_before_its_holder_is_met_from_its_memory_not_its_stamp() -> None:
    """A counter made and written (its shard 0) under a first holder, whose sweep persisted its
    counts, then handed over: the successor meets it through a write to its shard 1, and, the
    birth stamp being older than its first tick, reads its memory rather than taking shard 0
    for 0 (`Ledger.meet_born`)."""
    scene = Scene()
    scene.at(1)
    first = scene.holder("first")
    scene.at(2)
    first.tick()
    scene.at(3)
    counters.create_counter(scene.ctx, scene.db, "old", shards=2)
    scene.write_shard("old", 0, 5)
    t = 4.0
    swept = first.swept
    while first.swept == swept:
        scene.at(t)
        first.tick()
        t += 1
    assert scene.published("old") == 5
    successor = scene.hand_over(first, t)
    t += 1  # the lease taken
    for _ in range(3):
        t += 1
        scene.at(t)
        successor.tick()
    scene.write_shard("old", 1, 3)
    for _ in range(3):
        t += 1
        scene.at(t)
        successor.tick()
    assert scene.published("old") == scene.shards("old") == 8


def backlog(scene: Scene, names: list[str], first: Rollup, until: float) -> dict[str, int]:
    """`first` ticks once at 1 s (its checkpoint) and lets go; then a shard of a counter of
    `names` is written every 0.1 s until `until`, each counter's shards in turn, with no holder.
    Returns what each counter's shards hold."""
    scene.at(1.2)
    first.tick()
    scene.at(1.5)
    first.store.lease.release(first.durable_progress)
    t, n = 1.5, 0
    while t < until:
        t += 0.1
        scene.at(t)
        name = names[n % len(names)]
        scene.write_shard(name, (n // len(names)) % 10, 1)
        n += 1
    return {name: scene.shards(name) for name in names}


def test_a_new_holder_reads_its_backlog_over_ticks_and_publishes_only_whole_sums() -> None:
    """A successor 40 s behind reads the older part of what is left each tick, in pages of 10
    (`catch_up_page`), and publishes nothing until its pages reach its instant: every count it
    publishes is a sum of every shard (here 0 or the final sum, as the writes stopped), never
    of the shards one tick read and the others' older values. No tick reads the backlog
    whole (without catching up, the first tick read 251 documents, all of it)."""
    scene = Scene(limits=Limits(catch_up_page=10))
    names, first = scene.twenty_counters()
    truth = backlog(scene, names, first, 41.0)
    successor = scene.holder("successor")
    t, reads, silent = 42.0, [], 0
    while any(scene.published(name) != truth[name] for name in names) and t < 80:
        t += 1
        scene.at(t)
        stats = successor.tick()
        reads.append(stats.reads)
        silent += stats.written == 0 and stats.owed > 0
        scene.at(t + 0.5)  # its commits are done
        assert {name: scene.published(name) for name in names
                if scene.published(name) not in (0, truth[name])} == {}
    assert all(scene.published(name) == truth[name] for name in names)
    assert silent >= 2 and max(reads) < 200, (silent, reads)


def test_a_holder_that_stops_while_catching_up_leaves_its_backlog_to_the_next() -> None:
    """A successor hands over after two ticks of catching up (its watermark in the middle of its
    backlog): the counters it found wait in no memory, so the progress it persists goes back to
    where its catch-up began, and the next holder publishes every sum."""
    scene = Scene(limits=Limits(catch_up_page=10))
    names, first = scene.twenty_counters()
    truth = backlog(scene, names, first, 41.0)
    successor = scene.holder("successor")
    t = scene.ticked(successor, 42.0, 2)
    assert successor.ledger.waiting and successor.watermark > successor.durable_progress.watermark
    third = scene.hand_over(successor, t)
    scene.ticked(third, t + 1, 10)
    scene.at(t + 12)
    assert {name: scene.published(name) for name in names} == truth


def test_a_new_holder_ticking_faster_than_the_overlap_still_catches_up() -> None:
    """A successor 40 s behind ticks every 0.2 s, less than the overlap (a scheduled run's drain:
    ticks back to back) while 90 shards a second are written: each tick reads on from the
    overlap before its last stamp, so it must gain more than that each tick; it catches up within
    a few dozen ticks, owing all the while (its holder ticks on), and then publishes every sum.
    (Gaining two intervals from the first stamp, 0.4 s, it fell behind by 0.05 s a tick.)"""
    scene = Scene(limits=Limits(catch_up_page=10))
    names, first = scene.twenty_counters()
    backlog(scene, names, first, 41.0)
    successor = scene.holder("successor")
    t, n, ticks = 42.0, 0, 0
    while ticks < 40:
        for _ in range(18):
            t += 0.2 / 18
            scene.at(t)
            scene.write_shard(names[n % len(names)], (n // len(names)) % 10, 1)
            n += 1
        stats = successor.tick()
        ticks += 1
        if not successor.catching_up:
            break
        assert stats.owed > 0
    assert not successor.catching_up, ticks
    t = scene.ticked(successor, t, 3)
    scene.at(t + 1)
    assert {name: scene.published(name) for name in names} == \
        {name: scene.shards(name) for name in names}
