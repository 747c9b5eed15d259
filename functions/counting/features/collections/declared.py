"""What a declaration is: its counter template, documents pattern and fields (`Declaration`), and
the watches (one trigger per documents pattern) the declarations make."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds

from counting.features.collections.ids import escape
from counting.features.collections.layout import SHARD_WILDCARD, SHARDS, Extension
from counting.foundation import config
from counting.foundation.errors import InvalidArgument

if TYPE_CHECKING:
    pass

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


_TEMPLATE = re.compile(r"(?P<name>[^:{}]+):\{(?P<placeholder>[A-Za-z_][A-Za-z0-9_]*)\}")


_WILDCARD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def summable(value: Any) -> int | None:
    """An integer field's value as summed: a JSON integer within the bounds of `by`; anything
    else (bool, float, string, missing, too large) is not summed."""
    if type(value) is int and abs(value) <= config.MAX_ABS_BY:
        return value
    return None


@dataclass(frozen=True, kw_only=True)
class Declaration:
    """One collection counter: `counter` is the template of its ids (`name:{placeholder}`),
    `documents` the path pattern of the documents it counts. The placeholder is filled from the
    string field `group_by` when given (documents without a string there are not counted), from
    the wildcard of that name in `documents` otherwise. With `sum`, the counter is the sum of
    that integer field (see `summable`) instead of the number of documents."""

    counter: str
    documents: str
    group_by: str | None = None
    sum: str | None = None
    # An extension counter's field and bound: the counter is the field of each document plus
    # that of its shards and partials (`counting.features.extension`).
    extension: Extension | None = None
    # The rate (writes/s) a new counter of this declaration is sized for. A group_by counter
    # takes the writes of every document in its group (all new orders go to orders:pending), so
    # it starts larger; the rollup then sizes every counter to its measured load.
    expected_rate: float | None = None

    @property
    def initial_rate(self) -> float:
        if self.expected_rate is not None:
            return self.expected_rate
        return (config.COLLECTION_GROUP_EXPECTED_RATE if self.group_by is not None
                else config.COLLECTION_EXPECTED_RATE)

    def __post_init__(self) -> None:
        match = _TEMPLATE.fullmatch(self.counter)
        if match is None or not _NAME.fullmatch(match["name"]):
            raise InvalidArgument(f"declaration {self.counter!r}: the counter must read "
                                  "name:{placeholder}, name of A-Z a-z 0-9 _ -")
        segments = self.documents.split("/")
        if len(segments) % 2 or any(not s for s in segments):
            raise InvalidArgument(f"declaration {self.counter!r}: {self.documents!r} is not a "
                                  "document path pattern")
        if not _WILDCARD.fullmatch(segments[-1]):
            raise InvalidArgument(f"declaration {self.counter!r}: the documents' own id must be "
                                  "a wildcard")
        if self.group_by is None and self.placeholder not in wildcards(self.documents):
            raise InvalidArgument(f"declaration {self.counter!r}: {{{self.placeholder}}} is "
                                  f"neither a wildcard of {self.documents!r} nor group_by")
        if self.group_by is not None and self.group_by != self.placeholder:
            raise InvalidArgument(f"declaration {self.counter!r}: group_by must be the "
                                  "placeholder's name")
        if self.extension is not None and (
                self.group_by is not None or self.sum is not None
                or segments[-1] != f"{{{self.placeholder}}}" or SHARDS in segments[::2]):
            raise InvalidArgument(f"declaration {self.counter!r}: an extension counter is one per "
                                  "document: its placeholder is the documents' own id, with no "
                                  f"group_by or sum, and no {SHARDS} in the path")

    @property
    def shards(self) -> str:
        """The path pattern of an extension counter's shards and partials."""
        return f"{self.documents}/{SHARDS}/{{{SHARD_WILDCARD}}}"

    @property
    def name(self) -> str:
        return self.counter.split(":", 1)[0]

    @property
    def placeholder(self) -> str:
        return self.counter[len(self.name) + 2:-1]

    def counter_id(self, value: str) -> str:
        """The counter this declaration keeps for one value of its placeholder."""
        return f"{self.name}:{escape(value, config.MAX_COUNTER_ID - len(self.name) - 1)}"

    def amounts(self, params: Mapping[str, str], data: Mapping[str, Any] | None) -> dict[str, int]:
        """What this declaration counts for one state of a document (`data` None: absent)."""
        if data is None:
            return {}
        value = data.get(self.group_by) if self.group_by is not None else params[self.placeholder]
        if not isinstance(value, str):
            return {}
        amount = 1 if self.sum is None else summable(data.get(self.sum)) or 0
        return {self.counter_id(value): amount}

    @property
    def owns(self) -> str:
        """The prefix of every id this declaration keeps."""
        return f"{self.name}:"


def wildcards(pattern: str) -> list[str]:
    return _WILDCARD.findall(pattern)


def match(pattern: str, path: str) -> dict[str, str] | None:
    """The wildcards' values when `path` is a document of `pattern`, else None."""
    want, got = pattern.split("/"), path.split("/")
    if len(want) != len(got):
        return None
    params: dict[str, str] = {}
    for w, g in zip(want, got, strict=True):
        wildcard = _WILDCARD.fullmatch(w)
        if wildcard is not None:
            params[wildcard[1]] = g
        elif w != g:
            return None
    return params


@dataclass(frozen=True, kw_only=True)
class Watch:
    """The declarations over one path pattern: one trigger, one record per document, and one
    commit per event for all of them (a status change moves two counts and two sums at once)."""

    documents: str
    declarations: tuple[Declaration, ...]

    @property
    def function_name(self) -> str:
        """The trigger's name: `count_` and the pattern's collection ids, each without the
        underscores it begins or ends with (`_counter_shards_`: a deployed service's name may not
        end in one)."""
        return "count_" + "_".join(part.strip("_") for part in self.documents.split("/")[::2])

    @property
    def extension_shards(self) -> bool:
        """It watches the shards (and partials) of extension counters."""
        return self.documents.endswith(f"/{SHARDS}/{{{SHARD_WILDCARD}}}")


def watches(declarations: Iterable[Declaration]) -> list[Watch]:
    """The collection counters grouped by the documents they watch, then the extension counters
    grouped by the shards they watch (`Watch.extension_shards`); names must be unique."""
    grouped: dict[str, list[Declaration]] = defaultdict(list)
    names: set[str] = set()
    declared = list(declarations)
    for declaration in declared:
        if declaration.name in names:
            raise InvalidArgument(f"declaration {declaration.counter!r}: name taken twice")
        names.add(declaration.name)
        if declaration.extension is None:
            grouped[declaration.documents].append(declaration)
    for declaration in declared:
        if declaration.extension is not None:
            grouped[declaration.shards].append(declaration)
    found = [Watch(documents=d, declarations=tuple(group)) for d, group in grouped.items()]
    functions = [w.function_name for w in found]
    if len(set(functions)) != len(functions):
        raise InvalidArgument(f"declarations: two patterns share a trigger name: {functions}")
    return found


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def nanos(instant: dt.datetime) -> int:
    """A commit time in nanoseconds since the epoch (Firestore keeps nanoseconds; a stored
    timestamp keeps microseconds, so versions are stored as integers)."""
    seconds = (instant.replace(microsecond=0) - _EPOCH) // dt.timedelta(seconds=1)
    fraction = instant.microsecond * 1000
    if isinstance(instant, DatetimeWithNanoseconds) and instant.nanosecond:
        fraction = int(instant.nanosecond)
    return seconds * 1_000_000_000 + fraction
