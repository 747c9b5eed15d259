"""bench/sim_scale.py at small sizes: exact with the real partitions and ledger, and its checks
catch a partition that misses a stripe, two partitions that own one home, a design whose index
ranges are too few, and ticks too slow for the load."""

from __future__ import annotations

import math

import pytest
import sim_scale
from counting.writepath import partitions
from sim_scale import Costs, Load

COSTS = Costs(fixed_s=0.25, per_counter_s=0.0005, source="test")  # one holder: 1,500 a tick
SMALL = Load(changed_per_s=300, increments_per_s=900, counters=600, shards=3, seconds=3)


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


def narrow(count: int) -> list[sim_scale.PartLike]:
    return [Narrow(count, index) for index in range(count)]


def greedy(count: int) -> list[sim_scale.PartLike]:
    return [Greedy(count, index) for index in range(count)]


@pytest.mark.parametrize("count", [1, 2, 4, 128])
def test_exact_with_the_rollups_code(count: int) -> None:
    outcome = sim_scale.simulate(count, SMALL, COSTS, exact=True, seed=count)
    assert (outcome.lost, outcome.doubled) == (0, 0)
    assert outcome.keeps_up and math.isfinite(outcome.lag_max_s)
    assert outcome.queries_per_tick == 1  # 16 stripes (17 past P = 16): one `in`


def test_a_partition_missing_a_stripe_loses() -> None:
    outcome = sim_scale.simulate(2, SMALL, COSTS, exact=True, part_of=narrow)
    assert outcome.lost and outcome.lost > 0


def test_two_partitions_owning_a_home_double() -> None:
    outcome = sim_scale.simulate(4, SMALL, COSTS, exact=True, part_of=greedy)
    assert outcome.doubled and outcome.doubled > 0
    assert outcome.lost == 0


def test_writes_beyond_the_index_ranges_back_up() -> None:
    """P = 1 has 16 ranges of 500 writes/s: 12,000 increments a second wait for them."""
    crowded = Load(changed_per_s=300, increments_per_s=12_000, counters=600, shards=3, seconds=3)
    outcome = sim_scale.simulate(1, crowded, COSTS, exact=True)
    assert not outcome.keeps_up and outcome.write_delay_max_s > 1
    assert (outcome.lost, outcome.doubled) == (0, 0)  # late, not lost


def test_stripes_are_read_by_their_owner() -> None:
    for count in partitions.CHOICES:
        table = sim_scale.stripe_table(count)
        for home in range(partitions.HOMES):
            owner = partitions.Part(count, home % count)
            assert set(table[home].tolist()) <= set(owner.ticks())


def test_capacity_is_found_and_grows_with_p() -> None:
    one, probes = sim_scale.capacity(1, COSTS)
    budget = (1 - COSTS.fixed_s) / COSTS.per_counter_s
    assert 0.8 * budget < one <= budget
    assert any(not p["keeps_up"] for p in probes) and any(p["keeps_up"] for p in probes)
    four, _ = sim_scale.capacity(4, COSTS)
    assert four / (4 * one) >= 0.85
    slow = Costs(fixed_s=0.25, per_counter_s=0.001, source="test")
    assert sim_scale.capacity(1, slow)[0] < one * 0.6
