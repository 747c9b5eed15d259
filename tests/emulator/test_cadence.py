"""The rollup's cadence: one tick per slot's task on a holder that keeps its ledger, late and
duplicate deliveries, another holder's lease, the scheduled housekeeping, and what it all costs.

In-process holders on a project of their own (isolated_db), with short timings, stand for the
deployed functions; the last tests go through the stack's real triggers (an increment enqueues
its slot's task, which the Cloud Tasks emulator delivers to `rolluptick` after the slot ends).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
from callables import Callables
from counting.features import counter_refs, counters, shard_choice
from counting.features.context import Context
from counting.foundation import config
from counting.foundation.config import Names, Placement
from counting.rollup import cadence, repartition, status
from counting.rollup.lease import state_ref
from counting.rollup.tick import Limits
from counting.writepath import partitions, waking
from counting.writepath.partitions import WHOLE, Part
from google.cloud import firestore

from tests.waiting import eventually

NAMES = Names()  # the collection ids of the default placement, which these run on

FAST = dataclasses.replace(config.ROLLUP, lease_s=3.0, renew_s=1.0, busy_wait_s=0.5,
                           poll_s=0.1, usage_flush_s=0.0)


def rollup_count(db: firestore.Client, counter: str) -> int:
    return int(counter_refs.counter_ref(db, NAMES, counter).get().get("count") or 0)


def add(ctx: Context, db: firestore.Client, counter: str, by: int) -> dt.datetime:
    """An increment, the counter's configuration read afresh; returns its commit time."""
    fresh = dataclasses.replace(ctx, configs=shard_choice.ConfigCache())
    counters.increment(fresh, db, counter, by)
    shards = counter_refs.counter_ref(db, NAMES, counter).collection(config.SHARDS).stream()
    latest: dt.datetime = max(shard.update_time for shard in shards)
    return latest


def usage(db: firestore.Client) -> dict[str, Any]:
    return cadence.usage_ref(db, NAMES).get().to_dict() or {}


def test_a_slot_is_ticked_once_after_it_ends(isolated_db: firestore.Client, ctx: Context) -> None:
    """A task for the slot of a write ticks after the slot's end and publishes the write; the
    same slot delivered again, or an older slot delivered late, costs no Firestore operation."""
    counters.create_counter(ctx, isolated_db, "slotted", shards=2)
    holder = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    slot = waking.slot_of(add(ctx, isolated_db, "slotted", 3))
    run = holder.tick_slot(slot)
    assert run.outcome == cadence.Outcome.TICKED and rollup_count(isolated_db, "slotted") == 3
    assert holder.last_as_of is not None and holder.last_as_of >= waking.slot_end(slot)
    for late in (slot, slot - 5):
        again = holder.tick_slot(late)
        assert again.outcome == cadence.Outcome.COVERED and again.usage.reads == 0
    holder.close()


def test_a_warm_holder_reads_only_what_changed(isolated_db: firestore.Client, ctx: Context) -> None:
    """Between invocations the holder keeps its ledger: a later tick reads the lease, the change
    query and nothing whole, and writes the counter and the lease in one commit."""
    counters.create_counter(ctx, isolated_db, "warm", shards=8)
    for _ in range(8):
        add(ctx, isolated_db, "warm", 1)
    # Past the change query's overlap: the second tick's query does not return these again.
    time.sleep(config.CHANGE_OVERLAP_S + 0.2)
    holder = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    first = holder.tick_slot(None)
    assert first.usage.reads >= 8 + 1  # the counter read whole
    add(ctx, isolated_db, "warm", 1)
    second = holder.tick_slot(None)
    assert rollup_count(isolated_db, "warm") == 9
    # The lease, the shards written within the overlap (at most the two of the last second).
    assert second.usage.reads <= 3, second.usage
    # The counter and the fence (its memory's shard counts wait for the next sweep).
    assert second.usage.writes == 2, second.usage
    holder.close()


def test_an_early_task_whose_lease_was_taken_ticks_after_its_slot(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """A task delivered before its slot ends, to a holder whose lease the scheduled run took and
    let go meanwhile: it takes the lease back once, and its last tick still starts after the
    slot's end."""
    counters.create_counter(ctx, isolated_db, "early", shards=1)
    holder = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    holder.tick_slot(None)
    time.sleep(FAST.lease_s + 0.5)
    assert cadence.Holder(isolated_db, cadence=FAST,
                          writing=ctx.writing).housekeeping().outcome == \
        cadence.Outcome.TICKED
    # The next second's task, delivered at once: over a second early, however slow the machine
    # (the write's own slot may have ended by the time the lease is read).
    slot = waking.slot_of(add(ctx, isolated_db, "early", 1)) + 1
    run = holder.tick_slot(slot)
    assert run.outcome == cadence.Outcome.TICKED and run.early and run.ticks >= 2
    assert holder.last_as_of is not None and holder.last_as_of >= waking.slot_end(slot)
    assert rollup_count(isolated_db, "early") == 1
    holder.close()


def test_a_holder_that_owes_counters_does_not_take_a_late_task_as_done(
    isolated_db: firestore.Client, ctx: Context
) -> None:
    """Counters left waiting by the budget of meetings get the next second's task; a late
    delivery of an earlier slot is not skipped while any is owed: it meets the next one."""
    names = ("a", "b", "c")
    for name in names:
        counters.create_counter(ctx, isolated_db, name, shards=1)
    slot = max(waking.slot_of(add(ctx, isolated_db, name, 1)) for name in names)
    enqueued: list[int] = []

    def enqueue(part: Part, next_slot: int) -> bool:
        assert part == WHOLE
        enqueued.append(next_slot)
        return True

    holder = cadence.Holder(isolated_db, cadence=FAST, enqueue=enqueue, writing=ctx.writing,
                            # one met by its document a tick, the others wait
                            limits=Limits(document_loads_per_tick=1, first_loads_per_tick=1))
    time.sleep(max(0.0, (waking.slot_end(slot) - dt.datetime.now(dt.UTC)).total_seconds()))
    first = holder.tick_slot(slot)
    assert first.outcome == cadence.Outcome.TICKED and len(enqueued) == 1
    assert [rollup_count(isolated_db, name) for name in names].count(1) == 1
    for _ in range(2):
        assert holder.tick_slot(slot).outcome == cadence.Outcome.TICKED  # late, but owed
    assert [rollup_count(isolated_db, name) for name in names] == [1, 1, 1]
    assert holder.tick_slot(slot).outcome == cadence.Outcome.COVERED  # nothing owed now
    holder.close()


def test_a_task_that_finds_another_holder_fails_for_a_retry(isolated_db: firestore.Client,
                                                            ctx: Context
                                                             ) -> None:
    """While another holder's lease is live, a task waits `busy_wait_s` and fails (Cloud Tasks
    delivers it again); once that holder lets go it ticks, with a ledger of its own."""
    counters.create_counter(ctx, isolated_db, "shared", shards=2)
    add(ctx, isolated_db, "shared", 2)
    first = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    first.tick_slot(None)
    second = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    with pytest.raises(cadence.Busy):
        second.tick_slot(None)
    first.close()
    add(ctx, isolated_db, "shared", 3)
    assert second.tick_slot(None).outcome == cadence.Outcome.TICKED
    assert rollup_count(isolated_db, "shared") == 5
    second.close()


def test_housekeeping_ticks_only_when_nobody_else_holds_the_lease(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """The scheduled invocation leaves a live holder alone; once that holder's lease expires it
    ticks and lets go, and the holder takes the lease back at its next task with an empty
    ledger, publishing exactly."""
    counters.create_counter(ctx, isolated_db, "kept", shards=3)
    add(ctx, isolated_db, "kept", 1)
    tasks = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    tasks.tick_slot(None)
    scheduled = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    assert scheduled.housekeeping().outcome == cadence.Outcome.BUSY
    add(ctx, isolated_db, "kept", 2)
    eventually(lambda: scheduled.housekeeping().outcome == cadence.Outcome.TICKED,
               timeout_s=FAST.lease_s + 10)
    assert rollup_count(isolated_db, "kept") == 3
    assert (state_ref(isolated_db, NAMES).get().to_dict() or {}).get("owner") is None  # let go
    add(ctx, isolated_db, "kept", 4)
    again = tasks.tick_slot(None)
    assert again.outcome == cadence.Outcome.TICKED and rollup_count(isolated_db, "kept") == 7
    assert again.usage.reads >= 3  # read whole again: another holder published in between
    tasks.close()


def test_invocations_add_what_they_cost_to_the_usage_record(isolated_db: firestore.Client,
                                                            ctx: Context
                                                            ) -> None:
    """Each invocation's billed time (rounded up to 100 ms), ticks, operations, outcome and
    trigger reach internal/rollup_usage; the record's own write is counted."""
    counters.create_counter(ctx, isolated_db, "billed", shards=2)
    holder = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    slot = waking.slot_of(add(ctx, isolated_db, "billed", 1)) + 1  # over a second early
    holder.tick_slot(slot)
    holder.tick_slot(slot)
    found = usage(isolated_db)
    # Delivered before its slot ended: it ticked, waited for the end, ticked again.
    assert found["invocations"] == 2 and found["ticks"] == 2 and found["early"] == 1
    assert found["outcomes"] == {"ticked": 1, "covered": 1}
    assert found["triggers"] == {"write": 2}
    assert found["billed_seconds"] >= 0.2 and round(found["billed_seconds"] * 10) == \
        pytest.approx(found["billed_seconds"] * 10)
    assert found["reads"] >= 2 and found["writes"] >= 3  # acquire, commit, the record's
    holder.close()


def test_the_lease_reports_the_rollups_health(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch, ctx: Context
) -> None:
    """After ticks, health shows it active with its tick figures; once nobody writes the lease
    for longer than ROLLUP_STALE_S (commit times, not the `renewed_at` field), it is stale."""
    counters.create_counter(ctx, isolated_db, "watched", shards=2)
    assert status.read_status(isolated_db, NAMES).stale == "the rollup never ran"
    holder = cadence.Holder(isolated_db, cadence=FAST, writing=ctx.writing)
    for _ in range(2):  # a tick's figures go with the holder's next write to the lease
        add(ctx, isolated_db, "watched", 1)
        holder.tick_slot(None)
    found = status.read_status(isolated_db, NAMES)
    assert found.active and found.stale is None and found.holder and found.lag_s is not None
    assert found.tick_s is not None
    holder.close()
    # A forged `renewed_at` changes nothing: staleness is judged from the commit times.
    state_ref(isolated_db, NAMES).update({"renewed_at": dt.datetime(2000, 1, 1, tzinfo=dt.UTC)})
    assert status.read_status(isolated_db, NAMES).stale is None
    monkeypatch.setattr(config, "ROLLUP_STALE_S", 0.5)
    eventually(lambda: "no tick for" in (status.read_status(isolated_db, NAMES).stale or ""))


# -- through the stack's triggers --


def test_an_increment_is_published_by_its_slots_task(
    admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """Through the stack: an increment enqueues its slot's task, which the Cloud Tasks emulator
    delivers to `rolluptick` after the slot ends, and the count reaches counters/{id}. How soon
    is measured by the cost benchmark (`lag_p99_s_*`, `first_after_idle_s`)."""
    counter = f"slot-{suffix}"
    admin.call("create_counter", counter=counter, shards=2)
    ticked_by_a_write(db, lambda: admin.call("increment", counter=counter, by=7),
                      lambda: rollup_count(db, counter) == 7)


def ticked_by_a_write(db: firestore.Client, write: Callable[[], object],
                      published: Callable[[], bool], within_s: float = 10.0) -> None:
    """`write` is published by its slot's task: the scheduler's runs come at each minute's
    start, so a write made between its seconds 5 and 60 - `within_s` - 10 and published within
    `within_s` was."""
    eventually(lambda: 5 <= dt.datetime.now(dt.UTC).second <= 50 - within_s, timeout_s=60)
    write()
    eventually(published, timeout_s=within_s)


def test_the_writes_of_one_second_share_one_task(db: firestore.Client, suffix: str) -> None:
    """Tasks are named for their slot: the Cloud Tasks emulator refuses a second one, so the
    writers of one second, on any number of instances, enqueue its tick once."""
    slot = waking.slot_of(dt.datetime.now(dt.UTC)) + 3600 + int(suffix, 16) % 10**6
    assert waking.enqueue_tick(db, Placement(), "write", WHOLE, slot) is True
    assert waking.enqueue_tick(db, Placement(), "write", WHOLE, slot) is False


def test_each_partition_is_ticked_by_its_own_function(
    admin: Callables, db: firestore.Client, suffix: str, ctx: Context
) -> None:
    """With P = 4 on the stack's project, a write to a counter of each partition is published by
    that partition's task function (`rolluptick`, `rolluptick1`, ...); back at P = 1 the one
    partition publishes again. A callable that still knows the old P for a few seconds wakes a
    retired partition, whose task wakes the current ones."""
    names: dict[int, str] = {}
    for n in range(200):
        name = f"part-{suffix}-{n}"
        names.setdefault(partitions.home_of(name) % 4, name)
    assert sorted(names) == [0, 1, 2, 3]
    for name in names.values():
        admin.call("create_counter", counter=name, shards=2)
    try:
        repartition.change(db, NAMES, 4, known=ctx.writing.known)
        ticked_by_a_write(
            db, lambda: [admin.call("increment", counter=name, by=3) for name in names.values()],
            lambda: all(rollup_count(db, name) == 3 for name in names.values()),
            within_s=25.0)  # three more function workers start
        found = status.read_statuses(db, NAMES)
        assert [part for part, _ in found] == partitions.parts(4)
        assert all(state.last_tick_at is not None for _, state in found)
    finally:
        repartition.change(db, NAMES, 1, known=ctx.writing.known)
    ticked_by_a_write(
        db, lambda: [admin.call("increment", counter=name, by=2) for name in names.values()],
        lambda: all(rollup_count(db, name) == 5 for name in names.values()))


def test_past_16_partitions_each_is_ticked_by_its_own_function(
    admin: Callables, db: firestore.Client, suffix: str, ctx: Context
) -> None:
    """With P = 32 (the emulator serves 32 tick functions: functions/.env.local), counters of
    partitions 1, 17 and 32 are published by their own task functions (`rolluptick`,
    `rolluptick16`, `rolluptick31`), from stripes at resolution 32; back at P = 1 the one
    partition reads what those writes left and publishes on."""
    names: dict[int, str] = {}
    for n in range(2000):
        name = f"wide-{suffix}-{n}"
        if partitions.home_of(name) % 32 in (0, 16, 31):
            names.setdefault(partitions.home_of(name) % 32, name)
    assert sorted(names) == [0, 16, 31]
    for name in names.values():
        admin.call("create_counter", counter=name, shards=1)
    try:
        repartition.change(db, NAMES, 32, known=ctx.writing.known)
        time.sleep(config.CONFIG_CACHE_TTL_S + 1)  # the callables' instances know P = 32
        ticked_by_a_write(
            db, lambda: [admin.call("increment", counter=name, by=3) for name in names.values()],
            lambda: all(rollup_count(db, name) == 3 for name in names.values()),
            within_s=25.0)  # two more function workers start
        found = dict(status.read_statuses(db, NAMES))
        assert len(found) == 32
        assert all(found[Part(32, index)].last_tick_at is not None for index in names)
        for home, name in names.items():  # each shard's stripe names its home at resolution 32
            shard = counter_refs.shard_ref(db, NAMES, name, 0).get()
            assert int(shard.get("stripe")) % 32 == home
    finally:
        repartition.change(db, NAMES, 1, known=ctx.writing.known)
    ticked_by_a_write(
        db, lambda: [admin.call("increment", counter=name, by=2) for name in names.values()],
        lambda: all(rollup_count(db, name) == 5 for name in names.values()))
