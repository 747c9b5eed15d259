"""The scheduled backstop of the moves: every minute, the shards no trigger's moves took."""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.field_path import FieldPath

from counting.features.collections.declared import Declaration, match
from counting.features.collections.layout import SHARDS
from counting.features.extension.moving import Moved, move
from counting.foundation.clock import instant

if TYPE_CHECKING:
    from counting.features.context import Context

log = logging.getLogger(__name__)

SWEEP_MAX_SHARDS = 1000  # shards the scheduled sweep's query reads per run (and per document)
# A run's time for its moves: it shares the scheduled function (timeout ROLLUP_TIMEOUT_S) with
# the housekeeping and the audit.
SWEEP_BUDGET_S = 20.0
SWEEP_BACKOFF_MAX = 4  # a run that moves nothing waits at most 2**4 minutes for the next
SWEEP_CURSOR = "extension_sweep"  # in `internal`: the path after which the next sweep reads
COUNTS = ("round_read", "round_moved", "quiet")  # the cursor's tallies (0 when it has none)


def sweep(ctx: Context, db: firestore.Client, declared: Iterable[Declaration], *,
          budget_s: float = SWEEP_BUDGET_S) -> Moved:
    """The scheduled backstop (every minute): move the shards no trigger's moves took (an
    instance killed mid-move, a shard written at every attempt). One collection-group query per
    run, of at most SWEEP_MAX_SHARDS shards in path order from where the last run stopped; the
    documents they belong to are moved, each by every declaration over it, from the first
    shard the query found of it (shards that stay, holding what no declaration counts, never
    hide those after them), each reading at most SWEEP_MAX_SHARDS of its shards. It moves
    documents for `budget_s` at most, and the next run starts at the first it did not reach. A
    round of runs over every shard that read shards, moved none and found none written since the
    last round ended (they hold what cannot be counted: a fraction, another app's fields) is
    logged, and the next round waits 2, 4, 8, then 16 minutes: shards that never move are not
    read every minute. The cursor is written at the version read (a late or overlapping run
    leaves a newer one as it is). A document that fails is logged and stops no other."""
    by_documents: dict[str, list[Declaration]] = defaultdict(list)  # likes and views of posts
    for declaration in declared:
        if declaration.extension is not None:
            by_documents[declaration.documents].append(declaration)
    if not by_documents:
        return Moved()
    clock = ctx.writing.clock
    until = clock.monotonic() + budget_s
    cursor_ref = db.collection(ctx.names.internal).document(SWEEP_CURSOR)
    cursor = cursor_ref.get()
    state = cursor.to_dict() or {}
    now = instant(cursor.read_time)
    waiting = state.get("wait_until")
    if isinstance(waiting, dt.datetime) and now < waiting:
        return Moved()
    after = state.get("after")
    query = db.collection_group(SHARDS).order_by(FieldPath.document_id()).limit(SWEEP_MAX_SHARDS)
    if isinstance(after, str):
        query = query.start_after({FieldPath.document_id(): db.document(after)})
    found = list(query.stream())
    following = found[-1].reference.path if len(found) == SWEEP_MAX_SHARDS else None
    firsts: dict[str, tuple[str, list[Declaration]]] = {}  # parent -> its first shard found
    before: dict[str, str | None] = {}  # parent -> the path of the shard found before it
    previous: str | None = after if isinstance(after, str) else None
    for shard in found:
        parent = shard.reference.parent.parent
        if parent is not None and parent.path not in firsts:
            owners = [d for pattern, each in by_documents.items()
                      if match(pattern, parent.path) for d in each]
            if owners:
                firsts[parent.path] = (shard.id, owners)
                before[parent.path] = previous
        previous = shard.reference.path
    total = Moved()
    ends = len(found) < SWEEP_MAX_SHARDS  # the round, from the first shard to the last
    for path, (first, owners) in firsts.items():
        if clock.monotonic() >= until:  # the next run starts at this document
            following, ends = before[path], False
            log.warning("the sweep stopped after %.0f s: %s and after wait for the next run",
                        budget_s, path)
            break
        try:
            read, last = 0, None
            start: str | None = first
            while read < SWEEP_MAX_SHARDS:
                done = move(ctx, db, db.document(path), owners, after=last, start_at=start)
                total.add(done)
                read, last, start = read + done.read, done.last, None
                if not done.full:
                    break
        except Exception:
            log.exception("%s: the sweep could not move its shards", path)
    # A round that read shards, moved none and found none written since the last round ended
    # waits before the next (the shards it read hold what cannot be moved).
    read = int(state.get("round_read") or 0) + len(found)
    moved = int(state.get("round_moved") or 0) + total.shards
    newest = max([instant(s.update_time) for s in found]
                 + [t for t in (state.get("round_newest"),) if isinstance(t, dt.datetime)],
                 default=None)
    quiet = int(state.get("quiet") or 0)
    update: dict[str, Any] = {"after": following, "round_read": read, "round_moved": moved,
                              "round_newest": newest, "quiet": quiet, "wait_until": None,
                              "round_ended": state.get("round_ended")}
    if ends:
        ended = state.get("round_ended")
        unchanged = isinstance(ended, dt.datetime) and (newest is None or newest <= ended)
        quiet = min(quiet + 1, SWEEP_BACKOFF_MAX) if read and not moved and unchanged else 0
        # A round that read nothing (no shard anywhere) leaves the cursor as it was: an idle
        # project's sweep writes nothing.
        update.update(round_read=0, round_moved=0, round_newest=None, quiet=quiet,
                      round_ended=now if read else state.get("round_ended"),
                      wait_until=now + dt.timedelta(minutes=2**quiet) if quiet else None)
        if quiet:
            log.warning("the sweep read %d shards round the collection group, none written "
                        "since the last round, and could move none (they hold what cannot be "
                        "counted: a fraction, another app's fields): the next round in %d "
                        "minutes", read, 2**quiet)
    current = {**dict.fromkeys(update), **dict.fromkeys(COUNTS, 0), **state}
    if update != {key: current[key] for key in update}:
        # At the version read: a late or overlapping run's cursor never replaces a newer one.
        try:
            if cursor.exists:
                cursor_ref.update(update, option=db.write_option(
                    last_update_time=instant(cursor.update_time)))
            else:
                cursor_ref.create(update)
        except (gexc.FailedPrecondition, gexc.AlreadyExists, gexc.NotFound):
            log.info("the sweep's cursor moved on since it was read: left as it is")
    return total
