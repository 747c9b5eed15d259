"""What the counters cost at list price (us-central1: Cloud Run functions, Firestore regional,
Cloud Tasks, Cloud Scheduler), under the platforms' billing rules. Pure: the benchmarks measure,
this prices. Free tiers are not subtracted anywhere, so every figure is an upper bound.
docs/operations.md ("Idle and cadence costs") states the rules; `python bench/cost_model.py`
prints its worked figures.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VCPU_S = 0.000024  # per vCPU-second, tier 1, request-based billing
GIB_S = 0.0000025  # per GiB-second
INVOCATION = 0.40 / 1_000_000
READ = 0.03 / 100_000
WRITE = 0.09 / 100_000
DELETE = 0.01 / 100_000
TASK_OPERATION = 0.40 / 1_000_000  # a task creation (refused ones too) or a delivery attempt
SCHEDULER_JOB_MONTH = 0.10
MONTH_S = 30 * 24 * 3600
BILLING_STEP_S = 0.1  # each request's time is rounded up to this

# What the functions are deployed with (tests/unit/test_manifest.py checks them against the
# manifest). The rollup's functions run at gen-1 CPU sizing, 512 MiB: a third of a vCPU.
GEN1_VCPU_BY_MB = {128: 0.083, 256: 0.167, 512: 0.333, 1024: 0.583, 2048: 1.0}
ROLLUP_MB = 512
ROLLUP_VCPU, ROLLUP_GIB = GEN1_VCPU_BY_MB[ROLLUP_MB], ROLLUP_MB / 1024
CALLABLE_VCPU, CALLABLE_GIB = 1.0, 0.5
CALLABLE_CONCURRENCY = 80
SCHEDULE_S = 60.0  # the scheduled `rollup` runs once a minute
CONFIG_CACHE_S = 5.0  # a writer instance reads a counter's configuration at most this often

FIELDS = ("invocations", "billed_seconds", "ticks", "tasks", "reads", "writes", "deletes")

Request = tuple[float, float]  # (start_s, duration_s)


def usage_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, float]:
    """What the rollup recorded in `internal/rollup_usage` between two reads of it."""
    return {key: float(after.get(key) or 0) - float(before.get(key) or 0) for key in FIELDS}


def billed_s(duration_s: float) -> float:
    """A request's billed time: its duration rounded up to the next 100 ms (at least 100 ms)."""
    steps = math.ceil(duration_s / BILLING_STEP_S - 1e-9)  # 0.3 s stays 3 steps despite floats
    return max(1, steps) * BILLING_STEP_S


@dataclass
class _Instance:
    ends: list[float] = field(default_factory=list)  # its requests in flight: a heap of ends
    billed_s: float = 0.0
    covered_until: float = -math.inf

    def bill(self, start: float, end: float) -> None:
        """Add [start, end] to the union of billed intervals; starts come in order."""
        self.billed_s += max(0.0, end - max(start, self.covered_until))
        self.covered_until = max(self.covered_until, end)


def instance_seconds(requests: Iterable[Request], concurrency: int) -> float:
    """Billed instance time of a function serving `requests`, (start_s, duration_s) each.

    Requests go in start order to the first instance with fewer than `concurrency` in flight
    (a new instance otherwise). An instance is billed while it serves at least one request, each
    request's time rounded up to 100 ms: the measure of the union of its requests'
    [start, start + billed_s(duration)]."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    instances: list[_Instance] = []
    for start, duration in sorted(requests, key=lambda request: request[0]):
        for instance in instances:
            while instance.ends and instance.ends[0] <= start:
                heapq.heappop(instance.ends)
            if len(instance.ends) < concurrency:
                break
        else:
            instance = _Instance()
            instances.append(instance)
        heapq.heappush(instance.ends, start + duration)
        instance.bill(start, start + billed_s(duration))
    return sum(instance.billed_s for instance in instances)


def compute_usd(instance_s: float, vcpu: float, gib: float) -> float:
    return instance_s * (vcpu * VCPU_S + gib * GIB_S)


def firestore_usd(reads: float, writes: float, deletes: float) -> float:
    return reads * READ + writes * WRITE + deletes * DELETE


def task_deliveries(usage: Mapping[str, float], scheduled: float) -> float:
    """The rollup's invocations that Cloud Tasks delivered: all but the `scheduled` ones."""
    return max(0.0, usage["invocations"] - scheduled)


def slot_tasks(usage: Mapping[str, float], scheduled: float) -> float:
    """Tick tasks delivered for the writers' slots: deliveries of tasks the rollup did not
    enqueue itself."""
    return max(0.0, task_deliveries(usage, scheduled) - usage["tasks"])


def rollup_usd(usage: Mapping[str, float], scheduled: float) -> float:
    """The rollup's cost over a window, from its `usage_delta`: compute (`billed_seconds`: one
    request at a time, so the sum of its requests), invocations, Firestore operations, and a
    task operation per delivery and per task it enqueued. `scheduled`: how many of its
    invocations Cloud Scheduler made (one a minute); the others were task deliveries."""
    return (compute_usd(usage["billed_seconds"], ROLLUP_VCPU, ROLLUP_GIB)
            + usage["invocations"] * INVOCATION
            + firestore_usd(usage["reads"], usage["writes"], usage["deletes"])
            + (task_deliveries(usage, scheduled) + usage["tasks"]) * TASK_OPERATION)


def _window_s(requests: Sequence[Request]) -> float:
    """From the first request's start to the last one's end."""
    if not requests:
        return 0.0
    return max(start + duration for start, duration in requests) - min(
        start for start, _ in requests)


def writer_instances(requests: Sequence[Request]) -> int:
    """Callable instances serving the load, by Little's law: requests in flight on average
    (rate x mean latency = busy time / window) over the CALLABLE_CONCURRENCY each serves."""
    window = _window_s(requests)
    busy = sum(duration for _, duration in requests)
    in_flight = busy / window if window > 0 else 1.0
    return max(1, math.ceil(in_flight / CALLABLE_CONCURRENCY))


def write_path_usd(requests: Sequence[Request], slot_tasks: float, counters: int) -> float:
    """The write path's cost over a window: `requests` are the measured `increment` calls
    (start_s, duration_s), each one increment with a request id, over `counters` counters.

    Per increment: an invocation, two writes (shard and marker), the marker's TTL delete later.
    Compute: `instance_seconds` at the callables' concurrency. Configuration reads: one per
    counter and writer instance every 5 s at most, never more than one per increment, and the
    rollup's partition count (P) once per writer instance every 5 s at most. Task
    creations: each writer instance creates (or is refused, billed alike) the task of every
    slot it writes in, `slot_tasks x writer_instances`."""
    increments = len(requests)
    instances = writer_instances(requests)
    refreshes = instances * math.ceil(_window_s(requests) / CONFIG_CACHE_S)
    config_reads = min(increments, counters * refreshes) + min(increments, refreshes)
    return (increments * INVOCATION
            + compute_usd(instance_seconds(requests, CALLABLE_CONCURRENCY),
                          CALLABLE_VCPU, CALLABLE_GIB)
            + firestore_usd(config_reads, 2 * increments, increments)
            + slot_tasks * instances * TASK_OPERATION)


def floor_usd(increments: int, counter_seconds: float) -> float:
    """What no design of this API can bill less than (compute aside): per increment an
    invocation, two writes (the shard and the request marker, which exactly-once needs) and the
    marker's TTL delete; per counter-second in which the counter changed, the one write that
    publishes it and the one read that finds it changed."""
    return (increments * (INVOCATION + 2 * WRITE + DELETE)
            + counter_seconds * (WRITE + READ))


def compute_floor_usd(requests: Sequence[Request]) -> float:
    """The callables' compute that no design of this API can bill less than (what `floor_usd`
    sets aside): each request served, however fast, is billed at least one 100 ms step of an
    instance, at the callables' cpu and memory. An instance whose requests start less than
    100 ms apart is billed all the time (100 evenly spaced a second: every second)."""
    return compute_usd(instance_seconds([(start, 0.0) for start, _ in requests],
                                        CALLABLE_CONCURRENCY), CALLABLE_VCPU, CALLABLE_GIB)


def month_usd(usd: float, seconds: float) -> float:
    """A month at the rate of a window that cost `usd` over `seconds` (the rollup's cost, or
    the whole app's), plus the Scheduler job, billed by the month whatever the load."""
    return usd * MONTH_S / seconds + SCHEDULER_JOB_MONTH


def usd_per_million_increments(usd: float, increments: int) -> float:
    """A cost over a window (the whole, or the rollup's share) per million of its increments."""
    return usd / increments * 1_000_000
