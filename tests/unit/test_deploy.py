"""`make deploy`'s plan (tools/deploy.py): what it refuses, the order of its steps, the act-as
role it grants, and that doctor's verdict decides, against a model of Google's APIs (no
network). What doctor checks is tests/unit/test_doctor.py."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import deploy
import pytest
from click.testing import CliRunner
from counters_cli import doctor
from counters_cli.canary import Finding
from counters_cli.doctor import ACT_AS, ENQUEUER, INVOKER
from counters_cli.google_apis import POLICY_V3
from counting.foundation import config

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "my-app"
ACCOUNT = "123456789-compute@developer.gserviceaccount.com"
SELF = deploy.account_url(PROJECT, ACCOUNT)
PASSED = [Finding(check="functions", status="pass", found="27 functions ACTIVE")]


def binding(role: str, *accounts: str) -> dict[str, Any]:
    return {"role": role, "members": [f"serviceAccount:{a}" for a in accounts]}


class FakeGoogle:
    """Google's APIs as a deploy calls them itself: the project's number and the runtime
    account's IAM policy."""

    def __init__(self) -> None:
        self.policy: dict[str, Any] = {
            "etag": "s1", "bindings": [binding("roles/iam.serviceAccountTokenCreator",
                                               "someone@my-app.iam.gserviceaccount.com")]}
        self.calls: list[str] = []

    def __call__(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        if url == f"https://cloudresourcemanager.googleapis.com/v1/projects/{PROJECT}":
            self.calls.append("projects.get")
            return {"projectId": PROJECT, "projectNumber": "123456789"}
        resource, _, verb = url.rpartition(":")
        assert resource == SELF, url
        self.calls.append(verb)
        if verb == "getIamPolicy":
            assert body == POLICY_V3  # conditions are shown
            return copy.deepcopy(self.policy)
        assert verb == "setIamPolicy" and method == "POST" and body is not None
        assert body["policy"]["etag"] == self.policy["etag"]  # no blind overwrite
        self.policy = {**body["policy"], "etag": "changed"}
        return self.policy


@pytest.mark.parametrize(("project", "why"), [
    ("", "name the project"), ("demo-counters", "emulator-only")])
def test_no_deploy_without_a_real_project(project: str, why: str) -> None:
    result = CliRunner().invoke(deploy.main, ["--project", project, "--dry-run"])
    assert result.exit_code == 2
    assert why in result.output


def test_rules_and_indexes_go_first_then_functions_then_hosting() -> None:
    result = CliRunner().invoke(deploy.main, ["--project", "my-app", "--dry-run"])
    assert result.exit_code == 0, result.output
    steps = [line.split() for line in result.output.splitlines() if not line.startswith("#")]
    assert [step[step.index("--only") + 1] for step in steps] == [
        "firestore", "functions", "hosting"]
    assert all(step[step.index("--project") + 1] == "my-app" for step in steps)


def test_the_dry_run_shows_the_runtime_account_its_grant_and_the_check() -> None:
    """The account is written before the functions deploy reads it; the grant and doctor come
    after everything is deployed."""
    result = CliRunner().invoke(deploy.main, ["--project", "my-app", "--dry-run"])
    lines = result.output.splitlines()
    assert lines[0].startswith("# RUNTIME_SERVICE_ACCOUNT=<project number>-compute@")
    assert "functions/.env.my-app" in lines[0]
    assert [line.split()[-1] for line in lines[1:4]] == ["firestore", "functions", "hosting"]
    assert lines[4].startswith(f"# grant: {ACT_AS}")
    assert lines[5].startswith("# doctor: counters doctor --project my-app")
    assert all(role in lines[-1] for role in (ENQUEUER, INVOKER, ACT_AS))


def test_a_deploy_writes_the_account_grants_act_as_and_ends_with_doctor(tmp_path: Path) -> None:
    """firebase-tools grants the enqueuer and invoker roles at the functions deploy; make deploy
    adds the runtime account's service account user role on itself, then runs doctor."""
    google = FakeGoogle()
    ran: list[str] = []

    def run(command: Sequence[str]) -> None:
        ran.append(command[-1])
        if command[-1] == "functions":
            assert (tmp_path / ".env.my-app").read_text().endswith(
                f"RUNTIME_SERVICE_ACCOUNT={ACCOUNT}\n")

    def check() -> list[Finding]:
        ran.append("doctor")
        return PASSED

    for _, step in deploy.plan(PROJECT, run, google, check, functions=tmp_path):
        step()
    assert ran == ["firestore", "functions", "hosting", "doctor"]
    assert binding(ACT_AS, ACCOUNT) in google.policy["bindings"]
    assert google.calls == ["projects.get", "getIamPolicy", "setIamPolicy"]


def test_a_failed_check_of_doctor_fails_the_deploy_naming_it(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    def check() -> list[Finding]:
        return [*PASSED, Finding(check="indexes", status="fail",
                                 found="shards (stripe, updated_at): CREATING", todo="wait")]

    steps = deploy.plan(PROJECT, lambda command: None, FakeGoogle(), check, functions=tmp_path)
    with pytest.raises(click.ClickException, match="doctor found the problems above"):
        for _, step in steps:
            step()
    assert "shards (stripe, updated_at): CREATING" in capsys.readouterr().err


def test_granting_act_as_keeps_the_other_bindings_and_happens_once() -> None:
    google = FakeGoogle()
    assert deploy.grant_act_as(google, PROJECT, ACCOUNT)
    assert google.policy["bindings"] == [
        binding("roles/iam.serviceAccountTokenCreator", "someone@my-app.iam.gserviceaccount.com"),
        binding(ACT_AS, ACCOUNT)]
    assert not deploy.grant_act_as(google, PROJECT, ACCOUNT)
    assert google.calls.count("setIamPolicy") == 1


def test_the_runtime_account_is_added_to_the_projects_dotenv(tmp_path: Path) -> None:
    """Kept beside what the file says already; a second deploy leaves it as it is."""
    env_file = tmp_path / ".env.my-app"
    env_file.write_text("ENFORCE_APP_CHECK=false")
    assert deploy.declare_account(FakeGoogle(), PROJECT, env_file) == ACCOUNT
    written = env_file.read_text()
    assert written.startswith("ENFORCE_APP_CHECK=false\n")
    assert written.endswith(f"\nRUNTIME_SERVICE_ACCOUNT={ACCOUNT}\n")
    deploy.declare_account(FakeGoogle(), PROJECT, env_file)
    assert env_file.read_text() == written


def test_a_dotenv_naming_another_account_stops_the_deploy(tmp_path: Path) -> None:
    env_file = tmp_path / ".env.my-app"
    env_file.write_text('RUNTIME_SERVICE_ACCOUNT="999-compute@developer.gserviceaccount.com"\n')
    with pytest.raises(click.ClickException, match="the functions run as 123456789-compute@"):
        deploy.declare_account(FakeGoogle(), PROJECT, env_file)


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


def test_doctor_checks_the_backend_the_cli_finds(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy's doctor operates the backend codebase firebase.json lists, at the placement
    its files state and check, as `counters doctor` does; none listed and it refuses."""
    checked: list[tuple[Path | None, Any]] = []

    def deployed(project: str, placement: config.Placement, codebase: Path | None,
                 *rest: object) -> list[Finding]:
        checked.append((codebase, placement))
        return PASSED

    monkeypatch.setattr(doctor, "deployed", deployed)
    assert deploy.check_deployed(PROJECT) == PASSED
    assert checked == [(ROOT / "functions", config.Placement())]

    (tmp_path / "firebase.json").write_text('{"functions": [{"source": "backend"}]}')
    with pytest.raises(click.UsageError, match="lists no counters backend"):
        deploy.check_deployed(PROJECT, tmp_path)
    (tmp_path / "backend").mkdir()
    placement = config.Placement(database="tallies")
    (tmp_path / "backend" / config.PLACEMENT_FILE).write_text(placement.to_json())
    deploy.check_deployed(PROJECT, tmp_path)
    assert checked[-1] == (tmp_path / "backend", placement)
