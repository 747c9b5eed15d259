"""`counters doctor` against hand-made Google API answers (tests/unit/doctor/: a healthy and a
broken install in a project, each answer written in the shape of its API's public REST
reference, named in tests/unit/doctor/README.md; none was recorded from a real project), and its
canary and audit against stand-ins; tests/emulator/test_doctor.py runs the canary on the
emulators. MUTATIONS proves each comparison of each check: an edit of the healthy answers that
exactly that comparison must fail. No network."""

from __future__ import annotations

import datetime as dt
import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import main
import pytest
import yaml
from click.testing import CliRunner
from counters_cli import cli, doctor
from counters_cli.canary import Finding, Probe, audit_finding, probe_of, run_canary
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
    """A transport answering from a project's answers (`"METHOD URL"` -> the JSON body, Google's
    error shape for an error), the calls it was asked, and every call answered."""
    return answering(json.loads((RECORDED / f"{name}.json").read_text()))


def answering(answers: dict[str, Any]) -> tuple[Fetch, list[str], set[str]]:
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


def diagnose(name: str | dict[str, Any], expect: doctor.Expected | None = None,
             now: dt.datetime = NOW) -> tuple[dict[str, Finding], list[str], set[str]]:
    fetch, asked, answers = recorded(name) if isinstance(name, str) else answering(name)
    apis = Apis(fetch, PROJECT, config.REGION)
    found = doctor.diagnose(apis, expect or expected(), now, doctor.deployed_functions(apis))
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
        "public callables": ["counters-get_count: allUsers lacks roles/run.invoker",
                             "counters-track: not deployed"],
        "project roles": [f"{ACCOUNT} holds none of roles/datastore.user"],
        "app check": ["none of the project's 1 web apps is registered with App Check"],
        "scheduler invoker": [f"{ACCOUNT} (the token of firebase-schedule-counters-rollup-"
                              "us-central1) lacks roles/run.invoker on the counters-rollup"],
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
        "functions", "public callables", "task queues", "queue roles", "scheduler invoker"}
    assert "HTTP 403" in found["task queues"].found and found["task queues"].todo
    assert found["database"].status == "pass"


def test_without_a_manifest_the_configuration_of_firestore_is_still_checked() -> None:
    found, _, _ = diagnose("healthy", expected(endpoints=None, no_manifest="no venv"))
    assert {c for c, f in found.items() if f.status == "cannot-check"} == {
        "functions", "public callables", "task queues", "queue roles", "scheduler",
        "scheduler invoker"}
    assert {found[c].status for c in ("database", "indexes", "ttl policies", "rules",
                                      "project roles")} == {"pass"}


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
    # The sizes a deploy reads from the .env files: 32 tick functions of 2 GiB.
    (codebase / f".env.{PROJECT}").write_text(
        f"RUNTIME_SERVICE_ACCOUNT={ACCOUNT}\nROLLUP_PARTITIONS_MAX=32\nROLLUP_TICK_MB=2048\n")
    wide = doctor.expected_of(codebase, INSTALL, PROJECT).endpoints
    assert wide is not None and len(wide) == len(found.endpoints) + 16
    assert wide["counters-rolluptick31"]["availableMemoryMb"] == 2048
    (codebase / config.PLACEMENT_FILE).unlink()
    refused = doctor.expected_of(codebase, INSTALL, PROJECT)
    assert refused.endpoints is None and "does not load" in refused.no_manifest


# --- the canary and the audit ----------------------------------------------------------------


SERVED = Probe(status=401, error_status="UNAUTHENTICATED")


class FakeCanary:
    """The deployed backend as the canary sees it: a callable answering `status`, and a rollup
    that publishes an increment after `publish_after_s` (None: never)."""

    def __init__(self, clock: FakeClock, *, probe: Probe = SERVED,
                 publish_after_s: float | None = 1.0) -> None:
        self.clock, self.probed, self.publish_after_s = clock, probe, publish_after_s
        self.counts: dict[str, int] = {}
        self.incremented_at: float | None = None
        self.deleted: list[str] = []

    def probe(self) -> Probe:
        return self.probed

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


@pytest.mark.parametrize(("status", "body", "served"), [
    (401, '{"error": {"message": "Unauthenticated", "status": "UNAUTHENTICATED"}}', True),
    (403, '{"error": {"message": "App Check", "status": "PERMISSION_DENIED"}}', True),
    # Cloud Run's IAM refusing the public (no allUsers invoker): Google's front end, not the
    # function, answers with an HTML page.
    (403, "<html><head>\n<meta http-equiv=\"content-type\" content=\"text/html;charset=utf-8\">"
          "\n<title>403 Forbidden</title>\n</head>\n<body text=#000000 bgcolor=#ffffff>\n"
          "<h1>Error: Forbidden</h1>\n<h2>Your client does not have permission to get URL "
          "<code>/</code> from this server.</h2>\n<h2></h2>\n</body></html>\n", False),
    (500, "Internal Server Error", False),
    (404, '{"error": {"code": 404, "message": "not found"}}', False),
    (401, '{"error": "unauthorized"}', False),
])
def test_only_the_callable_protocols_own_refusal_counts_as_served(status: int, body: str,
                                                                   served: bool) -> None:
    assert probe_of(status, body).served is served


@pytest.mark.parametrize("probe", [Probe(status=500), Probe(status=403)])
def test_functions_that_do_not_serve_fail_the_canary_before_it_writes(probe: Probe) -> None:
    clock = FakeClock()
    canary = FakeCanary(clock, probe=probe)
    found = run_canary(canary, clock, ticks=True, counter="doctor-canary-x")
    assert found.status == "fail" and f"HTTP {probe.status}" in found.found
    assert "placement.json" in found.todo and "public callables" in found.todo
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


# --- every comparison of every check can fail ------------------------------------------------

JOB = ("GET https://cloudscheduler.googleapis.com/v1/projects/my-shop/locations/us-central1/jobs/"
       "firebase-schedule-counters-rollup-us-central1")
RUN = ("GET https://run.googleapis.com/v2/projects/my-shop/locations/us-central1/services/{}"
       ":getIamPolicy?options.requestedPolicyVersion=3")
TASKS = "https://cloudtasks.googleapis.com/v2/projects/my-shop/locations/us-central1/queues"
FIRESTORE = "https://firestore.googleapis.com/v1/projects/my-shop/databases/counters"
PROJECT_POLICY = "POST https://cloudresourcemanager.googleapis.com/v1/projects/my-shop:getIamPolicy"
ACCOUNT_POLICY = (f"POST https://iam.googleapis.com/v1/projects/my-shop/serviceAccounts/{ACCOUNT}"
                  ":getIamPolicy?options.requestedPolicyVersion=3")
WEB_APPS = "GET https://firebase.googleapis.com/v1beta1/projects/my-shop/webApps"


def attestation(answers: dict[str, Any], provider: str) -> Json:
    """The one web app's App Check configuration of `provider` (its batchGet answer's)."""
    found: Json = next(page["configs"][0] for key, page in answers.items()
                       if f"/apps/-/{provider}:batchGet" in key)
    return found


def function(answers: dict[str, Any], name: str) -> Json:
    """The function `name` in the answers' pages of functions."""
    return next(f for key, page in answers.items() if "cloudfunctions" in key
                for f in page["functions"] if f["name"].endswith(f"/{name}"))


def queue(answers: dict[str, Any], name: str) -> Json:
    return next(q for q in answers[f"GET {TASKS}"]["queues"] if q["name"].endswith(f"/{name}"))


def drop_function(answers: dict[str, Any], name: str) -> None:
    for key, page in answers.items():
        if "cloudfunctions" in key:
            page["functions"] = [f for f in page["functions"]
                                 if not f["name"].endswith(f"/{name}")]


def refuse(answers: dict[str, Any], key: str, code: int, status: str) -> None:
    """Google's error body (google.rpc.Status in an `error` object) in place of an answer."""
    answers[key] = {"error": {"code": code, "message": f"{key} refused", "status": status}}


def without_role(role: str) -> Callable[[dict[str, Any]], None]:
    def edit(answers: dict[str, Any]) -> None:
        policy = answers[PROJECT_POLICY]
        policy["bindings"] = [b for b in policy["bindings"] if b["role"] != role]
    return edit


# Each: the edit of the healthy project's answers, and the checks it must fail (all others
# pass). Switch a comparison off, or invert it, and its mutation shows it.
MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], set[str]]] = {
    "function state": (lambda a: function(a, "counters-increment").update(state="FAILED"),
                       {"functions"}),
    "function cpu": (lambda a: function(a, "counters-increment")["serviceConfig"].update(
        availableCpu="0.5"), {"functions"}),
    "function memory": (lambda a: function(a, "counters-increment")["serviceConfig"].update(
        availableMemory="1Gi"), {"functions"}),
    "function concurrency": (lambda a: function(a, "counters-increment")["serviceConfig"].update(
        maxInstanceRequestConcurrency=1), {"functions"}),
    "function timeout": (lambda a: function(a, "counters-increment")["serviceConfig"].update(
        timeoutSeconds=300), {"functions"}),
    "function missing": (lambda a: drop_function(a, "counters-top_tags"),
                         {"functions", "public callables"}),
    "callable not public": (lambda a: a[RUN.format("counters-increment")].update(
        bindings=[{"role": "roles/run.invoker", "members": ["allAuthenticatedUsers"]}]),
        {"public callables"}),
    "callable public under a condition": (lambda a: a[RUN.format("counters-increment")][
        "bindings"][0].update(condition={"title": "t", "expression": "true"}),
        {"public callables"}),
    "web app not registered with App Check": (lambda a: attestation(
        a, "recaptchaEnterpriseConfig").pop("siteKey"), {"app check"}),
    "no web app": (lambda a: a[WEB_APPS].update(apps=[]), {"app check"}),
    "web app deleted": (lambda a: a[WEB_APPS]["apps"][0].update(state="DELETED"),
                        {"app check"}),
    "queue state": (lambda a: queue(a, "counters-rolluptick3").update(state="PAUSED"),
                    {"task queues"}),
    "queue maxConcurrentDispatches": (lambda a: queue(a, "counters-rolluptick3")[
        "rateLimits"].update(maxConcurrentDispatches=2), {"task queues"}),
    "queue maxDispatchesPerSecond": (lambda a: queue(a, "counters-rolluptick3")[
        "rateLimits"].update(maxDispatchesPerSecond=100), {"task queues"}),
    "queue maxAttempts": (lambda a: queue(a, "counters-rolluptick3")["retryConfig"].update(
        maxAttempts=queue(a, "counters-rolluptick3")["retryConfig"]["maxAttempts"] + 1),
        {"task queues"}),
    "queue missing": (lambda a: a[f"GET {TASKS}"].update(queues=[
        q for q in a[f"GET {TASKS}"]["queues"] if not q["name"].endswith("/counters-rolluptick3")
    ]), {"task queues"}),
    "tick runs as another account": (lambda a: function(a, "counters-rolluptick2")[
        "serviceConfig"].update(serviceAccountEmail="other@my-shop.iam.gserviceaccount.com"),
        {"queue roles"}),
    "no enqueuer": (lambda a: a[f"POST {TASKS}/counters-rolluptick2:getIamPolicy"].update(
        bindings=[]), {"queue roles"}),
    "no tick invoker": (lambda a: a[RUN.format("counters-rolluptick2")].update(bindings=[]),
                        {"queue roles"}),
    "no act-as": (lambda a: a[ACCOUNT_POLICY].update(bindings=[]), {"queue roles"}),
    "no Firestore role": (without_role("roles/datastore.user"), {"project roles"}),
    "database missing": (lambda a: refuse(a, f"GET {FIRESTORE}", 404, "NOT_FOUND"),
                         {"database"}),
    "database in Datastore mode": (lambda a: a[f"GET {FIRESTORE}"].update(type="DATASTORE_MODE"),
                                   {"database"}),
    "index broken": (lambda a: a[f"GET {FIRESTORE}/collectionGroups/-/indexes"]["indexes"][0]
                     .update(state="NEEDS_REPAIR"), {"indexes"}),
    "index missing": (lambda a: a[f"GET {FIRESTORE}/collectionGroups/-/indexes"].update(
        indexes=a[f"GET {FIRESTORE}/collectionGroups/-/indexes"]["indexes"][1:]), {"indexes"}),
    "ttl policy broken": (lambda a: a[f"GET {FIRESTORE}/collectionGroups/-/fields?filter="
                                      "ttlConfig:*"]["fields"][0]["ttlConfig"].update(
        state="NEEDS_REPAIR"), {"ttl policies"}),
    "ttl policy missing": (lambda a: a[f"GET {FIRESTORE}/collectionGroups/-/fields?filter="
                                       "ttlConfig:*"]["fields"].pop(0), {"ttl policies"}),
    "rules without the block": (lambda a: next(
        v for k, v in a.items() if "/rulesets/" in k)["source"]["files"][0].update(
        content="rules_version = '2';\nservice cloud.firestore {}\n"), {"rules"}),
    "rules let clients write shards": (lambda a: next(
        v for k, v in a.items() if "/rulesets/" in k)["source"]["files"][0].update(
        content=next(v for k, v in a.items() if "/rulesets/" in k)["source"]["files"][0][
            "content"].replace("service cloud.firestore {", "service cloud.firestore {\n"
                               "  match /databases/{database}/documents/pages/{page} {\n"
                               "    match /_counter_shards_/{shardId} { allow write; }\n  }", 1)),
        {"rules"}),
    "job paused": (lambda a: a[JOB].update(state="PAUSED"), {"scheduler"}),
    "job schedule": (lambda a: a[JOB].update(schedule="every 5 minutes"), {"scheduler"}),
    "job stopped": (lambda a: a[JOB].update(lastAttemptTime="2026-11-20T11:50:00Z"),
                    {"scheduler"}),
    "job failing": (lambda a: a[JOB].update(status={"code": 7, "message": "PERMISSION_DENIED"}),
                    {"scheduler"}),
    "job missing": (lambda a: refuse(a, JOB, 404, "NOT_FOUND"),
                    {"scheduler", "scheduler invoker"}),
    "job without a token": (lambda a: a[JOB]["httpTarget"].pop("oidcToken"),
                            {"scheduler invoker"}),
    "job's account not an invoker": (lambda a: a[RUN.format("counters-rollup")].update(
        bindings=[]), {"scheduler invoker"}),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_comparison_of_each_check_fails_its_check_alone(mutation: str) -> None:
    """The healthy project with one thing broken fails exactly the checks that compare it."""
    answers = json.loads((RECORDED / "healthy.json").read_text())
    edit, failing = MUTATIONS[mutation]
    edit(answers)
    found, _, _ = diagnose(answers)
    assert {c: f.status for c, f in found.items()} == {
        c: "fail" if c in failing else "pass" for c in doctor.CHECKS}, mutation


def test_every_check_has_a_mutation() -> None:
    assert set(doctor.CHECKS) == {c for _, checks in MUTATIONS.values() for c in checks}


def test_app_check_passes_with_a_recaptcha_v3_app_or_when_not_enforced() -> None:
    """A web app with reCAPTCHA v3 gets tokens as well as one with Enterprise; a backend that
    does not enforce App Check needs neither (and the APIs are not asked)."""
    answers = json.loads((RECORDED / "healthy.json").read_text())
    attestation(answers, "recaptchaEnterpriseConfig").pop("siteKey")
    attestation(answers, "recaptchaV3Config").update(siteSecretSet=True)
    found, _, _ = diagnose(answers)
    assert found["app check"].status == "pass" and "1 of 1 web apps" in found["app check"].found
    found, asked, _ = diagnose("broken", expected(enforces_app_check=False))
    assert found["app check"].status == "pass" and "not enforced" in found["app check"].found
    assert not [key for key in asked if "firebaseappcheck" in key or "webApps" in key]


@pytest.mark.parametrize("value", [None, "", "true", "TRUE", "1", "yes", "false", " False ", "0",
                                   "no", "n", "off"])
def test_doctor_reads_enforce_app_check_as_the_callables_do(
        value: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    import handlers

    if value is None:
        monkeypatch.delenv("ENFORCE_APP_CHECK", raising=False)
    else:
        monkeypatch.setenv("ENFORCE_APP_CHECK", value)
    assert doctor.enforces_app_check(value) is handlers.app_check_enforced()


def test_the_codebases_env_files_say_whether_app_check_is_enforced(tmp_path: Path) -> None:
    codebase = tmp_path / "counters"
    codebase.mkdir()
    assert doctor.expected_of(codebase, INSTALL, PROJECT).enforces_app_check
    (codebase / ".env").write_text("ENFORCE_APP_CHECK=true\n")
    (codebase / f".env.{PROJECT}").write_text("ENFORCE_APP_CHECK=false\n")
    assert not doctor.expected_of(codebase, INSTALL, PROJECT).enforces_app_check


def test_a_first_deploy_is_pending_not_failed() -> None:
    """Right after a first deploy, TTL policies and an index still building and a scheduler job
    that has not fired yet are pending: doctor exits 0 and says when to run again."""
    answers = json.loads((RECORDED / "healthy.json").read_text())
    key = f"GET {FIRESTORE}/collectionGroups/-/fields?filter=ttlConfig:*"
    for field in answers[key]["fields"]:
        field["ttlConfig"]["state"] = "CREATING"
    answers[f"GET {FIRESTORE}/collectionGroups/-/indexes"]["indexes"][0]["state"] = "CREATING"
    answers[JOB].pop("lastAttemptTime")
    answers[JOB]["userUpdateTime"] = "2026-11-20T11:59:30Z"
    found, _, _ = diagnose(answers)
    assert {c for c, f in found.items() if f.status != "pass"} == {
        "ttl policies", "indexes", "scheduler"}
    assert {found[c].status for c in ("ttl policies", "indexes", "scheduler")} == {"pending"}
    lines: list[str] = []
    assert doctor.report(list(found.values()), lines.append)  # exit 0
    assert lines[-1] == ("pending: indexes, ttl policies, scheduler (settling by themselves): "
                         "run doctor again in 60 minutes")
    # The same job, never run long after it was made, has stopped: a failure.
    found, _, _ = diagnose(answers, now=NOW + dt.timedelta(minutes=10))
    assert found["scheduler"].status == "fail" and "last attempt never" in found["scheduler"].found


def test_doctor_without_credentials_is_one_line_with_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Application Default Credentials: one line saying how to get them, no traceback."""
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "missing.json"),
           "FIRESTORE_EMULATOR_HOST": "", "CLOUDSDK_CONFIG": str(tmp_path)}
    result = CliRunner().invoke(cli, ["doctor", "--project", PROJECT], env=env)
    assert result.exit_code == 1, result.output
    assert ("Traceback" not in result.output and result.exception is None) or isinstance(
        result.exception, SystemExit)
    error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "gcloud auth application-default login" in error[0]


@pytest.mark.parametrize(("p", "status"), [(1, "pass"), (16, "pass"), (32, "fail")])
def test_each_partition_of_the_databases_p_needs_its_tick_function(p: int, status: str) -> None:
    """The recorded project deploys 16 tick functions (ROLLUP_PARTITIONS_MAX as shipped): P up to
    16 passes; at P = 32 the partitions past 16 are never ticked, and the finding names them."""
    fetch, _, _ = recorded("healthy")
    functions = doctor.deployed_functions(Apis(fetch, PROJECT, config.REGION))
    found = doctor.check_partitions(functions, INSTALL, lambda: p)
    assert found.status == status, found
    if status == "fail":
        assert "16 of its tick functions are not deployed (counters-rolluptick16, " \
               "counters-rolluptick17, counters-rolluptick18, ...)" in found.found
        assert "ROLLUP_PARTITIONS_MAX of 32" in found.todo


def test_partitions_doctor_cannot_read_are_cannot_check() -> None:
    """No function list, or no P (the database refused): the check cannot check. A stored value
    that is no P fails, where the backend would take P = 1: doctor never guesses it."""
    refused = ApiError(403, "permission denied", "functions")
    assert doctor.check_partitions(refused, INSTALL, lambda: 1).status == "cannot-check"

    def unreadable() -> int:
        raise PermissionError("no read of internal/partitions")

    fetch, _, _ = recorded("healthy")
    functions = doctor.deployed_functions(Apis(fetch, PROJECT, config.REGION))
    found = doctor.check_partitions(functions, INSTALL, unreadable)
    assert found.status == "cannot-check" and "no read of internal" in found.found
    for stored in (3, "16", None, 256):
        bad = doctor.check_partitions(functions, INSTALL, functools.partial(lambda v: v, stored))
        assert bad.status == "fail" and f"stores count {stored!r}, which is no P" in bad.found
