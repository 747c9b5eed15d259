"""A per-instance cache whose entries are trusted for a time: the write path's copies of counter
and sequence configurations."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    stored_at: float  # the cache's clock, when the value was read or written at its source


class TtlCache(Generic[K, V]):
    """Values trusted for `ttl_s` seconds of `clock` after they were stored; safe across
    threads."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[K, _Entry[V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value while it is trusted, else None."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or self._clock() - entry.stored_at >= self._ttl_s:
            return None
        return entry.value

    def put(self, key: K, value: V, *, at: float | None = None) -> None:
        """Store a value read or written at `at` (the cache's clock; default now): it is trusted
        for `ttl_s` from then."""
        with self._lock:
            self._entries[key] = _Entry(value, self._clock() if at is None else at)

    def update(self, key: K, change: Callable[[V | None], tuple[V, bool]]) -> V:
        """Replace the value (trusted or not) with `change(value)`, atomically: `change` returns
        the new value and whether it is fresh (its time restarts) or keeps the old one's."""
        with self._lock:
            entry = self._entries.get(key)
            value, fresh = change(None if entry is None else entry.value)
            stored_at = entry.stored_at if entry is not None and not fresh else self._clock()
            self._entries[key] = _Entry(value, stored_at)
        return value

    def forget(self, key: K) -> None:
        with self._lock:
            self._entries.pop(key, None)
