"""Adding counters to an app that already runs on Firebase (docs/adopt.md), on the emulators.

The fixture host app (tests/adopt/host: its own Python function in the default codebase, rules
that guard its `orders`, a Hosting page) gets the backend from `counters init`, as
docs/adopt.md says, once in a database of its own and once under a collection prefix in the
default database. On an Emulator Suite started from the host's own firebase.json, with no step
of its own: the host's function, rules and page work as before, its orders are not counted until
it declares a counter, and the counters' callables, rollup, listeners and rules (in each
database) work. `counters remove` then gives back the host's files as they were, and the host
runs without the backend.

The Node host (tests/adopt/node-host: a Node HTTP function and Firestore trigger, rules version
1, an empty index file, a stock Node .gitignore that hides `.env`, no Auth emulator) is a git
repository: it gets the backend, both are committed, and a clone of it (as a teammate or CI gets
it) deploys, checked offline by deploy_dry_run.cjs, and runs, with the install's placement; with
placement.json tampered (issue 42's placement in the host's default collections), the backend
refuses to load and every command run in the clone refuses, writing nothing; with install.json
hidden it runs on its placement; with placement.json removed, the backend refuses to load.

`make adopt` runs this module alone: it starts emulator stacks of its own (the machine's emulator
ports, taken as tools/stack.py takes them), so it cannot run inside `make exec`. It names in
COUNTERS_ADOPT the `counters` command of a venv holding the wheel (`make packages`) and its
declared dependencies alone, which is what runs every step, as on a host developer's machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import main
import pytest
import requests
import stack
from callables import Callables, sign_up
from counting.features import declarations
from google.cloud import firestore
from readiness import http_probe, wait_ready

from tests.waiting import eventually

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

FIXTURE = Path(__file__).parent / "host"
NODE_FIXTURE = Path(__file__).parent / "node-host"
# `make adopt` installs the Node host's packages here (npm ci); copies link to them.
NODE_MODULES = NODE_FIXTURE / "functions" / "node_modules"
DRY_RUN = Path(__file__).parent / "deploy_dry_run.cjs"
PROJECT = "demo-host"
HOST = "127.0.0.1"
# Where the emulators listen, as each host's firebase.json says (after init for auth and tasks).
PORTS = {"auth": 9099, "firestore": 8080, "functions": 5001, "hosting": 5000, "tasks": 9499}
# The deploy parameter a host writes for its project (docs/adopt.md, step 4).
RUNTIME_ACCOUNT = "RUNTIME_SERVICE_ACCOUNT=123456789-compute@developer.gserviceaccount.com\n"
FUNCTIONS = f"http://{HOST}:{PORTS['functions']}/{PROJECT}/us-central1"
FIRESTORE = f"http://{HOST}:{PORTS['firestore']}/v1/projects/{PROJECT}/databases"
READY_S = 240.0
ARTIFACTS = stack.ROOT / "tests" / "artifacts"

# Absolute: some steps run it from inside a host (`cwd`), and make passes a relative path.
COMMAND = str(Path(os.environ["COUNTERS_ADOPT"]).resolve()) if os.environ.get("COUNTERS_ADOPT") \
    else ""
pytestmark = pytest.mark.skipif(not COMMAND, reason="run by `make adopt` (it starts emulators "
                                                    "of its own)")


def counters(*args: str, cwd: Path | None = None) -> str:
    """Run the wheel's operator command (in `cwd`), failing the test on a non-zero exit."""
    done = subprocess.run([COMMAND, *args], capture_output=True, text=True, timeout=300,
                          check=False, cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def counters_refuses(*args: str, cwd: Path) -> str:
    """Run the wheel's operator command in `cwd`, expecting a refusal: a non-zero exit whose
    error is one line, without a traceback. Returns that line."""
    done = subprocess.run([COMMAND, *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd)
    assert done.returncode != 0, (args, done.stdout + done.stderr)
    assert "Traceback" not in done.stdout + done.stderr, (args, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, (args, done.stderr)
    return errors[0]


def commands() -> list[str]:
    """Every command the wheel's `counters --help` lists."""
    listed = counters("--help").split("Commands:", 1)[1]
    return [line.split()[0] for line in listed.splitlines() if line.startswith("  ")]


def tree(root: Path) -> dict[str, bytes]:
    """The project's files, without what running it leaves (venvs, packages, caches, emulator
    logs) and git's own."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not {"venv", "__pycache__", "node_modules", ".git"}
            & set(p.relative_to(root).parts) and p.suffix != ".log"}


def link_runtimes(host: Path) -> None:
    """Each codebase's runtime as its developer installs it: the Python ones' venv (the
    repository's, which holds the same requirements), the Node one's packages."""
    for folder in (host / "functions", host / "counters"):
        if (folder / "requirements.txt").exists() and not (folder / "venv").exists():
            (folder / "venv").symlink_to(stack.ROOT / "functions" / "venv")
        if (folder / "package.json").exists() and not (folder / "node_modules").exists():
            (folder / "node_modules").symlink_to(NODE_MODULES)


def deploy_dry_run(host: Path) -> subprocess.CompletedProcess[str]:
    """What a deploy works out from the project's files before it calls Google
    (deploy_dry_run.cjs)."""
    link_runtimes(host)
    return subprocess.run(["node", str(DRY_RUN), str(stack.ROOT / "node_modules/firebase-tools"),
                          str(host), PROJECT], capture_output=True, text=True, timeout=300,
                          check=False)


def deploys(host: Path) -> dict[str, Any]:
    done = deploy_dry_run(host)
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def the_installs_functions() -> set[str]:
    """The install's function ids: the backend's, prefixed, without the demo's collection
    triggers (an install declares none)."""
    demo = {watch.function_name for watch in OWN.watches}
    return {f"counters-{name}" for name in main.__all__ if name not in demo}


@pytest.fixture(scope="module", autouse=True)
def emulator_ports() -> None:
    stack.hold_ports("exec")  # held by this process until it exits
    os.environ.update({
        "GCLOUD_PROJECT": PROJECT,
        "FIRESTORE_EMULATOR_HOST": f"{HOST}:{PORTS['firestore']}",
        "FIREBASE_AUTH_EMULATOR_HOST": f"{HOST}:{PORTS['auth']}",
        "CLOUD_TASKS_EMULATOR_HOST": f"{HOST}:{PORTS['tasks']}",
    })


@contextmanager
def emulators(host: Path, label: str, *, loads_counters: bool = True) -> Iterator[Path]:
    """The Emulator Suite as the host runs it: `firebase emulators:start` in its folder, every
    emulator its firebase.json configures and nothing else. Ready once the host's function
    answers, and the backend's when an install is there (`loads_counters`)."""
    link_runtimes(host)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / f"adopt-{label}.log"
    env = {**os.environ, **stack.offline_emulator_env(), **stack.java_env(), **stack.firebase_env()}
    firebase = stack.start_group(
        [str(stack.ROOT / "node_modules/.bin/firebase"), "emulators:start", "--project", PROJECT],
        env, log, cwd=host)
    try:
        names = ["hello"] + (["counters-get_count"] if (host / "counters").is_dir()
                             and loads_counters else [])
        for name in names:
            wait_ready(f"{name} in {label}", http_probe(f"{FUNCTIONS}/{name}", (200, 400, 401),
                                                       body=b'{"data": {}}'),
                       READY_S, exited=stack.firebase_exited(firebase))
        yield log
    finally:
        stack.stop_group(firebase)
        firebase.wait()  # reaped, whatever stop_group saw


# --- what the host sees ----------------------------------------------------------------------


def rest(method: str, database: str, path: str, token: str | None,
         fields: dict[str, Any] | None = None) -> int:
    """A client's Firestore request (REST, as the SDKs send it): its HTTP status."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    url = f"{FIRESTORE}/{database}/documents/{path}"
    if method == "CREATE":
        parent, _, doc = path.rpartition("/")
        url = f"{FIRESTORE}/{database}/documents/{parent}?documentId={doc}"
        method = "POST"
    body = None if fields is None else {"fields": {
        k: {"integerValue": str(v)} if isinstance(v, int) else {"stringValue": v}
        for k, v in fields.items()}}
    return requests.request(method, url, json=body, headers=headers, timeout=30).status_code


def documents(database: str) -> dict[str, str]:
    """Every document of `database` in the Firestore emulator and when it was last written
    (a query of all descendants of the root, as the emulator's owner, past the rules)."""
    answer = requests.post(f"{FIRESTORE}/{database}/documents:runQuery", json={
        "structuredQuery": {"from": [{"allDescendants": True}]}},
        headers={"Authorization": "Bearer owner"}, timeout=30)
    answer.raise_for_status()
    return {found["document"]["name"]: found["document"]["updateTime"]
            for found in answer.json() if "document" in found}


def check_host_as_before(host_db: str = "(default)") -> None:
    """The host's function and page answer, and its rules allow and refuse as they did."""
    assert requests.get(f"{FUNCTIONS}/hello", timeout=30).text == "hello from the host app"
    page = requests.get(f"http://{HOST}:{PORTS['hosting']}/", timeout=30)
    assert "The host app's own page." in page.text
    alice, bob = sign_up(project=PROJECT), sign_up(project=PROJECT)
    order = f"orders/o-{alice.uid}"
    assert rest("CREATE", host_db, order, alice.id_token,
                {"owner": alice.uid, "status": "paid", "amount": 5}) == 200
    assert rest("GET", host_db, order, alice.id_token) == 200
    assert rest("GET", host_db, order, bob.id_token) == 403
    assert rest("CREATE", host_db, f"orders/o-x-{bob.uid}", bob.id_token,
                {"owner": alice.uid, "status": "paid", "amount": 5}) == 403
    assert rest("GET", host_db, "anything/else", alice.id_token) == 403


def check_counters(database: str, prefix: str) -> str:
    """The backend's callables, rollup and a listener, where the install put its data; returns
    a counter that the rollup has published."""
    admin = Callables(sign_up({"admin": True}, project=PROJECT).id_token, base_url=FUNCTIONS)
    user = Callables(sign_up(project=PROJECT).id_token, base_url=FUNCTIONS)
    counter = f"likes-{time.time_ns()}"
    admin.call("counters-create_counter", counter=counter, shards=4)
    db = firestore.Client(project=PROJECT, database=database)
    seen: list[int] = []
    ready = threading.Event()

    def on_snapshot(snapshots: list[Any], *_: Any) -> None:
        for snapshot in snapshots:
            if snapshot.exists:
                seen.append(int(snapshot.get("count")))
                ready.set()

    watch = db.collection(f"{prefix}counters").document(counter).on_snapshot(on_snapshot)
    try:
        assert ready.wait(30)
        for n in range(5):
            assert user.call("counters-increment", counter=counter, request_id=f"r{n}")["applied"]
        eventually(lambda: seen and seen[-1] == 5, 60)
    finally:
        watch.unsubscribe()  # type: ignore[no-untyped-call]
    anyone = sign_up(project=PROJECT).id_token
    assert rest("GET", database, f"{prefix}counters/{counter}", anyone) == 200
    assert rest("GET", database, f"{prefix}internal/rollup", anyone) == 403
    assert rest("GET", database, f"{prefix}counters/{counter}/{prefix}shards/0", anyone) == 403
    return counter


def orders_counted(database: str, prefix: str) -> dict[str, int]:
    db = firestore.Client(project=PROJECT, database=database)
    return {s.id: int(s.get("count")) for s in db.collection(f"{prefix}counters").stream()
            if s.id.startswith("orders:")}


# --- the install, in each of its two places --------------------------------------------------


@pytest.fixture
def host(tmp_path: Path) -> Path:
    copy = tmp_path / "host"
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.mark.parametrize(("args", "database", "prefix"), [
    ((), "counters", ""),
    (("--prefix", "ctr_"), "(default)", "ctr_"),
], ids=["own-database", "prefix"])
def test_add_counters_then_remove_them(host: Path, args: tuple[str, ...], database: str,
                                       prefix: str) -> None:
    before = tree(host)
    shown = counters("init", str(host), "--dry-run", *args)
    assert "firebase.json" in shown and "counters/main.py" in shown
    assert tree(host) == before  # a dry run writes nothing

    counters("init", str(host), *args)
    installed = tree(host)
    firebase = json.loads((host / "firebase.json").read_text())
    assert [c.get("codebase", "default") for c in firebase["functions"]] == ["default",
                                                                              "counters"]
    assert "hosting" in firebase and firebase["hosting"] == json.loads(
        before["firebase.json"])["hosting"]
    assert json.loads((host / "counters/declarations.json").read_text()) == []
    assert counters("init", str(host), *args).strip() == "nothing to change"
    assert tree(host) == installed

    (host / "counters" / f".env.{PROJECT}").write_text(RUNTIME_ACCOUNT)
    planned = deploys(host)
    assert set(planned["functions"]) == {"default", "counters"}
    assert set(planned["functions"]["default"]) == {"hello"}
    assert set(planned["functions"]["counters"]) == the_installs_functions()
    assert [store["database"] for store in planned["firestore"]] == (
        ["(default)", "counters"] if database != "(default)" else ["(default)"])

    label = "db" if database != "(default)" else "prefix"
    with emulators(host, f"{label}-installed") as log:
        # Two databases: the backend loaded both rules files when the emulator loaded it.
        check_host_as_before()
        published = check_counters(database, prefix)
        # The host's orders are the host's: nothing counts them (the rollup has run since).
        assert orders_counted(database, prefix) == {}
        assert published not in orders_counted(database, prefix)
        declare_a_collection_counter(host, database, prefix, log)

    counters("remove", str(host))
    assert tree(host) == before
    with emulators(host, f"{label}-removed"):
        check_host_as_before()
        assert requests.post(f"{FUNCTIONS}/counters-increment", json={"data": {}},
                             timeout=30).status_code == 404


def declare_a_collection_counter(host: Path, database: str, prefix: str, log: Path) -> None:
    """docs/adopt.md, "Counting the app's own documents": declare, deploy (here: the Functions
    emulator reloads the codebase), backfill what was there before, and the trigger counts what
    comes after."""
    (host / "counters/declarations.json").write_text(json.dumps([
        {"counter": "orders:{status}", "documents": "orders/{order}", "group_by": "status"}]))
    eventually(lambda: "counters-count_orders" in log.read_text(), READY_S)
    shown = counters("--backend", str(host / "counters"), "backfill", "orders")
    assert "1 counted now" in shown, shown
    eventually(lambda: orders_counted(database, prefix) == {"orders:paid": 1}, 60)
    alice = sign_up(project=PROJECT)
    assert rest("CREATE", "(default)", f"orders/new-{alice.uid}", alice.id_token,
                {"owner": alice.uid, "status": "paid", "amount": 7}) == 200
    eventually(lambda: orders_counted(database, prefix) == {"orders:paid": 2}, 60)


# --- a Node host, committed and cloned ---------------------------------------------------------


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout


def check_node_host_as_before() -> None:
    """The Node host's function and page answer, its trigger notes each new order, and its
    rules (version 1) allow and refuse as they did."""
    assert requests.get(f"{FUNCTIONS}/hello", timeout=30).text == "hello from the node host app"
    assert "The Node host app's own page." in requests.get(
        f"http://{HOST}:{PORTS['hosting']}/", timeout=30).text
    alice, bob = sign_up(project=PROJECT), sign_up(project=PROJECT)
    order = f"orders/o-{alice.uid}"
    assert rest("CREATE", "(default)", order, alice.id_token,
                {"owner": alice.uid, "status": "paid"}) == 200
    assert rest("GET", "(default)", order, bob.id_token) == 403
    assert rest("GET", "(default)", "order_log/x", alice.id_token) == 403
    log = firestore.Client(project=PROJECT).collection("order_log").document(f"o-{alice.uid}")
    eventually(lambda: log.get().exists, 60)


def test_a_clone_of_a_node_host_committed_after_init_deploys_and_runs_the_install(
        tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    shutil.copytree(NODE_FIXTURE, origin, ignore=shutil.ignore_patterns("node_modules"))
    before = tree(origin)
    git(origin, "init", "-q")
    git(origin, "add", "-A")
    git(origin, "-c", "user.name=host", "-c", "user.email=host@example.com", "commit", "-qm",
        "the host app")
    shown = counters("init", str(origin))
    assert "warning" not in shown, shown  # the stock .gitignore's .env rule is answered
    firebase = json.loads((origin / "firebase.json").read_text())
    assert {"auth", "tasks"} <= set(firebase["emulators"])  # what the callables need locally
    (origin / "counters" / f".env.{PROJECT}").write_text(RUNTIME_ACCOUNT)
    git(origin, "add", "-A")
    git(origin, "-c", "user.name=host", "-c", "user.email=host@example.com", "commit", "-qm",
        "counters init")

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True, timeout=120)
    assert {"counters/placement.json", "counters/.env", "counters/.env.local",
            f"counters/.env.{PROJECT}"} <= set(tree(clone))
    planned = deploys(clone)
    assert set(planned["functions"]["default"]) == {"hello", "logorder"}
    assert set(planned["functions"]["counters"]) == the_installs_functions()
    assert planned["firestore"] == [
        {"database": "(default)", "rules": "firestore.rules", "indexes": 0},
        {"database": "counters", "rules": "counters/firestore.rules",
         "indexes": len(install_indexes())}]

    with emulators(clone, "node-clone"):
        check_node_host_as_before()
        # the install's database, its rules enforced there too
        published = check_counters("counters", "")
        # doctor's canary on the install: its prefixed callable, its database, its tick queues.
        checked = counters("--backend", str(clone / "counters"), "doctor")
        assert re.search(r"^pass\s+canary\s+get_count serves", checked, re.MULTILINE), checked
        tampered_placement_is_refused(clone)
        hidden_install_json_runs_on_the_placement(clone, published, planned,
                                                  tmp_path / "elsewhere")

    (clone / "counters" / "placement.json").unlink()
    refused = deploy_dry_run(clone)
    assert refused.returncode != 0 and "placement.json not found" in refused.stderr
    with emulators(clone, "node-clone-no-placement", loads_counters=False) as log:
        eventually(lambda: "Failed to load function definition" in log.read_text(), READY_S)
        assert "placement.json not found" in log.read_text()
        assert requests.get(f"{FUNCTIONS}/hello", timeout=30).ok  # the host's own still serve
        assert requests.post(f"{FUNCTIONS}/counters-increment", json={"data": {}},
                             timeout=30).status_code == 404
    git(clone, "checkout", "--", "counters/placement.json")
    counters("remove", str(clone))
    assert tree(clone) == before


# The placement of issue 42: the install's function prefix on the host's default database's
# unprefixed collections, which install.json (database `counters`) did not write.
HOSTS_COLLECTIONS = {"database": "(default)", "collection_prefix": "",
                     "function_prefix": "counters", "watched_database": "(default)"}
# Arguments that make a command write, were it to run (the rest run bare: the refusal comes
# before a command reads its arguments).
WRITING = {"create": ("tampered",), "inc": ("tampered",),
           "reset": ("tampered", "--yes"), "get": ("tampered",)}


def tampered_placement_is_refused(clone: Path) -> None:
    """A placement.json that disagrees with install.json beside it: a deploy stops loading the
    codebase, and every command run in the clone refuses in one line naming both files, before
    it writes a file or a document (where the tampered placement points: the host's default
    database)."""
    (clone / "counters" / "placement.json").write_text(json.dumps(HOSTS_COLLECTIONS))
    files, stored = tree(clone), documents("(default)")
    assert any("/documents/orders/" in name for name in stored)  # the host's, seen
    refused = deploy_dry_run(clone)
    assert refused.returncode != 0, refused.stdout
    assert "counters/placement.json" in refused.stderr, refused.stderr[-3000:]
    assert "counters/install.json" in refused.stderr, refused.stderr[-3000:]
    # `remove` and `emulator-rules` work on an install's record whatever its placement says.
    for command in sorted(set(commands()) - {"remove", "emulator-rules"}):
        args = (str(clone),) if command == "init" else WRITING.get(command, ())
        line = counters_refuses(command, *args, cwd=clone)
        assert "placement.json" in line and "install.json" in line, (command, line)
    assert tree(clone) == files
    assert documents("(default)") == stored
    git(clone, "checkout", "--", "counters/placement.json")


def hidden_install_json_runs_on_the_placement(clone: Path, counter: str,
                                              planned: dict[str, Any], outside: Path) -> None:
    """A clone whose host .gitignore hid install.json (docs/adopt.md): the codebase deploys on
    its placement.json, and a command in the clone operates the install's database, never the
    default placement; outside any host, a command refuses rather than guess. Nothing is
    written to the clone's files."""
    (clone / "counters" / "install.json").unlink()
    files = tree(clone)
    assert deploys(clone) == planned
    shown = json.loads(counters("get", counter, "--json", cwd=clone))
    assert shown["rollup"]["count"] == 5, shown  # the count check_counters made, in `counters`
    outside.mkdir()
    line = counters_refuses("get", counter, cwd=outside)
    assert "no firebase.json" in line and "never falls back" in line, line
    assert tree(clone) == files
    git(clone, "checkout", "--", "counters/install.json")


def install_indexes() -> list[Any]:
    """The backend's composite indexes and field overrides, as a database of its own gets
    them."""
    ours = json.loads((stack.ROOT / "firestore.indexes.json").read_text())
    return [*ours["indexes"], *ours["fieldOverrides"]]
