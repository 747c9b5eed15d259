"""`counters init`, `counters remove` and `counters emulator-rules`: add the backend to a Firebase
project that already has its own functions, rules and site, take it out again, and give a local
Firestore emulator the rules of every database by hand (docs/adopt.md).

An install is a folder in the host project (`counters/` by default: the functions codebase, its
`placement.json` saying where the data lives, its `.env` files, `declarations.json`, a
`.gitignore` that keeps the `.env` files in git, and in a database of its own, that database's
rules and indexes) and entries in the host's `firebase.json`:

- a functions codebase of that name, whose function ids firebase-tools prefixes with it
  (`counters-increment`), beside the host's codebases;
- with `--database` (the default, `counters`): a `firestore` entry for that database, with its own
  rules, indexes and TTL policies; the host's entry stays as it is (in list form);
- with `--prefix`: the backend's collections in the default database, every id prefixed, its
  rules added to the host's rules file as a block of their own and its indexes and TTL policies
  to the host's index file;
- the Auth and Cloud Tasks emulators, when the host configures emulators and lacks them, on
  ports none of the host's emulators takes.

Nothing else of the host's changes. `install.json` in the folder records what was added and the
text of each host file before, so that `counters remove` gives back that text when nothing changed
the file since, and otherwise takes out only the install's entries, keeping the host's changes;
the last install removed gives back the text from before the first. Running `init` again changes
nothing (it brings the backend's code up to this version, and keeps the host's edits of the
install's `.env` files, declarations, watched database and firebase.json entries). Init refuses
up front on a machine without Python 3.11, and says which of the install's files git would leave
out of a commit.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import counting
from counting.foundation import config
from counting.foundation import emulator_rules as emulator_rules_module

import counters_cli

from .json_text import dumps, edit, in_own_format
from .rules import database_block, insert_rules, old_shard_rules, remove_rules

# Where init finds what it writes: a wheel carries it in counters_cli/backend/ (make packages);
# this repository's checkout keeps it at its root and in functions/.
_PACKED = Path(counters_cli.__file__).resolve().parent / "backend"
_REPO = Path(counters_cli.__file__).resolve().parents[2]
RECORD = config.INSTALL_RECORD
# The backend's part of the repository's rules file lies between these lines.
RULES_BEGIN = re.compile(r"^ *// counters: begin\..*$", re.MULTILINE)
RULES_END = re.compile(r"^ *// counters: end$", re.MULTILINE)
FUNCTIONS_IGNORE = ["venv", ".git", "*.local", "__pycache__", RECORD]
# The emulators the backend needs locally beside the host's (the callables need ID tokens, the
# rollup its tick tasks), added to a host that configures emulators and lacks them, each on its
# firebase-tools default port unless the host uses that one: then the next free one.
ADDED_EMULATORS = {"auth": 9099, "tasks": 9499}
EMULATOR_HOST = "127.0.0.1"
# The ports firebase-tools gives an emulator firebase.json names without a port, or starts on
# its own (hub, logging, ui; the Firestore emulator's websocket): none of them is free.
DEFAULT_PORTS = {"ui": 4000, "hub": 4400, "logging": 4500, "hosting": 5000, "functions": 5001,
                 "apphosting": 5002, "firestore": 8080, "pubsub": 8085, "database": 9000,
                 "auth": 9099, "storage": 9199, "eventarc": 9299, "dataconnect": 9399,
                 "tasks": 9499}
FIRESTORE_WEBSOCKET_PORT = 9150
PORT_TRIES = 100
# What a clone needs of the install beside firebase.json: git must not ignore it. A host's
# `.env` rule (the stock Node .gitignore has one) would hide the codebase's deploy parameters.
GITIGNORE = ("venv/\n__pycache__/\n# The codebase's deploy parameters (no secrets: those go to "
             "Secret Manager) travel with\n# the repository, whatever the host's own .gitignore "
             "says of .env files.\n!.env\n!.env.*\n")
# The interpreter the codebase's venv needs (firebase.json's runtime python311).
PYTHON = (3, 11)


def source(name: str) -> Path:
    """A file of the backend as this command ships it."""
    packed = _PACKED / name
    if packed.exists():
        return packed
    at_root = name in ("firestore.rules", "firestore.indexes.json")
    return (_REPO if at_root else _REPO / "functions") / name


# The option of init that gives each placement field.
OPTIONS = {"database": "--database", "collection_prefix": "--prefix", "function_prefix": "--name",
           "name": "--name"}


@dataclass(frozen=True, kw_only=True)
class Install:
    """One install: its `name` (folder, codebase and function prefix) and its placement."""

    name: str
    database: str  # config.DEFAULT_DATABASE with a collection prefix
    collection_prefix: str

    def __post_init__(self) -> None:
        """config.PlacementError, naming the record's field at fault (`options` names init's
        option instead: the values come from the command line or from an install's record)."""
        if not config.FUNCTION_PREFIX_PATTERN.fullmatch(self.name):
            raise config.PlacementError(f"name: {self.name!r} must be 1-30 of a-z 0-9 -, a "
                                        "letter first, not ending in -", "name")
        if (self.database == config.DEFAULT_DATABASE) == (not self.collection_prefix):
            raise config.PlacementError("the backend needs a database of its own or a "
                                        "collection prefix in the default database: one or the "
                                        "other")
        self.placement  # noqa: B018 (validates the values)

    @classmethod
    def of_options(cls, name: str, database: str, collection_prefix: str) -> Install:
        """The install init's options describe; a UsageError naming the option at fault."""
        try:
            return cls(name=name, database=database, collection_prefix=collection_prefix)
        except config.PlacementError as error:
            if error.field is None:
                message = f"{error} (--database or --prefix)"
            else:
                message = str(error).replace(f"{error.field}:", f"{OPTIONS[error.field]}:", 1)
            raise click.UsageError(message) from None

    @property
    def placement(self) -> config.Placement:
        return config.Placement(database=self.database, collection_prefix=self.collection_prefix,
                                function_prefix=self.name)

    def folder(self, root: Path) -> Path:
        return root / self.name

    @property
    def own_database(self) -> bool:
        return self.database != config.DEFAULT_DATABASE

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "database": self.database,
                "collection_prefix": self.collection_prefix}

    @classmethod
    def recorded(cls, folder: Path) -> Install | None:
        path = folder / RECORD
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            return cls(name=data["name"], database=data["database"],
                       collection_prefix=data["collection_prefix"])
        except (ValueError, KeyError, TypeError) as error:  # PlacementError is a ValueError
            raise click.ClickException(
                f"{path} is not an install record `counters init` writes ({error}): restore it "
                f"from git (git checkout -- {folder.name}/{RECORD})") from None


# --- what the backend's files become in an install -------------------------------------------


def rules_block(collection_prefix: str) -> str:
    """The backend's rules (the repository's, between the markers), each collection id
    prefixed; indented as the body of a `match /databases/.../documents` block."""
    text = source("firestore.rules").read_text()
    begin, end = RULES_BEGIN.search(text), RULES_END.search(text)
    assert begin is not None and end is not None, "the backend's rules are marked"
    block = text[begin.end():end.start()].strip("\n")
    ids = "|".join(re.escape(base) for base in config.COLLECTION_IDS.values())
    return re.sub(rf"(match /)({ids})(/)", rf"\g<1>{collection_prefix}\g<2>\g<3>", block)


def own_rules(install: Install) -> str:
    """The rules file of a database of the backend's own: its rules, and nothing else allowed."""
    return ("rules_version = '2';\n\n"
            "// The counters backend's database: clients read what these rules allow; every "
            "write goes\n// through its functions (the Admin SDK bypasses rules). Written by "
            "`counters init`.\n"
            "service cloud.firestore {\n"
            + database_block(rules_block("")) + "}\n")


def indexes(collection_prefix: str) -> dict[str, Any]:
    """The backend's indexes and field overrides (TTL policies included), ids prefixed."""
    data: dict[str, Any] = json.loads(source("firestore.indexes.json").read_text())
    for entry in [*data["indexes"], *data["fieldOverrides"]]:
        entry["collectionGroup"] = collection_prefix + entry["collectionGroup"]
    return data


def merge_indexes(host: dict[str, Any], ours: dict[str, Any], *, add: bool) -> dict[str, Any]:
    """The host's index file with ours added (or taken out): entries are compared whole."""
    merged = dict(host)
    for key in ("indexes", "fieldOverrides"):
        kept = [entry for entry in host.get(key, []) if entry not in ours[key]]
        merged[key] = kept + (ours[key] if add else [])
    return merged


def placement_file(install: Install, folder: Path) -> str:
    """The codebase's placement.json: where the install put the data, with the database whose
    documents collection counters count as the host left it (the one value that is the host's
    to change there: docs/adopt.md)."""
    watched = config.DEFAULT_DATABASE
    if (folder / config.PLACEMENT_FILE).exists():  # else none yet, or a lost one: written anew
        try:
            watched = config.Placement.read(folder).watched_database
        except config.PlacementError as error:  # edited: which file is right is not init's guess
            raise click.ClickException(str(error)) from None
    return dataclasses.replace(install.placement, watched_database=watched).to_json()


# --- the host's files ------------------------------------------------------------------------


@dataclass
class Changes:
    """Files to write (path -> new text, None: delete) and the folder to remove. `record` is
    written first and the host's files last, so that an interrupted run leaves an install that
    `counters remove` finds."""

    root: Path
    files: dict[Path, str | None] = field(default_factory=dict)
    remove_folder: Path | None = None
    record: Path | None = None

    def put(self, path: Path, text: str | None) -> None:
        if text_of(path) != text:
            self.files[path] = text

    def describe(self, echo: Callable[[str], None]) -> None:
        for path, text in sorted(self.files.items()):
            current = text_of(path)
            name = str(path.relative_to(self.root))
            if text is None:
                echo(f"delete {name}")
            elif current is None:
                echo(f"create {name} ({len(text.splitlines())} lines)")
            else:
                echo("".join(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                  f"a/{name}", f"b/{name}")).rstrip("\n"))
        if self.remove_folder is not None:
            echo(f"delete {self.remove_folder.relative_to(self.root)}/")

    def apply(self) -> None:
        folder = self.record.parent if self.record is not None else None

        def order(path: Path) -> tuple[bool, bool, bool]:
            return (path != self.record, folder not in path.parents,
                    path.name == "firebase.json")

        for path in sorted(self.files, key=order):
            text = self.files[path]
            if text is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("w", newline="") as file:
                    file.write(text)
        if self.remove_folder is not None:
            shutil.rmtree(self.remove_folder)


def text_of(path: Path) -> str | None:
    """A file's text as it is on disk (line endings kept), None when it does not exist."""
    if not path.exists():
        return None
    with path.open(newline="") as file:
        return file.read()


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise click.ClickException(f"{path} is not plain JSON ({error}); comments, which "
                                   "firebase-tools allows, are not: add the entries by hand "
                                   "(docs/adopt.md)") from None


def read_firebase_json(root: Path) -> dict[str, Any]:
    path = root / "firebase.json"
    if not path.exists():
        raise click.ClickException(f"{path} not found: run this in a Firebase project's folder "
                                   "(or name it)")
    data = read_json(path)
    if not isinstance(data, dict):
        raise click.ClickException(f"{path} is not a JSON object")
    return data


def as_list(entry: Any) -> list[dict[str, Any]]:
    if entry is None:
        return []
    return list(entry) if isinstance(entry, list) else [entry]


def codebase(install: Install) -> dict[str, Any]:
    return {"source": install.name, "codebase": install.name, "prefix": install.name,
            "runtime": "python311", "ignore": FUNCTIONS_IGNORE}


def firestore_entry(install: Install) -> dict[str, Any]:
    return {"database": install.database, "rules": f"{install.name}/firestore.rules",
            "indexes": f"{install.name}/firestore.indexes.json"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def other_installs(root: Path, name: str) -> list[Install]:
    return [found for record in sorted(root.glob(f"*/{RECORD}"))
            if record.parent.name != name and (found := Install.recorded(record.parent))]


def check_free(root: Path, firebase: dict[str, Any], install: Install) -> None:
    """Refuse a name, database or prefix the host (or another install) uses already."""
    if install.name == "default":
        raise click.ClickException("--name default is the host's own codebase")
    for config_ in as_list(firebase.get("functions")):
        if config_.get("codebase", "default") == install.name:
            raise click.ClickException(f"firebase.json has a codebase {install.name!r} already: "
                                       "choose another --name")
        if config_.get("prefix") == install.name and config_.get("codebase") != install.name:
            raise click.ClickException(f"codebase {config_.get('codebase', 'default')!r} "
                                       f"prefixes its functions with {install.name!r} already: "
                                       "choose another --name")
        if config_.get("source") == install.name and config_.get("codebase") != install.name:
            raise click.ClickException(f"a codebase of the host's has its source in "
                                       f"{install.name}/: choose another --name")
    stores = as_list(firebase.get("firestore"))
    if install.own_database and any(s.get("database") == install.database for s in stores):
        raise click.ClickException(f"firebase.json deploys a database {install.database!r} "
                                   "already: choose another --database")
    for other in other_installs(root, install.name):
        if (other.database, other.collection_prefix) == (install.database,
                                                         install.collection_prefix):
            raise click.ClickException(f"install {other.name!r} keeps its data there already")


def plan_init(root: Path, install: Install) -> Changes:
    firebase = read_firebase_json(root)
    folder = root / install.name
    recorded = Install.recorded(folder)
    if recorded is not None and recorded != install:
        raise click.ClickException(f"{folder} holds an install with {recorded.record()}: "
                                   "`counters remove` it first to place the backend elsewhere")
    if recorded is None and folder.exists():
        raise click.ClickException(f"{folder} exists and is not an install: choose another "
                                   "--name")
    if recorded is None:
        check_free(root, firebase, install)
    record: dict[str, Any] = (read_json(folder / RECORD) if recorded is not None else
                              {**install.record(), "before": {}, "written": {}})
    before = record["before"]
    before.setdefault("functions", firebase.get("functions"))
    before.setdefault("firestore", firebase.get("firestore"))
    changes = Changes(root, record=folder / RECORD)
    host_files: dict[Path, str] = {}

    # The install's own entries keep what the host changed in them since (a runtime, a location).
    functions = as_list(firebase.get("functions"))
    mine = next((c for c in functions if c.get("codebase") == install.name), {})
    others = [c for c in functions if c.get("codebase") != install.name]
    firebase["functions"] = [*others, {**codebase(install), **mine}]
    stores = as_list(firebase.get("firestore"))
    if install.own_database:
        kept = next((s for s in stores if s.get("database") == install.database), {})
        firebase["firestore"] = [*listed(firebase.get("firestore"), install),
                                 {**firestore_entry(install), **kept}]
        changes.put(folder / "firestore.rules", own_rules(install))
        changes.put(folder / "firestore.indexes.json", dumps(indexes("")))
    else:
        host_files.update(shared_database(root, install, stores, record, add=True))
    others_records = [read_json(other.folder(root) / RECORD)
                      for other in other_installs(root, install.name)]
    record["emulators"] = add_emulators(firebase.get("emulators"), record, others_records)
    record.pop("tasks_emulator", None)  # an earlier version's form of the same
    # A first install writes firebase.json in its format; a re-run keeps the host's since.
    host_files[root / "firebase.json"] = (edit(text_of(root / "firebase.json") or "{}", firebase)
                                          if recorded is not None else dumps(firebase))

    packages = {"counting": Path(counting.__file__).resolve().parent,
                "handlers": source("handlers")}
    for name, package in packages.items():
        shipped = {folder / name / path.relative_to(package): path
                   for path in sorted(package.rglob("*.py"))}
        for target, path in shipped.items():
            changes.put(target, path.read_text())
        # An upgrade deletes the modules this version no longer ships (a module become a
        # package would otherwise be deployed beside it, dead).
        for stale in sorted((folder / name).rglob("*.py")):
            if stale not in shipped:
                changes.put(stale, None)
    for name in ("main.py", "requirements.txt"):
        changes.put(folder / name, source(name).read_text())
    changes.put(folder / config.PLACEMENT_FILE, placement_file(install, folder))
    # The .env files' comments name the files the install reads: the codebase is in its folder.
    keep = {**{env: source(env).read_text().replace("functions/", f"{install.name}/")
               for env in (".env", ".env.local")},
            "declarations.json": "[]\n", ".gitignore": GITIGNORE}
    for name, text in keep.items():  # the host's to edit once written
        if not (folder / name).exists():
            changes.put(folder / name, text)
    ignore = text_of(folder / ".gitignore")
    if ignore is not None and "!.env" not in ignore.splitlines():  # from an earlier version
        changes.put(folder / ".gitignore", ignore.rstrip("\n") + "\n" + GITIGNORE.split(
            "__pycache__/\n", 1)[1])
    edited = set(record.setdefault("edited", []))
    origin = record.setdefault("origin", {})
    for path, text in host_files.items():
        key = str(path.relative_to(root))
        current = text_of(path)
        # The text before any install, for the last removal: another install's, or this one.
        origin.setdefault(key, next((o["origin"][key] for o in others_records
                                     if key in o.get("origin", {})), current))
        if text == current and key in record["written"]:
            continue  # a re-run leaves the file, and so what the record says of it, as it is
        if key in record["written"] and record["written"][key] != sha256(current or ""):
            edited.add(key)  # changed since the install: remove takes entries out, not text
            before.pop(key, None)
        if key not in edited:
            before.setdefault(key, current)
        record["written"][key] = sha256(text)
        changes.put(path, text)
    record["edited"] = sorted(edited)
    changes.put(folder / RECORD, dumps(record))
    return changes


def add_emulators(emulators: Any, record: dict[str, Any], others: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """Adds the emulators of ADDED_EMULATORS that a host configuring emulators lacks, each on a
    port no emulator of the host's takes; returns the entries installs added (this one, or an
    earlier one, which the last install removed takes out)."""
    added: dict[str, Any] = {}
    for other in [record, *others]:
        if other.get("tasks_emulator"):  # an earlier version's record
            added.setdefault("tasks", {"host": EMULATOR_HOST, "port": ADDED_EMULATORS["tasks"]})
        for name, entry in other.get("emulators", {}).items():
            added.setdefault(name, entry)
    if not isinstance(emulators, dict):
        return added
    for name, default in ADDED_EMULATORS.items():
        if name in emulators:
            continue
        taken = ports_taken(emulators, besides=name)
        port = next((p for p in range(default, default + PORT_TRIES) if p not in taken), None)
        if port is None:
            raise click.ClickException(f"no free port for the {name} emulator near {default}: "
                                       f"add an `emulators.{name}` entry to firebase.json")
        emulators[name] = added[name] = {"host": EMULATOR_HOST, "port": port}
    return added


def ports_taken(emulators: dict[str, Any], besides: str) -> set[int]:
    """The ports the host's emulators may listen on, but for the emulator `besides`: those
    firebase.json gives, and the defaults of the others (firebase-tools starts the hub, logging
    and the UI on its own, and any emulator named on the command line)."""
    taken = {port for name, port in DEFAULT_PORTS.items() if name != besides}
    taken.add(FIRESTORE_WEBSOCKET_PORT)
    for entry in emulators.values():
        if isinstance(entry, dict):
            for key in ("port", "websocketPort"):
                if str(entry.get(key, "")).isdigit():
                    taken.add(int(entry[key]))
    return taken


def listed(entry: Any, install: Install) -> list[dict[str, Any]]:
    """The host's firestore entries in the list form several databases need (each names its
    database), without the install's."""
    if isinstance(entry, dict):
        if "target" in entry:
            raise click.ClickException("firebase.json's firestore entry uses a deploy target: "
                                       "write it as a list entry by hand, then run this again")
        return [{"database": entry.get("database", config.DEFAULT_DATABASE), **entry}]
    return [s for s in as_list(entry) if s.get("database") != install.database]


def shared_database(root: Path, install: Install, stores: list[dict[str, Any]],
                    record: dict[str, Any], *, add: bool) -> dict[Path, str]:
    """The host's rules and index files for the default database with the backend's rules and
    indexes added (or, `add` false, the ones `record` says were added taken out)."""
    default = [s for s in stores if s.get("database", config.DEFAULT_DATABASE)
               == config.DEFAULT_DATABASE and "target" not in s]
    if not default or "rules" not in default[0] or "indexes" not in default[0]:
        raise click.ClickException(
            "firebase.json deploys no rules and indexes files for the default database: a "
            "--prefix install adds its rules and indexes to them. Add them first (`firebase init "
            "firestore`), or give the backend a database of its own (--database)")
    rules_path, indexes_path = root / default[0]["rules"], root / default[0]["indexes"]
    rules_text = text_of(rules_path)
    if rules_text is None:
        raise click.ClickException(f"{rules_path} (firebase.json's rules for the default "
                                   "database) does not exist")
    old = old_shard_rules(rules_text)
    if add and old:
        raise click.ClickException(
            f"{rules_path} lets clients write `_counter_shards_` ({'; '.join(old)}): the "
            "Distributed Counter extension's rule lets any amount in. Remove it first "
            "(docs/adopt.md, \"Moving off the Distributed Counter extension\")")
    rules = remove_rules(rules_text, install.name)
    host_indexes = read_json(indexes_path) if indexes_path.exists() else {}
    added = record.get("indexes", {"indexes": [], "fieldOverrides": []})
    merged = merge_indexes(host_indexes, added, add=False)
    if add:
        rules = insert_rules(rules, database_block(rules_block(install.collection_prefix)),
                             install.name)
        record["indexes"] = indexes(install.collection_prefix)
        merged = merge_indexes(merged, record["indexes"], add=True)
        return {rules_path: rules, indexes_path: dumps(merged)}
    return {rules_path: rules, indexes_path: edit(text_of(indexes_path) or "{}", merged)}


def plan_remove(root: Path, name: str) -> Changes:
    folder = root / name
    install = Install.recorded(folder)
    if install is None:
        raise click.ClickException(f"{folder}/{RECORD} not found: no install named {name!r} here")
    record = read_json(folder / RECORD)
    before, written = record["before"], record["written"]
    firebase = read_firebase_json(root)
    changes = Changes(root, remove_folder=folder)
    host_files: dict[Path, str] = {}
    # The last install removed gives back the entries' shape, and the files' text, as they were
    # before the first install, whichever order the installs are removed in.
    last = not other_installs(root, name)
    origin: dict[str, str | None] = record.get("origin", {}) if last else {}
    found = json.loads(origin["firebase.json"] or "{}") if "firebase.json" in origin else before

    functions = [c for c in as_list(firebase.get("functions")) if c.get("codebase") != name]
    restore(firebase, "functions", functions, found.get("functions"), as_list)
    if install.own_database:
        kept = [s for s in as_list(firebase.get("firestore"))
                if s.get("database") != install.database]
        restore(firebase, "firestore", kept, found.get("firestore"),
                lambda entry: listed(entry, install))
    else:
        host_files.update(shared_database(root, install, as_list(firebase.get("firestore")),
                                          record, add=False))
    emulators = firebase.get("emulators", {})
    for emulator, entry in add_emulators(None, record, []).items():
        if last and emulators.get(emulator) == entry:
            emulators.pop(emulator)
    host_files[root / "firebase.json"] = edit(text_of(root / "firebase.json") or "{}", firebase)
    for path, text in host_files.items():
        key = str(path.relative_to(root))
        # Untouched since the install: exactly the text it found; else the entries taken out,
        # the rest as the host (or the last init) wrote it.
        current = text_of(path)
        unchanged = (key in before and key not in record.get("edited", [])
                     and current is not None and sha256(current) == written.get(key))
        if unchanged:
            changes.put(path, before[key])
        elif in_own_format(current or "") and same_content(origin.get(key), text):
            changes.put(path, origin[key])
        else:
            changes.put(path, text)
    return changes


def same_content(was: str | None, text: str) -> bool:
    """Whether `text` says what `was` said: the same JSON, or the same rules text."""
    if was is None:
        return False
    try:
        return bool(json.loads(was) == json.loads(text))
    except ValueError:
        return was == text


def restore(firebase: dict[str, Any], key: str, kept: list[dict[str, Any]], was: Any,
            listing: Callable[[Any], list[dict[str, Any]]]) -> None:
    """Put back the host's entry as init found it when what is left is what init made of it (or
    the entry itself: an install interrupted before it wrote firebase.json)."""
    if kept in (listing(was), as_list(was)):
        if was is None:
            firebase.pop(key, None)
        else:
            firebase[key] = was
    else:
        firebase[key] = kept


# --- the commands ----------------------------------------------------------------------------


def run(changes: Changes, dry_run: bool) -> None:
    if not changes.files and changes.remove_folder is None:
        click.echo("nothing to change")
        return
    changes.describe(click.echo)
    if dry_run:
        click.echo("(dry run: nothing written)")
        return
    changes.apply()


host_dir = click.argument("host", type=click.Path(file_okay=False, path_type=Path),
                          default=".")
name_option = click.option("--name", default="counters", show_default=True,
                           help="The install's folder, functions codebase and function-id "
                                "prefix.")
dry_run_option = click.option("--dry-run", is_flag=True, help="Show the changes; write nothing.")


@click.command()
@host_dir
@name_option
@click.option("--database", metavar="ID",
              help="A Firestore database of the backend's own (default: counters, unless "
                   "--prefix is given).")
@click.option("--prefix", "collection_prefix", metavar="PREFIX",
              help="Keep the backend's collections in the default database instead, each id "
                   "starting with PREFIX (e.g. counters_).")
@dry_run_option
def init(host: Path, name: str, database: str | None, collection_prefix: str | None,
         dry_run: bool) -> None:
    """Add the counters backend to the Firebase project in HOST (default: here), beside its own
    functions, rules and site: a functions codebase NAME, and its data in a database of its own
    or under a prefix. Run again, with or without the same options, it changes nothing. Then:
    docs/adopt.md."""
    root = host.resolve()
    recorded = Install.recorded(root / name) if database is collection_prefix is None else None
    if recorded is not None:  # a re-run: the placement the install has, not init's default
        database, collection_prefix = recorded.database, recorded.collection_prefix
    elif database is None:
        database = config.DEFAULT_DATABASE if collection_prefix else "counters"
    install = Install.of_options(name, database, collection_prefix or "")
    python = python_for_codebase()
    changes = plan_init(root, install)
    run(changes, dry_run)
    if not changes.files or dry_run:
        return
    click.echo(f"{name}/{config.PLACEMENT_FILE} says where the data lives, and {name}/.gitignore "
               "keeps the codebase's .env files in git: commit the folder with firebase.json "
               f"(without {config.PLACEMENT_FILE} the backend refuses to start).")
    hidden = ignored_by_git(root, [*sorted(p for p in install.folder(root).rglob("*")
                                           if p.is_file() and not {"venv", "__pycache__"}
                                           & set(p.relative_to(root).parts)),
                                   *(p for p, text in changes.files.items()
                                     if text is not None and install.folder(root) not in
                                     p.parents)])
    if hidden:
        click.echo("warning: git ignores files a clone needs to deploy and run the backend "
                   "(commit them with `git add -f`, or change the rule):\n  "
                   + "\n  ".join(hidden), err=True)
    create = (f"firebase firestore:databases:create {database} --location=<your default "
              "database's>; " if install.own_database else "")
    target = f"firestore:{database}" if install.own_database else "firestore"
    click.echo(f"next (docs/adopt.md): {venv_command(name, python)} (in every clone too: git "
               f"does not carry the venv); {create}firebase deploy --only "
               f"functions:{name},{target}")


def venv_command(folder: str, python: str = "python3.11") -> str:
    """What makes a codebase's venv, which firebase-tools loads the codebase from (in the
    emulators and at deploy) and git does not carry: each clone makes its own."""
    return (f"{python} -m venv {folder}/venv && {folder}/venv/bin/pip install -r "
            f"{folder}/requirements.txt")


def python_for_codebase() -> str:
    """A Python 3.11 on PATH, which the codebase's venv needs (firebase-tools runs it, in the
    emulators and at deploy, as firebase.json's runtime python311): a host whose own functions
    are in Node may have none, and hears it before anything is written."""
    wanted = ".".join(map(str, PYTHON))
    for name in (f"python{wanted}", "python3", "python"):
        found = shutil.which(name)
        if found is not None and subprocess.run(
                [found, "-c", f"import sys; sys.exit(sys.version_info[:2] != {PYTHON})"],
                capture_output=True, timeout=30, check=False).returncode == 0:
            return name
    raise click.ClickException(
        f"the backend is a Python {wanted} codebase (runtime python311), and no Python {wanted} "
        f"is on PATH: firebase-tools runs the codebase, in the emulators and at deploy, from a "
        f"venv made by python{wanted}, whatever language your own functions are in. Install "
        f"Python {wanted} (Debian and Ubuntu: apt install python{wanted} python{wanted}-venv; "
        f"macOS: brew install python@{wanted}; or pyenv install {wanted}), then run this again")


def ignored_by_git(root: Path, paths: list[Path]) -> list[str]:
    """Which of `paths` git would leave out of a commit in the work tree holding `root`, each
    with the rule that hides it (nothing outside a work tree, or without git)."""
    if shutil.which("git") is None or not paths:
        return []
    inside = subprocess.run(["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
                            capture_output=True, text=True, timeout=30, check=False)
    if inside.stdout.strip() != "true":
        return []
    done = subprocess.run(["git", "-C", str(root), "check-ignore", "--verbose", "--stdin"],
                          input="\n".join(str(p.relative_to(root)) for p in paths),
                          capture_output=True, text=True, timeout=30, check=False)
    found = (line.partition("\t") for line in done.stdout.splitlines())
    # --verbose lists the rule that decides, a negation (`!rule`: kept) included.
    return [f"{path} (ignored by {rule})" for rule, _, path in found
            if not rule.split(":", 2)[-1].startswith("!")]


@click.command()
@host_dir
@name_option
@dry_run_option
def remove(host: Path, name: str, dry_run: bool) -> None:
    """Take the install NAME out of the project in HOST: its firebase.json entries, rules and
    indexes, and its folder. What it deployed stays until deleted (docs/adopt.md, "Removing")."""
    run(plan_remove(host.resolve(), name), dry_run)


@click.command("emulator-rules")
@host_dir
@click.option("--emulator", metavar="HOST:PORT", envvar="FIRESTORE_EMULATOR_HOST",
              default="127.0.0.1:8080", show_default=True)
@click.option("--project", "project", metavar="ID", envvar="GCLOUD_PROJECT", required=True)
def emulator_rules(host: Path, emulator: str, project: str) -> None:
    """Load each database's rules of the project in HOST into a running Firestore emulator, as a
    deploy gives each database its own. The backend does it when the Functions emulator loads
    it; this is for a rules file edited while the emulators run."""
    root = host.resolve()
    read_firebase_json(root)  # says so when it is missing or not JSON
    try:
        loaded = emulator_rules_module.load(root, emulator, project)
    except emulator_rules_module.RulesNotLoaded as error:
        raise click.ClickException(str(error)) from None
    for database in loaded:
        click.echo(f"{database}: rules loaded into {emulator}")
