"""Parsing of client input: each function checks one field and names it in its error.

JSON gives us `bool` as a subclass of `int` and floats for every number with a fraction, so the
checks are explicit about types: `true`, `1.5` and `"1"` are not integers.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
import zoneinfo
from collections.abc import Mapping
from typing import Any

from counting.foundation import config, kinds
from counting.foundation.errors import InvalidArgument

_COUNTER_ID = re.compile(rf"[A-Za-z0-9_\-.:]{{1,{config.MAX_COUNTER_ID}}}")
_REQUEST_ID = re.compile(rf"[A-Za-z0-9_\-]{{1,{config.MAX_REQUEST_ID}}}")


def payload(data: object, allowed: set[str], where: str = "") -> Mapping[str, Any]:
    """An object whose keys are all known (`where` prefixes nested field names); `null` values
    count as absent."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InvalidArgument(f"{where.rstrip('.') or 'data'}: must be an object")
    unknown = sorted(str(key) for key in data if key not in allowed)
    if unknown:
        raise InvalidArgument(
            f"{where}{unknown[0]}: unknown field (expected one of {sorted(allowed)})"
        )
    return {key: value for key, value in data.items() if value is not None}


def required(data: Mapping[str, Any], field: str, where: str = "") -> Any:
    if field not in data:
        raise InvalidArgument(f"{where}{field}: required")
    return data[field]


def counter_id(value: object, field: str = "counter") -> str:
    if not isinstance(value, str) or not _COUNTER_ID.fullmatch(value):
        raise InvalidArgument(
            f"{field}: must be 1..{config.MAX_COUNTER_ID} characters of A-Z a-z 0-9 _ - . : "
            f"(got {_show(value)})"
        )
    if value[0] in "._":
        raise InvalidArgument(f"{field}: must not start with '.' or '_'")
    return value


def request_id(value: object | None, field: str = "request_id") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _REQUEST_ID.fullmatch(value):
        raise InvalidArgument(
            f"{field}: must be 1..{config.MAX_REQUEST_ID} characters of A-Z a-z 0-9 _ - "
            f"(got {_show(value)})"
        )
    return value


def integer(value: object, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{field}: must be an integer (got {_show(value)})")
    if not low <= value <= high:
        raise InvalidArgument(f"{field}: must be between {low} and {high} (got {value})")
    return value


def increment_by(value: object | None, field: str = "by") -> int:
    if value is None:
        return 1
    return integer(value, field, -config.MAX_ABS_BY, config.MAX_ABS_BY)


def shard_count(value: object | None) -> int | None:
    if value is None:
        return None
    return integer(value, "shards", config.MIN_SHARDS, config.MAX_SHARDS)


def expected_rate(value: object | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidArgument(f"expected_rate: must be a number of writes/s (got {_show(value)})")
    if not 0 <= value <= config.MAX_EXPECTED_RATE:
        raise InvalidArgument(
            f"expected_rate: must be between 0 and {config.MAX_EXPECTED_RATE:g} (got {value})"
        )
    return float(value)


def choice(value: object | None, field: str, names: tuple[kinds.Name, ...],
           default: kinds.Name) -> kinds.Name:
    """One of a kind's `names` (counting.foundation.kinds), typed as that kind."""
    if value is None:
        return default
    found = kinds.member(value, names)
    if found is None:
        raise InvalidArgument(f"{field}: must be one of {', '.join(names)} (got {_show(value)})")
    return found


def increments(value: object) -> list[tuple[str, int]]:
    """A batch: 1..MAX_BATCH `{counter, by}` objects."""
    if not isinstance(value, list) or not 1 <= len(value) <= config.MAX_BATCH:
        raise InvalidArgument(f"increments: must be a list of 1..{config.MAX_BATCH} objects")
    batch = []
    for i, item in enumerate(value):
        field = f"increments[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidArgument(f"{field}: must be an object with counter and by")
        item = payload(item, {"counter", "by"}, where=f"{field}.")
        counter = counter_id(required(item, "counter", where=f"{field}."), f"{field}.counter")
        batch.append((counter, increment_by(item.get("by"), f"{field}.by")))
    sums: dict[str, int] = {}
    for counter, by in batch:
        sums[counter] = sums.get(counter, 0) + by
        if abs(sums[counter]) > config.MAX_ABS_BY:
            # One shard write carries a counter's sum: the same bound as a single increment.
            raise InvalidArgument(f"increments: the by values for {counter!r} sum beyond "
                                  f"±{config.MAX_ABS_BY:,}")
    return batch


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# Sequences (issue 3).

_RESET_TIME = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


def tenant_id(value: object, field: str = "tenant") -> str:
    """Tenant ids follow the counter id rules (`counter_id`)."""
    return counter_id(value, field)


def timezone(value: object, field: str = "timezone") -> str:
    """An IANA time zone name known to this runtime's tz database (e.g. `Europe/Paris`)."""
    if not isinstance(value, str) or value not in _zone_names():
        raise InvalidArgument(f"{field}: must be an IANA time zone name (got {_show(value)})")
    return value


def reset_time(value: object | None, field: str = "reset_time") -> str:
    """A local wall-clock time `HH:MM` (00:00..23:59); absent means the configured default."""
    if value is None:
        return config.DEFAULT_RESET_TIME
    if not isinstance(value, str) or not _RESET_TIME.fullmatch(value):
        raise InvalidArgument(f"{field}: must be a local time HH:MM, 00:00..23:59 "
                              f"(got {_show(value)})")
    return value


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


# Trending tags (issue 5).

_REGION = re.compile(rf"[a-z0-9-]{{1,{config.MAX_REGION_CHARS}}}")


def region(value: object, field: str = "region") -> str:
    """1..MAX_REGION_CHARS of a-z 0-9 -; `global` names the sum of all regions, not a region."""
    if not isinstance(value, str) or not _REGION.fullmatch(value):
        raise InvalidArgument(f"{field}: must be 1..{config.MAX_REGION_CHARS} characters of "
                              f"a-z 0-9 - (got {_show(value)})")
    if value == config.GLOBAL_SCOPE:
        raise InvalidArgument(f"{field}: {config.GLOBAL_SCOPE!r} is reserved for the sum of all "
                              "regions")
    return value


# What `tag` reads before normalising: room for a leading '#', spaces and decomposed characters.
MAX_TAG_INPUT_CHARS = 4 * config.MAX_TAG_CHARS


def tag(value: object, field: str = "tag") -> str:
    """A tag as it is counted: trimmed, one leading `#` stripped, case-folded (NFC first, so
    composed and decomposed spellings are one tag). Two bounds: what is sent is a string of
    1..MAX_TAG_INPUT_CHARS characters, and the tag it normalises to 1..config.MAX_TAG_CHARS (the
    stored form is the one bounded: case folding can lengthen a tag, and a `#` or spaces are
    dropped)."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TAG_INPUT_CHARS:
        raise InvalidArgument(f"{field}: must be a string of 1..{MAX_TAG_INPUT_CHARS} characters, "
                              f"at most {config.MAX_TAG_CHARS} once normalised "
                              f"(got {_show(value)})")
    text = unicodedata.normalize("NFC", value).strip()
    text = text.removeprefix("#").casefold().strip()
    if not text:
        raise InvalidArgument(f"{field}: is empty once trimmed and stripped of its '#'")
    if len(text) > config.MAX_TAG_CHARS:
        # Checked on the stored form: case folding can lengthen a tag ("ß" -> "ss").
        raise InvalidArgument(f"{field}: must be at most {config.MAX_TAG_CHARS} characters once "
                              f"normalised (got {len(text)})")
    if not text.isprintable():
        raise InvalidArgument(f"{field}: must not contain control characters")
    return text


def tags(value: object, field: str = "tags") -> list[str]:
    """1..MAX_TAGS tags, normalised, each once (in first-seen order)."""
    if not isinstance(value, list) or not 1 <= len(value) <= config.MAX_TAGS:
        raise InvalidArgument(f"{field}: must be a list of 1..{config.MAX_TAGS} strings")
    return list(dict.fromkeys(tag(item, f"{field}[{i}]") for i, item in enumerate(value)))


def top_k(value: object | None, field: str = "k") -> int:
    if value is None:
        return config.DEFAULT_K
    return integer(value, field, 1, config.TOP_K)
