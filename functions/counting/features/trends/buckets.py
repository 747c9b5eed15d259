"""Where and when a tag's events are counted: pure arithmetic and document ids, no I/O.

Events of a tag in a region are counted per minute (`trend_minutes/{id}`, whose shards clients
write), the rollup sums them per hour (`trend_hours/{id}`), and each window's count of a tag in
a scope (a region, or `global`) is a window total (`trend_totals/{id}`). A window is a number of
buckets (`config.WINDOW_BUCKETS`): 60 minutes for 1 h, 24 hours for 24 h.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from counting.foundation import config
from counting.foundation.kinds import Window
from counting.writepath import partitions

MINUTE_S = 60


@dataclass(frozen=True, kw_only=True, order=True)
class TotalKey:
    """One window total: the count of `tag` in `scope` (a region, or `global`) over `window`."""

    scope: str
    window: Window
    tag: str


def minute_of(instant: dt.datetime) -> int:
    """The minute bucket of an instant: whole minutes since the Unix epoch."""
    return int(instant.timestamp() // MINUTE_S)


def bucket_of(window: Window, minute: int) -> int:
    """The bucket of `window` that a minute falls in."""
    bucket_s, _ = config.WINDOW_BUCKETS[window]
    return minute * MINUTE_S // bucket_s


def in_window(window: Window, bucket: int, now_minute: int) -> bool:
    """Whether a bucket of `window` still counts at `now_minute` (the current one included)."""
    _, buckets = config.WINDOW_BUCKETS[window]
    return bucket > bucket_of(window, now_minute) - buckets


def last_expired(window: Window, now_minute: int) -> int:
    """The last bucket of `window` that no longer counts at `now_minute`."""
    _, buckets = config.WINDOW_BUCKETS[window]
    return bucket_of(window, now_minute) - buckets


def expiry(window: Window, bucket: int) -> dt.datetime:
    """When the TTL policy may delete a bucket: after it left its window, plus the grace."""
    bucket_s, buckets = config.WINDOW_BUCKETS[window]
    seconds = (bucket + buckets) * bucket_s
    return dt.datetime.fromtimestamp(seconds, dt.UTC) + config.TREND_TTL_GRACE


def tag_key(tag: str) -> str:
    """Document-id-safe key of a tag (tags may hold `/` and up to 100 characters)."""
    return hashlib.sha256(tag.encode()).hexdigest()[:32]


def minute_id(region: str, minute: int, tag: str) -> str:
    """A minute bucket's id. It begins with the tag's hash: ids that begin with the minute would
    increase in time, and Firestore limits writes to a range of sequential ids (about 500/s)."""
    return f"{tag_key(tag)}:{region}:{minute}"


def hour_id(region: str, hour: int, tag: str) -> str:
    return f"{tag_key(tag)}:{region}:{hour}"


def total_id(key: TotalKey) -> str:
    return f"{key.scope}:{key.window}:{tag_key(key.tag)}"


def spread_of(tag: str) -> int:
    """The bucket documents' `spread`: the tag's home (`counting.writepath.partitions`). The index
    that finds expired buckets by `minute` (or `hour`) leads with it, so their writes, whose minutes
    increase, spread over BASE_HOMES ranges of the index instead of one."""
    return partitions.tag_home(tag)
