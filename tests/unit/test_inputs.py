"""Client input parsing: every malformed field is an InvalidArgument naming the field."""

from __future__ import annotations

import string
from typing import Any

import pytest
from counting.foundation import config, inputs
from counting.foundation.errors import InvalidArgument
from hypothesis import given
from hypothesis import strategies as st

ID_CHARS = string.ascii_letters + string.digits + "_-.:"


@given(st.text(alphabet=ID_CHARS, min_size=1, max_size=128).filter(lambda s: s[0] not in "._"))
def test_counter_ids_of_the_allowed_alphabet_pass(counter: str) -> None:
    """Every id of 1..128 allowed characters not starting with . or _ is accepted."""
    assert inputs.counter_id(counter) == counter


@pytest.mark.parametrize(
    "bad", ["", "a" * 129, "a/b", "a b", ".hidden", "_x", "ü", 7, None, ["a"], True]
)
def test_bad_counter_ids_are_rejected(bad: Any) -> None:
    """Empty, long, slashed, dotted or non-string ids name the counter field."""
    with pytest.raises(InvalidArgument, match="^counter:"):
        inputs.counter_id(bad)


@pytest.mark.parametrize("bad", [True, False, 1.5, 1.0, "1", None, [1], 10**9 + 1, -(10**9) - 1])
def test_by_must_be_a_bounded_json_integer(bad: Any) -> None:
    """Booleans, floats, strings and out-of-range integers are not a `by`."""
    if bad is None:
        assert inputs.increment_by(bad) == 1  # absent means the default
        return
    with pytest.raises(InvalidArgument, match="^by:"):
        inputs.increment_by(bad)


@given(st.integers(min_value=-config.MAX_ABS_BY, max_value=config.MAX_ABS_BY))
def test_by_accepts_the_whole_range(by: int) -> None:
    """Every integer with |by| <= 10^9 passes unchanged."""
    assert inputs.increment_by(by) == by


@pytest.mark.parametrize("bad", ["", "a" * 129, "a.b", "a:b", "a b", 5, True])
def test_bad_request_ids_are_rejected(bad: Any) -> None:
    """Request ids are 1..128 of A-Z a-z 0-9 _ -."""
    with pytest.raises(InvalidArgument, match="^request_id:"):
        inputs.request_id(bad)


@pytest.mark.parametrize("bad", [0, 1001, 2.0, True, "3"])
def test_bad_shard_counts_are_rejected(bad: Any) -> None:
    """shards is an integer in 1..1000."""
    with pytest.raises(InvalidArgument, match="^shards:"):
        inputs.shard_count(bad)


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), "5", True, 1e7])
def test_bad_expected_rates_are_rejected(bad: Any) -> None:
    """expected_rate is a finite number of writes/s in 0..10^6."""
    with pytest.raises(InvalidArgument, match="^expected_rate:"):
        inputs.expected_rate(bad)


def test_unknown_fields_are_named() -> None:
    """A misspelt field is rejected by name rather than ignored."""
    with pytest.raises(InvalidArgument, match="^countr: unknown field"):
        inputs.payload({"countr": "x"}, {"counter"})


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ([], "increments"),
        ([{"counter": "a", "by": 1}] * 501, "increments"),
        ("x", "increments"),
        ([{"counter": "a", "by": 1.5}], r"increments\[0\]\.by"),
        ([{"counter": "a"}, {"by": 1}], r"increments\[1\]\.counter"),
        ([{"counter": "a", "extra": 1}], r"increments\[0\]\.extra"),
        ([7], r"increments\[0\]"),
    ],
)
def test_bad_batches_name_the_item(bad: Any, field: str) -> None:
    """A batch error points at the offending item and field."""
    with pytest.raises(InvalidArgument, match=f"^{field}:"):
        inputs.increments(bad)


def test_batch_by_defaults_to_one() -> None:
    """An item without `by` adds one."""
    assert inputs.increments([{"counter": "a"}]) == [("a", 1)]


def test_a_batch_bounds_each_counters_sum() -> None:
    """The by values one counter gets in a batch sum to at most a single increment's bound."""
    half = config.MAX_ABS_BY // 2 + 1
    with pytest.raises(InvalidArgument, match="sum beyond"):
        inputs.increments([{"counter": "a", "by": half}, {"counter": "a", "by": half}])
    assert len(inputs.increments([{"counter": "a", "by": half}, {"counter": "b", "by": half},
                                  {"counter": "a", "by": -half}])) == 3
