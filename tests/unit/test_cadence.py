"""Which holders an instance of a tick function keeps when tasks of several partitionings reach
it (`cadence.closed_after`): the current partition's warm holder outlives a late task of a
retired P; a retired holder goes; the other P's go once the current partition has ticked."""

from __future__ import annotations

from counting.rollup import cadence
from counting.rollup.cadence import Outcome
from counting.writepath.partitions import Part

OLD, NEW = Part(4, 1), Part(2, 1)
BOTH = {OLD: object(), NEW: object()}


def test_a_late_task_of_a_retired_p_closes_only_its_own_holder() -> None:
    """Even a retired holder still warm in memory (it had ticked before the change) answers
    RETIRED, and only it goes: the current partition's warm holder stays."""
    assert cadence.closed_after(BOTH, OLD, Outcome.RETIRED) == [OLD]


def test_holders_of_another_p_go_once_the_current_partition_ticked() -> None:
    assert cadence.closed_after(BOTH, NEW, Outcome.TICKED) == [OLD]
    assert cadence.closed_after({**BOTH, Part(2, 0): object()}, NEW, Outcome.TICKED) == [OLD]


def test_nothing_goes_on_any_other_outcome() -> None:
    """A task that found another holder's lease, failed, or had its slot covered proves
    nothing about which partitioning is current."""
    for outcome in (Outcome.BUSY, Outcome.FAILED, Outcome.COVERED):
        assert cadence.closed_after(BOTH, NEW, outcome) == []
        assert cadence.closed_after(BOTH, OLD, outcome) == []
