"""A rollup partition's state document (`internal/rollup`, `internal/rollup-P-i`): one typed
record, written by this module only. Its holder's lease, its progress, its partitioning, its
duty to republish trends, and its health for operators; the rollup, its cadence, the trends step
and a change of P hand this module values, never fields.

The lease makes one rollup holder tick at a time. Acquiring and renewing are compare-and-set
writes (`last_update_time` preconditions), so two holders can never both believe they hold it.
Expiry is judged on server time from commit times only: the lease is free once a read's
`read_time` is `ttl_s` past the document's `update_time` (the commit of the holder's last write
to it), never from the `renewed_at` it writes for operators: that is a server timestamp, which
Firestore takes when a request starts, before its commit (docs/architecture.md, "Exact on real
Firestore"). Every write persists the whole record (`Record.fields`): the progress (`watermark`,
`swept`, `checkpoint` and the sweep under way), the partitioning (`spread` and `narrow_at`
after a change of P, `retired` once replaced), `republish`, and the health. A holder keeps the lease
between ticks (a warm instance keeps its ledger): `held` reads the document and tells whether
nobody has written it since the holder's own last write, and gives that read's time, which the
rollup uses as the instant of its snapshot reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.foundation.config import Names, Protections
from counting.writepath.partitions import WHOLE, Part, lease_ref

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Every write to the lease document is a compare-and-set: sent again after a lost answer, it
# would fail on its own first attempt's version and be taken for a lost lease. Sent once; an
# unknown outcome is resolved by reading the owner back (`Lease._resync`).
ONCE = None


def state_ref(db: firestore.Client, names: Names, part: Part = WHOLE
              ) -> firestore.DocumentReference:
    """A partition's state document."""
    return lease_ref(db, names, part)


class LeaseLost(Exception):
    """Another holder took the lease (ours expired or was never ours)."""


@dataclass(frozen=True, kw_only=True)
class Progress:
    """Where a successor starts (docs/architecture.md, "Exact on real Firestore" and "The
    holder's memory"): everything before `watermark` is published; every write committed by
    `swept` was read by a sweep; the counters' memories hold every change taken in up to
    `checkpoint`; the sweep under way began at `sweep_at` (None: none) and has read
    `sweep_done` of its cells."""

    watermark: dt.datetime = EPOCH
    swept: dt.datetime = EPOCH
    checkpoint: dt.datetime = EPOCH
    sweep_at: dt.datetime | None = None
    sweep_done: int = 0


@dataclass(frozen=True, kw_only=True)
class Partitioning:
    """After a change of P: the stripes' spread the ticks also read until `narrow_at`
    (`repartition.change`), the instant the partitioning began (`since`: before it, ticks of
    another P read other stripes), and whether this partition was replaced (`retired`: never
    again)."""

    spread: int = 1
    narrow_at: dt.datetime = EPOCH
    since: dt.datetime = EPOCH
    retired: bool = False


@dataclass(frozen=True, kw_only=True)
class Health:
    """For operators (`counters status`, the dashboard): since when the holder holds it, a recent
    tick's duration and lag, its last problems."""

    holder_since: dt.datetime | None = None
    tick_s: float | None = None
    lag_s: float | None = None
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Record:
    """The whole state document."""

    owner: str | None = None
    progress: Progress = Progress()
    partitioning: Partitioning = Partitioning()
    # The partition's first holder after a change of P publishes every trends/{scope} once
    # (the trends step, `counting.rollup.trend_step`).
    republish: bool = False
    health: Health = Health()

    def fields(self) -> dict[str, Any]:
        """The document's fields: flat, under the names the dashboard and the CLI read."""
        return {
            "owner": self.owner,
            "watermark": self.progress.watermark, "swept": self.progress.swept,
            "checkpoint": self.progress.checkpoint, "sweep_at": self.progress.sweep_at,
            "sweep_done": self.progress.sweep_done,
            "spread": self.partitioning.spread, "narrow_at": self.partitioning.narrow_at,
            "partitioned_at": self.partitioning.since, "retired": self.partitioning.retired,
            "republish": self.republish,
            "holder_since": self.health.holder_since, "tick_s": self.health.tick_s,
            "lag_s": self.health.lag_s, "errors": list(self.health.errors),
        }

    @classmethod
    def of(cls, data: dict[str, Any]) -> Record:
        watermark = data.get("watermark") or EPOCH
        # A lease from before sweeps existed sweeps from its watermark on; one from before the
        # checkpoint wrote every memory on its sweeps' ticks.
        swept = data.get("swept") or watermark
        return cls(
            owner=data.get("owner"),
            progress=Progress(watermark=watermark, swept=swept,
                              checkpoint=data.get("checkpoint") or swept,
                              sweep_at=data.get("sweep_at"),
                              sweep_done=int(data.get("sweep_done") or 0)),
            partitioning=Partitioning(spread=int(data.get("spread") or 1),
                                      narrow_at=data.get("narrow_at") or EPOCH,
                                      since=data.get("partitioned_at") or EPOCH,
                                      retired=bool(data.get("retired"))),
            republish=bool(data.get("republish")),
            health=Health(holder_since=data.get("holder_since"), tick_s=data.get("tick_s"),
                          lag_s=data.get("lag_s"), errors=tuple(data.get("errors") or ())),
        )


@dataclass(frozen=True, kw_only=True)
class LeaseView:
    """The lease document as one read saw it."""

    record: Record
    live: bool  # held by its owner and renewed within the TTL, as of `read_time`
    renewed_at: dt.datetime | None  # the commit time of the last write to the document
    read_time: dt.datetime

    @property
    def owner(self) -> str | None:
        return self.record.owner

    @property
    def retired(self) -> bool:
        return self.record.partitioning.retired

    @classmethod
    def of(cls, snapshot: firestore.DocumentSnapshot[Any], ttl: dt.timedelta) -> LeaseView:
        record = Record.of(snapshot.to_dict() or {})
        # Every write to the document is its holder's (or a taker's), so its commit time is
        # the last renewal.
        renewed_at: dt.datetime | None = snapshot.update_time if snapshot.exists else None
        read_time: dt.datetime = snapshot.read_time
        return cls(
            record=record,
            live=record.owner is not None and renewed_at is not None
            and read_time < renewed_at + ttl,
            renewed_at=renewed_at,
            read_time=read_time,
        )


class Lease:
    """One holder's hold on a partition's state document, and the record it writes next."""

    def __init__(self, db: firestore.Client, ref: firestore.DocumentReference, owner: str,
                 ttl_s: float, *, protections: Protections | None = None) -> None:
        """`protections` (every one on unless told) says whether commits are fenced."""
        self._db = db
        self._fenced = (protections or Protections()).lease_fence
        self._ref = ref
        self.owner = owner
        self._ttl = dt.timedelta(seconds=ttl_s)
        self._update_time: Any = None
        self.record = Record(owner=owner)  # what the next write persists
        self.found: LeaseView | None = None  # the document as acquire() last read it

    @property
    def written_at(self) -> dt.datetime | None:
        """The commit time of this holder's last write to the document; None when not held."""
        written: dt.datetime | None = self._update_time
        return written

    def note(self, *, progress: Progress | None = None, health: Health | None = None,
             republish: bool | None = None) -> None:
        """Values the next write persists: the rollup's progress, the holder's health, the
        republishing of trends done."""
        self.record = dataclasses.replace(
            self.record,
            progress=self.record.progress if progress is None else progress,
            health=self.record.health if health is None else health,
            republish=self.record.republish if republish is None else republish)

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

    def acquire(self, health: Health | None = None) -> bool:
        """Take the lease when it is free, expired or already ours; False when someone holds it.
        The record taken keeps the progress, partitioning and duties the document had, with
        `health` this holder's. `found` keeps what the read saw (the previous holder's)."""
        snapshot = self._ref.get()
        found = self.found = LeaseView.of(snapshot, self._ttl)
        if found.retired or (found.live and found.owner != self.owner):
            return False
        record = dataclasses.replace(found.record, owner=self.owner, health=health or Health())
        fields = {**record.fields(), "renewed_at": firestore.SERVER_TIMESTAMP}
        try:
            if snapshot.exists:
                option = self._db.write_option(last_update_time=snapshot.update_time)
                result = self._ref.update(fields, option=option, retry=ONCE)
            else:
                result = self._ref.create(fields, retry=ONCE)
        except (gexc.FailedPrecondition, gexc.AlreadyExists):
            return False
        self._update_time = result.update_time
        self.record = record
        return True

    def renew(self) -> dt.datetime:
        """Extend the lease and persist the record; returns the renewal's commit time."""
        if self._update_time is None:
            raise LeaseLost("not held")
        option = self._db.write_option(last_update_time=self._update_time)
        fields = {**self.record.fields(), "renewed_at": firestore.SERVER_TIMESTAMP}
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
        """Commit `batch` only while the lease is ours: it also writes the record, guarded by
        the update time of our own last write to it (a fencing token), so a holder that stalled
        past its lease cannot commit after a successor has taken over.

        A failed precondition of the batch's own writes (a fold's) is raised as it is when the
        lease is still ours; LeaseLost when it is not."""
        if self._update_time is None:
            raise LeaseLost("not held")
        option = self._db.write_option(last_update_time=self._update_time) \
            if self._fenced else None
        # A commit renews too (its commit time is the document's update time): a long tick that
        # commits keeps its lease. It persists the progress as of the tick's start (Store.begin).
        batch.update(self._ref, {**self.record.fields(), "renewed_at": firestore.SERVER_TIMESTAMP},
                     option=option)
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

    def release(self, progress: Progress) -> None:
        """Hand the lease back at once (the next holder need not wait for expiry), with the
        progress."""
        if self._update_time is None:
            return
        option = self._db.write_option(last_update_time=self._update_time)
        self.record = dataclasses.replace(self.record, owner=None, progress=progress)
        # Someone who took it already has nothing to be handed back; any other failure leaves
        # it to expire (the next holder waits the TTL).
        with contextlib.suppress(Exception):
            self._ref.update(self.record.fields(), option=option, retry=ONCE)
        self._update_time = None


# -- a change of P (`repartition.change`): the old partitions' records retired, the new ones
# written, in the change's one conditional commit --


def retire(db: firestore.Client, batch: firestore.WriteBatch,
           found: firestore.DocumentSnapshot[Any]) -> None:
    """Add to `batch` the retirement of a partition's record as read (`found`), conditional on
    its version: its holder's next write fails, and nobody takes it again."""
    record = Record.of(found.to_dict() or {})
    retired = dataclasses.replace(record, owner=None, partitioning=dataclasses.replace(
        record.partitioning, retired=True))
    if found.exists:
        batch.update(found.reference, retired.fields(),
                     option=db.write_option(last_update_time=found.update_time))
    else:
        batch.create(found.reference, retired.fields())


def start(db: firestore.Client, names: Names, batch: firestore.WriteBatch, part: Part,
          progress: Progress, partitioning: Partitioning) -> None:
    """Add to `batch` the record of a new partition: free, starting at `progress`, reading
    `partitioning`'s spread until `narrow_at`, and owing a republish of the trends."""
    batch.set(lease_ref(db, names, part), Record(progress=progress, partitioning=partitioning,
                                                 republish=True).fields())
