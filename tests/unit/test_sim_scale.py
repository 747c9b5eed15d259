"""bench/sim_scale.py at small sizes: the real tick (`tick.Rollup` and its ledger) on the
stand-in store is exact through sweeps and a handover (its successor starting from the lease's
progress), and the simulation's checks catch a
partition that misses a stripe (late: its sweep finds them), two partitions that own one home,
index ranges too few for the writes, a per-P cost (ticks reading every partition's stripes) and
a per-held one (a ledger that visits every counter it holds each tick) put back."""

from __future__ import annotations

import math
from typing import Any

import pytest
import sim_scale
from counting.rollup.lease import Progress
from counting.writepath import partitions
from sim_scale import Costs, Load

COSTS = Costs.deployed()
# 40 s: a sweep (every 50 s, its cells spread from the first tick) under way, a handover at 20 s.
SMALL = dict(counters_per_changed=10, shards=4, seconds=40, handover_s=20.0, warm_s=5.0)


def small(changed: int) -> Load:
    return Load(changed_per_s=changed, **SMALL)  # type: ignore[arg-type]


class Narrow(partitions.Part):
    """Its ticks read all their stripes but the last."""

    def ticks(self) -> list[int]:
        return super().ticks()[:-1]


class Greedy(partitions.Part):
    """Partition 2 of P also owns partition 1's homes, and reads their stripes."""

    def owns(self, home: int) -> bool:
        return super().owns(home) or (self.index == 1 and home % self.count == 0)

    def ticks(self) -> list[int]:
        mine = super().ticks()
        if self.index != 1:
            return mine
        return sorted({*mine, *partitions.Part(self.count, 0).ticks()})


class Everywhere(partitions.Part):
    """Its ticks read every partition's stripes (and keep what it owns)."""

    def ticks(self) -> list[int]:
        return sorted({stripe for index in range(self.count)
                       for stripe in partitions.Part(self.count, index).ticks()})


class Walking(sim_scale.SimLedger):
    """The ledger as it was: every tick visits every counter it holds."""

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        found = super().apply(*args, **kwargs)
        self._visiting |= set(self.held)
        return found


def test_exact_through_sweeps_and_a_handover() -> None:
    for count in (1, 4, 128):
        outcome = sim_scale.simulate(count, small(3), COSTS, seed=count)
        assert (outcome.lost, outcome.doubled) == (0, 0), count
        assert outcome.keeps_up, count
        assert outcome.handover_tick_max_s is not None  # a successor ticked after the handover
    # A sweep completes within a run of 130 s, two in every partition.
    long = sim_scale.simulate(2, Load(changed_per_s=4, counters_per_changed=10, shards=4),
                              COSTS)
    assert long.sweeps >= 4 and (long.lost, long.doubled) == (0, 0)


def test_a_partition_missing_a_stripe_is_late() -> None:
    """What its ticks miss, the sweep finds: nothing lost, but tens of seconds late."""
    outcome = sim_scale.simulate(2, small(3), COSTS,
                                 part_of=lambda n: [Narrow(n, i) for i in range(n)])
    assert outcome.lag_p99_s > 10 and math.isfinite(outcome.lag_max_s) and outcome.lost == 0
    assert sim_scale.simulate(2, small(3), COSTS).lag_p99_s < 3


def test_two_partitions_owning_a_home_double() -> None:
    outcome = sim_scale.simulate(4, small(3), COSTS,
                                 part_of=lambda n: [Greedy(n, i) for i in range(n)])
    assert outcome.doubled > 0


def test_writes_beyond_the_index_ranges_back_up() -> None:
    """P = 1 has 16 ranges of 500 writes/s: 10,000 increments a second wait for them."""
    crowded = Load(changed_per_s=1000, counters_per_changed=1, shards=4, seconds=8,
                   handover_s=None, warm_s=2.0)
    outcome = sim_scale.simulate(1, crowded, COSTS)
    assert not outcome.keeps_up and outcome.write_delay_max_s > 1


def test_stripes_are_read_by_their_owner() -> None:
    for count in partitions.CHOICES:
        table = sim_scale.stripe_table(count)
        for home in range(partitions.HOMES):
            owner = partitions.Part(count, home % count)
            assert set(table[home].tolist()) <= set(owner.ticks())


def table(changed: int) -> Load:
    """The table's counters in all (100 a changed one), of 4 shards, for 40 s."""
    return Load(changed_per_s=changed, shards=4, seconds=40, handover_s=20.0, warm_s=5.0)


def linearity(count: int, **broken: Any) -> float:
    one, _ = sim_scale.capacity(1, COSTS, guess=20, load=table, **broken)
    many, _ = sim_scale.capacity(count, COSTS, guess=20 * count, load=table, **broken)
    return many / (count * one)


def test_linearity_falls_with_a_cost_per_p() -> None:
    """Ticks that read every partition's stripes return P times the documents they keep:
    capacity grows less with P. (Deterministic: virtual time, one seed.)"""
    real = linearity(4)
    assert real > 0.7  # the busiest of 4 partitions takes more than a quarter
    assert linearity(4, part_of=lambda n: [Everywhere(n, i) for i in range(n)]) < 0.85 * real


def test_capacity_falls_with_a_cost_per_held_counter() -> None:
    """A tick visiting every held counter: one holder carries far less. (Linearity holds: the
    counters a partition holds grow with its own load, not with P; the model's agreement
    falls.)"""
    real, _ = sim_scale.capacity(1, COSTS, guess=20, load=table)
    walking, _ = sim_scale.capacity(1, COSTS, guess=20, load=table, ledger=Walking)
    assert walking < 0.6 * real


def test_the_models_sweep_overread_is_what_a_sweeps_stripes_hold() -> None:
    """`capacity_model.sweep_overread` against the model's documents: the share of all shard
    writes in a partition's sweep stripes over its own, at P = 16 (1) and 128 (2.24)."""
    import capacity_model
    import numpy as np

    for count in (16, 128):
        load = Load(changed_per_s=200, shards=2, seconds=1, handover_s=None)
        writes = sim_scale.write(load, count, np.random.default_rng(count))
        home = sim_scale.homes(load.counters)[writes.counter]
        ratios = []
        for index in range(4):
            part = partitions.Part(count, index)
            swept = np.isin(writes.stripe, part.reads(max(partitions.BASE_HOMES, count)))
            own = np.array([part.owns(h) for h in range(partitions.HOMES)])[home]
            ratios.append(swept.sum() / own.sum())
        assert np.mean(ratios) == pytest.approx(capacity_model.sweep_overread(count), rel=0.1)


class Amnesiac(sim_scale.Holder):
    """Its successors start from the run's start, not from what the lease's record carries."""

    def _successor(self) -> Any:
        if hasattr(self, "rollup"):
            start = sim_scale.instant(sim_scale.HISTORY_S * sim_scale.US)
            self.lease.note(progress=Progress(watermark=start, swept=start, checkpoint=start))
        return super()._successor()


def test_a_successor_starts_from_the_leases_progress() -> None:
    """At 60 s a successor that reads the lease's progress (the last round of memories, the last
    sweep) reads back less than one that starts over; both exact."""
    load = Load(changed_per_s=3, shards=4, seconds=100, handover_s=60.0)
    real = sim_scale.simulate(2, load, COSTS)
    over = sim_scale.simulate(2, load, COSTS, holder=Amnesiac)
    assert (real.lost, real.doubled, over.lost, over.doubled) == (0, 0, 0, 0)
    assert real.handover_documents < 0.85 * over.handover_documents
