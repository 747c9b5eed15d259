"""List prices (us-central1, Cloud Run functions 2nd gen, Firestore regional, Cloud Tasks, Cloud
Scheduler) applied to what the local stack counted. Free tiers are not subtracted: a bill at list
price is an upper bound of what a project pays. docs/operations.md explains the model.
"""

from __future__ import annotations

from typing import Any

VCPU_S = 0.000024
GIB_S = 0.0000025
INVOCATION = 0.40 / 1_000_000
READ = 0.03 / 100_000
WRITE = 0.09 / 100_000
DELETE = 0.01 / 100_000
TASK = 0.40 / 1_000_000
SCHEDULER_JOB_MONTH = 0.10
MONTH_S = 30 * 24 * 3600

# What the functions are deployed with (tests/unit/test_manifest.py pins the same values).
ROLLUP_VCPU, ROLLUP_GIB = 1.0, 1.0
CALLABLE_VCPU, CALLABLE_GIB = 1.0, 0.5
FIELDS = ("invocations", "billed_seconds", "ticks", "tasks", "reads", "writes", "deletes")


def usage_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    return {key: float(after.get(key) or 0) - float(before.get(key) or 0) for key in FIELDS}


def rollup_usd(usage: dict[str, float]) -> float:
    """The price of what rollup invocations did: compute, invocations, operations, tasks."""
    return (usage["billed_seconds"] * (ROLLUP_VCPU * VCPU_S + ROLLUP_GIB * GIB_S)
            + usage["invocations"] * INVOCATION
            + usage["reads"] * READ + usage["writes"] * WRITE + usage["deletes"] * DELETE
            + usage["tasks"] * TASK)


def idle_usd_month(usage: dict[str, float], seconds: float) -> float:
    """An idle window's rollup cost scaled to a month, plus the Scheduler job."""
    return rollup_usd(usage) * MONTH_S / seconds + SCHEDULER_JOB_MONTH


def usd_per_million_increments(rollup_usage: dict[str, float], increments: int,
                               callable_s: float) -> float:
    """Per increment: its callable (one invocation billed for about its measured latency, an
    upper bound with concurrency), its shard write and request marker (two writes), and its
    share of the rollup's work under that load."""
    per_increment = (INVOCATION + callable_s * (CALLABLE_VCPU * VCPU_S + CALLABLE_GIB * GIB_S)
                     + 2 * WRITE + rollup_usd(rollup_usage) / increments)
    return per_increment * 1_000_000
