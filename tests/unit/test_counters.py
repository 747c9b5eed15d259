"""Pure parts of sharded counters: sizing, shard choice and a retry's commit time."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter

from counting.features.counters import shards_for
from counting.features.shard_choice import CounterConfig, ShardPicker
from counting.foundation import config
from counting.writepath.shards import MARKER_COMMIT_SLACK_S, commit_time_of
from hypothesis import given
from hypothesis import strategies as st


@given(st.floats(min_value=0, max_value=config.MAX_EXPECTED_RATE))
def test_sizing_covers_the_rate_at_the_target_utilisation(rate: float) -> None:
    """Shards x per-shard rate x utilisation covers the expected rate, within 1..1000."""
    shards = shards_for(rate)
    assert config.MIN_SHARDS <= shards <= config.MAX_SHARDS
    per_shard = config.AUTOSCALE.shard_write_rate * config.AUTOSCALE.target_utilisation
    assert shards * per_shard >= rate or shards == config.MAX_SHARDS
    assert shards == 1 or (shards - 1) * per_shard < rate


def test_sizing_without_a_hint_uses_the_default_rate() -> None:
    """No expected_rate sizes for the documented default load."""
    default = math.ceil(config.DEFAULT_EXPECTED_RATE / (config.AUTOSCALE.shard_write_rate
                                                        * config.AUTOSCALE.target_utilisation))
    assert shards_for(None) == default == 4


@given(st.integers(min_value=1, max_value=50), st.integers(min_value=0, max_value=2**32))
def test_round_robin_visits_every_shard_equally(shards: int, seed: int) -> None:
    """k x shards picks hit each shard exactly k times."""
    picker = ShardPicker(random.Random(seed))
    target = CounterConfig(counter="c", num_shards=shards, strategy="round_robin")
    hits = Counter(picker.pick(target) for _ in range(3 * shards))
    assert hits == {n: 3 for n in range(shards)}


def test_round_robin_instances_start_at_different_shards() -> None:
    """Instances start at a random offset rather than in lockstep."""
    target = CounterConfig(counter="c", num_shards=100, strategy="round_robin")
    starts = {ShardPicker(random.Random(seed)).pick(target) for seed in range(20)}
    assert len(starts) > 5


def test_random_picks_stay_in_range() -> None:
    """Random choice only returns existing shards and reaches all of them."""
    picker = ShardPicker(random.Random(1))
    target = CounterConfig(counter="c", num_shards=7, strategy="random")
    assert set(picker.pick(target) for _ in range(500)) == set(range(7))


STAMPED = dt.datetime(2026, 11, 24, 12, 0, 0, 968000, tzinfo=dt.UTC)


def test_a_retry_answers_its_markers_create_time_the_commit_time() -> None:
    """A marker's create time is its commit's when it comes within MARKER_COMMIT_SLACK_S of the
    server timestamp the commit stored (and when the marker stored none)."""
    committed = STAMPED + dt.timedelta(milliseconds=42)
    assert commit_time_of(committed, STAMPED) == committed
    overlap = STAMPED + dt.timedelta(seconds=MARKER_COMMIT_SLACK_S)
    assert commit_time_of(overlap, STAMPED) == overlap
    assert commit_time_of(committed, None) == committed


def test_a_retry_after_an_import_answers_the_stored_timestamp() -> None:
    """An import re-creates the marker later, fields unchanged: its create time is not the
    commit's, and the stored server timestamp, at or before the commit, stands in."""
    imported = STAMPED + dt.timedelta(minutes=3)
    assert commit_time_of(imported, STAMPED) == STAMPED
