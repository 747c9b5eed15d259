"""`counters init` and `counters remove` on the fixture host app's files (tests/adopt/host), and
the bounds of what an install may be told: no emulator (tests/adopt runs the installs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner, Result
from counters_cli import cli, doctor, install, installed_backend, json_text, session
from counting.features import declarations
from counting.foundation import config
from counting.foundation.errors import InvalidArgument
from hypothesis import given
from hypothesis import strategies as st

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
    assert config.Placement.read(host / "counters") == config.Placement(
        database="counters" if not args else "(default)",
        collection_prefix=args[1] if args else "", function_prefix="counters")

    assert counters("init", str(host), *args).output.strip() == "nothing to change"
    (host / "counters/declarations.json").write_text('[{"counter": "n:{o}", '
                                                     '"documents": "orders/{o}"}]')
    assert counters("init", str(host), *args).output.strip() == "nothing to change"

    assert "delete counters/" in counters("remove", str(host), "--dry-run").output
    counters("remove", str(host))
    back = files(host)
    assert json.loads(back.pop("firebase.json")) == original
    assert back == {k: v for k, v in before.items() if k != "firebase.json"}


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("args", [(), ("--prefix", "ctr_")], ids=["own-database", "prefix"])
def test_a_plain_re_run_of_init_changes_nothing(host: Path, args: tuple[str, ...]) -> None:
    """`counters init` without options, in a project holding an install, keeps that install's
    placement (not init's default database)."""
    counters("init", str(host), *args)
    before = tree(host)
    assert counters("init", str(host)).output.strip() == "nothing to change"
    assert tree(host) == before
    # The host reformats firebase.json: a re-run keeps its text.
    firebase = host / "firebase.json"
    firebase.write_text(json.dumps(json.loads(firebase.read_text()), indent="\t"))
    before = tree(host)
    assert counters("init", str(host)).output.strip() == "nothing to change"
    assert tree(host) == before


def test_an_upgrade_deletes_the_modules_no_longer_shipped(host: Path) -> None:
    """A module an earlier version shipped and this one does not (`features/sequences.py`, a
    package since) is deleted by the next `counters init`, not deployed beside the package."""
    counters("init", str(host))
    old = host / "counters/counting/features/sequences.py"
    old.write_text("# a module of an earlier version\n")
    assert "delete counters/counting/features/sequences.py" in counters(
        "init", str(host), "--dry-run").output
    counters("init", str(host))
    assert not old.exists()
    assert (host / "counters/counting/features/sequences/issuing.py").exists()


def test_a_record_init_would_refuse_is_refused_in_its_own_terms(host: Path) -> None:
    """A changed install.json is named with its field, not an option the user did not give."""
    counters("init", str(host), "--prefix", "ctr_")
    record = host / "counters" / install.RECORD
    record.write_text(record.read_text().replace('"collection_prefix": "ctr_"',
                                                 '"collection_prefix": "Ctr_"'))
    before = tree(host)
    for args in (["init", str(host)], ["remove", str(host)]):
        refused = counters(*args, code=1).output
        assert f"{record} is not an install record" in refused
        assert "collection_prefix: 'Ctr_'" in refused and "git checkout" in refused
        assert "--" not in refused.replace("git checkout --", "")
    assert tree(host) == before


@pytest.mark.parametrize(("args", "message"), [
    (("--name", "Counters"), "--name"),
    (("--name", "c" * 31), "--name"),
    (("--name", "counters-"), "--name"),
    (("--database", "ab"), "database id"),
    (("--database", "x" * 64), "database id"),
    (("--database", "Counters"), "database id"),
    (("--prefix", "Ctr_"), "--prefix: 'Ctr_'"),
    (("--prefix", "c" * 31), "--prefix: 'ccc"),
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


def test_init_refuses_a_host_whose_rules_let_clients_write_extension_shards(
        host: Path) -> None:
    """The Distributed Counter extension's post-install rule lets any amount into a shard: init
    names it and adds nothing until it is removed."""
    rules = host / "firestore.rules"
    text = rules.read_text()
    rules.write_text(text.replace("service cloud.firestore {", "service cloud.firestore {\n"
                                  "  match /databases/{database}/documents/pages/{page} {\n"
                                  "    match /_counter_shards_/{shardId} { allow write; }\n  }",
                                  1))
    output = counters("init", str(host), "--prefix", "c_", code=1).output
    assert "_counter_shards_" in output and "Remove it first" in output
    rules.write_text(text)
    counters("init", str(host), "--prefix", "c_")


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
    (json.dumps([{"counter": "n:{c}", "documents": "counters/{c}"}]), "backend's own"),
    (json.dumps([{"counter": "n:{s}", "documents": "x/{c}/shards/{s}"}]), "backend's own"),
    (json.dumps([{"counter": "n:{x}", "documents": "{c}/{x}"}]), "trigger id"),
    (json.dumps([{"counter": "n:{x}", "documents": "caf\u00e9/{x}"}]), "trigger id"),
    (json.dumps([{"counter": "n:{x}", "documents": "o" * 58 + "/{x}"}]), "trigger id"),
])
def test_declarations_files_are_checked(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        declarations.parse(text, config.Placement())


def test_the_longest_trigger_id() -> None:
    assert declarations.parse(json.dumps([{"counter": "n:{x}", "documents": "o" * 57 + "/{x}"}]),
                              config.Placement())


def test_declarations_are_checked_against_the_installs_placement() -> None:
    """Under a prefix the backend's own collections are the prefixed ones, and the trigger's id
    carries the codebase's function prefix."""
    placement = config.Placement(collection_prefix="c_", function_prefix="shop")
    own = json.dumps([{"counter": "n:{c}", "documents": "c_counters/{c}"}])
    with pytest.raises(InvalidArgument, match="backend's own collection 'c_counters'"):
        declarations.parse(own, placement)
    assert declarations.parse(own, config.Placement())
    assert declarations.parse(json.dumps([{"counter": "n:{c}", "documents": "counters/{c}"}]),
                              placement)
    longest = json.dumps([{"counter": "n:{x}", "documents": "o" * 57 + "/{x}"}])
    with pytest.raises(InvalidArgument, match="trigger id 'shop-count_"):
        declarations.parse(longest, placement)


def test_the_most_declarations_a_file_may_hold() -> None:
    most = [{"counter": f"n{i}:{{o}}", "documents": f"o{i}/{{o}}"}
            for i in range(declarations.MAX_DECLARATIONS)]
    assert len(declarations.parse(json.dumps(most), config.Placement())) \
        == declarations.MAX_DECLARATIONS


def test_a_placement_file_says_all_of_the_placement_or_is_refused(tmp_path: Path) -> None:
    placement = config.Placement(collection_prefix="c_", function_prefix="counters",
                                 watched_database="shop")
    (tmp_path / config.PLACEMENT_FILE).write_text(placement.to_json())
    assert config.Placement.read(tmp_path) == placement
    assert placement.function_id("rolluptick") == "counters-rolluptick"
    assert config.Placement().function_id("rolluptick") == "rolluptick"
    with pytest.raises(config.PlacementError, match="function_prefix") as raised:
        config.Placement(function_prefix="-x")
    assert raised.value.field == "function_prefix"
    for text in ("", "[]", '{"database": "counters"}', json.dumps(
            {**json.loads(placement.to_json()), "extra": 1}), " " * 5000):
        (tmp_path / config.PLACEMENT_FILE).write_text(text)
        with pytest.raises(config.PlacementError, match="must be a JSON object"):
            config.Placement.read(tmp_path)
    (tmp_path / config.PLACEMENT_FILE).unlink()
    with pytest.raises(config.PlacementError, match="does not start without it"):
        config.Placement.read(tmp_path)


MANIFEST = ("import main, sys\nfrom firebase_functions.private import serving\n"
            "sys.stdout.write(serving.functions_as_yaml({n: getattr(main, n) "
            "for n in main.__all__}))\n")


def load_codebase(codebase: Path) -> subprocess.CompletedProcess[str]:
    """Load a codebase's main.py as firebase-tools' discovery does, printing its manifest."""
    env = {**os.environ, "PYTHONPATH": str(codebase), "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1",
           "GCLOUD_PROJECT": "demo-x"}
    return subprocess.run([sys.executable, "-c", MANIFEST], env=env, capture_output=True,
                          text=True, cwd=codebase, check=False, timeout=120)


def test_an_install_runs_where_its_placement_says_and_not_without_it(host: Path) -> None:
    """An install's functions load its placement.json: its collection triggers watch the
    watched database it names, whatever the backend's own one is; a bad value or no file at all
    and they refuse to load, saying what to do."""
    counters("init", str(host))
    codebase = host / "counters"
    placement = config.Placement.read(codebase)
    (codebase / config.PLACEMENT_FILE).write_text(
        placement.to_json().replace('"watched_database": "(default)"',
                                    '"watched_database": "shop"'))
    (codebase / "declarations.json").write_text(
        '[{"counter": "orders:{status}", "documents": "orders/{o}", "group_by": "status"}]')
    endpoints = yaml.safe_load(load_codebase(codebase).stdout)["endpoints"]
    triggers = [e["eventTrigger"] for e in endpoints.values() if "eventTrigger" in e]
    assert triggers and all(t["eventFilters"]["database"] == "shop" for t in triggers)
    counters("init", str(host))  # keeps the host's watched database
    assert config.Placement.read(codebase).watched_database == "shop"

    (codebase / config.PLACEMENT_FILE).write_text(
        placement.to_json().replace('"counters"', '"Bad"', 1))
    bad = load_codebase(codebase)
    assert bad.returncode != 0 and "database: 'Bad'" in bad.stderr
    (codebase / config.PLACEMENT_FILE).unlink()
    missing = load_codebase(codebase)
    assert missing.returncode != 0 and "does not start without it" in missing.stderr
    counters("init", str(host))  # gives it back
    assert config.Placement.read(codebase) == placement


@pytest.mark.parametrize(("database", "prefix"), [("counters", ""), ("(default)", "c_")])
@pytest.mark.parametrize("function_prefix", ["", "counters"])
def test_an_install_keeps_its_data_apart_from_the_hosts(database: str, prefix: str,
                                                        function_prefix: str) -> None:
    """A placement with a function prefix (an install) is refused where `counters init` would
    refuse it: the host's unprefixed default collections, or both a database and a prefix."""
    config.Placement(database=database, collection_prefix=prefix, function_prefix=function_prefix)
    config.Placement()  # this repository's own stack
    for database, prefix in (("(default)", ""), ("counters", "c_")):
        with pytest.raises(config.PlacementError, match="one or the other"):
            config.Placement(database=database, collection_prefix=prefix,
                             function_prefix="counters")


# Each edit of an install's files that leaves them disagreeing, and what the refusal names.
TAMPERED: dict[str, tuple[str, Callable[[str], str], str]] = {
    "host's default collections": ("counters/placement.json", lambda text: json.dumps(
        {"database": "(default)", "collection_prefix": "", "function_prefix": "counters",
         "watched_database": "(default)"}), "one or the other"),
    "another database": ("counters/placement.json", lambda text: text.replace(
        '"database": "counters"', '"database": "elsewhere"').replace(
        '"collection_prefix": "ctr_"', '"collection_prefix": "zz_"'),
        "counters/install.json disagree"),
    "another function prefix": ("firebase.json", lambda text: text.replace(
        '"prefix": "counters"', '"prefix": "shop"'), "firebase.json disagree"),
    "install.json changed": ("counters/install.json", lambda text: text.replace(
        '"name": "counters"', '"name": "shop"'), "counters/install.json disagree"),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERED))
@pytest.mark.parametrize("args", [(), ("--prefix", "ctr_")], ids=["own-database", "prefix"])
def test_a_placement_its_install_did_not_write_is_refused_everywhere(
        host: Path, args: tuple[str, ...], tamper: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files of an install that disagree on where it lives (or a placement init would refuse)
    stop the functions at load, every command of the CLI operating it, and `init`, each naming
    the files and the fix; nothing is written and no Firestore is contacted."""
    counters("init", str(host), *args)
    name, edit, says = TAMPERED[tamper]
    path = host / name
    edited = edit(path.read_text())
    if edited == path.read_text():
        pytest.skip("this edit does not apply to this mode")  # the other mode's database
    path.write_text(edited)
    before = files(host)
    loaded = load_codebase(host / "counters")
    assert loaded.returncode != 0 and says in loaded.stderr and "git checkout" in loaded.stderr
    monkeypatch.chdir(host / "public")
    monkeypatch.setattr(session, "connect", lambda *a: pytest.fail("contacted Firestore"))
    for command in sorted(set(cli.commands) - {"init", "remove", "emulator-rules"}):
        refused = CliRunner().invoke(cli, [command], env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
        assert refused.exit_code == 2 and says in refused.stderr, (command, refused.output)
        assert "git checkout" in refused.stderr and "Traceback" not in refused.output
    refused = CliRunner().invoke(cli, ["--backend", str(host / "counters"), "get", "likes"])
    assert refused.exit_code == 2 and says in refused.stderr
    if name != "counters/install.json":  # init itself refuses a changed record differently
        refused = counters("init", str(host), *args, code=1)
        assert says in refused.stderr
    assert files(host) == before


def test_a_clone_without_install_json_runs_on_its_placement(host: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A host whose .gitignore hid install.json: the codebase and the CLI find the install by
    firebase.json and placement.json, and both check the codebase's prefix."""
    counters("init", str(host), "--prefix", "ctr_")
    (host / "counters" / install.RECORD).unlink()
    assert load_codebase(host / "counters").returncode == 0
    monkeypatch.chdir(host / "public")
    assert installed_backend(Path.cwd()) == host / "counters"
    assert config.Placement.read(host / "counters").names.counters == "ctr_counters"


def edit_firebase_json(host: Path, **entries: object) -> None:
    firebase = json.loads((host / "firebase.json").read_text())
    firebase.update(entries)
    (host / "firebase.json").write_text(json.dumps(firebase))


@pytest.mark.parametrize(("functions", "args", "message"), [
    ([{"source": "functions"}, {"source": "other", "codebase": "counters"}], (),
     "codebase 'counters' already"),
    ([{"source": "functions", "prefix": "counters"}], (), "prefixes its functions"),
    ([{"source": "counters", "codebase": "mine"}], (), "source in counters/"),
    ({"source": "functions"}, ("--name", "default"), "host's own codebase"),
])
def test_init_never_takes_a_codebase_of_the_hosts(host: Path, functions: object,
                                                  args: tuple[str, ...], message: str) -> None:
    edit_firebase_json(host, functions=functions)
    before = files(host)
    assert message in counters("init", str(host), *args, code=1).output
    assert files(host) == before


def test_init_never_takes_a_database_of_the_hosts_or_another_installs(host: Path) -> None:
    edit_firebase_json(host, firestore=[
        {"database": "(default)", "rules": "firestore.rules", "indexes": "firestore.indexes.json"},
        {"database": "counters", "rules": "firestore.rules"}])
    assert "deploys a database 'counters'" in counters("init", str(host), code=1).output
    counters("init", str(host), "--database", "tallies")
    assert "deploys a database 'tallies'" in counters("init", str(host), "--name", "second",
                                                      "--database", "tallies", code=1).output
    counters("init", str(host), "--name", "third", "--prefix", "c_")
    assert "keeps its data there" in counters("init", str(host), "--name", "fourth",
                                              "--prefix", "c_", code=1).output


def test_remove_gives_back_the_exact_text_and_odd_shapes(host: Path) -> None:
    odd = ('{"functions": {"source": "functions", "runtime": "python311"},\n'
           ' "firestore": {"database": "shop", "rules": "firestore.rules", '
           '"indexes": "firestore.indexes.json"}}\n')
    (host / "firebase.json").write_text(odd)
    counters("init", str(host))
    firebase = json.loads((host / "firebase.json").read_text())
    assert firebase["firestore"][0] == {"database": "shop", "rules": "firestore.rules",
                                        "indexes": "firestore.indexes.json"}
    counters("remove", str(host))
    assert (host / "firebase.json").read_text() == odd

    counters("init", str(host))
    edited = json.loads((host / "firebase.json").read_text())
    edited["hosting"] = {"public": "site"}  # the host's change after the install stays
    (host / "firebase.json").write_text(json.dumps(edited))
    counters("remove", str(host))
    assert json.loads((host / "firebase.json").read_text()) == {
        **json.loads(odd), "hosting": {"public": "site"}}


def test_a_deploy_target_in_object_form_is_left_to_the_user(host: Path) -> None:
    edit_firebase_json(host, firestore={"target": "main", "rules": "firestore.rules"})
    assert "deploy target" in counters("init", str(host), code=1).output


def test_comments_in_firebase_json_are_refused_in_words(host: Path) -> None:
    (host / "firebase.json").write_text('{\n  // a comment\n  "hosting": {}\n}\n')
    assert "not plain JSON" in counters("init", str(host), code=1).output


def test_braces_in_comments_and_strings_do_not_end_the_service(host: Path) -> None:
    rules = host / "firestore.rules"
    text = rules.read_text().replace(
        "service cloud.firestore {",
        "/* } */ service cloud.firestore { // }\n  function f() { return 'a}b'; }")
    rules.write_text(text + "/* trailing } */\n")
    counters("init", str(host), "--prefix", "c_")
    assert "match /c_counters/{counter}" in rules.read_text()
    counters("remove", str(host))
    assert rules.read_text() == text + "/* trailing } */\n"


def test_an_interrupted_install_can_be_removed(host: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    before = files(host)
    written: list[Path] = []
    real = Path.open

    def fail_on_firebase_json(path: Path, mode: str = "r", **kwargs: Any) -> Any:
        if "w" in mode:
            if path.name == "firebase.json":
                raise OSError("disk full")
            written.append(path)
        return real(path, mode, **kwargs)

    monkeypatch.setattr(Path, "open", fail_on_firebase_json)
    with pytest.raises(OSError):
        install.plan_init(host, install.Install(name="counters", database="counters",
                                                collection_prefix="")).apply()
    monkeypatch.undo()
    assert written[0].name == install.RECORD
    monkeypatch.chdir(host)  # where ./counters is the half-written install
    counters("remove")
    assert files(host) == before


@pytest.mark.parametrize(("text", "expected"), [
    ("A=1\n# B=2\nC = 3 # note\n", {"A": "1", "C": "3"}),
    ("A=\"x # y\"\nB='z' # w\nC=a#b\nexport D=4\n",
     {"A": "x # y", "B": "z", "C": "a", "D": "4"}),
])
def test_dotenv_reads_what_firebase_tools_reads(text: str, expected: dict[str, str]) -> None:
    assert session.dotenv(text) == expected


@pytest.mark.parametrize("args", [(), ("--prefix", "ctr_")], ids=["own-database", "prefix"])
def test_what_the_host_changes_after_the_install_stays_through_init_and_remove(
        host: Path, args: tuple[str, ...]) -> None:
    counters("init", str(host), *args)
    firebase = json.loads((host / "firebase.json").read_text())
    firebase["hosting"]["rewrites"] = [{"source": "**", "destination": "/index.html"}]
    (host / "firebase.json").write_text(json.dumps(firebase))
    rules = host / "firestore.rules"
    rules.write_text(rules.read_text().replace(
        "    match /orders/{order} {", "    match /carts/{cart} { allow read: if false; }\n"
        "    match /orders/{order} {"))
    counters("init", str(host), *args)  # an upgrade, say
    counters("remove", str(host))
    back = json.loads((host / "firebase.json").read_text())
    assert back["hosting"]["rewrites"] == firebase["hosting"]["rewrites"]
    assert [c.get("codebase") for c in as_list(back["functions"])] == [None]
    assert "match /carts/{cart}" in rules.read_text()
    assert "counters:begin" not in rules.read_text()


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_hosts_edits_of_the_installs_own_entries_are_kept_and_removed_with_it(
        host: Path) -> None:
    counters("init", str(host))
    firebase = json.loads((host / "firebase.json").read_text())
    firebase["functions"][1]["runtime"] = "python312"
    firebase["firestore"][1]["location"] = "eur3"
    (host / "firebase.json").write_text(json.dumps(firebase))
    counters("init", str(host))
    again = json.loads((host / "firebase.json").read_text())
    assert again["functions"][1]["runtime"] == "python312"
    assert [s["database"] for s in again["firestore"]] == ["(default)", "counters"]
    assert again["firestore"][1]["location"] == "eur3"
    counters("remove", str(host))
    back = json.loads((host / "firebase.json").read_text())
    assert "counters" not in json.dumps(back["functions"]) + json.dumps(back["firestore"])


def test_removing_one_install_keeps_the_tasks_emulator_another_uses(host: Path) -> None:
    counters("init", str(host))
    counters("init", str(host), "--name", "second", "--prefix", "second_")
    counters("remove", str(host))
    assert "tasks" in json.loads((host / "firebase.json").read_text())["emulators"]
    counters("remove", str(host), "--name", "second")
    assert "tasks" not in json.loads((host / "firebase.json").read_text())["emulators"]


def test_line_endings_come_back_as_they_were(host: Path) -> None:
    crlf = {name: (host / name).read_text().replace("\n", "\r\n").encode()
            for name in ("firebase.json", "firestore.rules", "firestore.indexes.json")}
    for name, data in crlf.items():
        (host / name).write_bytes(data)
    counters("init", str(host), "--prefix", "ctr_")
    assert b"\r\n  // counters:begin" in (host / "firestore.rules").read_bytes()
    counters("remove", str(host))
    assert {name: (host / name).read_bytes() for name in crlf} == crlf


@pytest.mark.parametrize("order", [("counters", "second"), ("second", "counters")],
                         ids=["first-in-first-out", "last-in-first-out"])
@pytest.mark.parametrize("args", [(), ("--prefix", "first_")], ids=["own-database", "prefix"])
def test_removing_two_installs_in_either_order_gives_back_the_hosts_text(
        host: Path, order: tuple[str, str], args: tuple[str, ...]) -> None:
    """Whichever install goes last gives back the files as they were before the first came:
    their shape (an object, not a one-entry list) and their text, compact JSON included."""
    compact = json.dumps(json.loads((host / "firebase.json").read_text()),
                         separators=(",", ":"))
    (host / "firebase.json").write_text(compact)
    before = files(host)
    counters("init", str(host), *args)
    counters("init", str(host), "--name", "second", "--database", "tallies")
    for name in order:
        counters("remove", str(host), "--name", name)
    assert files(host) == before


def test_the_emulators_the_backend_needs_are_added_on_ports_the_host_leaves_free(
        host: Path) -> None:
    firebase = json.loads((host / "firebase.json").read_text())
    del firebase["emulators"]["auth"]
    firebase["emulators"]["storage"] = {"host": "127.0.0.1", "port": 9499}
    firebase["emulators"]["database"] = {"port": 9099}
    (host / "firebase.json").write_text(json.dumps(firebase))
    counters("init", str(host))
    emulators = json.loads((host / "firebase.json").read_text())["emulators"]
    assert emulators["auth"] == {"host": "127.0.0.1", "port": 9100}
    assert emulators["tasks"] == {"host": "127.0.0.1", "port": 9500}
    counters("remove", str(host))
    assert json.loads((host / "firebase.json").read_text()) == firebase


def test_a_host_without_emulators_gets_none(host: Path) -> None:
    edit_firebase_json(host, emulators=None)
    counters("init", str(host))
    assert json.loads((host / "firebase.json").read_text())["emulators"] is None


def test_init_says_up_front_that_the_backend_needs_python_3_11(
        host: Path, tmp_path: Path) -> None:
    before = files(host)
    empty = tmp_path / "bin"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["init", str(host)], env={"PATH": str(empty)})
    assert result.exit_code == 1 and "no Python 3.11 is on PATH" in result.output
    assert files(host) == before


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_what_a_clone_needs_is_kept_in_git_and_said_when_a_rule_hides_it(host: Path) -> None:
    """A stock Node .gitignore hides `.env`: the install's own .gitignore keeps its codebase's
    deploy parameters in git, and init names what another rule still hides."""
    (host / ".gitignore").write_text("node_modules/\n.env\n.env.local\n")
    git(host, "init", "-q")
    done = counters("init", str(host))
    assert "warning" not in done.output
    git(host, "add", "-A")
    committed = git(host, "ls-files").split()
    assert {"counters/.env", "counters/.env.local", "counters/placement.json",
            "counters/main.py", "counters/install.json", "firebase.json"} <= set(committed)
    counters("remove", str(host))
    git(host, "read-tree", "--empty")  # nothing tracked: all of it up to the rules

    (host / ".gitignore").write_text("*.json\n")
    warned = counters("init", str(host)).output
    assert "git ignores files a clone needs" in warned
    assert "counters/placement.json (ignored by .gitignore:1:*.json)" in warned


def test_a_host_without_the_stack_hears_how_to_start_its_own_emulators(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a host project (no Makefile), the CLI reaches the Firestore emulator its firebase.json
    names, and says how that project starts its emulators, not this repository's `make dev`."""
    counters("init", str(host))
    firebase = json.loads((host / "firebase.json").read_text())
    firebase["emulators"]["firestore"]["port"] = 1  # nothing listens there
    (host / "firebase.json").write_text(json.dumps(firebase))
    monkeypatch.chdir(host)
    for args in (["get", "likes"], ["claims", "show", "someone"]):
        result = CliRunner().invoke(cli, args, env={"FIRESTORE_EMULATOR_HOST": None,
                                                    "FIREBASE_AUTH_EMULATOR_HOST": "127.0.0.1:1",
                                                    "GOOGLE_CLOUD_PROJECT": None})
        assert result.exit_code == 1, result.output
        assert "no Firestore emulator at 127.0.0.1:1: start the emulators with `firebase " \
               f"emulators:start` in {host}" in result.stderr
        assert "make dev" not in result.output
    monkeypatch.chdir(ROOT)  # this repository's own stack starts with its Makefile
    in_repository = CliRunner().invoke(cli, ["get", "likes"], env={
        "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert "no Firestore emulator at 127.0.0.1:1: start the emulators with `make dev`" \
        in in_repository.stderr


def test_the_cli_runs_as_the_project_the_hosts_firebaserc_names(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --project, the emulator is reached as the project `firebase emulators:start` runs
    as in the host (its .firebaserc's default), and the first line says where that came from."""
    counters("init", str(host))
    used: list[str] = []

    def connect(target: session.Target, *args: object) -> None:
        used.append(target.project)
        raise click.ClickException("stop here")

    monkeypatch.setattr(session, "connect", connect)
    monkeypatch.chdir(host / "public")
    env = {"FIRESTORE_EMULATOR_HOST": None, "GOOGLE_CLOUD_PROJECT": None, "GCLOUD_PROJECT": None}
    result = CliRunner().invoke(cli, ["get", "likes"], env=env)
    assert used == ["demo-host"]
    assert f"project demo-host (from {host / '.firebaserc'})" in result.stderr
    result = CliRunner().invoke(cli, ["--project", "demo-other", "get", "likes"], env=env)
    assert used[-1] == "demo-other" and "project demo-other (from --project)" in result.stderr


def test_the_installs_env_files_name_the_files_it_reads(host: Path) -> None:
    """The comments of an install's .env files name its own folder, not this repository's."""
    counters("init", str(host), "--name", "shop")
    for name in (".env", ".env.local"):
        text = (host / "shop" / name).read_text()
        assert "shop/.env.<project>" in text and "functions/" not in text, name


@pytest.mark.parametrize("args", [(), ("--prefix", "ctr_")], ids=["own-database", "prefix"])
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_remove_keeps_the_formatting_the_host_gave_its_files_since(
        host: Path, args: tuple[str, ...], newline: str) -> None:
    """Once the host has reformatted firebase.json (and its index file) after init, remove gives
    back their bytes minus the install's entries, not the files in init's format."""
    def styled(data: object) -> bytes:
        return (json.dumps(data, indent=4) + "\n").replace("\n", newline).encode()

    names = ["firebase.json", *(["firestore.indexes.json"] if args else [])]
    original = {name: json.loads((host / name).read_text()) for name in names}
    counters("init", str(host), *args)
    for name in names:
        (host / name).write_bytes(styled(json.loads((host / name).read_text())))
    counters("remove", str(host))
    for name in names:
        assert (host / name).read_bytes() == styled(original[name]), name


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4), max_leaves=12)


def pruned(value: object, draw: Callable[[object], bool]) -> object:
    """`value` with some entries of its objects and lists left out, as remove takes out whole
    entries (a list either loses entries or has entries changed within)."""
    if isinstance(value, dict):
        return {k: pruned(v, draw) for k, v in value.items() if draw(k)}
    if isinstance(value, list):
        kept = [v for v in value if draw(v)]
        return kept if len(kept) < len(value) else [pruned(v, draw) for v in value]
    return value


@given(value=JSON_VALUES, indent=st.sampled_from([None, 0, 2, 4, "\t"]),
       keep=st.randoms(use_true_random=False))
def test_an_edit_cuts_entries_out_of_a_json_text_as_its_author_wrote_it(
        value: object, indent: int | str | None, keep: Any) -> None:
    """Entries taken out of a JSON text leave the text its own formatter writes for the rest."""
    smaller = pruned(value, lambda entry: keep.random() < 0.7)
    assert json_text.edit(json.dumps(value, indent=indent), smaller) == json.dumps(
        smaller, indent=indent)


def test_what_a_clone_makes_itself_is_the_same_command_in_init_the_doctor_and_the_docs(
        host: Path) -> None:
    """Git does not carry the codebase's venv, without which firebase-tools stops: init's next
    step, the doctor and the docs that quote it give one command to make it."""
    command = install.venv_command("counters")
    for doc in ("README.md", "docs/adopt.md"):
        assert command in (ROOT / doc).read_text(), doc
    done = counters("init", str(host)).output
    assert command.partition(" ")[2] + " (in every clone too" in done
    placement = config.Placement.read(host / "counters")
    found = doctor.expected_of(host / "counters", placement, "demo-host").no_manifest
    assert f"in {host}, {command}" in found
