"""The merge of the partitions' lists (P > 1): pure, no I/O.

With P > 1 each partition lists the top K of its own tags only (a tag is counted by its home's
partition alone). Partitions 1..P-1 publish their lists of a scope as a part,
`trends/{scope}/parts/{P}-{index}`, and in the same commit the part's version (the tick's
instant) to their index `internal/trend_parts-{P}-{index}`. Partition 0 reads the indexes, then
the parts whose version changed, and publishes `trends/{scope}` from the merge of its own lists
and theirs. This module says what a part and an index hold, which parts to read and what the
merge is; `counting.rollup.trend_step` reads and commits them (docs/architecture.md, "Trends").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from counting.foundation import config, kinds
from counting.foundation.kinds import Window
from counting.rollup.trend_ledger import Item, Lists, rank
from counting.writepath.partitions import Part

PartKey = tuple[str, int]  # (scope, index of the partition)


def merge_lists(lists: Iterable[Mapping[Window, list[Item]]], top_k: int = config.TOP_K
                ) -> Lists:
    """The top K per window of the union of partitions' lists. Exact when each list is its
    partition's exact top K and a tag is counted in one partition only (its home's): a tag in
    the top K of the union is in the top K of its own partition."""
    found: Lists = {window: [] for window in kinds.WINDOWS}
    for each in lists:
        for window, items in each.items():
            found[window].extend(items)
    return {window: sorted(items, key=rank)[:top_k] for window, items in found.items()}


def part_document(lists: Mapping[Window, list[Item]]) -> dict[str, Any]:
    """trends/{scope}/parts/{P}-{index}: a partition's top K per window."""
    return {"windows": {window: [{"tag": tag, "count": count} for tag, count in items]
                        for window, items in lists.items()}}


def part_fields(content: Mapping[str, Any]) -> dict[str, Any] | None:
    """A part as written; None deletes it (a missing part is read as empty lists)."""
    return dict(content) if any(content["windows"].values()) else None


def lists_of(document: Mapping[str, Any] | None) -> Lists:
    """The lists of a part document (none when it does not exist)."""
    windows = (document or {}).get("windows") or {}
    return {window: [(str(item["tag"]), int(item["count"])) for item in windows.get(window) or []]
            for window in kinds.WINDOWS}


def index_document(part: Part, scopes: Iterable[str], as_of: dt.datetime) -> dict[str, Any]:
    """What a partition merges into its index with the parts of `scopes`: their version."""
    return {"count": part.count, "index": part.index, "scopes": dict.fromkeys(scopes, as_of)}


class Parts:
    """What one holder of P > 1 knows of the parts. Partition 0: the other partitions' lists
    by (scope, index), and the versions it read them at. The others: whether their index
    exists (checked once: a partition without one publishes every scope at its first tick)."""

    def __init__(self) -> None:
        self.lists: dict[PartKey, Lists] = {}
        self.versions: dict[PartKey, Any] = {}
        self.indexed = False

    def forget(self) -> None:
        self.lists.clear()
        self.versions.clear()
        self.indexed = False

    def stale(self, others: Sequence[Part], indexes: Sequence[Mapping[str, Any] | None]
              ) -> dict[PartKey, Any] | None:
        """The parts whose version in their index (`indexes`, those of `others`, None for one
        that does not exist) is not the one last read, with that version. None while an index
        is missing: a partition that has not published since P changed would be left out."""
        if any(index is None for index in indexes):
            return None
        stale: dict[PartKey, Any] = {}
        for other, index in zip(others, indexes, strict=True):
            for scope, version in ((index or {}).get("scopes") or {}).items():
                if self.versions.get((scope, other.index)) != version:
                    stale[(scope, other.index)] = version
        return stale

    def take(self, key: PartKey, document: Mapping[str, Any] | None, version: Any) -> None:
        """Take in a part read at `version` (None: it does not exist)."""
        self.lists[key] = lists_of(document)
        self.versions[key] = version

    def merged(self, scope: str, own: Lists, others: Sequence[Part], top_k: int) -> Lists:
        """The lists of `scope` over every partition: ours and the parts of `others`."""
        return merge_lists([own, *(self.lists.get((scope, other.index), {})
                                   for other in others)], top_k)
