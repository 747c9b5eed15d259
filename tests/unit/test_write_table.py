"""docs/architecture.md lists every function of functions/counting that sends a Firestore write
that is not a create, with its guard: a write added without an entry fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ROOT / "functions" / "counting"
ARCH = ROOT / "docs" / "architecture.md"
GUARDS = {"version", "fence", "marker", "increment", "harmless"}
# The primitives the listed writes call (their callers are what the table judges).
PRIMITIVES = {"foundation.encoding"}
OVERWRITES = {"set", "update", "delete", "merge", "update_at"}
# What a Firestore write is called on: a batch or transaction, a document reference (named
# `...ref`, made by a `..._ref(...)` or `.document(...)` call, a snapshot's `reference`), or the
# encoding module. A dict's `update` is called on none of these.
FIRESTORE = re.compile(r"^encoding$|batch|transaction|ref$|_ref\(|\.reference$|\.document\(")
ROW = re.compile(r"^\| `([\w.]+:[\w.]+)` \| (\w+) \| (.+) \|$")


def overwrites_in(source: str, module: str) -> set[str]:
    """`module:qualified.function` of each function in `source` that sends an overwrite."""
    found: set[str] = set()

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in OVERWRITES \
                and FIRESTORE.search(ast.unparse(node.func.value)):
            found.add(f"{module}:{'.'.join(scope)}")
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(ast.parse(source), [])
    return found


def domain_overwrites() -> set[str]:
    found: set[str] = set()
    for path in sorted(DOMAIN.rglob("*.py")):
        module = ".".join(path.relative_to(DOMAIN).with_suffix("").parts)
        if module not in PRIMITIVES:
            found |= overwrites_in(path.read_text(), module)
    return found


def table() -> dict[str, str]:
    """The table's rows: write -> guard."""
    rows = {}
    for line in ARCH.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_overwrite_in_the_domain_is_in_the_table_with_a_guard() -> None:
    listed = table()
    found = domain_overwrites()
    assert sorted(found - listed.keys()) == [], "writes with no entry in docs/architecture.md"
    assert sorted(listed.keys() - found) == [], "entries whose write is gone"
    assert {write: guard for write, guard in listed.items() if guard not in GUARDS} == {}


def test_the_scan_finds_writes_and_leaves_dictionaries_alone() -> None:
    """A new overwrite is found whatever it is called on; a dict's update is not one."""
    source = '''
def configure(db, ref, fields, snapshot):
    ref.set(fields)
class Holder:
    def flush(self, db):
        usage_ref(db).set({}, merge=True)
        db.batch().update(snapshot.reference, {})
def plan(fields, totals):
    fields.update(totals)
    totals.update({})
def quiet(db):
    encoding.merge(batch, ref, {})
'''
    assert overwrites_in(source, "m") == {"m:configure", "m:Holder.flush", "m:quiet"}
