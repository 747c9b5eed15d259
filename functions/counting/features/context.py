"""The features' context (`Context`): what a process's calls of the domain share, where the
backend lives among it, built once per process by the handlers (`handlers.context`, with the
codebase's placement), the operator CLI (with the install's) and the demo, and by tests and the
simulation for themselves. Every feature function that writes, or reads a process cache, takes
it as its first argument."""

from __future__ import annotations

from dataclasses import dataclass, field

from counting.features.sequences.caching import SequenceCache, Unrecorded
from counting.features.sequences.limits import LIMITS, SequenceLimits
from counting.features.shard_choice import ConfigCache, ShardPicker
from counting.foundation.clock import SYSTEM, Clock
from counting.foundation.config import Names, Placement, Protections
from counting.writepath import partitions, waking
from counting.writepath.caching import TtlCache
from counting.writepath.context import Writing

RETURNING_TTL_S = 60.0  # how long a paced counter's last request is taken as a hint


@dataclass(frozen=True, kw_only=True)
class Context:
    """The write path's context (`writing`), the cache of counter configurations, the shard
    picker, the cache of sequence configurations and the paced counters' hints."""

    writing: Writing
    configs: ConfigCache
    picker: ShardPicker
    sequences: SequenceCache
    # Per paced counter: whether its last request here found the user's pacing marker.
    returning: TtlCache[str, bool] = field(default_factory=lambda: TtlCache(RETURNING_TTL_S))
    # Numbers issued for request ids here that their records do not hold yet.
    unrecorded: Unrecorded = field(default_factory=Unrecorded)
    sequence_limits: SequenceLimits = LIMITS

    @property
    def placement(self) -> Placement:
        return self.writing.placement

    @property
    def names(self) -> Names:
        return self.writing.names

    @classmethod
    def of(cls, writing: Writing) -> Context:
        """A context around `writing`, with caches of its own on `writing`'s clock."""
        return cls(writing=writing, configs=ConfigCache(clock=writing.clock.monotonic),
                   picker=ShardPicker(), sequences=SequenceCache(clock=writing.clock.monotonic),
                   returning=TtlCache(RETURNING_TTL_S, clock=writing.clock.monotonic))

    @classmethod
    def for_process(cls, *, placement: Placement, waker: waking.AfterWrite | None = None,
                    protections: Protections | None = None, clock: Clock = SYSTEM) -> Context:
        """A process's context for the backend at `placement`: its writes wake the rollup through
        `waker` (None: Cloud Tasks, `waking.cloud_tasks`), with every protection on unless told
        otherwise."""
        known = partitions.Known(monotonic=clock.monotonic)
        return cls.of(Writing(known=known, waker=waker or waking.cloud_tasks(known, placement),
                              protections=protections or Protections(), clock=clock,
                              placement=placement))

    @classmethod
    def offline(cls, *, protections: Protections | None = None,
                placement: Placement | None = None) -> Context:
        """A context whose writes wake nothing (`Writing.offline`): tests and benchmarks, whose
        rollup runs in-process."""
        return cls.of(Writing.offline(protections=protections, placement=placement))
