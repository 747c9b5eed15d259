"""Trending tags: exact windowed counts per region and worldwide, and the Top-K clients read.

Shaped as the counters are: `tracking` is what clients call (`track`, the write path: one commit
per event, a blind shard write per distinct tag into its minute bucket; `top_tags`, one read);
`buckets` is the arithmetic of windows and the documents' ids; `ledger` is the pure core of the
rollup's trends step (what a holder knows and every decision), `step` its I/O (`TrendRollup`,
one step of each rollup tick, through the `counting.store`), and `merge` the merge of the
partitions' lists when P > 1. How and why, once: docs/architecture.md, "Trends".
"""

from .buckets import bucket_of, expiry, in_window, minute_id, minute_of, spread_of, tag_key
from .ledger import rank, trends_document
from .merge import lists_of, merge_lists
from .step import TrendRollup, TrendStats
from .tracking import TagCount, TopTags, top_tags, track

__all__ = [
    "TagCount",
    "TopTags",
    "TrendRollup",
    "TrendStats",
    "bucket_of",
    "expiry",
    "in_window",
    "lists_of",
    "merge_lists",
    "minute_id",
    "minute_of",
    "rank",
    "spread_of",
    "tag_key",
    "top_tags",
    "track",
    "trends_document",
]
