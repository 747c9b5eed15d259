"""What every write of a process shares (`Writing`): where the backend lives (its placement, with
its collection ids), P as the process knows it, the waker of the rollup, the protections, the
generator of stripes, the clock, the nonces and the thread pools. The handlers, the operator
CLI and the demo build one per process (in
`counting.features.context.Context`), the rollup gets one from its constructor; tests and the
simulation build their own."""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.cloud import firestore

from counting.foundation import writes
from counting.foundation.clock import SYSTEM, Clock
from counting.foundation.config import Names, Placement, Protections
from counting.writepath import partitions, waking

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Writing:
    """The write path's context. `placement` says where the backend's data is: its `names`, the
    collection ids every document path of the domain is made of (the defaults: this
    repository's own stack). `rng` picks stripes (and what else the domain draws for itself: a
    trend event's shards), `nonces` makes the nonce of each request, `clock` times and paces the
    resends of guarded commits, `pools(max_workers, thread_name_prefix)` makes the thread pools
    of the rollup's reads and of the backfill."""

    known: partitions.Known
    waker: waking.AfterWrite
    placement: Placement = field(default_factory=Placement)
    protections: Protections = field(default_factory=Protections)
    rng: random.Random = field(default_factory=random.Random)
    clock: Clock = SYSTEM
    nonces: Callable[[], str] = writes.new_nonce
    pools: Callable[[int, str], Executor] = ThreadPoolExecutor

    @classmethod
    def offline(cls, *, protections: Protections | None = None,
                placement: Placement | None = None) -> Writing:
        """A context whose writes wake nothing: for writers whose rollup runs in-process (tests,
        benchmarks), at `placement` (None: the defaults)."""
        return cls(known=partitions.Known(), waker=waking.Never(),
                   protections=protections or Protections(), placement=placement or Placement())

    @property
    def names(self) -> Names:
        return self.placement.names

    def stripe(self, db: firestore.Client, home: int) -> int:
        """The `stripe` of a write of a key living at `home`, over P as this process knows it."""
        return partitions.stripe(home, self.known.count(db, self.names), self.rng)

    def nonce(self) -> str:
        return self.nonces()

    def once(self) -> Any:
        """`retry=` of a commit that must not be applied twice (`writes.once`)."""
        return writes.once(self.protections)

    def send(self, batch: firestore.WriteBatch) -> list[Any]:
        """One attempt at a commit that must not apply twice (`writes.send`)."""
        return writes.send(batch, self.protections)

    def commit_once(self, batch: firestore.WriteBatch, *,
                    request_id: str | None = None) -> list[Any]:
        """A commit with no marker to tell whether it applied: one attempt
        (`writes.commit_once`)."""
        return writes.commit_once(batch, self.protections, request_id=request_id)

    def resending(self, attempt: Callable[[], T], *, request_id: str | None) -> T:
        """A guarded commit, sent again until it is answered (`writes.resending`)."""
        return writes.resending(attempt, request_id=request_id, clock=self.clock)

    def after_write(self, db: firestore.Client, committed_at: dt.datetime,
                    homes: Iterable[int]) -> bool:
        """Called after each commit of shard writes (`shards.settle`), with its commit time and
        the homes of the keys written: the waker makes sure a tick follows. Never raises (the
        write is done: a client told otherwise would retry it)."""
        try:
            return self.waker.after_write(db, committed_at, homes)
        except Exception:
            log.exception("could not enqueue the rollup's tick (the scheduled run will tick)")
            return False
