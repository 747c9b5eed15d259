"""What clients call: `track` an event (the write path) and read the `top_tags` of a scope.

An event is one commit: a blind shard write per distinct tag into its minute bucket, with the
request's marker. The top tags are one read of `trends/{scope}`, which the rollup publishes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.cloud import firestore

from counting.features.trends.buckets import expiry, minute_id, minute_of
from counting.foundation import config
from counting.foundation.config import Names
from counting.foundation.kinds import Window
from counting.writepath import shards

if TYPE_CHECKING:
    from counting.features.context import Context


@dataclass(frozen=True, kw_only=True)
class TagCount:
    tag: str
    count: int


@dataclass(frozen=True, kw_only=True)
class TopTags:
    region: str
    window: Window
    items: list[TagCount]
    as_of: dt.datetime


def track(
    ctx: Context,
    db: firestore.Client,
    region: str,
    tags: Iterable[str],
    *,
    request_id: str | None = None,
    uid: str = "",
    now: dt.datetime | None = None,
) -> int:
    """Count one event: one occurrence of each distinct (normalised) tag, in one commit.

    Returns the number of tags recorded; 0 when `request_id` was already applied for this user.
    """
    writing = ctx.writing
    distinct = list(dict.fromkeys(tags))
    minute = minute_of(now or writing.clock.now())
    expires_at = expiry("1h", minute)
    buckets = db.collection(ctx.names.trend_minutes)
    ids = [minute_id(region, minute, tag) for tag in distinct]
    refs = [buckets.document(bucket).collection(ctx.names.shards).document(
        str(writing.rng.randrange(config.TREND_SHARDS))) for bucket in ids]
    shard_writes = [shards.shard_write(writing, db, shard, 1, creates=True, region=region,
                                       tag=tag, minute=minute, **{config.EXPIRES_AT: expires_at})
                    for tag, shard in zip(distinct, refs, strict=True)]
    request = None if request_id is None or not writing.protections.request_markers \
        else request_id
    # Its marker is keyed apart from an increment's of the same id; an answer names the id sent.
    applied = shards.commit_marked(writing, db, shard_writes, uid=uid, request_id=request,
                                   counters=ids, nonce=writing.nonce(),
                                   marker_id=None if request is None else f"track:{request}")
    return len(distinct) if applied else 0


def top_tags(db: firestore.Client, names: Names, region: str | None, k: int,
             window: Window) -> TopTags:
    """The first k of the list the rollup maintains: one document read."""
    scope = region or config.GLOBAL_SCOPE
    snapshot = db.collection(names.trends).document(scope).get()
    data = snapshot.to_dict() or {}
    section = (data.get("windows") or {}).get(window) or {}
    items = [TagCount(tag=str(item["tag"]), count=int(item["count"]))
             for item in (section.get("items") or [])[:k]]
    return TopTags(region=scope, window=window, items=items,
                   as_of=data.get("updated_at") or snapshot.read_time)
