"""Billable work: the Firestore operations one piece of server work performed.

The rollup counts what every tick reads and writes (the trends step included) and each
invocation adds its totals, with its seconds, to `internal/rollup_usage`; the cadence benchmark
prices them (docs/operations.md, "Idle and cadence costs").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class Usage:
    """Billed Firestore operations: a query that matches nothing still bills one read."""

    reads: int = 0
    writes: int = 0
    deletes: int = 0

    def add(self, other: Usage) -> None:
        self.reads += other.reads
        self.writes += other.writes
        self.deletes += other.deletes
