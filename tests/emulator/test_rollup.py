"""The rollup loop's library, driven in-process on a Firestore project of its own.

The stack's loop serves demo-counters; these tests get an empty project each (isolated_db), so
they control every tick.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from typing import Any

import pytest
from counting.features import counter_refs, counters, shard_choice
from counting.features.context import Context
from counting.foundation import config
from counting.foundation.config import Names
from counting.rollup import audit, cadence, ledger
from counting.rollup.lease import Lease, LeaseLost, state_ref
from counting.rollup.tick import Limits, Rollup
from google.cloud import firestore

from ..waiting import eventually
from .shards import write_shard

NAMES = Names()  # the collection ids of the default placement, which these run on


def lease_for(db: firestore.Client, owner: str = "test") -> Lease:
    lease = Lease(db, state_ref(db, NAMES), owner, config.ROLLUP.lease_s)
    assert lease.acquire()
    return lease


def rollup_count(db: firestore.Client, counter: str) -> int:
    return int(counter_refs.counter_ref(db, NAMES, counter).get().get("count"))


def strong_count(db: firestore.Client, counter: str) -> int:
    return counters.get_count(db, NAMES, counter, "strong").count


def add(ctx: Context, db: firestore.Client, counter: str, by: int) -> None:
    """An increment, the counter's configuration read afresh."""
    fresh = dataclasses.replace(ctx, configs=shard_choice.ConfigCache())
    counters.increment(fresh, db, counter, by)


def test_tick_writes_the_sum_of_changed_counters(isolated_db: firestore.Client,
                                                 ctx: Context) -> None:
    """A tick sets count and updated_at for counters that changed, and only those."""
    for name in ("a", "b", "quiet"):
        counters.create_counter(ctx, isolated_db, name, shards=4)
    step = Rollup(isolated_db, lease_for(isolated_db), writing=ctx.writing)
    for by in (1, 2, 3):
        add(ctx, isolated_db, "a", by)
    add(ctx, isolated_db, "b", -4)
    stats = step.tick()
    assert (rollup_count(isolated_db, "a"), rollup_count(isolated_db, "b")) == (6, -4)
    assert stats.written == 2 and stats.changed_counters == 2
    a = counter_refs.counter_ref(isolated_db, NAMES, "a").get()
    assert a.get("updated_at") == stats.as_of
    quiet = counter_refs.counter_ref(isolated_db, NAMES, "quiet").get()
    assert quiet.update_time < stats.as_of  # never rewritten


def test_idle_ticks_cost_a_lease_read_and_one_empty_query(isolated_db: firestore.Client,
                                                          ctx: Context
                                                           ) -> None:
    """With nothing changed, a tick costs the read of the lease, the minimum of one query, its
    share of the sweep under way (a cell query or two, one read each), and writes nothing (its
    lease was written less than `renew_s` ago)."""
    for n in range(30):
        counters.create_counter(ctx, isolated_db, f"idle-{n}", shards=3)
    step = Rollup(isolated_db, lease_for(isolated_db), writing=ctx.writing)
    step.tick()
    stats = step.tick()
    counter_reads = stats.reads - (stats.trends.reads if stats.trends else 0)
    assert (counter_reads - stats.sweep_reads, stats.written, stats.changed_counters) == (2, 0, 0)
    assert stats.sweep_reads <= 2 and stats.usage.writes == 0


def test_unchanged_sum_is_not_rewritten(isolated_db: firestore.Client, ctx: Context) -> None:
    """Shards that change but cancel out leave the rollup document alone."""
    counters.create_counter(ctx, isolated_db, "flat", shards=2)
    step = Rollup(isolated_db, lease_for(isolated_db), writing=ctx.writing)
    add(ctx, isolated_db, "flat", 5)
    step.tick()
    add(ctx, isolated_db, "flat", 3)
    add(ctx, isolated_db, "flat", -3)
    assert step.tick().written == 0
    assert rollup_count(isolated_db, "flat") == 5


def test_a_falling_rate_is_decayed_by_readers_not_written(isolated_db: firestore.Client,
                                                         ctx: Context) -> None:
    """The publish carries the rate and its instant; the ticks after it, with nobody writing,
    leave the document alone however far the rate falls, and a reader decays it to what the
    holder measures."""
    counters.create_counter(ctx, isolated_db, "once", shards=1)
    step = Rollup(isolated_db, lease_for(isolated_db), writing=ctx.writing)
    step.tick()  # the watermark: the next tick's rate sample spans a moment, not a minute
    add(ctx, isolated_db, "once", 1)
    first = step.tick()
    published = counter_refs.counter_ref(isolated_db, NAMES, "once").get()
    assert published.get("rate") > 0 and published.get("rate_at") == first.as_of
    for _ in range(3):
        last = step.tick()
        assert last.usage.writes <= 1  # the lease's renewal at most
    again = counter_refs.counter_ref(isolated_db, NAMES, "once").get()
    assert again.update_time == published.update_time
    state = step.ledger.held["once"].scaling
    assert state is not None and 0 < state.rate < published.get("rate")
    shown = ledger.shown_rate(published.get("rate"), published.get("rate_at").timestamp(),
                              last.as_of.timestamp())
    assert shown == pytest.approx(state.rate, rel=0.01)


def test_interrupted_tick_is_redone_exactly(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch, ctx: Context
) -> None:
    """A tick that dies after writing some sums is redone by the next holder, exactly."""
    names = [f"c{n}" for n in range(6)]
    for name in names:
        counters.create_counter(ctx, isolated_db, name, shards=3)
    one_a_commit = Limits(publishes_per_commit=1)
    first = Rollup(isolated_db, lease_for(isolated_db, "crashing"), writing=ctx.writing,
                   limits=one_a_commit)
    first.tick()
    rng = random.Random(7)
    expected = dict.fromkeys(names, 0)
    for _ in range(60):
        name, by = rng.choice(names), rng.randint(-5, 9)
        add(ctx, isolated_db, name, by)
        expected[name] += by

    real_batch = isolated_db.batch
    commits = {"n": 0}

    def failing_batch() -> Any:
        batch = real_batch()
        commit = batch.commit

        def crash_after_first_chunk(**options: Any) -> Any:
            # A tick commits its lease renewal, then the sums in chunks: die after one chunk.
            commits["n"] += 1
            if commits["n"] > 2:
                raise RuntimeError("instance died mid-tick")
            return commit(**options)

        monkeypatch.setattr(batch, "commit", crash_after_first_chunk)
        return batch

    monkeypatch.setattr(isolated_db, "batch", failing_batch)
    with pytest.raises(RuntimeError):
        first.tick()
    monkeypatch.setattr(isolated_db, "batch", real_batch)
    half_written = [rollup_count(isolated_db, name) == expected[name] for name in names]
    assert 0 < sum(half_written) < len(names)

    # The dead holder's lease has the persisted watermark of before the failed tick.
    successor = Rollup(isolated_db, lease_for(isolated_db, "crashing"), writing=ctx.writing,
                       limits=one_a_commit)
    successor.tick()
    assert {name: rollup_count(isolated_db, name) for name in names} == expected
    assert all(strong_count(isolated_db, name) == expected[name] for name in names)


def test_rollup_is_exact_while_writes_continue(isolated_db: firestore.Client, ctx: Context) -> None:
    """Ticks racing 4 writers always publish a sum the shards really had; the last is exact."""
    counters.create_counter(ctx, isolated_db, "hot", shards=5)
    step = Rollup(isolated_db, lease_for(isolated_db), writing=ctx.writing)
    stop = threading.Event()
    totals = [0] * 4

    def writer(n: int) -> None:
        mine = dataclasses.replace(ctx, configs=shard_choice.ConfigCache())
        while not stop.is_set():
            counters.increment(mine, isolated_db, "hot", 1)
            totals[n] += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    published = []
    try:
        for _ in range(8):
            step.tick()
            published.append(rollup_count(isolated_db, "hot"))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    step.tick()
    assert published == sorted(published)  # increments only: sums never go back
    assert rollup_count(isolated_db, "hot") == sum(totals) == strong_count(isolated_db, "hot")


def test_a_second_loop_waits_for_the_lease(isolated_db: firestore.Client) -> None:
    """While one holder renews, another cannot take the lease; after release it can."""
    first = lease_for(isolated_db, "first")
    second = Lease(isolated_db, state_ref(isolated_db, NAMES), "second", config.ROLLUP.lease_s)
    assert not second.acquire()
    first.renew()
    assert not second.acquire()
    first.release(first.record.progress)
    assert second.acquire()
    with pytest.raises(LeaseLost):
        first.renew()


def test_a_holder_keeps_its_ledger_between_ticks_and_lets_go_when_closed(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """One holder ticks in separate invocations: the first reads the counter whole, the next
    only the shard written since; closing it releases the lease with its progress."""
    counters.create_counter(ctx, isolated_db, "looped", shards=3)
    for _ in range(10):
        add(ctx, isolated_db, "looped", 2)
    holder = cadence.Holder(isolated_db, writing=ctx.writing)
    first = holder.tick_slot(None)
    assert first.outcome == cadence.Outcome.TICKED and rollup_count(isolated_db, "looped") == 20
    add(ctx, isolated_db, "looped", 1)
    second = holder.tick_slot(None)
    assert rollup_count(isolated_db, "looped") == 21
    # The lease read, the change query (the shards written within the overlap) and no shard
    # listing: the counter is not read whole again.
    assert second.usage.reads < first.usage.reads
    holder.close()
    state = state_ref(isolated_db, NAMES).get()
    assert state.get("owner") is None and state.get("watermark") is not None


def test_a_superseded_holder_commits_nothing(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch, ctx: Context
) -> None:
    """A holder that stalls mid-tick past its lease cannot write its older sums over those of
    the holder that took over meanwhile."""
    counters.create_counter(ctx, isolated_db, "fenced", shards=2)
    stale = Rollup(isolated_db, Lease(isolated_db, state_ref(isolated_db, NAMES), "stale",
                                             0.5), writing=ctx.writing)
    assert stale.store.lease.acquire()
    add(ctx, isolated_db, "fenced", 1)
    real_plan = ledger.Ledger.plan

    def stall_then_plan(self: ledger.Ledger, *args: Any, **kwargs: Any) -> Any:
        if self is stale.ledger:
            # Paused (GC, a slow machine) past the lease: a successor takes over and publishes.
            add(ctx, isolated_db, "fenced", 10)
            lease = Lease(isolated_db, state_ref(isolated_db, NAMES), "successor", 0.5)
            eventually(lease.acquire, timeout_s=10)  # once the stale holder's lease expired
            successor = Rollup(isolated_db, lease, writing=ctx.writing)
            successor.tick()
        return real_plan(self, *args, **kwargs)

    monkeypatch.setattr(ledger.Ledger, "plan", stall_then_plan)
    with pytest.raises(LeaseLost):
        stale.tick()
    assert rollup_count(isolated_db, "fenced") == 11


def test_a_counter_that_cannot_be_published_does_not_stop_the_others(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """A sum outside 64-bit integers and a deleted counter document are skipped and reported;
    every other counter is published and the watermark moves on."""
    for name in ("big", "gone", "fine"):
        counters.create_counter(ctx, isolated_db, name, shards=2)
    step = Rollup(isolated_db, lease_for(isolated_db), writing=ctx.writing)
    add(ctx, isolated_db, "gone", 1)
    step.tick()
    for shard in (0, 1):
        write_shard(isolated_db, "big", shard, 2**62)
    write_shard(isolated_db, "big", 0, 2**62)
    add(ctx, isolated_db, "gone", 4)
    counter_refs.counter_ref(isolated_db, NAMES, "gone").delete()
    add(ctx, isolated_db, "fine", 5)
    before = step.watermark
    stats = step.tick()
    assert rollup_count(isolated_db, "fine") == 5
    assert step.watermark > before
    assert any(p.startswith("big: sum") for p in stats.problems)
    assert any(p.startswith("gone: ") for p in stats.problems)
    add(ctx, isolated_db, "fine", 1)
    again = step.tick()
    assert rollup_count(isolated_db, "fine") == 6
    assert any(p.startswith("big: ") for p in again.problems)  # reported while it lasts


def test_first_loads_are_spread_and_survive_a_handover(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch, ctx: Context
) -> None:
    """A holder meeting more counters than it meets in a tick (one by its document; the others
    wait) publishes them over the next ticks; one that hands over first leaves a watermark from
    which its successor finds them."""
    budget = Limits(document_loads_per_tick=1, first_loads_per_tick=1)
    names = [f"many-{n}" for n in range(5)]
    for name in names:
        counters.create_counter(ctx, isolated_db, name, shards=2)
        add(ctx, isolated_db, name, 3)
    first = Rollup(isolated_db, lease_for(isolated_db, "first"), writing=ctx.writing,
                   limits=budget)
    stats = first.tick()
    assert (stats.changed_counters, stats.owed) == (1, 4)
    assert sum(rollup_count(isolated_db, name) == 3 for name in names) == 1
    first.store.lease.release(first.durable_progress)  # hands over with four still owed
    successor = Rollup(isolated_db, lease_for(isolated_db, "successor"), writing=ctx.writing,
                       limits=budget)
    for _ in range(6):  # it meets all five (from the watermark left), one a tick
        successor.tick()
    assert [rollup_count(isolated_db, name) for name in names] == [3] * 5



def test_the_audit_turns_a_lasting_mismatch_into_drift(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, ctx: Context
) -> None:
    """An exact rollup gives the audit nothing to say. A shard changed behind the rollup's back
    (no `updated_at`: no query finds it, as a write landing later than any sweep reaches) makes
    the next publish disagree with the shards at its instant: a suspect at one run, drift at a
    later one once the confirmation time has passed, logged at ERROR, kept in internal/audit,
    and repaired: the next tick publishes the shards' sum."""
    db = isolated_db
    counters.create_counter(ctx, db, "liked", shards=2)
    step = Rollup(db, lease_for(db), writing=ctx.writing)
    write_shard(db, "liked", 0, 3)
    step.tick()
    assert audit.run(ctx.writing, db, size=10) == audit.Run(
        checked=[audit.check_counter(db, NAMES,
                                     "liked")], suspects=[], drift=[])  # type: ignore[list-item]
    forged = counter_refs.shard_ref(db, NAMES, "liked", 1)
    forged.update({"count": firestore.Increment(4)})
    write_shard(db, "liked", 0, 1)
    step.tick()
    found = audit.check_counter(db, NAMES, "liked")
    assert found is not None and (found.published, found.shards) == (4, 8)
    assert audit.run(ctx.writing, db, size=10).suspects == ["liked"]
    monkeypatch.setattr(audit, "CONFIRM_AFTER_S", 0.0)
    with caplog.at_level(logging.ERROR, logger="counting.rollup.audit"):
        confirmed = audit.run(ctx.writing, db, size=10)
    assert [c.counter for c in confirmed.drift] == ["liked"] and confirmed.suspects == []
    assert any(r.getMessage().startswith(audit.DRIFT_LOG_PREFIX) for r in caplog.records)
    state = audit.audit_ref(db, NAMES).get().to_dict() or {}
    assert [(d["counter"], d["published"], d["shards"]) for d in state["drift"]] == [
        ("liked", 4, 8)]
    assert state["last_drift_at"] == state["last_run_at"] and state["checked"] == 3
    # The drifting counter's shards were touched: the next tick publishes their sum.
    step.tick()
    assert rollup_count(db, "liked") == 8 and audit.check_counter(
        db, NAMES, "liked").exact  # type: ignore[union-attr]
