"""The rollup's I/O: snapshot reads and commits fenced by its lease, each counted as Firestore
bills it, so that the rollup and the trends step keep no tallies of their own; and it keeps the
lease live through a tick that reads for long (a first tick after a handover, say).

Reads bill one per document returned, and one for a query that returns nothing; a `get` bills
one whether the document exists or not. A commit bills one write per write in it, the lease's
fencing write included, and one delete per delete (priced apart). Firestore implements it, or
the simulation's model of Firestore (tests/sim), behind the same client API.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.cloud import firestore

from .lease import Lease, LeaseLost, Progress
from .usage import Usage

T = TypeVar("T")
R = TypeVar("R")
Snapshot = firestore.DocumentSnapshot[Any]
READ_THREADS = 8  # reads of many small queries (a counter's shards) run this many at once


class Store:
    def __init__(self, db: firestore.Client, lease: Lease, *, renew_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """`lease` was just written (taken); it is renewed before a read when its last write is
        `renew_s` old on the `monotonic` clock."""
        self.db = db
        self.lease = lease
        self._renew_s = renew_s
        self._monotonic = monotonic
        self._written = monotonic()  # when this holder last wrote the lease
        self._usage = Usage()
        self._lock = threading.Lock()
        self._renewing = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="store")

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    @property
    def usage(self) -> Usage:
        """What was billed since the last `take_usage`."""
        return self._usage

    def take_usage(self) -> Usage:
        with self._lock:
            usage, self._usage = self._usage, Usage()
        return usage

    def _bill(self, reads: int = 0, writes: int = 0, deletes: int = 0) -> None:
        with self._lock:
            self._usage.reads += reads
            self._usage.writes += writes
            self._usage.deletes += deletes

    def begin(self, progress: Progress) -> dt.datetime:
        """A tick's instant: the read time of a read of the lease that finds it still ours
        (LeaseLost otherwise). The progress so far goes with the next write to the lease."""
        instant = self.lease.held()
        self._bill(reads=1)
        if instant is None:
            raise LeaseLost("another holder has written the lease")
        self.lease.note(progress=progress)
        return instant

    def renew(self) -> dt.datetime:
        """Renew the lease, persisting its record; returns the renewal's commit time."""
        written = self._monotonic()
        instant = self.lease.renew()
        self._written = written
        self._bill(writes=1)
        return instant

    def _keep(self) -> None:
        """Before a read: renew the lease when its last write is `renew_s` old, with the
        progress as of the tick's start (`begin`), so that a tick reading longer than the lease
        lives keeps it (LeaseLost, raised through the read, ends the tick). One renewal at a
        time: the read pool's threads would otherwise race their own preconditions."""
        with self._renewing:
            if self._monotonic() - self._written >= self._renew_s:
                self.renew()

    def query(self, query: Any, read_time: dt.datetime | None = None) -> list[Snapshot]:
        self._keep()
        found = list(query.stream(read_time=read_time) if read_time else query.stream())
        self._bill(reads=max(1, len(found)))
        return found

    def get(self, ref: firestore.DocumentReference,
            field_paths: list[str] | None = None) -> Snapshot:
        self._keep()
        snapshot: Snapshot = ref.get(field_paths=field_paths)
        self._bill(reads=1)
        return snapshot

    def get_all(self, refs: Sequence[firestore.DocumentReference], *,
                field_paths: list[str] | None = None,
                read_time: dt.datetime | None = None) -> list[Snapshot]:
        if not refs:
            return []
        self._keep()
        options: dict[str, Any] = {} if read_time is None else {"read_time": read_time}
        found = list(self.db.get_all(list(refs), field_paths=field_paths, **options))
        self._bill(reads=len(refs))
        return found

    def each(self, read: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`read` of every item, several at once (each read bills itself)."""
        return list(self._pool.map(read, items))

    def commit(self, batch: firestore.WriteBatch, *, deletes: int = 0) -> list[Any]:
        """Commit `batch`, which holds `deletes` deletes, fenced by the lease (`Lease.commit`)."""
        written = self._monotonic()
        results = self.lease.commit(batch)
        self._written = written
        self._bill(writes=len(results) - deletes, deletes=deletes)
        return results
