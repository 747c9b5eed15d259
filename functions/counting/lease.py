"""A lease on one document, so that only one rollup loop runs at a time.

Acquiring and renewing are compare-and-set writes (`last_update_time` preconditions), so two
loops can never both believe they hold it. Expiry is judged on server time: the lease is free
once a read's `read_time` is `ttl_s` past the holder's last renewal (a server timestamp). Each
renewal also persists the holder's progress (`watermark`) and returns its commit time, which
the rollup uses as the instant of its snapshot reads.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class LeaseLost(Exception):
    """Another holder took the lease (ours expired or was never ours)."""


class Lease:
    def __init__(self, db: firestore.Client, ref: Any, owner: str, ttl_s: float) -> None:
        self._db = db
        self._ref = ref
        self.owner = owner
        self._ttl = dt.timedelta(seconds=ttl_s)
        self._update_time: Any = None
        self.watermark: dt.datetime = EPOCH

    @property
    def held(self) -> bool:
        return self._update_time is not None

    def acquire(self) -> bool:
        """Take the lease when it is free, expired or already ours; False when someone holds it."""
        snapshot = self._ref.get()
        data = snapshot.to_dict() or {}
        holder = data.get("owner")
        renewed_at = data.get("renewed_at")
        live = renewed_at is not None and snapshot.read_time < renewed_at + self._ttl
        if holder not in (None, self.owner) and live:
            return False
        fields = {"owner": self.owner, "renewed_at": firestore.SERVER_TIMESTAMP}
        try:
            if snapshot.exists:
                option = self._db.write_option(last_update_time=snapshot.update_time)
                result = self._ref.update(fields, option=option)
            else:
                result = self._ref.create(fields)
        except (gexc.FailedPrecondition, gexc.AlreadyExists):
            return False
        self._update_time = result.update_time
        self.watermark = data.get("watermark") or EPOCH
        return True

    def renew(self, watermark: dt.datetime) -> dt.datetime:
        """Extend the lease and persist `watermark`; returns the renewal's commit time."""
        if self._update_time is None:
            raise LeaseLost("not held")
        option = self._db.write_option(last_update_time=self._update_time)
        fields = {"renewed_at": firestore.SERVER_TIMESTAMP, "watermark": watermark}
        try:
            result = self._ref.update(fields, option=option)
        except (gexc.FailedPrecondition, gexc.NotFound) as error:
            self._update_time = None
            raise LeaseLost(str(error)) from error
        self._update_time = result.update_time
        commit_time: dt.datetime = result.update_time
        return commit_time

    def commit(self, batch: Any) -> list[Any]:
        """Commit `batch` only while the lease is ours: it also writes the lease document, guarded
        by the update time of our own last write to it (a fencing token), so a holder that stalled
        past its lease cannot commit after a successor has taken over."""
        if self._update_time is None:
            raise LeaseLost("not held")
        option = self._db.write_option(last_update_time=self._update_time)
        batch.update(self._ref, {"fenced_at": firestore.SERVER_TIMESTAMP}, option=option)
        try:
            results: list[Any] = batch.commit()
        except (gexc.FailedPrecondition, gexc.NotFound) as error:
            self._update_time = None
            raise LeaseLost(str(error)) from error
        self._update_time = results[-1].update_time
        return results

    def release(self, watermark: dt.datetime) -> None:
        """Hand the lease back at once (the next holder need not wait for expiry)."""
        if self._update_time is None:
            return
        option = self._db.write_option(last_update_time=self._update_time)
        # Someone who took it already has nothing to be handed back.
        with contextlib.suppress(gexc.FailedPrecondition, gexc.NotFound):
            self._ref.update({"owner": None, "watermark": watermark}, option=option)
        self._update_time = None
