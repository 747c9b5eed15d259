"""Which holders an instance of a tick function keeps when tasks of several partitionings reach
it (`cadence.replaced`): the current partition's warm holder outlives a late task of a retired
P."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from counting import cadence
from counting.partitions import Part

OLD, NEW = Part(4, 1), Part(2, 1)


def holder(*, warm: bool) -> cadence.Holder:
    """A holder as `replaced` sees it: holding its lease and ledger, or not."""
    return cast(cadence.Holder, SimpleNamespace(rollup=object() if warm else None))


def test_a_late_task_of_a_retired_p_keeps_the_current_warm_holder() -> None:
    """The retired P's task gets a holder of its own (it answers RETIRED); the warm one stays."""
    assert cadence.replaced({NEW: holder(warm=True)}, OLD) == []
    assert cadence.replaced({NEW: holder(warm=True), OLD: holder(warm=False)}, OLD) == []


def test_holders_of_another_p_go_once_the_partition_holds_its_lease() -> None:
    holders = {OLD: holder(warm=True), NEW: holder(warm=True)}
    assert cadence.replaced(holders, NEW) == [OLD]
    assert cadence.replaced({OLD: holder(warm=True)}, NEW) == []  # until NEW's first tick


def test_holders_of_another_p_without_a_lease_go_at_once() -> None:
    assert cadence.replaced({OLD: holder(warm=False), Part(2, 0): holder(warm=False)},
                            NEW) == [OLD]  # the same P: kept
