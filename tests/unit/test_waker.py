"""The write path's side of ticking (`waking.Waker`): one task per slot and process, named for
the slot and scheduled for its end; refusals and failures never fail a write."""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from counting.writepath import partitions, shards, waking
from counting.writepath.context import Writing
from counting.writepath.partitions import WHOLE, Part
from google.cloud.firestore_v1.types import Value, WriteResult

NOW = dt.datetime(2026, 11, 22, 12, 0, 0, 250_000, tzinfo=dt.UTC)


class Db:
    def __init__(self, project: str = "p") -> None:
        self.project = project


def at(seconds: float) -> dt.datetime:
    return NOW + dt.timedelta(seconds=seconds)


def test_a_slot_is_its_commit_second_and_its_tick_starts_when_it_ends() -> None:
    slot = waking.slot_of(NOW)
    assert slot == int(NOW.timestamp())
    assert waking.slot_of(at(0.74)) == slot and waking.slot_of(at(0.75)) == slot + 1
    assert waking.slot_end(slot) == NOW.replace(microsecond=0) + dt.timedelta(seconds=1)


def test_task_ids_are_valid_distinct_and_spread() -> None:
    """Cloud Tasks allows letters, digits, hyphens and underscores; consecutive slots must not
    share a prefix (sequential names concentrate Cloud Tasks' lookups)."""
    slot = waking.slot_of(NOW)
    ids = [waking.task_id(slot + n) for n in range(100)]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,500}", task) for task in ids)
    assert len(set(ids)) == 100 and len({task[:2] for task in ids}) > 50


def test_one_task_per_slot_and_process() -> None:
    enqueued: list[int] = []

    def enqueue(db: Any, part: Part, slot: int) -> bool:
        assert part == WHOLE
        enqueued.append(slot)
        return True

    waker = waking.Waker(enqueue, count=lambda db: 1)
    db: Any = Db()
    assert waker.after_write(db, at(0.0), {0}) is True
    assert waker.after_write(db, at(0.5), {0}) is False  # the same second: its task is on its way
    assert waker.after_write(db, at(1.0), {0}) is True
    assert waker.after_write(db, at(0.9), {0}) is False  # answered late, in a slot ticked after
    assert enqueued == [waking.slot_of(NOW), waking.slot_of(NOW) + 1]
    other: Any = Db("other")
    assert waker.after_write(other, at(1.0), {0}) is True  # another project: its own rollup
    assert waker.created == 3


def test_a_task_another_process_created_counts_as_refused() -> None:
    waker = waking.Waker(lambda db, part, slot: False, count=lambda db: 1)
    assert waker.after_write(Db(), NOW, {0}) is False  # type: ignore[arg-type]
    assert (waker.created, waker.refused) == (0, 1)


def test_a_failed_enqueue_is_not_retried_for_that_slot() -> None:
    calls: list[int] = []

    def enqueue(db: Any, part: Part, slot: int) -> bool:
        calls.append(slot)
        raise RuntimeError("Cloud Tasks unavailable")

    waker = waking.Waker(enqueue, count=lambda db: 1)
    db: Any = Db()
    assert waker.after_write(db, NOW, {0}) is False
    assert waker.after_write(db, at(0.1), {0}) is False
    assert waker.after_write(db, at(1.0), {0}) is False
    assert calls == [waking.slot_of(NOW), waking.slot_of(NOW) + 1]


def write_result(committed: dt.datetime) -> WriteResult:
    """A WriteResult whose server timestamp is its commit time (nothing straddles)."""
    return WriteResult(update_time=committed, transform_results=[Value(timestamp_value=committed)])


def test_settle_asks_for_the_tick_of_its_last_commit() -> None:
    """`shards.settle`, where the domain's write paths end, hands its context's waker the
    latest commit time of the shards it wrote; a commit that wrote no shard asks for nothing."""
    seen: list[tuple[object, dt.datetime, set[int]]] = []

    class Recording:
        def after_write(self, db: Any, committed_at: dt.datetime,
                        homes: Iterable[int]) -> bool:
            seen.append((db, committed_at, set(homes)))
            return False

    db = object()
    writing = Writing(known=partitions.Known(), waker=Recording())
    shards.settle(writing, db, [])  # type: ignore[arg-type]
    assert seen == []
    written = [shards.Landed.of(shard("a"), partitions.home_of("a"), write_result(at(0.3))),
               shards.Landed.of(shard("b"), partitions.home_of("b"), write_result(at(0.1)))]
    shards.settle(writing, db, written)  # type: ignore[arg-type]
    assert seen == [(db, at(0.3), {partitions.home_of("a"), partitions.home_of("b")})]


def shard(counter: str) -> Any:
    """A counter's shard reference, as far as `partitions.home_of_shard` reads it."""
    counters_coll = SimpleNamespace(id="counters")
    return SimpleNamespace(parent=SimpleNamespace(
        parent=SimpleNamespace(id=counter, parent=counters_coll)))


def test_a_write_wakes_each_partition_it_wrote_to_once_per_slot() -> None:
    """With P = 4, the homes written pick the partitions; each gets its slot's task once."""
    enqueued: list[tuple[Part, int]] = []

    def enqueue(db: Any, part: Part, slot: int) -> bool:
        enqueued.append((part, slot))
        return True

    waker = waking.Waker(enqueue, count=lambda db: 4)
    db: Any = Db()
    assert waker.after_write(db, NOW, {1, 5, 2}) is True
    assert waker.after_write(db, at(0.5), {9, 3}) is True  # partition 3's first task
    assert waker.after_write(db, at(0.6), {13}) is False  # partition 1's is on its way
    slot = waking.slot_of(NOW)
    assert enqueued == [(Part(4, 1), slot), (Part(4, 2), slot), (Part(4, 3), slot)]
    assert waking.task_id(slot, Part(4, 1)) != waking.task_id(slot, Part(4, 2))


def test_a_failing_waker_never_fails_the_write() -> None:
    class Broken:
        def after_write(self, db: Any, committed_at: dt.datetime,
                        homes: Iterable[int]) -> bool:
            raise RuntimeError("no Cloud Tasks")

    writing = Writing(known=partitions.Known(), waker=Broken())
    assert writing.after_write(object(), NOW, {0}) is False  # type: ignore[arg-type]


def test_a_write_waits_a_bounded_time_for_a_slow_cloud_tasks() -> None:
    """Cloud Tasks that does not answer (the Admin SDK would wait two minutes) holds a write up
    for the bound, not longer."""
    release = threading.Event()

    def enqueue(db: Any, part: Part, slot: int) -> bool:
        release.wait(10)
        return True

    waker = waking.Waker(enqueue, count=lambda db: 1, timeout_s=0.2)
    began = time.monotonic()
    assert waker.after_write(Db(), NOW, {0}) is False  # type: ignore[arg-type]
    assert time.monotonic() - began < 2
    release.set()


def test_a_write_to_every_partition_creates_their_tasks_at_once() -> None:
    """A write touching all 128 partitions has all their creations in flight together, under
    one deadline: each creation here waits for all the others to have started, which a pool
    running them a few at a time never lets happen (its creations would time out, none made)."""
    count = partitions.CHOICES[-1]
    started = threading.Barrier(count)

    def enqueue(db: Any, part: Part, slot: int) -> bool:
        started.wait(5)
        return True

    waker = waking.Waker(enqueue, count=lambda db: count, timeout_s=10)
    assert waker.after_write(Db(), NOW, range(count)) is True  # type: ignore[arg-type]
    assert waker.created == count
