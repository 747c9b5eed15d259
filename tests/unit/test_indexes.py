"""Every query the code runs is served by firestore.indexes.json (the emulator enforces no
composite index; production rejects a query without one)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INDEXES = json.loads((ROOT / "firestore.indexes.json").read_text())
DOMAIN = ROOT / "functions" / "counting"
ASC, DESC = "ASCENDING", "DESCENDING"


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A query as an index sees it: equality (and `in`) fields, then the inequality field and
    the orderings, in order."""

    built_in: str
    collection: str
    group: bool = False
    equal: frozenset[str] = frozenset()
    ordered: tuple[tuple[str, str], ...] = ()


QUERIES = [
    Shape(built_in="rollup.change_query", collection="shards", group=True,
          equal=frozenset({"stripe"}), ordered=(("updated_at", ASC),)),
    Shape(built_in="rollup.Rollup._above_min", collection="counters",
          equal=frozenset({"above_min"})),
    Shape(built_in="trends.TrendRollup._expired (1h)", collection="trend_minutes",
          ordered=(("minute", ASC),)),
    Shape(built_in="trends.TrendRollup._expired (24h)", collection="trend_hours",
          ordered=(("hour", ASC),)),
    Shape(built_in="trends.TrendRollup._read_board (top)", collection="trend_totals",
          equal=frozenset({"scope", "window"}), ordered=(("count", DESC), ("tag", ASC))),
]
# Filters and orderings written in the domain: one more means a query this list lacks.
CLAUSES = 8


def exempted(collection: str, field: str) -> bool:
    return any(o["collectionGroup"] == collection and o["fieldPath"] == field
               and o.get("indexes") == [] for o in INDEXES.get("fieldOverrides", []))


def served(shape: Shape) -> bool:
    fields = set(shape.equal) | {name for name, _ in shape.ordered}
    if len(fields) == 1 and not shape.group:
        return not exempted(shape.collection, fields.pop())  # the automatic single-field index
    scope = "COLLECTION_GROUP" if shape.group else "COLLECTION"
    reverse = {ASC: DESC, DESC: ASC}
    for index in INDEXES["indexes"]:
        if index["collectionGroup"] != shape.collection or index["queryScope"] != scope:
            continue
        found = [(f["fieldPath"], f.get("order")) for f in index["fields"]]
        head, tail = found[:len(shape.equal)], found[len(shape.equal):]
        flipped = tuple((name, reverse[order]) for name, order in shape.ordered)
        if {name for name, _ in head} == shape.equal and tuple(tail) in (shape.ordered, flipped):
            return True
    return False


@pytest.mark.parametrize("shape", QUERIES, ids=[q.built_in for q in QUERIES])
def test_each_query_has_an_index(shape: Shape) -> None:
    """The query's fields are covered by a composite index or a non-exempt single field."""
    assert served(shape)


def test_the_list_covers_every_query_in_the_domain() -> None:
    """Every filter and ordering the domain writes belongs to a query listed here."""
    pattern = re.compile(r"FieldFilter\(|\.order_by\(")
    found = sum(len(pattern.findall(path.read_text())) for path in DOMAIN.rglob("*.py"))
    assert found == CLAUSES


def test_a_missing_index_is_caught() -> None:
    """The check fails for a shape no index serves."""
    assert not served(Shape(built_in="nowhere", collection="trend_totals",
                            equal=frozenset({"scope"}), ordered=(("tag", ASC),)))
