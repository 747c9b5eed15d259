"""The app's collection counters, declared in `declarations.json` beside main.py (docs/api.md,
"Collection counters" and "Extension counters"): a list of `{"counter", "documents",
"group_by"?, "sum"?, "expected_rate"?, "extension"?}`. Each path pattern gets one Firestore
trigger, `count_` and its collection ids (`counting.features.collections.Watch`; an extension
counter watches its documents' shards too), which the deploy picks up from main.py: adding a
counter is adding a declaration and deploying. This repository's file declares the demo's
counters (comments per post, orders and revenue per status, visits per page); an install starts
with none (docs/adopt.md)."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from counting.features.collections import Declaration, Extension, Watch, watches
from counting.foundation.config import Placement
from counting.foundation.errors import FailedPrecondition, InvalidArgument, NotFound

# Where a deployed codebase keeps the declarations: beside main.py and its placement.json.
FILE_NAME = "declarations.json"
# This repository's functions/ (or, in the operator CLI's wheel, the backend it ships).
CODEBASE = Path(__file__).resolve().parents[2]
# Each pattern is a deployed function: a bound on what one file may ask for.
MAX_DECLARATIONS = 50
MAX_FILE_BYTES = 64 * 1024
_FIELDS = {"counter", "documents", "group_by", "sum", "expected_rate", "extension"}


def parse(text: str, placement: Placement,
          origin: str = "declarations.json") -> tuple[Declaration, ...]:
    """The declarations a file's text lists, every one checked against the backend's
    `placement` (InvalidArgument names the entry at fault)."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise InvalidArgument(f"{origin}: larger than {MAX_FILE_BYTES} bytes")
    try:
        raw: Any = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(f"{origin}: not JSON ({error})") from None
    if not isinstance(raw, list) or len(raw) > MAX_DECLARATIONS:
        raise InvalidArgument(f"{origin}: must be a list of at most {MAX_DECLARATIONS} "
                              "declarations")
    found: list[Declaration] = []
    for number, entry in enumerate(raw, 1):
        if not isinstance(entry, dict) or not {"counter", "documents"} <= entry.keys() <= _FIELDS:
            raise InvalidArgument(f"{origin}: entry {number} must be an object with counter and "
                                  "documents, and optionally group_by, sum, expected_rate, "
                                  "extension")
        strings = {k: v for k, v in entry.items() if k not in ("expected_rate", "extension")}
        rate = entry.get("expected_rate")
        if not all(isinstance(v, str) for v in strings.values()) or not (
                rate is None or (type(rate) in (int, float) and 0 < rate <= 1_000_000)):
            raise InvalidArgument(f"{origin}: entry {number}: counter, documents, group_by and "
                                  "sum are strings, expected_rate a number in (0, 1e6]")
        found.append(Declaration(**{**entry, "extension": extension_of(
            entry.get("extension"), f"{origin}: entry {number}")}))
    for watch in watches(found):  # names and trigger names unique
        check_watchable(watch, placement, origin)
    if placement.watched_database != placement.database and any(d.extension for d in found):
        raise InvalidArgument(f"{origin}: an extension counter moves its shards into its "
                              "documents and its counter in one commit: its documents must be in "
                              f"the backend's database ({placement.database!r}), not "
                              f"{placement.watched_database!r}")
    return tuple(found)


def extension_of(raw: Any, where: str) -> Extension | None:
    """An entry's `extension`: `{"field": "visits", "by": [-1, 1]}`, and optionally
    `"create_documents": true` (a client's shard may be the first of a document that does not
    exist; default false), or absent."""
    if raw is None:
        return None
    by = raw.get("by") if isinstance(raw, dict) else None
    if not isinstance(raw, dict) or not {"field", "by"} <= raw.keys() <= {
            "field", "by", "create_documents"} or not isinstance(raw["field"], str) \
            or not isinstance(by, list) or len(by) != 2 \
            or not isinstance(raw.get("create_documents", False), bool):
        raise InvalidArgument(f"{where}: extension must be {{\"field\": a dotted path, "
                              "\"by\": [low, high], \"create_documents\"?: true or false}")
    return Extension(field=raw["field"], by=(by[0], by[1]),
                     create_documents=raw.get("create_documents", False))


# A deployed function's id (firebase-tools): a letter, then letters, digits, _ and -.
_FUNCTION_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")


def check_watchable(watch: Watch, placement: Placement, origin: str) -> None:
    """A pattern must make a valid function id, and may not watch the backend's own collections
    (each counter write would fire a trigger that writes a counter: a loop)."""
    deployed = placement.function_id(watch.function_name)
    if not _FUNCTION_ID.fullmatch(deployed):
        raise InvalidArgument(f"{origin}: {watch.documents!r} makes the trigger id {deployed!r}: "
                              "collection ids of A-Z a-z 0-9 _ -, at most 63 characters in all")
    if placement.watched_database == placement.database:
        own = set(dataclasses.astuple(placement.names))
        taken = own.intersection(watch.documents.split("/")[::2])
        if taken:
            raise InvalidArgument(f"{origin}: {watch.documents!r} watches the backend's own "
                                  f"collection {sorted(taken)[0]!r}")


def load(path: Path, placement: Placement) -> tuple[Declaration, ...]:
    """The declarations in `path`, for the backend at `placement`; none when it does not
    exist."""
    return parse(path.read_text(), placement, str(path)) if path.exists() else ()


@dataclass(frozen=True)
class Declared:
    """A backend's collection counters: its codebase's declarations and the watches (one
    trigger each) they make. The handlers read their codebase's once (`handlers.declared`), the
    operator CLI the install's it operates."""

    declarations: tuple[Declaration, ...] = ()

    @classmethod
    def of_codebase(cls, codebase: Path, placement: Placement | None = None) -> Declared:
        """The declarations beside a codebase's main.py, checked against its placement (read
        from the codebase when not given: PlacementError without one); none without a file."""
        path = codebase / FILE_NAME
        if not path.exists():
            return cls()
        return cls(load(path, placement or Placement.read(codebase)))

    @functools.cached_property
    def watches(self) -> tuple[Watch, ...]:
        return tuple(watches(self.declarations))

    def owner(self, counter: str) -> str | None:
        """The declaration whose ids `counter` has the form of, if any."""
        return next((d.name for d in self.declarations if counter.startswith(d.owns)), None)

    def watch_of(self, name: str) -> Watch:
        """The (first) watch that holds the declaration `name` (or its counter template), or
        whose trigger is named `name`."""
        return self.watches_of(name)[0]

    def watches_of(self, name: str) -> list[Watch]:
        """Every watch that holds the declaration `name` (or its counter template: an extension
        counter's are two, its documents' and their shards'), or whose trigger is `name`."""
        found = [watch for watch in self.watches if name == watch.function_name or any(
            name in (d.name, d.counter) for d in watch.declarations)]
        if found:
            return found
        known = sorted({d.name for d in self.declarations}
                       | {w.function_name for w in self.watches})
        raise NotFound(f"no declaration {name!r}; declared: {', '.join(known) or 'none'}")

    def declaration(self, name: str) -> Declaration | None:
        """The declaration named `name` (or with that counter template), if any."""
        return next((d for d in self.declarations if name in (d.name, d.counter)), None)

    def check_plain(self, counter: str) -> None:
        """A counter created by hand may not take an id a declaration keeps."""
        declared = self.owner(counter)
        if declared is not None:
            raise FailedPrecondition(f"counter: {counter!r} has the form of declaration "
                                     f"{declared!r}'s ids: its trigger creates it")
