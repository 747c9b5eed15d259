"""`counters init` and `counters remove` on the fixture host app's files (tests/adopt/host), and
the bounds of what an install may be told: no emulator (tests/adopt runs the installs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result
from counters_cli import cli, install
from counting import config, declarations
from counting.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "adopt" / "host"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    copy = tmp_path / "host"
    shutil.copytree(FIXTURE, copy)
    return copy


def counters(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("args", [(), ("--prefix", "ctr_")], ids=["own-database", "prefix"])
def test_init_changes_only_its_entries_is_idempotent_and_remove_gives_everything_back(
        host: Path, args: tuple[str, ...]) -> None:
    before = files(host)
    assert "firebase.json" in counters("init", str(host), "--dry-run", *args).output
    assert files(host) == before

    counters("init", str(host), *args)
    after = files(host)
    firebase = json.loads(after["firebase.json"])
    original = json.loads(before["firebase.json"])
    assert firebase["functions"][0] == original["functions"]
    assert firebase["functions"][1] == install.codebase(install.Install(
        name="counters", database="counters" if not args else "(default)",
        collection_prefix=args[1] if args else ""))
    assert firebase["hosting"] == original["hosting"]
    assert {k: v for k, v in firebase["emulators"].items() if k != "tasks"} == original[
        "emulators"]
    if args:  # the default database's files gain the backend's block and entries only
        assert firebase["firestore"] == original["firestore"]
        assert after["firestore.rules"].startswith(before["firestore.rules"].rsplit("}", 1)[0])
        assert "match /ctr_counters/{counter}" in after["firestore.rules"]
        assert "match /counters/" not in after["firestore.rules"]
        groups = {e["collectionGroup"] for e in json.loads(after["firestore.indexes.json"])[
            "fieldOverrides"]}
        assert groups and all(g.startswith("ctr_") for g in groups)
    else:
        assert firebase["firestore"] == [{"database": "(default)", **original["firestore"]},
                                         install.firestore_entry(install.Install(
                                             name="counters", database="counters",
                                             collection_prefix=""))]
        assert {k: v for k, v in after.items() if not k.startswith("counters/")
                and k != "firebase.json"} == {k: v for k, v in before.items()
                                              if k != "firebase.json"}
    assert json.loads(after["counters/declarations.json"]) == []
    assert config.Placement.from_env(dict(
        line.split("=", 1) for line in after["counters/.env"].splitlines()
        if "=" in line and not line.startswith("#"))).function_prefix == "counters"

    assert counters("init", str(host), *args).output.strip() == "nothing to change"
    (host / "counters/declarations.json").write_text('[{"counter": "n:{o}", '
                                                     '"documents": "orders/{o}"}]')
    assert counters("init", str(host), *args).output.strip() == "nothing to change"

    assert "delete counters/" in counters("remove", str(host), "--dry-run").output
    counters("remove", str(host))
    back = files(host)
    assert json.loads(back.pop("firebase.json")) == original
    assert back == {k: v for k, v in before.items() if k != "firebase.json"}


@pytest.mark.parametrize(("args", "message"), [
    (("--name", "Counters"), "--name"),
    (("--name", "c" * 31), "--name"),
    (("--name", "counters-"), "--name"),
    (("--database", "ab"), "database id"),
    (("--database", "x" * 64), "database id"),
    (("--database", "Counters"), "database id"),
    (("--prefix", "Ctr_"), "COUNTERS_COLLECTION_PREFIX"),
    (("--prefix", "c" * 31), "COUNTERS_COLLECTION_PREFIX"),
    (("--prefix", "ctr_", "--database", "counters"), "one or the other"),
])
def test_init_refuses_a_bad_placement(host: Path, args: tuple[str, ...], message: str) -> None:
    before = files(host)
    assert message in counters("init", str(host), *args, code=2).output
    assert files(host) == before


def test_the_longest_names_are_accepted(host: Path) -> None:
    counters("init", str(host), "--name", "c" * 30, "--database", "d" * 63, "--dry-run")
    counters("init", str(host), "--prefix", "p" * 30, "--dry-run")


def test_init_refuses_what_it_would_have_to_overwrite(host: Path) -> None:
    (host / "counters").mkdir()
    assert "not an install" in counters("init", str(host), code=1).output
    (host / "counters").rmdir()
    counters("init", str(host))
    assert "remove` it first" in counters("init", str(host), "--prefix", "c_", code=1).output
    assert "no install named" in counters("remove", str(host), "--name", "other",
                                          code=1).output


def test_a_prefix_install_needs_the_hosts_rules_files(host: Path) -> None:
    firebase = json.loads((host / "firebase.json").read_text())
    del firebase["firestore"]
    (host / "firebase.json").write_text(json.dumps(firebase))
    assert "deploys no rules" in counters("init", str(host), "--prefix", "c_", code=1).output
    counters("init", str(host))  # a database of its own needs nothing of the host's
    counters("remove", str(host))
    assert json.loads((host / "firebase.json").read_text()) == firebase


def test_a_rules_file_that_does_not_end_with_its_service_is_left_to_the_user(
        host: Path) -> None:
    rules = host / "firestore.rules"
    rules.write_text(rules.read_text() + "match /x {}\n")
    assert "by hand" in counters("init", str(host), "--prefix", "c_", code=1).output


def test_init_outside_a_firebase_project_says_so(tmp_path: Path) -> None:
    assert "firebase.json" in counters("init", str(tmp_path), code=1).output


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"),
    ("{}", "a list"),
    (json.dumps([{"counter": "n:{o}", "documents": "o/{o}"}] * 2), "name taken twice"),
    (json.dumps([{"counter": "n:{o}"}]), "entry 1"),
    (json.dumps([{"counter": "n:{o}", "documents": "o/{o}", "color": "red"}]), "entry 1"),
    (json.dumps([{"counter": "n:{o}", "documents": "o/{o}", "sum": 3}]), "strings"),
    (json.dumps([{"counter": "n:{o}", "documents": "o/{o}", "expected_rate": 0}]), "expected_rate"),
    (json.dumps([{"counter": "n:{o}", "documents": "o/{o}", "expected_rate": True}]), "1e6"),
    (json.dumps([{"counter": f"n{i}:{{o}}", "documents": f"o{i}/{{o}}"}
                 for i in range(declarations.MAX_DECLARATIONS + 1)]), "at most 50"),
    (" " * (declarations.MAX_FILE_BYTES + 1), "larger than"),
])
def test_declarations_files_are_checked(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        declarations.parse(text)


def test_the_most_declarations_a_file_may_hold() -> None:
    most = [{"counter": f"n{i}:{{o}}", "documents": f"o{i}/{{o}}"}
            for i in range(declarations.MAX_DECLARATIONS)]
    assert len(declarations.parse(json.dumps(most))) == declarations.MAX_DECLARATIONS


def test_placement_follows_the_environment() -> None:
    placement = config.Placement.from_env({"COUNTERS_DATABASE": "counters",
                                           "COUNTERS_COLLECTION_PREFIX": "c_",
                                           "COUNTERS_FUNCTION_PREFIX": "counters"})
    assert placement.function_id("rolluptick") == "counters-rolluptick"
    assert config.Placement().function_id("rolluptick") == "rolluptick"
    assert config.Placement.from_env(placement.env()) == placement
    with pytest.raises(ValueError, match="COUNTERS_FUNCTION_PREFIX"):
        config.Placement(function_prefix="-x")


def test_an_installs_manifest_names_its_databases(tmp_path: Path) -> None:
    """The deploy manifest of functions loaded as an install's .env says: its collection
    triggers watch the watched database, whatever the backend's own one is."""
    script = ("import main, sys\nfrom firebase_functions.private import serving\n"
              "sys.stdout.write(serving.functions_as_yaml({n: getattr(main, n) "
              "for n in main.__all__}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "functions"),
           "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1", "GCLOUD_PROJECT": "demo-x",
           "COUNTERS_DATABASE": "counters", "COUNTERS_FUNCTION_PREFIX": "counters",
           "COUNTERS_WATCHED_DATABASE": "shop"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=ROOT / "functions", check=True, timeout=120)
    endpoints = yaml.safe_load(done.stdout)["endpoints"]
    triggers = [e["eventTrigger"] for e in endpoints.values() if "eventTrigger" in e]
    assert triggers and all(t["eventFilters"]["database"] == "shop" for t in triggers)
    env["COUNTERS_DATABASE"] = "Bad"
    bad = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, cwd=ROOT / "functions", check=False, timeout=120)
    assert bad.returncode != 0 and "COUNTERS_DATABASE" in bad.stderr
