"""Trending tags: exact windowed counts per region and worldwide, and the Top-K clients read.

`tracking` is what clients call (`track`, the write path: one commit per event, a blind shard
write per distinct tag into its minute bucket; `top_tags`, one read); `buckets` is the arithmetic
of windows and the documents' ids. The rollup's side is shaped as the counters' is:
`counting.rollup.trend_ledger` the pure core (what a holder knows and every decision),
`counting.rollup.trend_step` its I/O (`TrendRollup`, one step of each rollup tick, through the
`counting.rollup.store`), and `counting.rollup.trend_merge` the merge of the partitions' lists
when P > 1. How and why, once: docs/architecture.md, "Trends".
"""

from counting.features.trends.buckets import (
    bucket_of,
    expiry,
    in_window,
    minute_id,
    minute_of,
    spread_of,
    tag_key,
)
from counting.features.trends.tracking import TagCount, TopTags, top_tags, track

__all__ = [
    "TagCount",
    "TopTags",
    "bucket_of",
    "expiry",
    "in_window",
    "minute_id",
    "minute_of",
    "spread_of",
    "tag_key",
    "top_tags",
    "track",
]
