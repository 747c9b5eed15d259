"""docs/architecture.md lists every function of functions/counting that sends a Firestore write
that is not a create, with its guard: a write added without an entry fails here. A listed
function may write on its caller's behalf (into its batch, its document, its data): each of its
callers is listed too, or named below with the reason it is safe."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
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
    ("features.sequences.caching:SequenceCache.saw", "self._entries"): "a TtlCache",
    ("rollup.ledger:Ledger.first_loads", "self.retry"): "a set of counters",
    ("rollup.ledger:Ledger.plan", "updates[counter]"): "a dict of fields",
    ("rollup.ledger:Ledger.plan", "fields"): "a dict of fields (`updates.get(counter, {})`)",
    ("rollup.trend_ledger:TrendLedger.hold_totals", "self.totals"): "a dict of totals",
    ("rollup.tick:Rollup._backlog", "self._trend_backlog[bucket]"): "a dict of snapshots",
    ("rollup.trend_ledger:TrendLedger.remember", "self.published"): "a dict of totals",
}
# Listed writes whose guard travels with them (they make it themselves), so that their callers
# need no entry; a class stands for each of its listed methods.
GUARD_TRAVELS = {
    "features.collections.applying:Counting._commit": "created, or at the version it is given",
    "features.counters:_take_back": "reads the reset record, rewrites it at that version",
    "features.counters:forget_users": "each marker at the version it read",
    "features.extension.backfilling:_baseline": "reads the document, rewrites it at that version",
    "features.extension.moving:_commit": "each take at the version it is given, or marked",
    "features.sequences.housekeeping:_housekeep_tenant": "reads each record's number back itself",
    "features.sequences.opening:open_day": "a compare-and-set on its own read",
    "features.sequences.resetting:_record_reset": "an ArrayUnion of the same entry",
    "features.sequences.resetting:_reset_once": "creates the request's marker, needs its day open",
    "rollup.audit:record": "internal/audit alone, the audit's bookkeeping",
    "rollup.audit:touch": "a touch (`updated_at`, `stripe`), whatever shards it is given",
    "rollup.cadence:Holder._flush": "increments of its own document, sent once",
    "rollup.lease:Lease": "at its own last version (`commit` fences the caller's batch so)",
    "rollup.repartition:_change_once": "a compare-and-set on its own reads",
    "rollup.store:Store": "every commit is `Store.commit`'s: fenced by `Lease.commit`",
    "writepath.shards:configure": "a compare-and-set on its own read",
    "writepath.shards:settle": "a touch (`updated_at`, `stripe`), whatever shards it is given",
    "writepath.shards:write_at_version": "created, or at the version of the snapshot given",
}
# Callers of a listed write whose guard is the caller's own, and what it is.
SAFE_CALLERS = {
    ("writepath.shards:ShardWrite.add_to", "features.counters:increment.attempt"):
        "sent once (`commit_once`)",
    ("writepath.shards:ShardWrite.add_to", "features.counters:Guarded._commit"):
        "under its markers, created or at the version read",
    ("writepath.shards:ShardWrite.add_to", "writepath.shards:commit_marked"):
        "sent once, or under the request marker it creates",
    ("features.sequences.issuing:_record", "features.sequences.issuing:_issued"):
        "the record's own number, read back from its commit",
    ("rollup.store:replaced", "rollup.store:Store.publish_trends"): "a fenced `Store.commit`",
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


def domain_sources() -> dict[str, str]:
    """module (`rollup.lease`, `features.collections.__init__`) -> source."""
    return {".".join(path.relative_to(DOMAIN).with_suffix("").parts): path.read_text()
            for path in sorted(DOMAIN.rglob("*.py"))}


def domain_overwrites() -> set[str]:
    found: set[str] = set()
    for module, source in domain_sources().items():
        if module not in PRIMITIVES:
            found |= overwrites_in(source, module)
    return found


def imported_names(tree: ast.Module, modules: Iterable[str]) -> dict[str, str]:
    """What each name a module imports from `counting` stands for: one of its modules
    (`rollup.lease`), or something a module defines (`rollup.lease:retire`)."""
    def module(dotted: str) -> str | None:
        name = dotted.removeprefix("counting.")
        return next((m for m in (name, f"{name}.__init__") if m in modules), None)

    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and f"{node.module}.".startswith("counting."):
            for alias in node.names:
                names[alias.asname or alias.name] = module(f"{node.module}.{alias.name}") \
                    or f"{module(str(node.module))}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found = module(alias.name)
                if alias.asname and found:
                    names[alias.asname] = found
    return names


def references(sources: dict[str, str]) -> dict[str, set[str]]:
    """What each function of `sources` (module -> source) names, called or passed on as a value
    (`functools.partial(helper, ...)`, `writing.resending(self._commit)`): `module:function` for
    one of its module, an imported one (`settle`, followed through a package's re-export) or an
    imported module's (`lease.retire`); `module:Class.method` for `self.method`, `cls.method`;
    `.method` for a method of any other object (`write.add_to`, `self.store.publish`): its class
    is not known, so it stands for every method of that name (checked more, never less)."""
    trees = {module: ast.parse(source) for module, source in sources.items()}
    imports = {module: imported_names(tree, trees) for module, tree in trees.items()}

    def followed(target: str) -> str:
        module, _, name = target.partition(":")
        head, dot, rest = name.partition(".")
        source = imports.get(module, {}).get(head, "")
        return followed(source + dot + rest) if ":" in source else target

    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, module: str, scope: list[str], cls: str | None) -> None:
        named, target = imports[module], None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope = [*scope, node.name]
        elif isinstance(node, ast.ClassDef):
            scope = [*scope, node.name]
            cls = ".".join(scope)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            target = named.get(node.id, f"{module}:{node.id}")
        elif isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner in ("self", "cls") and cls:
                target = f"{module}:{cls}.{node.attr}"
            elif owner in named:  # an imported module's function, or an imported class's
                target = named[owner] + ("." if ":" in named[owner] else ":") + node.attr
            else:
                target = f".{node.attr}"
        if target is not None:
            found.setdefault(f"{module}:{'.'.join(scope)}", set()).add(followed(target))
        for child in ast.iter_child_nodes(node):
            visit(child, module, scope, cls)

    for module, tree in trees.items():
        visit(tree, module, [], None)
    return found


def callers(write: str, refs: dict[str, set[str]]) -> set[str]:
    """The functions that name `write` (a method also by its bare `.name`)."""
    name = write.partition(":")[2]
    by_name = "." + name.rsplit(".", 1)[-1] if "." in name else None
    return {caller for caller, named in refs.items()
            if caller != write and (write in named or by_name in named)}


def travels(write: str) -> bool:
    """Whether GUARD_TRAVELS names `write`, or its class."""
    return any(write == key or write.startswith(key + ".") for key in GUARD_TRAVELS)


def unlisted_callers(listed: Iterable[str], refs: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(listed write, caller) for each caller that is neither listed nor safe by GUARD_TRAVELS
    or SAFE_CALLERS: it may send the write's overwrite with no guard of its own."""
    listed = set(listed)
    return {(write, caller) for write in listed if not travels(write)
            for caller in callers(write, refs)
            if caller not in listed and (write, caller) not in SAFE_CALLERS}


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


def test_every_caller_of_a_listed_write_is_listed_or_safe() -> None:
    """A listed write can send its caller's batch, document or data: a caller that is not
    listed would overwrite with no guard, unless the write's guard travels with it or the
    caller's own guard is named (GUARD_TRAVELS, SAFE_CALLERS)."""
    refs = references(domain_sources())
    assert sorted(unlisted_callers(table(), refs)) == [], \
        "callers of a listed write with no entry in docs/architecture.md"


def test_the_caller_check_finds_callers_by_name_across_modules() -> None:
    """A caller of a listed write is found however it names it (through its module, under
    another name, through a package's re-export, in a `functools.partial`, as `self.method` or
    a method of any object), and fails the check unless it is listed."""
    helpers = '''
def put(batch, ref, fields):
    batch.set(ref, fields)
class Box:
    def save(self, batch):
        batch.update(self.ref, {})
    def flush(self, batch):
        self.save(batch)
'''
    package = "from counting.m.helpers import put\n"
    users = '''
import functools
from counting.m import helpers, put as exported
from counting.m.helpers import put as write_it
def through_module(db):
    helpers.put(db.batch(), ref, {})
def imported(db):
    write_it(db.batch(), ref, {})
def reexported(db):
    exported(db.batch(), ref, {})
def passed(writing, batch):
    writing.resending(functools.partial(helpers.put, batch, ref, {}))
def on_an_object(box, batch):
    box.save(batch)
def listed(db):
    helpers.put(db.batch(), ref, {})
'''
    refs = references({"m.__init__": package, "m.helpers": helpers, "m.users": users})
    listed = {"m.helpers:put", "m.helpers:Box.save", "m.users:listed"}
    assert unlisted_callers(listed, refs) == {
        ("m.helpers:put", "m.users:through_module"), ("m.helpers:put", "m.users:imported"),
        ("m.helpers:put", "m.users:reexported"), ("m.helpers:put", "m.users:passed"),
        ("m.helpers:Box.save", "m.users:on_an_object"),
        ("m.helpers:Box.save", "m.helpers:Box.flush")}
    assert ("m.helpers:put", "m.users:imported") not in unlisted_callers(
        listed | {"m.users:imported"}, refs)


def test_each_safe_caller_still_calls_a_listed_write() -> None:
    """GUARD_TRAVELS and SAFE_CALLERS name listed writes and callers that exist: an entry whose
    write or caller went away is removed, not left to let a new caller through."""
    listed, refs = table(), references(domain_sources())
    assert {key for key in GUARD_TRAVELS
            if not any(write == key or write.startswith(key + ".") for write in listed)} == set()
    assert {(write, caller) for write, caller in SAFE_CALLERS
            if write not in listed or caller not in callers(write, refs)} == set()
