"""The bounds of the sequences' work (`SequenceLimits`), carried by the context
(`Context.sequence_limits`): the simulation and tests give their own instead of patching."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SequenceLimits:
    # Numbers carried into their records by one commit of a number (`Unrecorded`).
    records_per_commit: int = 8
    # Numbers a process holds for its next commits, at most: the housekeeping records the rest.
    max_unrecorded: int = 1000
    # An unrecorded number younger than this is left to its process's commits.
    record_after_s: float = 10.0
    # Unrecorded numbers one housekeeping run reads, at most.
    records_per_run: int = 300
    # A record still unreadable this long after its claim, for whatever reason, is given up on.
    record_give_up_s: float = 7200.0


LIMITS = SequenceLimits()  # production's
