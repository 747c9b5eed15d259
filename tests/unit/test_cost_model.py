"""The cost model prices as the platforms bill: requests rounded up to 100 ms, an instance billed
once for overlapping requests, task operations per creation and per delivery, TTL deletes; and
the worked figures in docs/operations.md are the model's."""

from __future__ import annotations

from pathlib import Path

import cost_examples
import cost_model
import pytest
from cost_model import (
    DELETE,
    INVOCATION,
    MONTH_S,
    READ,
    SCHEDULER_JOB_MONTH,
    TASK_OPERATION,
    WRITE,
    compute_usd,
    instance_seconds,
    month_usd,
    rollup_usd,
    slot_tasks,
    usage_delta,
    usd_per_million_increments,
    write_path_usd,
    writer_instances,
)
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CALLABLE_S_USD = compute_usd(1.0, cost_model.CALLABLE_VCPU, cost_model.CALLABLE_GIB)
requests_st = st.lists(st.tuples(st.floats(0, 100), st.floats(0, 5)), max_size=40)


def usage(**fields: float) -> dict[str, float]:
    return {key: float(fields.get(key, 0)) for key in cost_model.FIELDS}


def test_each_request_is_rounded_up_to_100_ms() -> None:
    """12 ms bills 100 ms, 100 ms bills 100 ms, 101 ms bills 200 ms, 300 ms bills 300 ms."""
    assert instance_seconds([(0.0, 0.012)], 1) == pytest.approx(0.1)
    assert instance_seconds([(0.0, 0.1)], 1) == pytest.approx(0.1)
    assert instance_seconds([(0.0, 0.101)], 1) == pytest.approx(0.2)
    assert instance_seconds([(0.0, 0.3)], 1) == pytest.approx(0.3)


def test_overlapping_requests_bill_their_instance_once() -> None:
    """Two requests on one instance bill the union of their rounded intervals."""
    assert instance_seconds([(0.0, 0.5), (0.2, 0.5)], 80) == pytest.approx(0.7)
    assert instance_seconds([(0.0, 0.05), (0.05, 0.05)], 80) == pytest.approx(0.15)
    # 100 requests a second of 12 ms: each bills 100 ms, their union is the whole second.
    assert instance_seconds([(i / 100, 0.012) for i in range(100)], 80) == pytest.approx(1.09)


def test_disjoint_requests_bill_each_one() -> None:
    """Requests further apart than 100 ms each bill their own rounded time, in any order."""
    assert instance_seconds([(5.0, 0.03), (0.0, 0.25), (1.0, 0.01)], 1) == pytest.approx(0.5)


def test_a_full_instance_opens_a_second_one() -> None:
    """At concurrency 1 a request arriving while another is in flight bills a second instance;
    once the first has ended, even within its billed 100 ms, the same instance takes it; at
    concurrency 2 the third of three overlapping requests opens the second instance."""
    assert instance_seconds([(0.0, 0.5), (0.2, 0.5)], 1) == pytest.approx(1.0)
    assert instance_seconds([(0.0, 0.05), (0.05, 0.05)], 1) == pytest.approx(0.15)
    assert instance_seconds([(0.0, 1.0), (0.1, 1.0), (0.2, 1.0)], 2) == pytest.approx(2.1)


@given(requests_st, st.integers(1, 4))
def test_instance_time_lies_between_the_union_and_the_sum(
        requests: list[tuple[float, float]], concurrency: int) -> None:
    """No instance arrangement bills less than one instance serving all, or more than every
    request billed alone."""
    alone = sum(cost_model.billed_s(duration) for _, duration in requests)
    together = instance_seconds(requests, len(requests) + 1)
    assert together - 1e-9 <= instance_seconds(requests, concurrency) <= alone + 1e-9


def test_the_rollup_pays_a_task_operation_per_delivery_and_per_task_it_enqueues() -> None:
    """10 invocations, 1 scheduled: 9 deliveries, plus 3 tasks it created: 12 operations."""
    assert rollup_usd(usage(invocations=10, tasks=3), scheduled=1) == pytest.approx(
        10 * INVOCATION + 12 * TASK_OPERATION)
    assert slot_tasks(usage(invocations=10, tasks=3), scheduled=1) == 6


def test_the_rollup_pays_its_compute_and_operations() -> None:
    """billed_seconds at the rollup's size; reads, writes and deletes at their prices."""
    figures = usage(invocations=1, billed_seconds=0.1, reads=6, writes=4, deletes=2)
    assert rollup_usd(figures, scheduled=1) == pytest.approx(
        0.1 * (cost_model.ROLLUP_VCPU * cost_model.VCPU_S + cost_model.ROLLUP_GIB
               * cost_model.GIB_S) + INVOCATION + 6 * READ + 4 * WRITE + 2 * DELETE)


def test_an_increment_pays_two_writes_an_invocation_and_a_ttl_delete() -> None:
    """One increment of 50 ms: its invocation, 100 ms of a callable, shard and marker writes,
    the marker's TTL delete, a configuration read and a read of P, one task creation for its
    slot."""
    assert write_path_usd([(0.0, 0.05)], slot_tasks=1, counters=1) == pytest.approx(
        INVOCATION + 0.1 * CALLABLE_S_USD + 2 * WRITE + DELETE + 2 * READ + TASK_OPERATION)


def test_every_writer_instance_creates_each_slot_task() -> None:
    """Duplicate creations are refused by name but billed: slot tasks x writer instances, the
    instances by Little's law at 80 requests each."""
    busy = [(i / 200, 1.0) for i in range(1000)]  # 200/s of 1 s: 200 in flight, 3 instances
    assert writer_instances(busy) == 3
    assert writer_instances([(0.0, 0.05)]) == 1
    assert write_path_usd(busy, slot_tasks=5, counters=1) - write_path_usd(
        busy, slot_tasks=0, counters=1) == pytest.approx(15 * TASK_OPERATION)


def test_configuration_reads_are_one_per_counter_and_instance_every_5_s() -> None:
    """At most one per increment; at 10 increments/s over 2 counters, 2 every 5 s."""
    def reads(requests: list[tuple[float, float]], counters: int) -> float:
        return (write_path_usd(requests, 0, counters) - write_path_usd(requests, 0, 0)) / READ

    assert reads([(10.0 * i, 0.05) for i in range(6)], 1) == pytest.approx(6)
    assert reads([(i / 10, 0.05) for i in range(100)], 2) == pytest.approx(4)


def test_a_month_scales_the_window_and_adds_the_scheduler_job() -> None:
    """Half a month's $1 is $2 a month, plus the job; $3 over 2 million is $1.50 a million."""
    assert month_usd(1.0, MONTH_S / 2) == pytest.approx(2.0 + SCHEDULER_JOB_MONTH)
    assert usd_per_million_increments(3.0, 2_000_000) == pytest.approx(1.5)


def test_usage_delta_subtracts_the_numeric_fields() -> None:
    """Missing fields count as 0; the `triggers` and `outcomes` maps are left out."""
    before = {"invocations": 3, "reads": 10, "triggers": {"schedule": 3}}
    after = {"invocations": 5, "reads": 16, "writes": 4, "triggers": {"schedule": 5}}
    assert usage_delta(before, after) == usage(invocations=2, reads=6, writes=4)


def test_busy_load_costs_its_floor_plus_compute_tasks_and_tick_overhead() -> None:
    """100 increments/s over 100 counters: two writes, an invocation and a TTL delete per
    increment, plus a rollup write and a change read per counter-second, make $3.50 a
    million; the change query's overlap (a shard read again a quarter of the time), compute,
    task operations, configuration reads and each tick's own read and write bring the model's
    figure to $3.92."""
    floor = INVOCATION + 2 * WRITE + DELETE + (WRITE + READ)
    assert usd_per_million_increments(floor, 1) == pytest.approx(3.50)
    busy = cost_examples.month(cost_examples.LOADS[-1])
    assert busy.usd_per_million == pytest.approx(3.92, abs=0.005)


def test_idle_costs_the_scheduled_ticks_and_the_job() -> None:
    """43,200 housekeeping ticks a month of 100 ms at a third of a vCPU, 6 reads and 4 writes:
    $0.39, the Scheduler job included."""
    idle = cost_examples.month(cost_examples.LOADS[0])
    assert idle.write_path_usd == 0
    assert idle.total_usd == pytest.approx(0.39, abs=0.005)


def test_the_docs_show_the_models_worked_figures() -> None:
    """docs/operations.md's worked table has the rows `python bench/cost_examples.py` prints."""
    docs = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8").splitlines()
    assert [cost_examples.row(load) for load in cost_examples.LOADS if
            cost_examples.row(load) not in docs] == []


def test_the_docs_show_what_one_more_partition_costs() -> None:
    """docs/operations.md's partitions section quotes `cost_examples.partition_row`: idle, 43,200
    housekeeping ticks a month of 100 ms with 6 reads and 3 writes."""
    idle = cost_examples.partition_month(busy=False)
    minutes = MONTH_S / 60
    assert idle == pytest.approx(minutes * (
        compute_usd(0.1, cost_model.ROLLUP_VCPU, cost_model.ROLLUP_GIB) + 6 * READ + 3 * WRITE))
    assert cost_examples.partition_month(busy=True) > 30 * idle
    docs = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    assert cost_examples.partition_row() in docs


def test_the_floor_is_what_exactly_once_and_one_publish_a_second_need() -> None:
    """At the busy level (one increment per counter-second) the floor is $3.50 a million: two
    writes, an invocation and a TTL delete per increment, a write and a read per
    counter-second; a hot counter's many increments a second share one publish."""
    busy = cost_model.usd_per_million_increments(cost_model.floor_usd(18_000, 18_000), 18_000)
    hot = cost_model.usd_per_million_increments(cost_model.floor_usd(18_000, 180), 18_000)
    assert round(busy, 6) == 3.5 and round(hot, 6) == 2.312


def test_the_compute_floor_bills_an_instance_all_the_time_past_ten_requests_a_second() -> None:
    """100 requests a second for 180 s keep one instance billed throughout, however short each
    request (the last one's 100 ms included: $0.25 a million at 1 vCPU and 512 MiB); one request
    every second bills 100 ms of each second."""
    second = cost_model.VCPU_S + 0.5 * cost_model.GIB_S  # an instance-second
    busy = [(n / 100, 0.006) for n in range(18_000)]
    slow = [(float(n), 0.006) for n in range(180)]
    per_million = cost_model.usd_per_million_increments(cost_model.compute_floor_usd(busy),
                                                        len(busy))
    assert per_million == pytest.approx(180.09 * second / 18_000 * 1e6)
    assert round(per_million, 2) == 0.25
    assert cost_model.compute_floor_usd(slow) == pytest.approx(18 * second)
