"""`counters doctor` against recorded Google API answers (tests/unit/doctor/: a healthy and a
broken install in a project, answers shaped as the public REST references give them), and its
canary and audit against stand-ins; tests/emulator/test_doctor.py runs the canary on the
emulators. No network."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import main
import pytest
import yaml
from click.testing import CliRunner
from counters_cli import cli, doctor
from counters_cli.canary import Finding, audit_finding, run_canary
from counters_cli.google_apis import ApiError, Apis, Fetch, Json
from counting.features import declarations
from counting.foundation import config
from firebase_functions.private import serving

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).parent / "doctor"
PROJECT = "my-shop"
ACCOUNT = "612349087123-compute@developer.gserviceaccount.com"
NOW = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.UTC)
INSTALL = config.Placement(database="counters", function_prefix="counters")


def recorded(name: str) -> tuple[Fetch, list[str], set[str]]:
    """A transport answering from a recorded project (`"METHOD URL"` -> the JSON body, Google's
    error shape for an error), the calls it was asked, and every call recorded."""
    answers: dict[str, Any] = json.loads((RECORDED / f"{name}.json").read_text())
    asked: list[str] = []

    def fetch(method: str, url: str, body: Json | None = None) -> Json:
        key = f"{method} {url}"
        asked.append(key)
        assert method == "GET" or url.split("?")[0].endswith(":getIamPolicy"), \
            f"not read-only: {key}"
        # IAM's service account policy takes its options in the query, with an empty body.
        assert body is None or "iam.googleapis.com" not in url, f"a body for {key}"
        assert key in answers, f"no recorded answer for {key}"
        answer: Json = json.loads(json.dumps(answers[key]))
        if "error" in answer:
            raise ApiError(int(answer["error"]["code"]), str(answer["error"]["message"]), url)
        return answer

    return fetch, asked, set(answers)


def the_installs_endpoints() -> dict[str, Json]:
    """The install's deploy manifest: the backend's, without the demo's collection triggers
    (an install declares none), ids prefixed as firebase.json's codebase prefix makes them."""
    found = yaml.safe_load(serving.functions_as_yaml({n: getattr(main, n) for n in main.__all__}))
    demo = {watch.function_name for watch in OWN.watches}
    return {INSTALL.function_id(name): endpoint
            for name, endpoint in found["endpoints"].items() if name not in demo}


def expected(**changes: Any) -> doctor.Expected:
    return doctor.Expected(**{"placement": INSTALL, "endpoints": the_installs_endpoints(),
                              "deploy": "firebase deploy --only functions:counters", **changes})


def diagnose(name: str, expect: doctor.Expected | None = None
             ) -> tuple[dict[str, Finding], list[str], set[str]]:
    fetch, asked, answers = recorded(name)
    apis = Apis(fetch, PROJECT, config.REGION)
    found = doctor.diagnose(apis, expect or expected(), NOW, doctor.deployed_functions(apis))
    assert [f.check for f in found] == list(doctor.CHECKS)
    return {f.check: f for f in found}, asked, answers


def test_a_healthy_project_passes_every_check_and_each_is_read() -> None:
    found, asked, answers = diagnose("healthy")
    assert {check: f.status for check, f in found.items()} == dict.fromkeys(doctor.CHECKS, "pass")
    assert set(asked) == answers  # every queue, service and policy was looked at
    assert "27 functions ACTIVE" in found["functions"].found
    assert ACCOUNT in found["queue roles"].found  # derived from the project number


def test_every_broken_part_of_a_broken_project_is_named() -> None:
    found, _, _ = diagnose("broken")
    assert {check: f.status for check, f in found.items()} == dict.fromkeys(doctor.CHECKS, "fail")
    named = {
        "functions": ["counters-increment: memory 256Mi, manifest 512Mi",
                      "counters-get_count: maxInstanceRequestConcurrency 1, manifest 80",
                      "counters-rolluptick2: cpu 1, manifest 0.3333",
                      "counters-rollup: timeoutSeconds 540, manifest 60",
                      "counters-reset_counter: FAILED", "counters-track: not deployed"],
        "task queues": ["counters-rolluptick5: maxConcurrentDispatches 1000, manifest 1",
                        "counters-rolluptick7: state DISABLED", "counters-rolluptick9: no queue"],
        "queue roles": [f"counters-rolluptick6 runs as {PROJECT}@appspot.gserviceaccount.com",
                        f"{ACCOUNT} lacks roles/cloudtasks.enqueuer on the counters-rolluptick3",
                        f"{ACCOUNT} lacks roles/run.invoker on the counters-rolluptick4 service",
                        f"{ACCOUNT} lacks roles/iam.serviceAccountUser on itself"],
        "database": ["counters is in DATASTORE_MODE"],
        "indexes": ["shards (stripe, updated_at): missing", ": CREATING", ": NEEDS_REPAIR"],
        "ttl policies": ["requests.expires_at: CREATING", "counted_docs.expires_at: no policy"],
        "rules": ["do not hold this version's backend block"],
        "scheduler": ["firebase-schedule-counters-rollup-us-central1: PAUSED",
                      "last attempt 2026-11-19T16:03:00", "last attempt failed (code 7"],
    }
    for check, parts in named.items():
        for part in parts:
            assert part in found[check].found, (check, part, found[check].found)
        assert found[check].todo


def test_a_refused_api_makes_its_checks_cannot_check() -> None:
    fetch, _, _ = recorded("healthy")

    def refusing(method: str, url: str, body: Json | None = None) -> Json:
        if "cloudtasks" in url or "cloudfunctions" in url:
            raise ApiError(403, "Cloud Tasks API has not been used in project my-shop", url)
        return fetch(method, url, body)

    apis = Apis(refusing, PROJECT, config.REGION)
    found = {f.check: f for f in doctor.diagnose(apis, expected(), NOW,
                                                 doctor.deployed_functions(apis))}
    assert {c for c, f in found.items() if f.status == "cannot-check"} == {
        "functions", "task queues", "queue roles"}
    assert "HTTP 403" in found["task queues"].found and found["task queues"].todo
    assert found["database"].status == "pass"


def test_without_a_manifest_the_configuration_of_firestore_is_still_checked() -> None:
    found, _, _ = diagnose("healthy", expected(endpoints=None, no_manifest="no venv"))
    assert {c for c, f in found.items() if f.status == "cannot-check"} == {
        "functions", "task queues", "queue roles", "scheduler"}
    assert {found[c].status for c in ("database", "indexes", "ttl policies", "rules")} == {"pass"}


def test_the_runtime_account_a_codebase_names_is_the_one_checked() -> None:
    other = "other@my-shop.iam.gserviceaccount.com"
    fetch, _, _ = recorded("healthy")

    def with_other(method: str, url: str, body: Json | None = None) -> Json:
        if f"/serviceAccounts/{other}:" in url:
            return {"version": 1, "etag": "BwYk"}  # nobody may act as it
        return fetch(method, url, body)

    apis = Apis(with_other, PROJECT, config.REGION)
    found = {f.check: f for f in doctor.diagnose(apis, expected(runtime_account=other), NOW,
                                                 doctor.deployed_functions(apis))}
    assert found["queue roles"].status == "fail"
    assert f"counters-rolluptick runs as {ACCOUNT}, not {other}" in found["queue roles"].found
    assert f"{other} lacks roles/iam.serviceAccountUser on itself" in found["queue roles"].found


@pytest.mark.parametrize(("quantity", "mib"), [("512Mi", 512), ("1Gi", 1024), ("256M", 244.140625),
                                               ("2G", 1907.3486328125), ("x", None)])
def test_memory_quantities_read_as_firebase_tools_reads_them(quantity: str,
                                                              mib: float | None) -> None:
    assert doctor.mebibytes(quantity) == mib


# --- the codebase's manifest -----------------------------------------------------------------


def test_this_repositorys_backend_deploys_its_functions_unprefixed() -> None:
    found = doctor.expected_of(ROOT / "functions", config.Placement(), PROJECT)
    assert found.endpoints is not None and "rolluptick" in found.endpoints
    assert found.deploy == "make deploy"


def test_an_installs_manifest_and_runtime_account_come_from_its_codebase(tmp_path: Path) -> None:
    host = tmp_path / "host"
    shutil.copytree(ROOT / "tests" / "adopt" / "host", host)
    assert CliRunner().invoke(cli, ["init", str(host)]).exit_code == 0
    codebase = host / "counters"
    found = doctor.expected_of(codebase, INSTALL, PROJECT)
    assert found.endpoints is None and "venv" in found.no_manifest
    (codebase / "venv").symlink_to(ROOT / "functions" / "venv")
    (codebase / f".env.{PROJECT}").write_text(f"RUNTIME_SERVICE_ACCOUNT={ACCOUNT}\n")
    found = doctor.expected_of(codebase, INSTALL, PROJECT)
    assert found.endpoints is not None
    assert set(found.endpoints) == set(the_installs_endpoints())
    assert found.runtime_account == ACCOUNT
    assert found.deploy == "firebase deploy --only functions:counters"
    (codebase / config.PLACEMENT_FILE).unlink()
    refused = doctor.expected_of(codebase, INSTALL, PROJECT)
    assert refused.endpoints is None and "does not load" in refused.no_manifest


# --- the canary and the audit ----------------------------------------------------------------


class FakeCanary:
    """The deployed backend as the canary sees it: a callable answering `status`, and a rollup
    that publishes an increment after `publish_after_s` (None: never)."""

    def __init__(self, clock: FakeClock, *, status: int = 401,
                 publish_after_s: float | None = 1.0) -> None:
        self.clock, self.status, self.publish_after_s = clock, status, publish_after_s
        self.counts: dict[str, int] = {}
        self.incremented_at: float | None = None
        self.deleted: list[str] = []

    def probe(self) -> int:
        return self.status

    def create(self, counter: str) -> None:
        self.counts[counter] = 0

    def increment(self, counter: str) -> None:
        self.incremented_at = self.clock.monotonic()

    def count(self, counter: str) -> int | None:
        if (self.publish_after_s is not None and self.incremented_at is not None
                and self.clock.monotonic() - self.incremented_at >= self.publish_after_s):
            self.counts[counter] = 1
        return self.counts.get(counter)

    def delete(self, counter: str) -> None:
        self.deleted.append(counter)
        self.counts.pop(counter, None)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(("publish_after_s", "ticks", "status", "says"), [
    (1.0, True, "pass", "published 1.0 s later (by a tick)"),
    (40.0, True, "fail", "no tick did it"),
    (40.0, False, "pass", "by the scheduled rollup"),
    (None, True, "fail", "not published 90 s after"),
])
def test_the_canary_times_a_publish_and_always_deletes_its_counter(
        publish_after_s: float | None, ticks: bool, status: str, says: str) -> None:
    clock = FakeClock()
    canary = FakeCanary(clock, publish_after_s=publish_after_s)
    found = run_canary(canary, clock, ticks=ticks, counter="doctor-canary-x")
    assert (found.status, says in found.found) == (status, True), found
    assert canary.deleted == ["doctor-canary-x"] and canary.counts == {}


def test_functions_that_do_not_serve_fail_the_canary_before_it_writes() -> None:
    clock = FakeClock()
    canary = FakeCanary(clock, status=500)
    found = run_canary(canary, clock, ticks=True, counter="doctor-canary-x")
    assert found.status == "fail" and "HTTP 500" in found.found and "placement.json" in found.todo
    assert canary.counts == {} and canary.deleted == []


def test_a_canary_that_raises_is_a_failed_check_not_a_crash() -> None:
    clock = FakeClock()
    canary = FakeCanary(clock)

    def refuse(counter: str) -> None:
        raise PermissionError("403 Missing or insufficient permissions.")

    canary.increment = refuse  # type: ignore[method-assign]
    ran, _ = doctor.operate(canary, lambda: None, clock, ticks=True, now=lambda: NOW,
                            names=config.Names())
    assert ran.status == "fail" and "insufficient permissions" in ran.found
    assert len(canary.deleted) == 1


def drift(found_at: dt.datetime) -> dict[str, Any]:
    return {"counter": "likes", "published": 11, "shards": 12,
            "as_of": found_at - dt.timedelta(seconds=2), "found_at": found_at}


@pytest.mark.parametrize(("audit", "status", "says"), [
    (None, "cannot-check", "has never run"),
    ({"last_run_at": NOW - dt.timedelta(minutes=6), "checked": 10, "drift": []}, "fail",
     "last run 6 min ago"),
    ({"last_run_at": NOW - dt.timedelta(seconds=30), "checked": 10,
      "drift": [drift(NOW - dt.timedelta(hours=1))]}, "fail",
     "likes: published 11, shards 12"),
    ({"last_run_at": NOW - dt.timedelta(seconds=30), "checked": 10,
      "drift": [drift(NOW - dt.timedelta(hours=25))],
      "last_drift_at": NOW - dt.timedelta(hours=25)}, "pass", "10 counters audited"),
    ({"last_run_at": NOW - dt.timedelta(seconds=30), "checked": 4000, "drift": [],
      "last_drift_at": None}, "pass", "no drift in 24 h"),
])
def test_the_audit_passes_only_when_it_ran_lately_and_found_no_drift(
        audit: dict[str, Any] | None, status: str, says: str) -> None:
    found = audit_finding(audit, NOW, config.Names())
    assert (found.status, says in found.found) == (status, True), found


def test_the_audit_finding_names_the_installs_document() -> None:
    found = audit_finding(None, NOW, config.Placement(collection_prefix="shop_").names)
    assert found.found.startswith("shop_internal/audit does not exist")


def test_the_report_says_every_finding_and_fails_on_one() -> None:
    lines: list[str] = []
    ok = doctor.report([Finding(check="rules", status="pass", found="fine"),
                        Finding(check="canary", status="fail", found="slow", todo="look")],
                       lines.append)
    assert not ok
    assert lines == ["pass          rules   fine", "FAIL          canary  slow",
                     "                      what to do: look"]
