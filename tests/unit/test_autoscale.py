"""Pure parts of autoscaling: sizing, the rate EWMA, the grow/shrink decision, least_loaded."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter

from counting.features.shard_choice import CounterConfig, ShardPicker
from counting.foundation import config
from counting.foundation.config import AutoscaleParams
from counting.writepath.autoscale import decide, ewma, measured_rate, shards_for_rate
from hypothesis import given
from hypothesis import strategies as st

PARAMS = AutoscaleParams(cool_down_s=30.0)
rates = st.floats(min_value=0, max_value=5000, allow_nan=False)
bounds = st.integers(min_value=1, max_value=1000).flatmap(
    lambda lo: st.tuples(st.just(lo), st.integers(min_value=lo, max_value=1000)))


def run(num_shards: int, rate: float, lo: int, hi: int, ticks: int, step_s: float) -> list[int]:
    """The shard counts decide() gives tick after tick under one constant rate."""
    counts, low_since, now = [num_shards], None, 0.0
    for _ in range(ticks):
        decision = decide(counts[-1], rate, now, low_since, min_shards=lo, max_shards=hi,
                          params=PARAMS)
        counts.append(decision.num_shards)
        low_since = decision.low_since
        now += step_s
    return counts


def test_sizing_formula() -> None:
    """ceil(rate / (per-shard rate x utilisation)), clamped to the bounds."""
    assert shards_for_rate(50.0) == 100
    assert shards_for_rate(50.0, shard_write_rate=10, utilisation=0.5) == 10
    assert shards_for_rate(0.0) == 1
    assert shards_for_rate(0.5) == 1 and shards_for_rate(0.51) == 2
    assert shards_for_rate(1e9) == config.MAX_SHARDS
    assert shards_for_rate(3.0, min_shards=8, max_shards=9) == 8


@given(st.floats(min_value=-1e6, max_value=1e6), st.floats(min_value=-1e6, max_value=1e6),
       st.floats(min_value=0, max_value=1e3), st.floats(min_value=0.1, max_value=100))
def test_ewma_moves_toward_the_sample_without_overshooting(
    previous: float, sample: float, dt_s: float, tau_s: float
) -> None:
    """One step lands between the previous estimate and the sample."""
    after = ewma(previous, sample, dt_s, tau_s)
    assert min(previous, sample) - 1e-6 <= after <= max(previous, sample) + 1e-6


def test_ewma_time_constant() -> None:
    """After tau seconds of a step, 1 - 1/e of it is reached, however the time is sliced."""
    coarse = ewma(0.0, 100.0, 10.0, 10.0)
    fine = 0.0
    for _ in range(100):
        fine = ewma(fine, 100.0, 0.1, 10.0)
    assert math.isclose(coarse, 100 * (1 - math.exp(-1)), rel_tol=1e-9)
    assert math.isclose(fine, coarse, rel_tol=1e-9)


def test_rate_rises_fast_and_falls_slowly() -> None:
    """A step up is followed within a few seconds; a step down decays over ~10 s."""
    rate = 0.0
    for _ in range(10):  # 10 ticks of 1 s at 50 writes/s
        rate = measured_rate(rate, 50.0, 1.0, PARAMS)
    assert rate > 49.0
    for _ in range(10):
        rate = measured_rate(rate, 0.0, 1.0, PARAMS)
    assert 15.0 < rate < 20.0  # e^-1 of 50


@given(st.integers(min_value=1, max_value=1000), rates, bounds)
def test_decision_stays_within_min_and_max(n: int, rate: float, lo_hi: tuple[int, int]) -> None:
    """Whatever the start, one decision lands within min..max and stays there."""
    lo, hi = lo_hi
    counts = run(n, rate, lo, hi, ticks=4, step_s=PARAMS.cool_down_s)
    assert all(lo <= c <= hi for c in counts[1:])


@given(st.integers(min_value=1, max_value=1000), rates, bounds)
def test_no_flapping_under_a_constant_rate(n: int, rate: float, lo_hi: tuple[int, int]) -> None:
    """Under a constant rate the count moves one way only, then holds."""
    lo, hi = lo_hi
    counts = run(n, rate, lo, hi, ticks=12, step_s=PARAMS.cool_down_s / 2)
    steps = [b - a for a, b in itertools.pairwise(counts) if b != a]
    assert all(s > 0 for s in steps) or all(s < 0 for s in steps)
    assert len(steps) <= 2  # into min..max, then to the size the rate needs
    assert counts[-1] == counts[-2] == counts[-3]


@given(rates, bounds)
def test_grows_at_once_to_cover_the_rate(rate: float, lo_hi: tuple[int, int]) -> None:
    """Above capacity at the target utilisation, the next decision covers the rate (or is max)."""
    lo, hi = lo_hi
    decision = decide(lo, rate, 0.0, None, min_shards=lo, max_shards=hi, params=PARAMS)
    capacity = decision.num_shards * PARAMS.shard_write_rate * PARAMS.target_utilisation
    assert capacity >= rate or decision.num_shards == hi


def test_shrinks_only_after_the_cool_down() -> None:
    """A low rate shrinks to the size it needs once it has lasted the cool-down, not before."""
    counts = run(100, 2.0, 1, 1000, ticks=4, step_s=10.0)
    assert counts == [100, 100, 100, 100, 4]


def test_a_rate_in_the_hysteresis_band_holds() -> None:
    """Between the shrink and grow lines nothing changes, however long."""
    # 10 shards: grow above 5 writes/s, shrink below 2.5 writes/s.
    assert run(10, 3.0, 1, 1000, ticks=20, step_s=60.0) == [10] * 21


def test_a_burst_resets_the_cool_down() -> None:
    """The cool-down counts from the last time the rate was high."""
    low = decide(10, 0.0, 0.0, None, min_shards=1, max_shards=1000, params=PARAMS)
    busy = decide(10, 3.0, 20.0, low.low_since, min_shards=1, max_shards=1000, params=PARAMS)
    again = decide(10, 0.0, 40.0, busy.low_since, min_shards=1, max_shards=1000, params=PARAMS)
    assert (low.low_since, busy.low_since, again.low_since, again.num_shards) == (
        0.0, None, 40.0, 10)


def spread(picks: list[int], shards: int) -> float:
    hits = Counter(picks)
    return statistics.pstdev([hits.get(n, 0) for n in range(shards)])


def test_least_loaded_spreads_one_instance_evenly() -> None:
    """With no published load, one instance's picks are spread far more evenly than random."""
    target = CounterConfig(counter="c", num_shards=10, strategy="least_loaded")
    picker = ShardPicker(random.Random(3))
    picks = [picker.pick(target) for _ in range(10_000)]
    random_sd = math.sqrt(10_000 / 10 * (1 - 1 / 10))  # a multinomial's, about 30
    assert spread(picks, 10) < random_sd / 3


def test_least_loaded_avoids_busy_shards() -> None:
    """Shards the rollup reports as busy get fewer of this instance's writes."""
    load = (50.0,) * 5 + (0.0,) * 5
    target = CounterConfig(counter="c", num_shards=10, strategy="least_loaded", shard_load=load)
    picker = ShardPicker(random.Random(4))
    hits = Counter(picker.pick(target) for _ in range(400))
    assert sum(hits[n] for n in range(5)) < sum(hits[n] for n in range(5, 10))
