"""The exactness audit: the deployed system checking its own rollup against its shards.

Nothing here runs on real Firestore before it is deployed, so what only production can get wrong
(a commit later than any model drew, a path nobody thought of) is looked for where it would
show: a published count that is not the sum of its counter's shards. Each scheduled run (inside
the `rollup` function, after the housekeeping) takes the next counters in id order, round and
round, as many as make one rotation a day of the counters there were at the last rotation's end
(`per_run`), and for each compares `count` with the sum of its shards read at the publish's
own instant `updated_at` (a snapshot read: one aggregation query, billed as one read per 1,000
shards). A mismatch there is not yet drift: a write whose commit came late after its timestamp
joins the rollup only at the next sweep. So a mismatch is a suspect, checked again at every run;
it is drift when it is still there CONFIRM_AFTER_S later, past every sweep that could have taken
the write in. Drift is logged at ERROR with DRIFT_LOG_PREFIX (a log-based alert matches it),
repaired (`repair`: the rollup reads the counter's shards again), and kept, with the suspects and
the progress, in `internal/audit`, which only this module writes (`counters status`, `counters
audit`, `counters doctor` and the dashboard read it). So a write the rollup missed, however late
it landed, is published again within a rotation of the counters.
docs/operations.md, "The exactness audit".
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from counting.features import counter_refs
from counting.foundation import config, writes
from counting.foundation.clock import instant
from counting.foundation.config import Names
from counting.rollup.lease import Record, state_ref
from counting.writepath import partitions
from counting.writepath.context import Writing

log = logging.getLogger(__name__)

AUDIT_DOC = "audit"  # internal/audit
# Counters a scheduled run (one a minute) checks, about 2 reads each: enough for a rotation a day
# of the counters counted when the last one ended, at least the first, at most the second.
AUDIT_PER_RUN_MIN, AUDIT_PER_RUN_MAX = 3, 1000
RUNS_PER_ROTATION = 24 * 60
AUDIT_THREADS = 16  # the checks of a run in parallel: 1,000 take about as long as 63
DRIFT_KEPT = 20  # drift entries kept on the document, newest last
SUSPECTS_KEPT = 50  # suspects re-checked at each run; beyond, the oldest are dropped
DRIFT_LOG_PREFIX = "counters audit: drift"
# A mismatch still there this long after it was first seen is drift: longer than two sweep
# periods (a sweep begun before a commit does not reach it; the next one's cells take a period)
# plus the reach of a sweep behind its instant, plus a run's period.
CONFIRM_AFTER_S = 2 * config.ROLLUP_SWEEP_EVERY_S + config.MAX_REQUEST_S + 60.0
# Firestore serves snapshot reads up to an hour back (without point-in-time recovery): a publish
# older than that is compared with the shards as they were this long ago, when nothing has been
# published since (an unchanged sum, or drift).
HISTORY_S = 3300.0


@dataclass(frozen=True, kw_only=True)
class Checked:
    """One counter's published count and the sum of its shards at the instant compared."""

    counter: str
    published: int
    shards: int
    as_of: dt.datetime  # the instant compared (`at`)
    # Shards whose value the rollup had not taken in by `as_of` though they changed more than
    # CONFIRM_AFTER_S before: drift without waiting for a confirmation.
    missed: tuple[str, ...] = ()

    @property
    def exact(self) -> bool:
        return self.published == self.shards

    def entry(self, found_at: dt.datetime) -> dict[str, Any]:
        return {"counter": self.counter, "published": self.published, "shards": self.shards,
                "as_of": self.as_of, "found_at": found_at}


@dataclass(frozen=True, kw_only=True)
class Run:
    checked: list[Checked]
    suspects: list[str]  # mismatched, not yet confirmed
    drift: list[Checked]  # confirmed by this run


def audit_ref(db: firestore.Client, names: Names) -> firestore.DocumentReference:
    return db.collection(names.internal).document(AUDIT_DOC)


def watermarks(db: firestore.Client, names: Names) -> tuple[int, dict[int, dt.datetime]]:
    """P, and the progress of each partition: before its watermark, every write it owns is
    published (`lease.Progress`)."""
    count = partitions.read_count(db, names)
    records = db.get_all([state_ref(db, names, part) for part in partitions.parts(count)])
    by_path = {snapshot.reference.path: snapshot for snapshot in records}
    return count, {part.index: Record.of(by_path[state_ref(db, names, part).path].to_dict() or {})
                   .progress.watermark for part in partitions.parts(count)}


def check(db: firestore.Client, names: Names, snapshot: firestore.DocumentSnapshot[Any],
          progress: tuple[int, dict[int, dt.datetime]]) -> Checked | None:
    """Compare one counter document (read just before) with its shards at the later of its
    publish's instant and its partition's watermark (`progress`, read before the document):
    every write the rollup owes it is in the publish by then, however idle the counter since
    (a write that landed after the last publish shows). None for a counter never published.

    A mismatch is read shard by shard, with the counter's memory as of that instant: a shard
    whose value differs from the one the rollup summed, and whose last write committed more
    than CONFIRM_AFTER_S before the instant (past every sweep that could still take it in), is
    missed: drift at once. A mismatch only of later writes is a suspect (`run`)."""
    data = snapshot.to_dict() or {}
    published, as_of = data.get("count"), data.get("updated_at")
    if not isinstance(published, int) or not isinstance(as_of, dt.datetime):
        return None
    count, marks = progress
    watermark = marks.get(partitions.home_of(snapshot.id) % count, as_of)
    oldest = snapshot.read_time - dt.timedelta(seconds=HISTORY_S)
    at = max(as_of, watermark, oldest)
    found = Checked(counter=snapshot.id, published=published,
                    shards=counter_refs.shard_sum(db, names, snapshot.id, at), as_of=at)
    if found.exact:
        return found
    memory = counter_refs.memory_ref(db, names, snapshot.id).get(read_time=at).to_dict() or {}
    summed = memory.get(config.SHARD_COUNTS_FIELD)
    if not isinstance(summed, dict):
        return found  # no shard counts to compare with: a suspect, confirmed by time
    settled = at - dt.timedelta(seconds=CONFIRM_AFTER_S)
    shards = db.collection(names.counters, snapshot.id, names.shards).stream(read_time=at)
    missed = tuple(sorted(
        shard.id for shard in shards
        if int(shard.get("count") or 0) != int(summed.get(shard.id, 0))
        and instant(shard.update_time) <= settled))
    return dataclasses.replace(found, missed=missed)


def checked_or_none(db: firestore.Client, names: Names,
                    snapshot: firestore.DocumentSnapshot[Any],
                    progress: tuple[int, dict[int, dt.datetime]]) -> Checked | None:
    """`check`, in a scheduled run: a counter whose check fails is logged with its id and
    passed over (None), so that it keeps no other from its check and the rotation moves on; a
    suspect stays one, checked again at the next run."""
    try:
        return check(db, names, snapshot, progress)
    except Exception:
        log.exception("counters audit: could not check counter %r; passed over", snapshot.id)
        return None


def check_counter(db: firestore.Client, names: Names, counter: str) -> Checked | None:
    """Check one counter now (`counters audit COUNTER`); nothing is recorded."""
    progress = watermarks(db, names)
    snapshot = db.collection(names.counters).document(counter).get(
        field_paths=["count", "updated_at"])
    return check(db, names, snapshot, progress) if snapshot.exists else None


def per_run(total: int) -> int:
    """Counters a run checks so that `total` counters take a day (within the bounds)."""
    return max(AUDIT_PER_RUN_MIN, min(AUDIT_PER_RUN_MAX, -(-total // RUNS_PER_ROTATION)))


def counted(db: firestore.Client, names: Names) -> int:
    """How many counters exist: a count aggregation (a read per 1,000), once a rotation."""
    # Typed Any: the library declares count() as returning a class, not an instance.
    query: Any = db.collection(names.counters)
    [[result]] = query.count(alias="counters").get()
    return int(result.value or 0)


def next_counters(db: firestore.Client, names: Names, after: str, n: int
                  ) -> tuple[list[firestore.DocumentSnapshot[Any]], bool]:
    """The next `n` counter documents in id order after `after`, from the first again at the
    end, and whether the rotation began again (or began)."""
    coll = db.collection(names.counters)

    def page(start: str | None, limit: int) -> list[firestore.DocumentSnapshot[Any]]:
        query = coll.order_by(FieldPath.document_id()).select(["count", "updated_at"])
        if start:
            query = query.start_after({FieldPath.document_id(): coll.document(start)})
        return list(query.limit(limit).stream())

    found = page(after, n)
    wrapped = not after or len(found) < n
    if len(found) < n and after:
        seen = {snapshot.id for snapshot in found}
        found += [s for s in page(None, n - len(found)) if s.id not in seen]
    return found, wrapped


def run(writing: Writing, db: firestore.Client, size: int | None = None) -> Run:
    """One scheduled run: the next counters of the rotation (`size`, or `per_run` of the
    counters counted when the last rotation ended) and every suspect, checked in parallel and
    recorded in one write; a drifting counter's shards are touched with `writing`, in the
    collections of its placement."""
    names = writing.names
    state_snapshot = audit_ref(db, names).get()
    state = state_snapshot.to_dict() or {}
    now: dt.datetime = state_snapshot.read_time
    suspects: dict[str, dict[str, Any]] = dict(state.get("suspects") or {})
    progress = watermarks(db, names)
    total = state.get("counters")
    if not isinstance(total, int):
        total = counted(db, names)
    rotation, wrapped = next_counters(db, names, str(state.get("cursor") or ""),
                                      size or per_run(total))
    if wrapped and isinstance(state.get("counters"), int):
        total = counted(db, names)  # a rotation ended: the next one is sized on a new count
    again = [db.collection(names.counters).document(c) for c in suspects
             if c not in {s.id for s in rotation}]
    documents = [*rotation, *(s for s in db.get_all(again, field_paths=["count", "updated_at"])
                              if s.exists)]
    with writing.pools(AUDIT_THREADS, "audit") as pool:
        checked = [found for found in pool.map(
            lambda snapshot: checked_or_none(db, names, snapshot, progress), documents)
            if found is not None]
    live = {snapshot.id for snapshot in documents}
    drift: list[Checked] = []
    for found in checked:
        first = suspects.get(found.counter)
        if found.exact:
            suspects.pop(found.counter, None)
        elif not found.missed and (
                first is None or (now - first["found_at"]).total_seconds() < CONFIRM_AFTER_S):
            suspects.setdefault(found.counter, found.entry(now))  # perhaps a write joining
        else:  # shards the rollup missed, or a mismatch that lasted past every sweep
            suspects.pop(found.counter, None)
            drift.append(found)
            log.error("%s: counter %r published %d at %s, its shards sum to %d; its shards are "
                      "touched so that the rollup reads them again", DRIFT_LOG_PREFIX,
                      found.counter, found.published, found.as_of.isoformat(), found.shards)
            try:
                repair(writing, db, found.counter)
            except Exception:  # recorded as drift all the same; found and repaired again later
                log.exception("counters audit: could not repair counter %r", found.counter)
    suspects = {c: entry for c, entry in suspects.items() if c in live}  # deleted: none
    kept = dict(sorted(suspects.items(), key=lambda item: item[1]["found_at"])[-SUSPECTS_KEPT:])
    record(db, names, state, now, rotation, checked, kept, drift, total)
    return Run(checked=checked, suspects=sorted(kept), drift=drift)


def repair(writing: Writing, db: firestore.Client, counter: str) -> None:
    """Touch every shard of a drifting counter (a fresh `updated_at`, as a writer touches a
    write that straddled): the rollup's next tick reads them all, and the published count is
    their sum again. Shard values are absolute, so this changes no count; it costs a write per
    shard, only for drift."""
    shards = list(db.collection(writing.names.counters, counter,
                                writing.names.shards).list_documents())
    for start in range(0, len(shards), config.ROLLUP_COMMIT_WRITES):
        chunk = shards[start:start + config.ROLLUP_COMMIT_WRITES]
        try:
            touch(writing, db, chunk)
        except gexc.NotFound:  # a shard folded away meanwhile: the fold moved it; the others
            for shard in chunk:
                with contextlib.suppress(gexc.NotFound):
                    touch(writing, db, [shard])
    writing.after_write(db, writing.clock.now(), {partitions.home_of(counter)})


def touch(writing: Writing, db: firestore.Client,
          shards: list[firestore.DocumentReference]) -> None:
    batch = db.batch()
    for shard in shards:
        batch.update(shard, {"updated_at": firestore.SERVER_TIMESTAMP,
                             "stripe": writing.stripe(db, partitions.home_of_shard(
                                 shard, writing.names))})
    batch.commit(retry=writes.IDEMPOTENT)


def record(db: firestore.Client, names: Names, state: dict[str, Any], now: dt.datetime,
           rotation: Iterable[firestore.DocumentSnapshot[Any]], checked: list[Checked],
           suspects: dict[str, dict[str, Any]], drift: list[Checked], total: int) -> None:
    """Write the run's outcome to internal/audit (a set of absolute values: safe to resend)."""
    ids = [snapshot.id for snapshot in rotation]
    history = [*(state.get("drift") or []), *(found.entry(now) for found in drift)][-DRIFT_KEPT:]
    fields: dict[str, Any] = {
        "cursor": ids[-1] if ids else "",
        "last_run_at": now,
        "checked": int(state.get("checked") or 0) + len(checked),
        "suspects": suspects,
        "drift": history,
        "last_drift_at": now if drift else state.get("last_drift_at"),
        "counters": total,  # counted when the last rotation ended: this one's size
    }
    audit_ref(db, names).set(fields, retry=writes.IDEMPOTENT)
