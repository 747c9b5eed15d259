"""The operator command's pure parts: target selection, percentiles, the load loop, and input
errors caught before anything is contacted."""

from __future__ import annotations

import itertools
import threading

import pytest
from click.testing import CliRunner
from counters_cli import Target, cli, percentile, resolve_target, run_load
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("project", "env", "expected"),
    [
        (None, {}, Target(project="demo-counters", emulator_host="127.0.0.1:8080")),
        (None, {"FIRESTORE_EMULATOR_HOST": "localhost:9000", "GCLOUD_PROJECT": "demo-x"},
         Target(project="demo-x", emulator_host="localhost:9000")),
        ("my-app", {}, Target(project="my-app", emulator_host=None)),
        (None, {"GOOGLE_CLOUD_PROJECT": "my-app"}, Target(project="my-app", emulator_host=None)),
        ("my-app", {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080"},
         Target(project="my-app", emulator_host="127.0.0.1:8080")),
        ("demo-other", {}, Target(project="demo-other", emulator_host="127.0.0.1:8080")),
    ],
)
def test_target_is_production_only_for_a_named_project_without_emulator(
    project: str | None, env: dict[str, str], expected: Target
) -> None:
    """Production needs a named, non-demo project and no emulator host; else the emulator."""
    assert resolve_target(project, env) == expected


def test_target_line_says_which_firestore() -> None:
    """The announcement names the emulator host or says PRODUCTION."""
    assert Target(project="demo-counters", emulator_host="127.0.0.1:8080").describe() == (
        "target: Firestore emulator 127.0.0.1:8080, project demo-counters")
    assert Target(project="my-app", emulator_host=None).describe() == (
        "target: PRODUCTION Firestore, project my-app")


def test_percentile_interpolates_between_ranks() -> None:
    """Percentiles of 1..101 are the values themselves; between ranks they interpolate."""
    values = [float(v) for v in range(101, 0, -1)]
    assert [percentile(values, q) for q in (0, 50, 95, 99, 100)] == [1, 51, 96, 100, 101]
    assert percentile([10.0, 20.0], 50) == 15.0
    assert percentile([], 50) is None


@given(st.lists(st.floats(-1e6, 1e6), min_size=1), st.floats(0, 100))
def test_percentile_lies_within_the_values(values: list[float], q: float) -> None:
    """Any percentile is between the minimum and the maximum."""
    found = percentile(values, q)
    assert found is not None
    assert min(values) - 1e-6 <= found <= max(values) + 1e-6


def test_load_counts_calls_applied_and_errors() -> None:
    """Every call is attempted once; failures are counted by type, successes timed."""
    calls = itertools.count()
    lock = threading.Lock()

    def call() -> bool:
        with lock:
            n = next(calls)
        if n % 4 == 3:
            raise TimeoutError("slow")
        return True

    result = run_load(call, rate=200, seconds=0.5, concurrency=4)
    summary = result.summary()
    assert summary["attempted"] == 100  # the schedule: 200/s for 0.5 s
    assert summary["applied"] == 75
    assert summary["errors"] == 25
    assert summary["errors_by_type"] == {"TimeoutError": 25}
    assert summary["first_error"] == "TimeoutError: slow"
    assert len(result.latencies_ms) == 75
    assert summary["latency_p50_ms"] is not None


def test_load_without_rate_runs_until_the_time_is_up() -> None:
    """Without a rate, calls go back to back until `seconds` have passed."""
    result = run_load(lambda: True, rate=None, seconds=0.2, concurrency=2)
    assert result.attempted == result.applied > 0
    assert result.elapsed_s >= 0.2


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["get", "bad id!"], "counter:"),
        (["inc", "likes", "--by", "2000000000"], "by:"),
        (["inc", "likes", "--request-id", "no spaces"], "request_id:"),
        (["create", "likes", "--strategy", "fastest"], "strategy:"),
        (["create", "likes", "--shards", "0"], "shards:"),
        (["seq", "configure", "org-1", "--timezone", "Mars/Olympus"], "timezone:"),
        (["seq", "configure", "org-1", "--timezone", "UTC", "--reset-time", "25:00"],
         "reset_time:"),
        (["load", "_private"], "counter:"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(args: list[str], field: str) -> None:
    """Invalid input exits 1 with the field named, before any Firestore is contacted."""
    result = CliRunner().invoke(cli, args, env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {field}")
    assert "Traceback" not in result.output and "target:" not in result.output
