"""The write path's TTL cache: trusted for its TTL from when a value was read, and atomic
updates that keep or restart that time."""

from __future__ import annotations

from counting.writepath.caching import TtlCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_value_is_trusted_for_its_ttl_from_when_it_was_read() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(5.0, clock)
    assert cache.get("a") is None
    cache.put("a", 1, at=99.0)  # read before now: trusted from then
    clock.now = 103.9
    assert cache.get("a") == 1
    clock.now = 104.0
    assert cache.get("a") is None
    cache.put("a", 2)
    clock.now = 108.9
    assert cache.get("a") == 2
    cache.forget("a")
    assert cache.get("a") is None


def test_update_keeps_or_restarts_the_time_as_the_change_says() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(5.0, clock)
    assert cache.update("a", lambda old: ((old or 0) + 1, False)) == 1  # new: stored now
    clock.now = 103.0
    assert cache.update("a", lambda old: ((old or 0) + 1, False)) == 2  # keeps 100.0
    clock.now = 105.0
    assert cache.get("a") is None  # expired, but still there for update
    assert cache.update("a", lambda old: ((old or 0) + 1, True)) == 3  # restarted at 105.0
    clock.now = 109.9
    assert cache.get("a") == 3
