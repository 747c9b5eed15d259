"""The rollup's cadence: handovers, duplicate deliveries, a holder that dies, sleep and wake-up.

In-process invocations of `cadence.serve` on a project of their own (isolated_db), with short
timings, stand for the deployed functions; the last test goes through the stack's real
triggers (the increment callable wakes `rolluptick` through the Cloud Tasks emulator).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from callables import Callables
from counting import cadence, config, counters, rollup, status, waking
from counting.lease import Lease, state_ref
from google.cloud import firestore

from tests.waiting import eventually

FAST = config.Cadence(period_s=0.25, lease_s=5.0, run_s=3.0, lead_s=1.5, extend_s=1.0,
                       idle_s=1.0, drain_s=0.6, handover_wait_s=2.5, poll_s=0.1)


# For the chains: writes on an isolated project wake nothing (tests/emulator/conftest.py), so it
# must not fall asleep
# when a busy machine pauses them for a second.
AWAKE = dataclasses.replace(FAST, idle_s=60.0)


def rollup_count(db: firestore.Client, counter: str) -> int:
    return int(counters.counter_ref(db, counter).get().get("count") or 0)


def strong(db: firestore.Client, counter: str) -> int:
    return counters.get_count(db, counter, "strong").count


def lease_state(db: firestore.Client) -> dict[str, Any]:
    return state_ref(db).get().to_dict() or {}


class Chain:
    """Invocations that enqueue their successors as threads (the task queue's stand-in)."""

    def __init__(self, db: firestore.Client, copies: int = 1,
                 timing: config.Cadence = FAST) -> None:
        self.db = db
        self.timing = timing
        self.copies = copies  # deliveries of each successor: 2 is a duplicate delivery
        self.runs: list[cadence.Invocation] = []
        self.threads: list[threading.Thread] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def successor(self) -> None:
        for _ in range(self.copies):
            self.start(woken=True)

    def start(self, *, woken: bool) -> None:
        thread = threading.Thread(target=self.invoke, args=(woken,))
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def invoke(self, woken: bool) -> None:
        successor = None if self.stop.is_set() else self.successor
        run = cadence.serve(self.db, successor=successor, woken=woken, cadence=self.timing,
                            stop=self.stop)
        with self.lock:
            self.runs.append(run)

    def __enter__(self) -> Chain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()  # a failed test leaves no invocation running into the next one

    def finish(self) -> None:
        self.stop.set()
        while True:
            with self.lock:
                pending = [t for t in self.threads if t.is_alive()]
            if not pending:
                return
            for thread in pending:
                thread.join(timeout=30)


def write_for(db: firestore.Client, counter: str, seconds: float) -> int:
    """Increment `counter` about 20 times a second for `seconds`; returns the total added."""
    configs = counters.ConfigCache()
    total, stop_at = 0, time.monotonic() + seconds
    while time.monotonic() < stop_at:
        counters.increment(db, counter, 1, configs=configs)
        total += 1
        time.sleep(0.05)
    return total


def test_handovers_keep_publishing_and_stay_exact(isolated_db: firestore.Client) -> None:
    """A chain of invocations under steady writes sums exactly across several handovers, each
    successor taking the lease its predecessor released (not waiting for it to expire). How long
    publishes pause at a handover is measured by the cadence benchmark (`max_publish_gap_s`)."""
    counters.create_counter(isolated_db, "steady", shards=4)
    with Chain(isolated_db, timing=AWAKE) as chain:
        chain.start(woken=True)
        total = write_for(isolated_db, "steady", 10.0)
        eventually(lambda: rollup_count(isolated_db, "steady") == total, timeout_s=20)
    handed = [run for run in chain.runs if run.outcome == cadence.Outcome.HANDED_OVER]
    assert len(handed) >= 2
    took = sorted(run.took for run in chain.runs if run.ticks)
    assert took == ["new"] + ["released"] * (len(took) - 1)
    assert strong(isolated_db, "steady") == total


def test_duplicate_deliveries_do_no_double_work(isolated_db: firestore.Client) -> None:
    """Every successor delivered twice: one copy takes the lease, the other returns at once."""
    counters.create_counter(isolated_db, "twice", shards=4)
    with Chain(isolated_db, copies=2, timing=AWAKE) as chain:
        chain.start(woken=True)
        total = write_for(isolated_db, "twice", 7.0)
        eventually(lambda: rollup_count(isolated_db, "twice") == total, timeout_s=20)
    busy = [run for run in chain.runs if run.outcome == cadence.Outcome.BUSY]
    worked = [run for run in chain.runs if run.ticks]
    assert busy and all(run.ticks == 0 for run in busy)
    assert len(worked) <= len(chain.runs) - len(busy)
    assert strong(isolated_db, "twice") == rollup_count(isolated_db, "twice") == total


def test_a_redelivery_takes_over_from_a_holder_that_died(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder that dies mid-tick (never releasing) is replaced once its lease expires, and the
    sums come out exact. How long that takes is measured by the chaos benchmark."""
    names = [f"c{n}" for n in range(4)]
    for name in names:
        counters.create_counter(isolated_db, name, shards=2)
    for name in names:
        counters.increment(isolated_db, name, 5, configs=counters.ConfigCache())
    real_commit = rollup.Rollup._commit

    def dies_half_way(self: rollup.Rollup, updates: dict[str, dict[str, Any]]) -> None:
        real_commit(self, dict(list(updates.items())[:2]))
        raise SystemExit("killed mid-tick")

    monkeypatch.setattr(rollup.Rollup, "_commit", dies_half_way)
    monkeypatch.setattr(Lease, "release", lambda *args: None)  # a dead one releases nothing
    with pytest.raises(SystemExit):
        cadence.serve(isolated_db, successor=None, woken=True, cadence=FAST)
    monkeypatch.undo()
    assert lease_state(isolated_db)["owner"] is not None  # still "held" by the dead one
    for name in names:
        counters.increment(isolated_db, name, 1, configs=counters.ConfigCache())
    run = cadence.serve(isolated_db, successor=None, woken=True, cadence=FAST)
    assert run.ticks and run.took == "expired"
    assert [rollup_count(isolated_db, name) for name in names] == [6] * 4


def test_idle_rollup_sleeps_and_a_scheduled_run_only_does_housekeeping(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no writes the holder marks the lease asleep and releases it; a scheduled invocation
    then ticks once and sleeps again, and one that finds writes stays awake."""
    counters.create_counter(isolated_db, "quiet", shards=2)
    first = cadence.serve(isolated_db, successor=None, woken=True, cadence=FAST)
    assert first.outcome == cadence.Outcome.ASLEEP
    state = lease_state(isolated_db)
    assert state["awake"] is False and state["owner"] is None
    seen: list[object] = []
    real_tick = rollup.Rollup.tick

    def tick_seen_by_writers(self: rollup.Rollup) -> rollup.TickStats:
        seen.append(lease_state(isolated_db)["awake"])  # what a writer reads before the tick
        return real_tick(self)

    monkeypatch.setattr(rollup.Rollup, "tick", tick_seen_by_writers)
    housekeeping = cadence.serve(isolated_db, successor=None, woken=False, cadence=FAST)
    monkeypatch.undo()
    assert (housekeeping.outcome, housekeeping.ticks) == (cadence.Outcome.ASLEEP, 1)
    assert seen == [False]  # writers meanwhile are told it sleeps, and wake it
    counters.increment(isolated_db, "quiet", 3, configs=counters.ConfigCache())
    found = cadence.serve(isolated_db, successor=None, woken=False, cadence=FAST)
    assert found.ticks > 1 and rollup_count(isolated_db, "quiet") == 3


def test_a_writer_wakes_a_sleeping_rollup_once(isolated_db: firestore.Client) -> None:
    """After a write, the waker enqueues a wake-up when the lease says asleep, and not again
    for a while; it enqueues nothing while the rollup is awake."""
    counters.create_counter(isolated_db, "woken", shards=2)
    woken: list[int] = []
    waker = waking.Waker(lambda db: woken.append(1))
    assert waker.after_write(isolated_db)  # no lease document yet: nobody ticks
    assert not waker.after_write(isolated_db)
    stop = threading.Event()
    holder = threading.Thread(target=cadence.serve, args=(isolated_db,), kwargs={
        "successor": None, "woken": True, "cadence": cadence.in_process(0.2), "stop": stop})
    holder.start()
    eventually(lambda: lease_state(isolated_db).get("owner"))
    awake = waking.Waker(lambda db: woken.append(2))
    assert not awake.after_write(isolated_db)
    stop.set()
    holder.join(timeout=30)
    assert woken == [1]


def test_the_first_increment_after_sleep_reaches_the_rollup(
    admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """Through the stack's triggers: once the rollup sleeps, an increment enqueues a wake-up
    task, which the Cloud Tasks emulator delivers to `rolluptick`, and the count reaches
    counters/{id}. How soon is measured by the cadence benchmark (`first_after_idle_s`)."""
    counter = f"wake-{suffix}"
    admin.call("create_counter", counter=counter, shards=2)
    wakes_the_sleeping_rollup(db, lambda: admin.call("increment", counter=counter, by=7),
                              lambda: rollup_count(db, counter) == 7)


def wakes_the_sleeping_rollup(db: firestore.Client, write: Callable[[], object],
                              published: Callable[[], bool]) -> None:
    """Once the stack's rollup sleeps, `write` wakes it: what it wrote is `published`, and a
    `rolluptick` invocation that a wake-up task triggered is on record."""
    idle = config.ROLLUP.idle_s + config.ROLLUP.drain_s
    # Released asleep: every instance's cached view of the lease is "asleep" or stale by then.
    eventually(lambda: (lambda state: state.get("awake") is False and state.get("owner") is None)(
        lease_state(db)), timeout_s=idle + 30)
    wakes = woken_invocations(db)
    write()
    eventually(published)
    # An invocation records its trigger when it ends: after it has slept again.
    eventually(lambda: woken_invocations(db) > wakes, timeout_s=idle + 60)


def woken_invocations(db: firestore.Client) -> int:
    usage = cadence.usage_ref(db).get().to_dict() or {}
    return int((usage.get("triggers") or {}).get("wake", 0))


def test_the_lease_reports_the_rollups_health(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a holder ticks, health shows it awake with its tick figures; once nobody renews
    the lease for longer than its TTL (commit times, not the `renewed_at` field), health says
    it is stale."""
    counters.create_counter(isolated_db, "watched", shards=2)
    assert status.read_status(isolated_db).stale == "the rollup never ran"
    stop = threading.Event()
    holder = threading.Thread(target=cadence.serve, args=(isolated_db,), kwargs={
        "successor": None, "woken": True, "cadence": cadence.in_process(0.2), "stop": stop})
    holder.start()
    counters.increment(isolated_db, "watched", 1, configs=counters.ConfigCache())
    found = eventually(lambda: (lambda h: h if h.tick_s is not None else None)(
        status.read_status(isolated_db)))
    assert found.awake and found.stale is None and found.holder and found.lag_s is not None
    stop.set()
    holder.join(timeout=30)
    assert status.read_status(isolated_db).stale is None  # released awake a moment ago
    # A forged `renewed_at` changes nothing: staleness is judged from the commit times.
    state_ref(isolated_db).update({"renewed_at": dt.datetime(2000, 1, 1, tzinfo=dt.UTC)})
    assert status.read_status(isolated_db).stale is None
    monkeypatch.setattr(config, "ROLLUP", dataclasses.replace(config.ROLLUP, lease_s=0.5,
                                                              period_s=0.1))
    eventually(lambda: "no tick for" in (status.read_status(isolated_db).stale or ""))
