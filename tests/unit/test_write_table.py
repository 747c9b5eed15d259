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
# Every Firestore write API that overwrites (a document reference's, a batch's, a transaction's,
# a BulkWriter's, `encoding`'s), whatever the receiver is called: a call of one of these names,
# or the bound method passed on (`functools.partial(ref.update, ...)`), is a write, unless the
# function makes its receiver a mapping or set itself (`NOT_FIRESTORE`).
OVERWRITES = {"set", "update", "delete", "merge", "update_at"}
# Values a function can give a name that are no Firestore object.
MAPPINGS = {"dict", "set", "frozenset", "list", "defaultdict", "Counter", "OrderedDict"}
# Receivers kept on an object (not made in the function) that are no Firestore object: each is
# named with its function and what it is.
NOT_FIRESTORE = {
    ("features.sequences:SequenceCache.saw", "self._entries"): "a TtlCache",
    ("rollup.ledger:Ledger.first_loads", "self.retry"): "a set of counters",
    ("rollup.ledger:Ledger.plan", "updates[counter]"): "a dict of fields",
    ("rollup.ledger:Ledger.plan", "fields"): "a dict of fields (`updates.get(counter, {})`)",
    ("rollup.trend_ledger:TrendLedger.hold_totals", "self.totals"): "a dict of totals",
    ("rollup.trend_ledger:TrendLedger.remember", "self.published"): "a dict of totals",
}
ROW = re.compile(r"^\| `([\w.]+:[\w.]+)` \| (\w+) \| (.+) \|$")


def mappings_in(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names `function` binds to a mapping or a set: a literal, a comprehension, a call of
    one of MAPPINGS, or an annotation naming one."""
    def mapping_type(annotation: ast.expr | None) -> bool:
        return annotation is not None and ast.unparse(annotation).split("[")[0] in MAPPINGS

    names = {a.arg for a in (*function.args.args, *function.args.kwonlyargs)
             if mapping_type(a.annotation)}
    for node in ast.walk(function):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and mapping_type(node.annotation):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, (ast.Dict, ast.Set, ast.DictComp, ast.SetComp)) or (
                    isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                    and value.func.id in MAPPINGS):
                names.add(node.targets[0].id)
    return names


def overwrites_in(source: str, module: str) -> set[str]:
    """`module:qualified.function` of each function in `source` that sends an overwrite."""
    found: set[str] = set()

    def visit(node: ast.AST, scope: list[str], mappings: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope, mappings = [*scope, node.name], mappings_in(node)
        elif isinstance(node, ast.ClassDef):
            scope = [*scope, node.name]
        elif isinstance(node, ast.Attribute) and node.attr in OVERWRITES:
            receiver = ast.unparse(node.value)
            where = f"{module}:{'.'.join(scope)}"
            if receiver not in mappings and (where, receiver) not in NOT_FIRESTORE:
                found.add(where)
        for child in ast.iter_child_nodes(node):
            visit(child, scope, mappings)

    visit(ast.parse(source), [], set())
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


def test_the_scan_finds_writes_by_what_they_are_and_leaves_dictionaries_alone() -> None:
    """A new overwrite is found whatever its receiver is called (a batch named `b`, a
    transaction, a BulkWriter, a snapshot's reference, a reference in a loop, a bound method
    passed on); a mapping the function made is not one."""
    source = '''
def configure(db, ref, fields, snapshot):
    ref.set(fields)
class Holder:
    def flush(self, db):
        usage_ref(db).set({}, merge=True)
        db.batch().update(snapshot.reference, {})
def plan(fields: dict[str, int], totals):
    fields.update(totals)
    seen = {}
    seen.update(totals)
def short(db, b):
    b.set(x, {})
def in_txn(txn):
    txn.update(x, {})
def bulk(writer):
    writer.delete(x)
def through(snapshot):
    snapshot.reference.update({})
def loop(refs):
    for r in refs:
        r.delete()
def passed(ref):
    return functools.partial(ref.update, {})
def quiet(db):
    encoding.merge(batch, ref, {})
'''
    assert overwrites_in(source, "m") == {
        "m:configure", "m:Holder.flush", "m:short", "m:in_txn", "m:bulk", "m:through", "m:loop",
        "m:passed", "m:quiet"}
    assert "m:plan" not in overwrites_in(source, "m")


def test_each_receiver_taken_for_no_firestore_object_still_holds_one() -> None:
    """NOT_FIRESTORE names receivers in functions that exist: an entry whose function or
    receiver went away is removed, not left to hide a write."""
    receivers: set[tuple[str, str]] = set()
    for path in sorted(DOMAIN.rglob("*.py")):
        module = ".".join(path.relative_to(DOMAIN).with_suffix("").parts)

        def visit(node: ast.AST, scope: list[str], module: str = module) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                scope = [*scope, node.name]
            elif isinstance(node, ast.Attribute) and node.attr in OVERWRITES:
                receivers.add((f"{module}:{'.'.join(scope)}", ast.unparse(node.value)))
            for child in ast.iter_child_nodes(node):
                visit(child, scope)

        visit(ast.parse(path.read_text()), [])
    assert set(NOT_FIRESTORE) - receivers == set()
