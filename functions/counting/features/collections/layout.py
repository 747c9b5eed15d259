"""The Distributed Counter extension's layout, as a declaration names it: its shards, partials and
fields (`Extension`), and the amounts they hold (`whole`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from counting.foundation import config
from counting.foundation.errors import InvalidArgument

if TYPE_CHECKING:
    pass

# The Distributed Counter extension's layout (docs/architecture.md, "Extension counters"): its
# clients write `{doc}/SHARDS/{id}`; its workers left partials (ids starting with a tab) whose
# `_updates_` list `{_id_, _data_}` entries.
SHARDS = "_counter_shards_"


SHARD_WILDCARD = "_shard_"


PARTIAL_PREFIX = "\t"


UPDATES, UPDATE_ID, UPDATE_DATA = "_updates_", "_id_", "_data_"


# An extension field's value is counted while it is a whole number this large at most
# (JavaScript's exact integers: the extension's clients are JavaScript, Java, Swift and Dart).
MAX_EXTENSION_AMOUNT = 2**53 - 1


def whole(value: Any) -> int | None:
    """An amount as the extension's clients write it: an integer, or a double with no fraction
    (the Android and iOS clients increment by `1.0`), within MAX_EXTENSION_AMOUNT; None for
    anything else (a fraction, infinity, NaN, a bool, a string, a larger number)."""
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is int and abs(value) <= MAX_EXTENSION_AMOUNT:
        return value
    return None


_FIELD_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


MAX_FIELD_SEGMENTS = 8


@dataclass(frozen=True, kw_only=True)
class Extension:
    """How an extension counter is kept: `field` (a dotted path) of the documents, of their
    shards and of their partials' updates; `by`, the change a client's write may make to a
    shard's field (the generated rules refuse any other); `create_documents`, whether a shard
    may be written under a document that does not exist."""

    field: str
    by: tuple[int, int]
    # A client's shard may be the first write under a document that does not exist (the rules
    # refuse it otherwise: any signed-in user could make documents and counters at will).
    create_documents: bool = False

    def __post_init__(self) -> None:
        segments = self.field.split(".")
        if len(segments) > MAX_FIELD_SEGMENTS or not all(
                _FIELD_SEGMENT.fullmatch(s) for s in segments) or segments[0] == UPDATES:
            raise InvalidArgument(f"extension field {self.field!r}: at most {MAX_FIELD_SEGMENTS} "
                                  "dot-separated names of A-Z a-z 0-9 _, not starting with a digit")
        low, high = self.by
        bound = config.MAX_ABS_BY
        if not (type(low) is int and type(high) is int
                and -bound <= low <= high <= bound and (low, high) != (0, 0)):
            raise InvalidArgument(f"extension field {self.field!r}: by must be two integers "
                                  f"low <= high within +-{config.MAX_ABS_BY}, not both 0")

    @property
    def path(self) -> list[str]:
        return self.field.split(".")

    def raw(self, data: Any) -> Any:
        """What one map (a document's data, a partial update's `_data_`) holds at the field
        (None: nothing)."""
        for segment in self.path:
            if not isinstance(data, dict):
                return None
            data = data.get(segment)
        return data

    def value(self, data: Any) -> int:
        """The field's amount in one map: a whole number (see `whole`), else 0 (a fraction, a
        string, missing: not counted)."""
        return whole(self.raw(data)) or 0

    def amount(self, data: Mapping[str, Any], *, partial: bool) -> int:
        """What one document of the layout holds: a shard's (or the counter document's) field,
        or the sum of a partial's updates."""
        if not partial:
            return self.value(data)
        updates = data.get(UPDATES)
        if not isinstance(updates, list):
            return 0
        # Every entry: a move that took fewer would take the rest again. The document's 1 MiB
        # bounds the list (a few tens of thousands of entries).
        return sum(self.value(update.get(UPDATE_DATA)) for update in updates
                   if isinstance(update, dict))

    def nested(self, value: Any) -> dict[str, Any]:
        """`{a: {b: value}}` for the field `a.b`: a merge that writes only this field."""
        nested: dict[str, Any] = {self.path[-1]: value}
        for segment in reversed(self.path[:-1]):
            nested = {segment: nested}
        return nested


def is_partial(shard_id: str) -> bool:
    return shard_id.startswith(PARTIAL_PREFIX)
