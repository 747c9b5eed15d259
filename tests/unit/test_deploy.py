"""`make deploy`'s plan (tools/deploy.py): what it refuses, the order of its steps, and the
task queues' roles it grants and checks, against a model of Google's APIs (no network)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import deploy
import main
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "my-app"
ACCOUNT = "123456789-compute@developer.gserviceaccount.com"
# The tick functions, one per partition index of the rollup: each has its queue and service.
TICKS = ["rolluptick", *(f"rolluptick{index}" for index in range(1, 16))]
QUEUES = {name: deploy.queue_url(PROJECT, name) for name in TICKS}
SERVICES = {name: f"projects/{PROJECT}/locations/us-central1/services/{name}" for name in TICKS}
RUNS = {name: deploy.run_url(service) for name, service in SERVICES.items()}
FUNCTIONS = {deploy.function_url(PROJECT, name): name for name in TICKS}
SELF = deploy.account_url(PROJECT, ACCOUNT)


def binding(role: str, *accounts: str) -> dict[str, Any]:
    return {"role": role, "members": [f"serviceAccount:{a}" for a in accounts]}


class FakeGoogle:
    """Google's APIs as a deploy calls them: the project's number, each tick function's Cloud
    Functions resource, and the IAM policies of its queue, its Cloud Run service and the runtime
    account. `functions_deployed` does what firebase-tools does from the tick functions'
    manifests."""

    def __init__(self, runs_as: dict[str, str] | None = None) -> None:
        self.runs_as = {name: ACCOUNT for name in TICKS} | (runs_as or {})
        self.policies: dict[str, dict[str, Any]] = {
            **{url: {"etag": "q1"} for url in QUEUES.values()},
            **{url: {"etag": "r1"} for url in RUNS.values()},
            SELF: {"etag": "s1", "bindings": [binding("roles/iam.serviceAccountTokenCreator",
                                                      "someone@my-app.iam.gserviceaccount.com")]}}
        self.calls: list[str] = []

    def functions_deployed(self) -> None:
        for name in TICKS:
            self.policies[QUEUES[name]]["bindings"] = [binding(deploy.ENQUEUER, ACCOUNT)]
            self.policies[RUNS[name]]["bindings"] = [binding(deploy.INVOKER, ACCOUNT)]

    def has_all_roles(self) -> FakeGoogle:
        self.functions_deployed()
        self.policies[SELF]["bindings"].append(binding(deploy.ACT_AS, ACCOUNT))
        return self

    def __call__(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        resource, _, verb = url.partition("?")[0].rpartition(":")
        if url == f"https://cloudresourcemanager.googleapis.com/v1/projects/{PROJECT}":
            self.calls.append("projects.get")
            return {"projectId": PROJECT, "projectNumber": "123456789"}
        if url in FUNCTIONS:
            name = FUNCTIONS[url]
            self.calls.append(f"functions.get {name}")
            return {"serviceConfig": {"service": SERVICES[name],
                                      "serviceAccountEmail": self.runs_as[name]}}
        assert resource in self.policies, url
        self.calls.append(f"{verb} {resource}")
        if verb == "getIamPolicy":
            assert "requestedPolicyVersion=3" in url or body == deploy.POLICY_V3  # conditions
            return copy.deepcopy(self.policies[resource])
        assert verb == "setIamPolicy" and method == "POST" and body is not None
        assert body["policy"]["etag"] == self.policies[resource]["etag"]  # no blind overwrite
        self.policies[resource] = {**body["policy"], "etag": "changed"}
        return self.policies[resource]


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
    """The account is written before the functions deploy reads it; the grant and the check of
    the task queue's roles come after everything is deployed."""
    result = CliRunner().invoke(deploy.main, ["--project", "my-app", "--dry-run"])
    lines = result.output.splitlines()
    assert lines[0].startswith("# RUNTIME_SERVICE_ACCOUNT=<project number>-compute@")
    assert "functions/.env.my-app" in lines[0]
    assert [line.split()[-1] for line in lines[1:4]] == ["firestore", "functions", "hosting"]
    assert lines[4].startswith(f"# grant: {deploy.ACT_AS}")
    assert lines[5].startswith("# verify:")
    assert all(role in lines[-1] for role in (deploy.ENQUEUER, deploy.INVOKER, deploy.ACT_AS))
    assert "every tick function (rolluptick ... rolluptick15)" in lines[-1]


def test_a_deploy_grants_act_as_and_checks_every_role(tmp_path: Path) -> None:
    """firebase-tools grants the enqueuer and invoker roles at the functions deploy; make deploy
    adds the runtime account's service account user role on itself, then checks all three."""
    google = FakeGoogle()
    ran: list[str] = []

    def run(command: Sequence[str]) -> None:
        ran.append(command[-1])
        if command[-1] == "functions":
            assert (tmp_path / ".env.my-app").read_text().endswith(
                f"RUNTIME_SERVICE_ACCOUNT={ACCOUNT}\n")
            google.functions_deployed()

    for _, step in deploy.plan(PROJECT, run, google, functions=tmp_path):
        step()
    assert ran == ["firestore", "functions", "hosting"]
    assert deploy.grants(google.policies[SELF], deploy.ACT_AS, ACCOUNT)
    assert deploy.task_queue_problems(google, PROJECT, ACCOUNT) == []
    assert google.calls[0] == "projects.get"
    assert all(f"functions.get {name}" in google.calls for name in TICKS)


def test_a_deploy_fails_when_firebase_tools_granted_nothing(tmp_path: Path) -> None:
    """Without the invoker in the manifest firebase-tools grants no role: the check says so."""
    google = FakeGoogle()
    steps = deploy.plan(PROJECT, lambda command: None, google, functions=tmp_path)
    with pytest.raises(click.ClickException) as failed:
        for _, step in steps:
            step()
    for name in TICKS:
        assert f"{ACCOUNT} lacks {deploy.ENQUEUER} on the {name} queue\n" in failed.value.message
        assert f"{ACCOUNT} lacks {deploy.INVOKER} on the {name} Cloud Run service\n" \
            in failed.value.message
    assert f"lacks {deploy.ACT_AS}" not in failed.value.message  # granted by then


def test_the_check_passes_when_the_runtime_account_holds_the_three_roles() -> None:
    google = FakeGoogle().has_all_roles()
    assert deploy.task_queue_problems(google, PROJECT, ACCOUNT) == []
    deploy.verify_task_queue(google, PROJECT, ACCOUNT)
    assert not any(call.startswith("setIamPolicy") for call in google.calls)  # only reads


def test_the_check_reads_every_tick_functions_resources_and_the_account_once() -> None:
    """Each tick function's resource, queue policy and service policy; the account's policy once
    (acting as itself does not depend on the function)."""
    google = FakeGoogle().has_all_roles()
    deploy.task_queue_problems(google, PROJECT, ACCOUNT)
    assert sorted(google.calls) == sorted(
        [f"functions.get {name}" for name in TICKS]
        + [f"getIamPolicy {url}" for url in [*QUEUES.values(), *RUNS.values()]]
        + [f"getIamPolicy {SELF}"])


def test_the_check_covers_every_task_queue_function_deployed() -> None:
    """The functions whose roles the deploy checks are the ones main.py exports with a task
    queue."""
    deployed = [name for name in main.__all__
                if vars(getattr(main, name))["__firebase_endpoint__"].taskQueueTrigger]
    assert deploy.TICKS == deployed == TICKS


@pytest.mark.parametrize(("resource", "role", "on"), [
    (QUEUES["rolluptick"], deploy.ENQUEUER, "the rolluptick queue"),
    (RUNS["rolluptick"], deploy.INVOKER, "the rolluptick Cloud Run service"),
    (QUEUES["rolluptick7"], deploy.ENQUEUER, "the rolluptick7 queue"),
    (RUNS["rolluptick15"], deploy.INVOKER, "the rolluptick15 Cloud Run service"),
    (SELF, deploy.ACT_AS, "itself"),
])
def test_the_check_names_the_missing_role(resource: str, role: str, on: str) -> None:
    """One role missing (or granted only under a condition) fails the deploy, saying which."""
    google = FakeGoogle().has_all_roles()
    for held in google.policies[resource]["bindings"]:
        if held["role"] == role:
            held["condition"] = {"title": "until friday", "expression": "request.time < ..."}
    with pytest.raises(click.ClickException) as failed:
        deploy.verify_task_queue(google, PROJECT, ACCOUNT)
    assert f"{ACCOUNT} lacks {role} on {on}" in failed.value.message
    assert "run it again" in failed.value.message
    assert deploy.task_queue_problems(google, PROJECT, ACCOUNT) == [
        f"{ACCOUNT} lacks {role} on {on}"]


def test_the_check_fails_when_a_tick_function_runs_as_another_account() -> None:
    google = FakeGoogle(runs_as={"rolluptick7": "other@my-app.iam.gserviceaccount.com"})
    assert deploy.task_queue_problems(google.has_all_roles(), PROJECT, ACCOUNT) == [
        f"rolluptick7 runs as other@my-app.iam.gserviceaccount.com, not as {ACCOUNT} "
        "(RUNTIME_SERVICE_ACCOUNT)"]


def test_granting_act_as_keeps_the_other_bindings_and_happens_once() -> None:
    google = FakeGoogle()
    assert deploy.grant_act_as(google, PROJECT, ACCOUNT)
    assert google.policies[SELF]["bindings"] == [
        binding("roles/iam.serviceAccountTokenCreator", "someone@my-app.iam.gserviceaccount.com"),
        binding(deploy.ACT_AS, ACCOUNT)]
    assert not deploy.grant_act_as(google, PROJECT, ACCOUNT)
    assert google.calls.count(f"setIamPolicy {SELF}") == 1


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
