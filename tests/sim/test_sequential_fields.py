"""No field whose values rise with time is indexed on its own (Firestore's guidance: an index
over such a field takes about 500 writes a second for its whole collection group). The fields
are found in what the writers actually write: a simulation run drives every write path, the
rollup, the triggers and the housekeeping on the model, and every field of every document
version it stored is judged by its values, whatever the code that wrote it looks like (issue 54:
a scan of the source for `"name": as_of` missed the keyword form `rate_at=as_of`)."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Iterator
from typing import Any

from tests.sim import world
from tests.sim.history import History
from tests.sim.model import Model
from tests.sim.virtual import ORIGIN
from tests.unit.test_indexes import INDEXES

# Documents of which only a handful exist (one write a second at most): the partitions' leases
# and settings, the audit's state, the trends' Top-K.
SINGLE_DOCUMENTS = {"internal", "trends"}
SEEDS = (0, 1)  # P drawn 16 and 4 at 659656f: every write path meets the model in each
# An integer is taken for an instant when it is the run's time, within two days, in one of these
# units since the epoch (a minute's or an hour's number, seconds, milliseconds).
UNITS_S = (60, 3600, 1, 0.001)
SLACK_S = 2 * 86400


def instant_like(value: Any) -> bool:
    if isinstance(value, dt.datetime):
        return True
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    now = ORIGIN.timestamp()
    return any(abs(value * unit - now) <= SLACK_S for unit in UNITS_S)


def fields(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every field of a document, map fields' own fields as `a.b` (Firestore indexes those)."""
    for name, value in data.items():
        path = prefix + name
        yield path, value
        if isinstance(value, dict):
            yield from fields(value, path + ".")


def sequential(model: Model) -> dict[tuple[str, str], str]:
    """(collection group, field) -> a document holding an instant there, of every field the
    run wrote one into (arrays of maps by their field: the array is what is indexed)."""
    found: dict[tuple[str, str], str] = {}
    for path, versions in model.docs.items():
        for version in versions:
            for name, value in fields(version.data or {}):
                items = value if isinstance(value, list) else [value]
                if any(instant_like(item) or (isinstance(item, dict) and any(
                        instant_like(inner) for _, inner in fields(item))) for item in items):
                    found.setdefault((path[-2], name), "/".join(path))
    return found


@functools.cache
def written() -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}

    def keep(model: Model, _: History) -> None:
        for key, where in sequential(model).items():
            found.setdefault(key, where)

    for seed in SEEDS:
        world.run(seed, settings=world.Settings(tamper=keep))
    return found


def exempt(group: str, field: str) -> bool:
    """Exempt from single-field indexing, itself or a map holding it (an exemption is inherited
    by a map's fields)."""
    parts = field.split(".")
    return any(o["collectionGroup"] == group and o["fieldPath"] in {
        ".".join(parts[:n]) for n in range(1, len(parts) + 1)} and o.get("indexes") == []
        for o in INDEXES.get("fieldOverrides", []))


def test_every_field_written_with_instants_is_exempt_from_indexing() -> None:
    """Exempt from single-field indexing; where a query needs it, its composite index leads
    with an equality field that spreads the writes (`stripe`, `spread`)."""
    indexed = {f"{group}.{field} (e.g. {where})" for (group, field), where in written().items()
               if group not in SINGLE_DOCUMENTS and not exempt(group, field)}
    assert indexed == set(), "fields written with instants, indexed: " + json.dumps(
        sorted(indexed), indent=1)
    for group, field in written():
        for index in INDEXES["indexes"]:
            paths = [f["fieldPath"] for f in index["fields"]]
            if index["collectionGroup"] == group and field in paths:
                assert paths.index(field) > 0 and paths[0] in {"stripe", "spread"}, index


def test_the_run_writes_the_instants_it_is_known_for() -> None:
    """The finder sees an instant in whatever form it is written: a server timestamp, a
    datetime passed by keyword (`rate_at=as_of`), a minute's number, a TTL's expiry."""
    found = written()
    for key in [("counters", "rate_at"), ("counters", "updated_at"), ("shards", "minute"),
                ("shards", "expires_at"), ("trend_minutes", "minute"),
                ("number_requests", "claimed_at"), ("sequences", "resets")]:
        assert key in found, key
    assert ("counters", "count") not in found and ("shards", "count") not in found
