"""Every query the code runs is served by firestore.indexes.json (the emulator enforces no
composite index; production rejects a query without one), and no field whose values increase
with time is indexed on its own (Firestore limits writes to such an index range to about
500/s): it is exempted, or indexed only behind a field that spreads it."""

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
    # (A sweep's cell bounds `updated_at` on both sides: the same index.)
    Shape(built_in="rollup.change_queries", collection="shards", group=True,
          equal=frozenset({"stripe"}), ordered=(("updated_at", ASC),)),
    Shape(built_in="store.Store.above_min (a partition's watch)", collection="counters",
          equal=frozenset({"shrink_home"})),
    Shape(built_in="store.Store.above_min (the watch of every home)", collection="counters",
          equal=frozenset({"above_min"})),
    Shape(built_in="store.Store.expired_trend_buckets (1h)", collection="trend_minutes",
          equal=frozenset({"spread"}), ordered=(("minute", ASC),)),
    Shape(built_in="store.Store.expired_trend_buckets (24h)", collection="trend_hours",
          equal=frozenset({"spread"}), ordered=(("hour", ASC),)),
    Shape(built_in="store.Store.top_trend_totals (top)", collection="trend_totals",
          equal=frozenset({"scope", "window"}), ordered=(("count", DESC), ("tag", ASC))),
    Shape(built_in="store.Store.top_trend_totals (top of a partition's tags)",
          collection="trend_totals", equal=frozenset({"scope", "window", "home"}),
          ordered=(("count", DESC), ("tag", ASC))),
    Shape(built_in="audit.next_counters", collection="counters",
          ordered=(("__name__", ASC),)),
    # An aggregation reads the index of the field it sums.
    Shape(built_in="counter_refs.shard_sum", collection="shards", ordered=(("count", ASC),)),
    Shape(built_in="sequences.record_issued", collection="number_requests", group=True,
          equal=frozenset({"spread", "state"}), ordered=(("claimed_at", ASC),)),
    Shape(built_in="sequences.lost_records", collection="number_requests", group=True,
          equal=frozenset({"state"})),
    Shape(built_in="extension._read_and_move", collection="_counter_shards_",
          ordered=(("__name__", ASC),)),
    Shape(built_in="extension.sweep", collection="_counter_shards_", group=True,
          ordered=(("__name__", ASC),)),
]
# Filters and orderings written in the domain: one more means a query this list lacks.
CLAUSES = 21


def exempted(collection: str, field: str) -> bool:
    return any(o["collectionGroup"] == collection and o["fieldPath"] == field
               and o.get("indexes") == [] for o in INDEXES.get("fieldOverrides", []))


def served(shape: Shape) -> bool:
    if not shape.equal and shape.ordered == (("__name__", ASC),):
        return True  # document order, every query's own (a collection group's too)
    fields = set(shape.equal) | {name for name, _ in shape.ordered}
    scope = "COLLECTION_GROUP" if shape.group else "COLLECTION"
    if len(fields) == 1 and not shape.group:
        return not exempted(shape.collection, fields.pop())  # the automatic single-field index
    if len(fields) == 1:  # a collection group's single-field index is declared as an override
        field = fields.pop()
        return any(o["collectionGroup"] == shape.collection and o["fieldPath"] == field
                   and any(i.get("queryScope") == scope for i in o.get("indexes", []))
                   for o in INDEXES.get("fieldOverrides", []))
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
