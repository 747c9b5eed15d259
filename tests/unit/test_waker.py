"""The write path's waker (`waking.Waker`) with a fake lease document: one read at a time, no
write held up behind a slow read, and one wake-up for a sleeping rollup."""

from __future__ import annotations

import datetime as dt
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from counting import config, counters, waking
from google.cloud.firestore_v1.types import Value

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


class Snapshot:
    def __init__(self, awake: bool) -> None:
        self.exists = True
        self.read_time = NOW
        self.update_time = NOW - dt.timedelta(seconds=1)  # the holder's last renewal
        self._data = {"owner": "holder", "awake": awake}

    def to_dict(self) -> dict[str, Any]:
        return self._data


class LeaseDocument:
    """A stand-in Firestore client whose only document is the lease; `get` waits for `release`."""

    def __init__(self, awake: bool) -> None:
        self.awake = awake
        self.reads = 0
        self.release = threading.Event()
        self.reading = threading.Event()

    def collection(self, *path: str) -> LeaseDocument:
        return self

    def document(self, *path: str) -> LeaseDocument:
        return self

    def get(self) -> Snapshot:
        self.reads += 1
        self.reading.set()
        assert self.release.wait(10)
        return Snapshot(self.awake)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_writes_do_not_wait_behind_a_slow_lease_read() -> None:
    """While one call reads the lease, the others return at once without reading."""
    lease = LeaseDocument(awake=True)
    waker = waking.Waker(lambda db: None, clock=Clock())
    with ThreadPoolExecutor(1) as pool:
        reader = pool.submit(waker.after_write, lease)  # type: ignore[arg-type]
        assert lease.reading.wait(10)
        others = [waker.after_write(lease) for _ in range(50)]  # type: ignore[arg-type]
        assert others == [False] * 50 and lease.reads == 1
        lease.release.set()
        assert reader.result() is False


def test_a_sleeping_rollup_is_woken_once_by_the_reader() -> None:
    woken: list[int] = []
    lease = LeaseDocument(awake=False)
    clock = Clock()
    waker = waking.Waker(lambda db: woken.append(1), clock=clock)
    with ThreadPoolExecutor(1) as pool:
        reader = pool.submit(waker.after_write, lease)  # type: ignore[arg-type]
        assert lease.reading.wait(10)
        assert waker.after_write(lease) is False  # type: ignore[arg-type]
        lease.release.set()
        assert reader.result() is True
    assert woken == [1]
    assert waker.after_write(lease) is False  # type: ignore[arg-type]  # within WAKE_RETRY_S
    clock.now += config.WAKE_RETRY_S
    assert waker.after_write(lease) is True  # type: ignore[arg-type]  # it read again: asleep
    assert woken == [1, 1] and lease.reads == 2


def test_a_failed_read_wakes_the_rollup_as_it_cannot_tell() -> None:
    """The writes that counted on the failed read are covered: the reader wakes the rollup."""
    class Failing(LeaseDocument):
        def get(self) -> Snapshot:
            self.reads += 1
            raise OSError("unavailable")

    woken: list[int] = []
    lease = Failing(awake=True)
    clock = Clock()
    waker = waking.Waker(lambda db: woken.append(1), clock=clock)
    assert waker.after_write(lease) is True  # type: ignore[arg-type]
    assert waker.after_write(lease) is False  # type: ignore[arg-type]  # within WAKE_RETRY_S
    clock.now += config.WAKE_RETRY_S
    assert waker.after_write(lease) is True  # type: ignore[arg-type]
    assert woken == [1, 1] and lease.reads == 2


class Written:
    """A WriteResult whose server timestamp is its commit time (nothing straddles)."""

    def __init__(self) -> None:
        self.update_time = NOW
        self.transform_results = [Value(timestamp_value=NOW)]


def test_settle_wakes_the_rollup_once_per_commit_that_wrote_shards() -> None:
    """`counters.settle`, where the domain's write paths end, hands the client to the process's
    waker once per commit of shard writes; a commit that wrote no shard wakes nothing."""
    seen: list[object] = []

    class Recording:
        def after_write(self, db: Any) -> bool:
            seen.append(db)
            return False

    db = object()
    previous = waking.install(Recording())
    try:
        counters.settle(db, [], random.Random())  # type: ignore[arg-type]
        assert seen == []
        written: list[Any] = [(object(), Written()), (object(), Written())]
        counters.settle(db, written, random.Random())  # type: ignore[arg-type]
    finally:
        waking.install(previous)
    assert seen == [db]


def test_a_failing_waker_never_fails_the_write() -> None:
    class Broken:
        def after_write(self, db: Any) -> bool:
            raise RuntimeError("no Cloud Tasks")

    previous = waking.install(Broken())
    try:
        assert waking.after_write(object()) is False  # type: ignore[arg-type]
    finally:
        waking.install(previous)
