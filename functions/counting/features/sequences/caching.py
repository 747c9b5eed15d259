"""What a process keeps between calls of the sequences: each tenant's configuration and the
latest day seen open (`SequenceCache`), and the numbers its records do not hold yet
(`Unrecorded`). The context (`Context`) carries one of each."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.cloud import firestore

from counting.features.sequences.days import SequenceConfig
from counting.features.sequences.documents import Ticket, config_from, sequence_ref
from counting.features.sequences.limits import SequenceLimits
from counting.foundation import config
from counting.foundation.config import Names
from counting.writepath.caching import TtlCache


@dataclass(frozen=True, kw_only=True)
class _Known:
    config: SequenceConfig
    day: int  # a lower bound of the document's open day (0: none yet)


class SequenceCache:
    """Per-instance cache of each tenant's configuration and the latest day seen open.

    The day is a lower bound (a document's day only moves forward), so a number requested for
    that day needs no read at all. The configuration is trusted for `ttl_s` seconds: a changed
    timezone or reset_time reaches every instance within that time.
    """

    def __init__(self, ttl_s: float = config.SEQUENCE_CONFIG_CACHE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: TtlCache[tuple[str, str], _Known] = TtlCache(ttl_s, clock)

    def get(self, db: firestore.Client, names: Names, tenant: str) -> tuple[SequenceConfig, int]:
        """The tenant's configuration and a lower bound of its open day (0: none yet)."""
        known = self._entries.get((db.project, tenant))
        if known is not None:
            return known.config, known.day
        snapshot = sequence_ref(db, names, tenant).get()
        data = (snapshot.to_dict() or {}) if snapshot.exists else {}
        found = config_from(tenant, data)
        return found, self.saw(db, found, int(data.get("day", 0)), fresh=True)

    def saw(self, db: firestore.Client, found: SequenceConfig, day: int, *,
            fresh: bool = False) -> int:
        """Record that `found.tenant`'s document was on `day` (or later); the best bound known.

        `fresh` says `found` was just read (or written), which restarts its time in the cache.
        """
        def change(known: _Known | None) -> tuple[_Known, bool]:
            best = day if known is None else max(day, known.day)
            same = known is not None and known.config == found and not fresh
            return _Known(config=found, day=best), not same

        return self._entries.update((db.project, found.tenant), change).day


class Unrecorded:
    """The numbers a process issued for request ids whose records do not hold them yet: its
    next commit of a number for a request id writes some of them into their records
    (`SequenceLimits.records_per_commit`), so that a record costs no round trip of its own.
    Writing a number into its record twice writes the same values: a commit whose outcome is
    not known gives them back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers: list[tuple[firestore.DocumentReference, Ticket]] = []

    def take(self, limits: SequenceLimits) -> list[tuple[firestore.DocumentReference, Ticket]]:
        with self._lock:
            taken = self._numbers[:limits.records_per_commit]
            del self._numbers[:limits.records_per_commit]
        return taken

    def add(self, limits: SequenceLimits,
            *numbers: tuple[firestore.DocumentReference, Ticket]) -> None:
        with self._lock:
            self._numbers.extend(numbers)
            # At most `max_unrecorded`: the housekeeping records what is dropped.
            del self._numbers[:max(0, len(self._numbers) - limits.max_unrecorded)]
