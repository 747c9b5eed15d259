"""`make deploy`'s plan (tools/deploy.py): what it refuses, and the order of its steps."""

from __future__ import annotations

import json
from pathlib import Path

import deploy
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("project", "why"), [
    ("", "name the project"), ("demo-counters", "emulator-only")])
def test_no_deploy_without_a_real_project(project: str, why: str) -> None:
    result = CliRunner().invoke(deploy.main, ["--project", project, "--dry-run"])
    assert result.exit_code == 2
    assert why in result.output


def test_rules_and_indexes_go_first_then_functions_then_hosting() -> None:
    result = CliRunner().invoke(deploy.main, ["--project", "my-app", "--dry-run"])
    assert result.exit_code == 0, result.output
    steps = [line.split() for line in result.output.splitlines()]
    assert [step[step.index("--only") + 1] for step in steps] == [
        "firestore", "functions", "hosting"]
    assert all(step[step.index("--project") + 1] == "my-app" for step in steps)



def test_hosting_builds_the_web_client_itself() -> None:
    """A fresh clone deploys hosting without a separate step: the predeploy builds web/dist for
    production (`npm run build`), installing the web dependencies if they are missing."""
    hosting = json.loads((ROOT / "firebase.json").read_text())["hosting"]
    assert hosting["public"] == "web/dist"
    assert hosting["predeploy"][-1] == "npm run build"
    scripts = json.loads((ROOT / "package.json").read_text())["scripts"]
    assert "--mode" not in scripts["build"]  # the production mode, which names no emulator


def test_hosting_revalidates_pages_and_keeps_hashed_assets_forever() -> None:
    """Pages and the service worker are revalidated on every load, so that a deploy shows at
    once; the bundle's hashed files never change and are cached for a year."""
    hosting = json.loads((ROOT / "firebase.json").read_text())["hosting"]
    cache_control = {
        rule["source"]: {h["key"]: h["value"] for h in rule["headers"]}["Cache-Control"]
        for rule in hosting["headers"]}
    assert cache_control == {
        "/": "no-cache", "/index.html": "no-cache", "/ops.html": "no-cache", "/sw.js": "no-cache",
        "/assets/**": "public, max-age=31536000, immutable"}
