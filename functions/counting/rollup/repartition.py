"""Changing P, the number of rollup partitions (docs/architecture.md, "Partitions").

`change` is one conditional commit: it retires every lease of the old P (so no holder of the old
P commits again: their commits are fenced by their lease documents) and writes every lease of the
new P, each starting from the oldest progress of the old ones, and deletes the new P's indexes of
trend parts (a P chosen again must not merge the parts of its earlier time:
`counting.rollup.trend_merge`). The partitions themselves (homes, stripes, P as writers know it)
are `counting.writepath.partitions`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.foundation import writes
from counting.foundation.config import Names
from counting.foundation.errors import Aborted
from counting.rollup import lease
from counting.writepath.partitions import (
    CHOICES,
    NARROW_AFTER_S,
    WIDE_SWEEP_S,
    Known,
    lease_ref,
    partitions_ref,
    parts,
    trend_parts_ref,
)

CHANGE_ATTEMPTS = 20  # a change is read and tried again while holders write their leases


@dataclass(frozen=True, kw_only=True)
class Changed:
    before: int
    after: int
    watermark: dt.datetime  # where the new partitions start
    spread: int  # the stripes' spread they read until narrow_at
    narrow_at: dt.datetime


def change(db: firestore.Client, names: Names, new: int, *, known: Known,
           attempts: int = CHANGE_ATTEMPTS) -> Changed:
    """Set P to `new`: one commit retires every lease of the current P and writes every lease of
    the new one, starting at the oldest watermark and sweep of the old leases. The commit is
    conditional on every document it replaces being as it was read (a holder's commit writes its
    lease: then it is read and tried again), so the progress it carries over is the latest.
    Holders of the old P fail their next commit (their lease was written) and find their lease
    retired: nothing they committed is lost (the new leases start before it), and they commit
    nothing after it (fenced). Changing to the current P changes nothing. `known` (P as the
    caller's process knows it) is forgotten, so that the caller's next writes read P again."""
    if new not in CHOICES:
        raise ValueError(f"partitions: {new!r} is not one of {', '.join(map(str, CHOICES))}")
    for _ in range(attempts):
        try:
            return _change_once(db, names, new)
        except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound):
            continue  # a holder (or another change) wrote in between: read again
        except writes.FAILED as error:
            if writes.refused(error):
                raise
            continue  # the answer was lost: read again (applied, the new P is there)
        finally:
            known.forget()
    raise Aborted(f"partitions: the leases kept changing; {attempts} attempts failed: retry")


def _change_once(db: firestore.Client, names: Names, new: int) -> Changed:
    """One attempt: the settings, then every old partition's record in one read, then the
    conditional commit. Instants are Firestore's (the settings' read time), as the holders
    compare them with theirs. The records are written by `lease` (their one writer)."""
    settings = partitions_ref(db, names).get()
    instant: dt.datetime = settings.read_time
    data = settings.to_dict() or {}
    before = int(data["count"]) if data.get("count") in CHOICES else 1
    by_path = {snapshot.reference.path: snapshot for snapshot in
               db.get_all([lease_ref(db, names, part) for part in parts(before)])}
    olds = [by_path[lease_ref(db, names, part).path] for part in parts(before)]
    found = [lease.Record.of(snapshot.to_dict() or {}) for snapshot in olds]
    progress = lease.Progress(watermark=min(r.progress.watermark for r in found),
                              swept=min(r.progress.swept for r in found),
                              checkpoint=min(r.progress.checkpoint for r in found))
    # Still within an earlier change's grace (its ticks' until narrow_at, its sweeps' for
    # WIDE_SWEEP_S after): keep reading that spread too, or a write of a P two changes back that
    # lands late would be in no partition's stripes.
    wide = dt.timedelta(seconds=WIDE_SWEEP_S)
    spread = max([before, new] + [r.partitioning.spread for r in found
                                  if r.partitioning.narrow_at + wide > instant])
    changed = Changed(before=before, after=new, watermark=progress.watermark, spread=spread,
                      narrow_at=instant + dt.timedelta(seconds=NARROW_AFTER_S))
    if new == before:
        return changed
    batch = db.batch()
    fields = {"count": new, "before": before, "changed_at": firestore.SERVER_TIMESTAMP}
    if settings.exists:
        batch.update(settings.reference, fields,
                     option=db.write_option(last_update_time=settings.update_time))
    else:
        batch.create(settings.reference, fields)
    for snapshot in olds:
        lease.retire(db, batch, snapshot)
    for part in parts(new):
        lease.start(db, names, batch, part, progress, lease.Partitioning(
            spread=spread, narrow_at=changed.narrow_at, since=instant))
        if part.index > 0 and part.tag_homes():
            batch.delete(trend_parts_ref(db, names, part))
    batch.commit(retry=None)  # a compare-and-set: `change` reads again after any failure
    return changed
