"""A lease on one document, so that only one rollup holder ticks at a time, and the document
through which holders hand over their progress.

Acquiring and renewing are compare-and-set writes (`last_update_time` preconditions), so two
holders can never both believe they hold it. Expiry is judged on server time from commit times
only: the lease is free once a read's `read_time` is `ttl_s` past the document's `update_time`
(the commit of the holder's last write to it), never from the `renewed_at` it writes for
operators: that is a server timestamp, which Firestore takes when a request starts, before its
commit (docs/architecture.md, "Exact on real Firestore"). Each renewal also persists the
holder's progress (`watermark`, and `swept`, the instant of its last sweep). A holder keeps the
lease between ticks (a warm instance keeps its ledger): `held` reads the document and tells
whether nobody has written it since the holder's own last write, and gives that read's time,
which the rollup uses as the instant of its snapshot reads.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from . import config
from .partitions import WHOLE, Part, lease_ref

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Every write to the lease document is a compare-and-set: sent again after a lost answer, it
# would fail on its own first attempt's version and be taken for a lost lease. Sent once; an
# unknown outcome is resolved by reading the owner back (`Lease._resync`).
ONCE = None


def state_ref(db: firestore.Client, part: Part = WHOLE) -> firestore.DocumentReference:
    """A partition's state document: its lease, watermark and status."""
    return lease_ref(db, part)


class LeaseLost(Exception):
    """Another holder took the lease (ours expired or was never ours)."""


@dataclass(frozen=True, kw_only=True)
class LeaseView:
    """The lease document as one read saw it."""

    owner: str | None
    live: bool  # held by `owner` and renewed within the TTL, as of `read_time`
    renewed_at: dt.datetime | None  # the commit time of the last write to the document
    read_time: dt.datetime
    retired: bool = False  # its partitioning was replaced (`partitions.change`): never again

    @classmethod
    def of(cls, snapshot: firestore.DocumentSnapshot[Any], ttl: dt.timedelta) -> LeaseView:
        data = snapshot.to_dict() or {}
        # Every write to the document is its holder's (or a taker's), so its commit time is
        # the last renewal.
        renewed_at: dt.datetime | None = snapshot.update_time if snapshot.exists else None
        owner = data.get("owner")
        read_time: dt.datetime = snapshot.read_time
        return cls(
            owner=owner,
            live=owner is not None and renewed_at is not None and read_time < renewed_at + ttl,
            renewed_at=renewed_at,
            read_time=read_time,
            retired=bool(data.get("retired")),
        )


class Lease:
    def __init__(self, db: firestore.Client, ref: firestore.DocumentReference, owner: str,
                 ttl_s: float) -> None:
        self._db = db
        self._ref = ref
        self.owner = owner
        self._ttl = dt.timedelta(seconds=ttl_s)
        self._update_time: Any = None
        self.watermark: dt.datetime = EPOCH
        self.swept: dt.datetime = EPOCH  # the last sweep's instant (counting.rollup)
        self.found: LeaseView | None = None  # the document as acquire() last read it
        self.status: dict[str, Any] = {}  # health figures, for operators: the next write's
        # The stripes' spread its change query reads until `narrow_at` (`partitions.change`).
        self.spread = 1
        self.narrow_at = EPOCH
        # Publish every trends/{scope} at the first tick (`partitions.change`, `counting.trends`).
        self.republish = False

    @property
    def written_at(self) -> dt.datetime | None:
        """The commit time of this holder's last write to the document; None when not held."""
        written: dt.datetime | None = self._update_time
        return written

    def held(self) -> dt.datetime | None:
        """Read the document: its read time when the lease is still ours (nobody has written it
        since our own last write, however long ago), else None (we no longer hold it)."""
        if self._update_time is None:
            return None
        snapshot = self._ref.get()
        if not snapshot.exists or snapshot.update_time != self._update_time:
            self._update_time = None
            return None
        read_time: dt.datetime = snapshot.read_time
        return read_time

    def acquire(self) -> bool:
        """Take the lease when it is free, expired or already ours; False when someone holds it.
        `found` keeps what the read saw (the previous holder's state)."""
        snapshot = self._ref.get()
        found = self.found = LeaseView.of(snapshot, self._ttl)
        if found.retired or (found.live and found.owner != self.owner):
            return False
        fields = {"owner": self.owner, "renewed_at": firestore.SERVER_TIMESTAMP,
                  **self._state()}
        try:
            if snapshot.exists:
                option = self._db.write_option(last_update_time=snapshot.update_time)
                result = self._ref.update(fields, option=option, retry=ONCE)
            else:
                result = self._ref.create(fields, retry=ONCE)
        except (gexc.FailedPrecondition, gexc.AlreadyExists):
            return False
        self._update_time = result.update_time
        data = snapshot.to_dict() or {}
        self.watermark = data.get("watermark") or EPOCH
        # A lease from before sweeps existed sweeps from its watermark on.
        self.swept = data.get("swept") or self.watermark
        self.spread = int(data.get("spread") or 1)
        self.narrow_at = data.get("narrow_at") or EPOCH
        self.republish = bool(data.get("republish"))
        return True

    def renew(self, watermark: dt.datetime, swept: dt.datetime) -> dt.datetime:
        """Extend the lease and persist `watermark` and `swept` (and `status`); returns the
        renewal's commit time."""
        if self._update_time is None:
            raise LeaseLost("not held")
        option = self._db.write_option(last_update_time=self._update_time)
        self.watermark, self.swept = watermark, swept
        fields = {"renewed_at": firestore.SERVER_TIMESTAMP, "watermark": watermark,
                  "swept": swept, **self._state()}
        try:
            result = self._ref.update(fields, option=option, retry=ONCE)
        except (gexc.FailedPrecondition, gexc.NotFound) as error:
            self._update_time = None
            raise LeaseLost(str(error)) from error
        except Exception:
            self._resync()
            raise
        self._update_time = result.update_time
        commit_time: dt.datetime = result.update_time
        return commit_time

    def commit(self, batch: firestore.WriteBatch) -> list[Any]:
        """Commit `batch` only while the lease is ours: it also writes the lease document, guarded
        by the update time of our own last write to it (a fencing token), so a holder that stalled
        past its lease cannot commit after a successor has taken over.

        A failed precondition of the batch's own writes (a fold's) is raised as it is when the
        lease is still ours; LeaseLost when it is not."""
        if self._update_time is None:
            raise LeaseLost("not held")
        option = self._db.write_option(last_update_time=self._update_time) \
            if config.PROTECTIONS.lease_fence else None
        # A commit renews too (its commit time is the document's update time): a long tick that
        # commits keeps its lease. It persists the progress as of the tick's start (Store.begin).
        batch.update(self._ref, {"renewed_at": firestore.SERVER_TIMESTAMP,
                                 "watermark": self.watermark, "swept": self.swept,
                                 **self.status}, option=option)
        try:
            results: list[Any] = batch.commit(retry=ONCE)
        except (gexc.FailedPrecondition, gexc.NotFound) as error:
            if self._ref.get().update_time == self._update_time:
                raise  # the fence held: another write's precondition failed
            self._update_time = None
            raise LeaseLost(str(error)) from error
        except Exception:
            self._resync()
            raise
        self._update_time = results[-1].update_time
        return results

    def _resync(self) -> None:
        """After a write to the lease document whose outcome is unknown (its answer was lost, a
        timeout): if it applied, the document's version is ours but not the one we hold, and the
        next renewal would take us for superseded. Every taker writes its own owner, so while
        the document still names us, its version is ours to fence with."""
        with contextlib.suppress(Exception):
            snapshot = self._ref.get()
            if snapshot.exists and (snapshot.to_dict() or {}).get("owner") == self.owner:
                self._update_time = snapshot.update_time

    def release(self, watermark: dt.datetime, swept: dt.datetime | None = None) -> None:
        """Hand the lease back at once (the next holder need not wait for expiry), with the
        progress."""
        if self._update_time is None:
            return
        option = self._db.write_option(last_update_time=self._update_time)
        fields = {"owner": None, "watermark": watermark, "swept": swept or self.swept,
                  **self._state()}
        # Someone who took it already has nothing to be handed back; any other failure leaves
        # it to expire (the next holder waits the TTL).
        with contextlib.suppress(Exception):
            self._ref.update(fields, option=option, retry=ONCE)
        self._update_time = None

    def _state(self) -> dict[str, Any]:
        return dict(self.status)
