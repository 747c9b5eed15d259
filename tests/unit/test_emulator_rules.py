"""counting.foundation.emulator_rules: when the backend loads each database's rules into a Firestore
emulator, and what it sends, against a stand-in of the emulator's endpoint (tests/adopt runs it
against the real emulator)."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from counters_cli import cli
from counting.foundation import emulator_rules

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "adopt" / "host"


class Emulator(ThreadingHTTPServer):
    """The Firestore emulator's securityRules endpoint: records what it is given, refuses rules
    that say `refuse`."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.loaded: dict[str, Any] = {}

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Emulator

    def do_PUT(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        content = body["rules"]["files"][0]["content"]
        refused = "refuse" in content
        if not refused:
            self.server.loaded[self.path] = body
        self.send_response(400 if refused else 200)
        self.end_headers()
        self.wfile.write(b'{"error": "Parse error"}' if refused else b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    server = Emulator()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def host(tmp_path: Path) -> Path:
    copy = tmp_path / "host"
    shutil.copytree(FIXTURE, copy)
    firebase = json.loads((copy / "firebase.json").read_text())
    firebase["firestore"] = [{"database": "(default)", **firebase["firestore"]},
                             {"database": "counters", "rules": "counters/firestore.rules"}]
    (copy / "firebase.json").write_text(json.dumps(firebase))
    (copy / "counters").mkdir()
    (copy / "counters/firestore.rules").write_text("rules of the counters database\n")
    return copy


def env(emulator: Emulator, **extra: str) -> dict[str, str]:
    return {"FUNCTIONS_EMULATOR": "true", "FIRESTORE_EMULATOR_HOST": emulator.host,
            "GCLOUD_PROJECT": "demo-host", **extra}


def test_the_discovered_codebase_loads_every_databases_rules(host: Path,
                                                            emulator: Emulator) -> None:
    loaded = emulator_rules.load_for_emulated_codebase(host / "counters", env(emulator))
    assert loaded == ["(default)", "counters"]
    base = "/emulator/v1/projects/demo-host/databases"
    assert emulator.loaded[f"{base}/(default):securityRules"]["rules"]["files"] == [
        {"name": "firestore.rules", "content": (host / "firestore.rules").read_text()}]
    assert emulator.loaded[f"{base}/counters:securityRules"]["rules"]["files"][0][
        "content"] == "rules of the counters database\n"


@pytest.mark.parametrize("changed", [
    {"FUNCTION_TARGET": "increment"},  # a worker serving a function: discovery loaded them
    {"FUNCTIONS_EMULATOR": ""},  # deployed
    {"FIRESTORE_EMULATOR_HOST": ""},  # no Firestore emulator to load them into
])
def test_rules_are_loaded_at_discovery_under_the_emulators_only(
        host: Path, emulator: Emulator, changed: dict[str, str]) -> None:
    assert emulator_rules.load_for_emulated_codebase(host / "counters",
                                                     env(emulator, **changed)) == []
    assert emulator.loaded == {}


def test_one_database_is_left_to_the_emulator(emulator: Emulator, tmp_path: Path) -> None:
    """With one database the emulator loads its rules, and reloads them when they change."""
    shutil.copytree(FIXTURE, tmp_path / "host")
    assert emulator_rules.load_for_emulated_codebase(tmp_path / "host/functions",
                                                     env(emulator)) == []


def test_rules_the_emulator_refuses_stop_the_codebase(host: Path, emulator: Emulator) -> None:
    (host / "counters/firestore.rules").write_text("refuse\n")
    with pytest.raises(emulator_rules.RulesNotLoaded, match="Parse error"):
        emulator_rules.load_for_emulated_codebase(host / "counters", env(emulator))
    with pytest.raises(emulator_rules.RulesNotLoaded, match="no Firestore emulator"):
        emulator_rules.load(host, "127.0.0.1:1", "demo-host")


def test_the_command_loads_them_by_hand(host: Path, emulator: Emulator) -> None:
    result = CliRunner().invoke(cli, ["emulator-rules", str(host), "--emulator", emulator.host,
                                      "--project", "demo-host"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"(default): rules loaded into {emulator.host}",
                                          f"counters: rules loaded into {emulator.host}"]
