"""`counters doctor`: whether a deployed project (this repository's own deploy or an install)
is what the backend's code deploys, and whether it counts (docs/deploy.md, "Reading counters
doctor").

The checks of CHECKS read Google's APIs (`google_apis.Apis`) with the user's credentials,
read-only: the functions against the codebase's deploy manifest (CPU, memory, concurrency,
timeout), the callables open to the public (Cloud Run invoker allUsers), the task queues (one per
tick function) and their rate limits and attempts, the queues' roles (enqueuer, invoker, act-as),
the runtime account's Firestore role on the project, a web app registered with App Check when
the callables enforce it, the database, every composite index READY,
every TTL policy ACTIVE, the released rules holding the backend's block, the scheduled rollup's
Cloud Scheduler job and its invoker. Then the canary and the audit (canary.py). Each says pass,
fail, pending (settling by itself: run again later) or cannot-check, naming every broken part and
what to do; the command exits 1 when one fails. Credentials that are missing or refused are one
line with the fix. Against the emulators only the last two run.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from counting.features.context import Context
from counting.foundation import config
from counting.writepath import partitions
from google.auth import credentials as auth_credentials
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore

from . import install, rules
from .canary import (
    PROBED,
    Canary,
    Clock,
    Finding,
    FirestoreCanary,
    RealClock,
    audit_finding,
    canary_id,
    read_audit,
    run_canary,
)
from .google_apis import ApiError, Apis, Json, authorized_fetch, default_credentials
from .session import Session, deploy_variables, pass_session, resolve_target

ENQUEUER = "roles/cloudtasks.enqueuer"
INVOKER = "roles/run.invoker"
ACT_AS = "roles/iam.serviceAccountUser"
RUNTIME_ACCOUNT = "RUNTIME_SERVICE_ACCOUNT"
# firebase-tools' CPU for `gcf_gen1` by memory (MiB), and a queue's default dispatch rate.
GEN1_CPU = {128: 0.0833, 256: 0.1666, 512: 0.3333, 1024: 0.5833, 2048: 1, 4096: 2, 8192: 2,
            16384: 4, 32768: 8}
DEFAULT_DISPATCHES_PER_S = 500
# A scheduler job fires every minute; older than this, its last attempt says it has stopped.
SCHEDULER_STALE = dt.timedelta(minutes=3)
MANIFEST_TIMEOUT_S = 120
# The manifest as firebase-tools' discovery reads it: main.py loaded from the codebase's folder
# in its own venv.
MANIFEST_SCRIPT = ("import json, yaml\nfrom firebase_functions.private import serving\n"
                   "print(json.dumps(yaml.safe_load(serving.functions_as_yaml("
                   "serving.get_functions()))))\n")
PUBLIC = "allUsers"
# The project roles the runtime account needs: the functions read and write Firestore (any one of
# these grants it; new projects no longer give the default compute account Editor).
FIRESTORE_ROLES = ("roles/datastore.user", "roles/datastore.owner", "roles/editor", "roles/owner")
# How long a pending state takes to settle, as a "run again in" hint: an index builds in
# minutes, a TTL policy in up to a day (most within the hour), a new scheduler job fires within
# its minute.
AGAIN_INDEX_MIN, AGAIN_TTL_MIN, AGAIN_SCHEDULER_MIN = 10, 60, 2
CHECKS = ("functions", "public callables", "app check", "task queues", "queue roles",
          "project roles", "database", "indexes", "ttl policies", "rules", "scheduler",
          "scheduler invoker")
ENFORCE_APP_CHECK = "ENFORCE_APP_CHECK"


@dataclass(frozen=True, kw_only=True)
class Expected:
    """What the backend deploys: its `placement`, its deploy manifest's endpoints by deployed id
    (None when the manifest could not be built: `no_manifest` says why), the account the
    functions run as (None: the project's default compute account), and `deploy`, the command
    that deploys it again; `enforces_app_check`: the callables refuse a call without an App
    Check token (the deploy parameter ENFORCE_APP_CHECK)."""

    placement: config.Placement
    endpoints: dict[str, Json] | None
    no_manifest: str = ""
    runtime_account: str | None = None
    enforces_app_check: bool = True
    deploy: str

    def where(self, kind: str) -> dict[str, Json]:
        return {name: endpoint for name, endpoint in (self.endpoints or {}).items()
                if kind in endpoint}


def finding(check: str, problems: list[str], passed: str, todo: str,
            pending: list[str] | None = None, again_in_min: int = 0) -> Finding:
    """Pass; fail naming every problem, one a line; or, with only `pending` states (ones that
    settle by themselves), pending, to be checked again in `again_in_min` minutes."""
    if problems:
        return Finding(check=check, status="fail", found="\n".join([*problems, *(pending or [])]),
                       todo=todo)
    if pending:
        return Finding(check=check, status="pending", found="\n".join(pending),
                       todo=f"nothing to do: run doctor again in {again_in_min} minutes",
                       again_in_min=again_in_min)
    return Finding(check=check, status="pass", found=passed)


def no_manifest(check: str, expected: Expected) -> Finding:
    return Finding(check=check, status="cannot-check", found=expected.no_manifest,
                   todo="make the codebase's venv (docs/adopt.md, step 3), then run doctor "
                        "again")


# --- the functions ----------------------------------------------------------------------------


def mebibytes(quantity: str) -> float | None:
    """A Kubernetes memory quantity (Cloud Functions' availableMemory) in MiB, as firebase-tools
    reads it."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", quantity or "")
    if found is None:
        return None
    units = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20,
             "Gi": 2**30, "Ti": 2**40}
    return float(found[1]) * units[found[2] or ""] / 2**20


def function_problems(name: str, endpoint: Json, deployed: Json | None) -> list[str]:
    """How the deployed function differs from its manifest endpoint."""
    if deployed is None:
        return [f"{name}: not deployed"]
    if deployed.get("state") != "ACTIVE":
        return [f"{name}: {deployed.get('state', 'no state')}"]
    service = deployed.get("serviceConfig", {})
    memory = endpoint.get("availableMemoryMb")
    cpu = endpoint.get("cpu")
    if cpu == "gcf_gen1":
        cpu = GEN1_CPU.get(memory or 256)
    problems = []
    try:
        deployed_cpu: float | None = float(service.get("availableCpu", "nan"))
    except ValueError:
        deployed_cpu = None
    if cpu is not None and (deployed_cpu is None or abs(deployed_cpu - float(cpu)) > 1e-3):
        problems.append(f"cpu {service.get('availableCpu')}, manifest {cpu}")
    deployed_memory = mebibytes(str(service.get("availableMemory", "")))
    if memory is not None and deployed_memory != memory:
        problems.append(f"memory {service.get('availableMemory')}, manifest {memory}Mi")
    for key, field in (("concurrency", "maxInstanceRequestConcurrency"),
                       ("timeoutSeconds", "timeoutSeconds")):
        if endpoint.get(key) is not None and service.get(field) != endpoint[key]:
            problems.append(f"{field} {service.get(field)}, manifest {endpoint[key]}")
    return [f"{name}: {problem}" for problem in problems]


def check_functions(apis: Apis, expected: Expected, deployed: dict[str, Json]) -> Finding:
    if expected.endpoints is None:
        return no_manifest("functions", expected)
    problems = [problem for name, endpoint in sorted(expected.endpoints.items())
                for problem in function_problems(name, endpoint, deployed.get(name))]
    return finding("functions", problems,
                   f"{len(expected.endpoints)} functions ACTIVE, each with its manifest's cpu, "
                   "memory, concurrency and timeout",
                   f"deploy the functions again ({expected.deploy}), then run doctor again")


# --- the task queues and their roles ------------------------------------------------------------


def queue_problems(name: str, endpoint: Json, queue: Json | None) -> list[str]:
    if queue is None:
        return [f"{name}: no queue"]
    problems = []
    if queue.get("state") != "RUNNING":
        problems.append(f"state {queue.get('state')}")
    trigger = endpoint["taskQueueTrigger"]
    limits, found = trigger.get("rateLimits") or {}, queue.get("rateLimits", {})
    wanted = {"maxConcurrentDispatches": limits.get("maxConcurrentDispatches"),
              "maxDispatchesPerSecond": limits.get("maxDispatchesPerSecond",
                                                   DEFAULT_DISPATCHES_PER_S)}
    for key, value in wanted.items():
        if value is not None and found.get(key) != value:
            problems.append(f"{key} {found.get(key)}, manifest {value}")
    attempts = (trigger.get("retryConfig") or {}).get("maxAttempts")
    if attempts is not None and queue.get("retryConfig", {}).get("maxAttempts") != attempts:
        problems.append(f"maxAttempts {queue.get('retryConfig', {}).get('maxAttempts')}, "
                        f"manifest {attempts}")
    return [f"{name}: {problem}" for problem in problems]


def check_queues(apis: Apis, expected: Expected) -> Finding:
    if expected.endpoints is None:
        return no_manifest("task queues", expected)
    ticks = expected.where("taskQueueTrigger")
    queues = {queue["name"].rpartition("/")[2]: queue for queue in apis.queues()}
    problems = [problem for name, endpoint in sorted(ticks.items())
                for problem in queue_problems(name, endpoint, queues.get(name))]
    return finding("task queues", problems,
                   f"{len(ticks)} queues RUNNING ({', '.join(sorted(ticks)[:2])} ...), each with "
                   "its manifest's rate limits and attempts",
                   f"deploy the functions again ({expected.deploy}): it creates and updates "
                   "the queues (a disabled one belongs to a deleted function)")


def grants(policy: Json, role: str, account: str) -> bool:
    """Whether an IAM `policy` gives `account` `role` unconditionally."""
    return any(binding.get("role") == role and "condition" not in binding
               and f"serviceAccount:{account}" in binding.get("members", ())
               for binding in policy.get("bindings", ()))


def runtime_account(apis: Apis, expected: Expected) -> str:
    if expected.runtime_account:
        return expected.runtime_account
    return f"{apis.project_number()}-compute@developer.gserviceaccount.com"


def check_roles(apis: Apis, expected: Expected, deployed: dict[str, Json]) -> Finding:
    """The tick tasks' path (docs/deploy.md, "Task queue roles"): every tick function runs as
    the runtime account, which may enqueue to its queue, be dispatched to its service, and act
    as itself."""
    if expected.endpoints is None:
        return no_manifest("queue roles", expected)
    account = runtime_account(apis, expected)
    problems = []
    for name in sorted(expected.where("taskQueueTrigger")):
        function = deployed.get(name)
        if function is None:
            problems.append(f"{name}: not deployed")
            continue
        service = function.get("serviceConfig", {})
        if service.get("serviceAccountEmail") != account:
            problems.append(f"{name} runs as {service.get('serviceAccountEmail')}, not {account}")
        if not grants(apis.queue_policy(name), ENQUEUER, account):
            problems.append(f"{account} lacks {ENQUEUER} on the {name} queue")
        if not grants(apis.service_policy(service.get("service", "")), INVOKER, account):
            problems.append(f"{account} lacks {INVOKER} on the {name} service")
    if not grants(apis.account_policy(account), ACT_AS, account):
        problems.append(f"{account} lacks {ACT_AS} on itself")
    return finding("queue roles", problems,
                   f"the tick functions run as {account}, which holds {ENQUEUER} on each queue, "
                   f"{INVOKER} on each service and {ACT_AS} on itself",
                   f"firebase-tools grants the first two at every functions deploy "
                   f"({expected.deploy}) from {RUNTIME_ACCOUNT} in the codebase's "
                   f".env.<project>; grant the third with `gcloud iam service-accounts "
                   f"add-iam-policy-binding {account} --member serviceAccount:{account} --role "
                   f"{ACT_AS}` (make deploy does) (docs/deploy.md, \"Task queue roles\")")


def public(policy: Json) -> bool:
    """Whether a Cloud Run service's IAM `policy` lets anyone invoke it, unconditionally."""
    return any(binding.get("role") == INVOKER and "condition" not in binding
               and PUBLIC in binding.get("members", ()) for binding in policy.get("bindings", ()))


def check_public(apis: Apis, expected: Expected, deployed: dict[str, Json]) -> Finding:
    """The callables answer the public: their Cloud Run services let allUsers invoke them (the
    functions check who may do what; an organisation policy may forbid allUsers)."""
    if expected.endpoints is None:
        return no_manifest("public callables", expected)
    callables = expected.where("callableTrigger")
    problems = []
    for name in sorted(callables):
        function = deployed.get(name)
        if function is None:
            problems.append(f"{name}: not deployed")
        elif not public(apis.service_policy(function.get("serviceConfig", {}).get("service", ""))):
            problems.append(f"{name}: {PUBLIC} lacks {INVOKER} on its service")
    return finding("public callables", problems,
                   f"{len(callables)} callables' services let {PUBLIC} invoke them",
                   f"a functions deploy grants it ({expected.deploy}); where an organisation "
                   f"policy (iam.allowedPolicyMemberDomains) forbids {PUBLIC}, clients cannot "
                   "call the callables: ask for an exception for these services")


def check_project_roles(apis: Apis, expected: Expected) -> Finding:
    """The runtime account may use Firestore: one of FIRESTORE_ROLES on the project."""
    account = runtime_account(apis, expected)
    policy = apis.project_policy()
    if any(grants(policy, role, account) for role in FIRESTORE_ROLES):
        return Finding(check="project roles", status="pass",
                       found=f"{account} may use Firestore (one of {', '.join(FIRESTORE_ROLES)} "
                             "on the project)")
    return Finding(check="project roles", status="fail",
                   found=f"{account} holds none of {', '.join(FIRESTORE_ROLES)} on the project: "
                         "the functions cannot read or write Firestore (it shows as a rollup "
                         "that does not run)",
                   todo=f"gcloud projects add-iam-policy-binding {apis.project} --member "
                        f"serviceAccount:{account} --role roles/datastore.user")


def enforces_app_check(value: str | None) -> bool:
    """ENFORCE_APP_CHECK as the callables read it (handlers.app_check_enforced, which the CLI
    does not import: it needs firebase_functions): only an explicit false turns it off."""
    return (value or "true").strip().lower() not in ("false", "0", "no", "n")


def attested(answer: Json) -> bool:
    """Whether an App Check configuration lets its app get tokens: a reCAPTCHA Enterprise site
    key, or a reCAPTCHA v3 secret (never returned; `siteSecretSet` says there is one)."""
    return bool(answer.get("siteKey")) or answer.get("siteSecretSet") is True


def check_app_check(apis: Apis, expected: Expected) -> Finding:
    """With App Check enforced, some app of the project can get App Check tokens: a web app
    registered with a provider (docs/deploy.md, step 5); else every client call is refused."""
    if not expected.enforces_app_check:
        return Finding(check="app check", status="pass",
                       found=f"not enforced ({ENFORCE_APP_CHECK} false in the codebase's .env "
                             "files): the callables take calls without App Check tokens")
    apps = [app["appId"] for app in apis.web_apps() if app.get("state", "ACTIVE") == "ACTIVE"]
    registered = sorted({c["name"].split("/apps/")[1].split("/")[0]
                         for c in (apis.web_attestations(apps) if apps else []) if attested(c)})
    if registered:
        return Finding(check="app check", status="pass",
                       found=f"enforced, and {len(registered)} of {len(apps)} web apps get "
                             f"tokens ({', '.join(registered)})")
    found = (f"{ENFORCE_APP_CHECK} is on, but none of the project's {len(apps)} web apps is "
             "registered with App Check (reCAPTCHA Enterprise or v3)" if apps else
             f"{ENFORCE_APP_CHECK} is on, but the project has no web app")
    return Finding(check="app check", status="fail",
                   found=f"{found}: the callables refuse every client call",
                   todo="register the web app with App Check (Firebase console, App Check, "
                        "Apps: reCAPTCHA Enterprise and its site key; docs/deploy.md, step 5), "
                        f"or put {ENFORCE_APP_CHECK}=false in the codebase's .env.<project> and "
                        f"deploy again ({expected.deploy})")


# --- Firestore ---------------------------------------------------------------------------------


def check_database(apis: Apis, expected: Expected) -> Finding:
    database = expected.placement.database
    try:
        found = apis.database(database)
    except ApiError as error:
        if error.status != 404:
            raise
        return Finding(check="database", status="fail", found=f"no database {database}",
                       todo=f"create it: firebase firestore:databases:create {database} "
                            "--location=<your default database's location>")
    if found.get("type") != "FIRESTORE_NATIVE":
        return Finding(check="database", status="fail",
                       found=f"{database} is in {found.get('type')}, not FIRESTORE_NATIVE",
                       todo="the backend needs a database in Native mode: give it another "
                            "(counters init --database) or create this one anew")
    return Finding(check="database", status="pass",
                   found=f"{database}: Native mode, in {found.get('locationId')}")


def index_key(group: str, scope: str, fields: Iterable[Json]) -> tuple[str, str, str]:
    """An index as its collection group, scope and fields, without the `__name__` Firestore
    appends to every index."""
    listed = [field for field in fields if field.get("fieldPath") != "__name__"]
    return group, scope, json.dumps([{k: v for k, v in sorted(field.items())}
                                     for field in listed])


def check_indexes(apis: Apis, expected: Expected) -> Finding:
    wanted = install.indexes(expected.placement.collection_prefix)["indexes"]
    found = {index_key(index["name"].split("/collectionGroups/")[1].split("/")[0],
                       index.get("queryScope", "COLLECTION"), index.get("fields", [])):
             index.get("state") for index in apis.indexes(expected.placement.database)}
    problems: list[str] = []
    pending: list[str] = []
    for index in wanted:
        key = index_key(index["collectionGroup"], index.get("queryScope", "COLLECTION"),
                        index["fields"])
        state = found.get(key, "missing")
        if state != "READY":
            fields = ", ".join(f["fieldPath"] for f in index["fields"])
            (pending if state == "CREATING" else problems).append(
                f"{index['collectionGroup']} ({fields}): {state}")
    return finding("indexes", problems, f"{len(wanted)} composite indexes READY",
                   "a missing index: deploy the rules and indexes again (firebase deploy --only "
                   "firestore); CREATING: they take minutes, run doctor again; NEEDS_REPAIR: "
                   "delete that index in the console and deploy again", pending,
                   AGAIN_INDEX_MIN)


def check_ttl(apis: Apis, expected: Expected) -> Finding:
    wanted = [(entry["collectionGroup"], entry["fieldPath"]) for entry in
              install.indexes(expected.placement.collection_prefix)["fieldOverrides"]
              if entry.get("ttl")]
    found = {(field["name"].split("/collectionGroups/")[1].split("/")[0],
              field["name"].rpartition("/fields/")[2]): field.get("ttlConfig", {}).get("state")
             for field in apis.ttl_fields(expected.placement.database)}
    states = {(group, path): found.get((group, path)) or "no policy" for group, path in wanted}
    problems = [f"{group}.{path}: {state}" for (group, path), state in states.items()
                if state not in ("ACTIVE", "CREATING")]
    pending = [f"{group}.{path}: CREATING" for (group, path), state in states.items()
               if state == "CREATING"]
    return finding("ttl policies", problems,
                   f"{len(wanted)} TTL policies ACTIVE ({', '.join(g for g, _ in wanted)})",
                   "no policy: deploy the rules and indexes again (firebase deploy --only "
                   "firestore); CREATING: it takes up to a day, run doctor again", pending,
                   AGAIN_TTL_MIN)


def check_rules(apis: Apis, expected: Expected) -> Finding:
    database = expected.placement.database
    try:
        released = apis.released_rules(database)
    except ApiError as error:
        if error.status != 404:
            raise
        released = None
    block = install.rules_block(expected.placement.collection_prefix)
    old = rules.old_shard_rules(released or "")
    if released is None:
        problem = f"no rules released to {database}"
    elif block not in released.replace("\r\n", "\n"):
        problem = (f"the rules released to {database} do not hold this version's backend block "
                   "(the lines between `counters: begin` and `counters: end` of its "
                   "firestore.rules, collection ids prefixed as the install's)")
    elif old:
        return Finding(check="rules", status="fail", found=(
            f"the rules released to {database} let clients write `_counter_shards_` outside the "
            f"generated extension rules ({'; '.join(old)}): any amount gets in, whatever the "
            "declared bounds"), todo="remove that rule (the Distributed Counter extension's; "
            "docs/adopt.md), then deploy the rules")
    else:
        return Finding(check="rules", status="pass",
                       found=f"the rules released to {database} hold the backend's block")
    return Finding(check="rules", status="fail", found=problem,
                   todo="deploy the rules again (firebase deploy --only firestore)")


# --- Cloud Scheduler -----------------------------------------------------------------------------


def timestamp(value: Any) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def scheduled_jobs(apis: Apis, expected: Expected, problems: list[str]
                   ) -> Iterator[tuple[str, Json, str, Json]]:
    """Each scheduled function of the manifest with its Cloud Scheduler job: (name, endpoint,
    job id, job); a job that is not there is a problem, and skipped."""
    for name, endpoint in sorted(expected.where("scheduleTrigger").items()):
        job_id = f"firebase-schedule-{name}-{apis.region}"
        try:
            job = apis.job(job_id)
        except ApiError as error:
            if error.status != 404:
                raise
            problems.append(f"{job_id}: no job")
            continue
        yield name, endpoint, job_id, job


def check_scheduler(apis: Apis, expected: Expected, now: dt.datetime) -> Finding:
    if expected.endpoints is None:
        return no_manifest("scheduler", expected)
    problems: list[str] = []
    pending: list[str] = []
    for _, endpoint, job_id, job in scheduled_jobs(apis, expected, problems):
        if job.get("state") != "ENABLED":
            problems.append(f"{job_id}: {job.get('state')}")
        schedule = endpoint["scheduleTrigger"].get("schedule")
        if job.get("schedule") != schedule:
            problems.append(f"{job_id}: schedule {job.get('schedule')!r}, manifest {schedule!r}")
        last = timestamp(job.get("lastAttemptTime"))
        updated = timestamp(job.get("userUpdateTime"))
        if last is None and updated is not None and now - updated <= SCHEDULER_STALE:
            pending.append(f"{job_id}: created or updated {job.get('userUpdateTime')}, not run "
                           "yet")
        elif last is None or now - last > SCHEDULER_STALE:
            problems.append(f"{job_id}: last attempt {job.get('lastAttemptTime', 'never')}")
        code = job.get("status", {}).get("code", 0)
        if code:
            problems.append(f"{job_id}: last attempt failed (code {code}: "
                            f"{job.get('status', {}).get('message', '')})")
    return finding("scheduler", problems,
                   "the scheduled rollup's job is ENABLED, every minute, and ran within "
                   f"{SCHEDULER_STALE.total_seconds() / 60:.0f} min",
                   f"a missing or changed job: deploy the functions again ({expected.deploy}); "
                   "paused: resume it (console, Cloud Scheduler); failed attempts: the rollup "
                   "function's logs say why", pending, AGAIN_SCHEDULER_MIN)


def check_scheduler_invoker(apis: Apis, expected: Expected, deployed: dict[str, Json]
                            ) -> Finding:
    """Each scheduled function's job calls it with an OIDC token of an account that holds the
    invoker role on its Cloud Run service (else every run is refused: 403)."""
    if expected.endpoints is None:
        return no_manifest("scheduler invoker", expected)
    problems: list[str] = []
    for name, _, job_id, job in scheduled_jobs(apis, expected, problems):
        function = deployed.get(name)
        account = job.get("httpTarget", {}).get("oidcToken", {}).get("serviceAccountEmail")
        if function is None:
            problems.append(f"{name}: not deployed")
        elif not account:
            problems.append(f"{job_id}: calls {name} without an OIDC token")
        elif not grants(apis.service_policy(function.get("serviceConfig", {}).get("service", "")),
                        INVOKER, account):
            problems.append(f"{account} (the token of {job_id}) lacks {INVOKER} on the {name} "
                            "service")
    return finding("scheduler invoker", problems,
                   "the scheduled rollup's job calls it as an account its service lets invoke it",
                   f"deploy the functions again ({expected.deploy}): firebase-tools grants the "
                   "job's account the invoker role on the scheduled function's service")


# --- all of it ---------------------------------------------------------------------------------


def stored_partitions(db: firestore.Client, names: config.Names) -> Any:
    """The `count` of `internal/partitions` as stored (1 when nothing is: P was never changed)."""
    return (partitions.partitions_ref(db, names).get().to_dict() or {}).get("count", 1)


def check_partitions(functions: dict[str, Json] | ApiError, placement: config.Placement,
                     count: Callable[[], Any]) -> Finding:
    """Every partition of the P the database stores (`count`) has its tick function deployed. One
    without is never ticked: its counters are never published. `counters partitions N` refuses
    an N the codebase does not deploy, but a later deploy with a smaller ROLLUP_PARTITIONS_MAX
    removes functions whatever P is. A stored value that is no P fails: the backend takes P = 1
    then, which may not be what was set."""
    if isinstance(functions, ApiError):
        return Finding(check="partitions", status="cannot-check", found=str(functions),
                       todo="may these credentials list the functions (roles/viewer)?")
    try:
        p = count()
    except auth_exceptions.GoogleAuthError:
        raise
    except Exception as error:  # a P doctor cannot read, it cannot check
        return Finding(check="partitions", status="cannot-check",
                       found=f"{type(error).__name__}: {error}",
                       todo="may these credentials read the backend's database?")
    if p not in partitions.CHOICES:
        return finding("partitions", [f"internal/partitions stores count {p!r}, which is no P "
                                      f"({', '.join(map(str, partitions.CHOICES))}): the "
                                      "backend takes P = 1"], passed="",
                       todo="set P with `counters partitions N`")
    missing = [placement.function_id(part.function) for part in partitions.parts(p)
               if placement.function_id(part.function) not in functions]
    problems = [f"P = {p}, but {len(missing)} of its tick functions are not deployed "
                f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): the counters "
                "of those partitions are not published"] if missing else []
    return finding("partitions", problems,
                   passed=f"P = {p}: each partition has its tick function",
                   todo=f"deploy with ROLLUP_PARTITIONS_MAX of {p} or more (functions/.env), "
                        "or lower P with `counters partitions N`")


def deployed_functions(apis: Apis) -> dict[str, Json] | ApiError:
    """The project's functions by id, or why the API would not list them."""
    try:
        return {function["name"].rpartition("/")[2]: function for function in apis.functions()}
    except ApiError as error:
        return error


def diagnose(apis: Apis, expected: Expected, now: dt.datetime,
             functions: dict[str, Json] | ApiError) -> list[Finding]:
    """The checks (CHECKS) that read the project's configuration through Google's APIs; an API
    that refuses a check makes it cannot-check (a missing permission, a disabled API)."""
    deployed = functions if isinstance(functions, dict) else {}
    checks: dict[str, Callable[[], Finding]] = {
        "functions": lambda: check_functions(apis, expected, deployed),
        "public callables": lambda: check_public(apis, expected, deployed),
        "app check": lambda: check_app_check(apis, expected),
        "task queues": lambda: check_queues(apis, expected),
        "queue roles": lambda: check_roles(apis, expected, deployed),
        "project roles": lambda: check_project_roles(apis, expected),
        "database": lambda: check_database(apis, expected),
        "indexes": lambda: check_indexes(apis, expected),
        "ttl policies": lambda: check_ttl(apis, expected),
        "rules": lambda: check_rules(apis, expected),
        "scheduler": lambda: check_scheduler(apis, expected, now),
        "scheduler invoker": lambda: check_scheduler_invoker(apis, expected, deployed),
    }
    found = []
    for check, run in checks.items():
        try:
            if isinstance(functions, ApiError) and check in (
                    "functions", "public callables", "queue roles", "scheduler invoker"):
                raise functions
            found.append(run())
        except ApiError as error:
            found.append(Finding(check=check, status="cannot-check", found=str(error),
                                 todo="the API refused: is it enabled, and may these "
                                      "credentials read it (roles/viewer, or Owner)?"))
    return found


def operate(canary: Canary, audit: Callable[[], Mapping[str, Any] | None], clock: Clock, *,
            ticks: bool, now: Callable[[], dt.datetime], names: config.Names) -> list[Finding]:
    """The canary and the audit (its document among `names`): the backend at work."""
    try:
        ran = run_canary(canary, clock, ticks=ticks, counter=canary_id())
    except auth_exceptions.GoogleAuthError:
        raise  # the credentials, not the backend: one line with the fix (`doctor`)
    except Exception as error:  # whatever stops the round trip is the canary's verdict
        ran = Finding(check="canary", status="fail", found=f"{type(error).__name__}: {error}",
                      todo="the backend's database or functions refused the canary: see the "
                           "checks above and `counters status`")
    try:
        audited = audit_finding(audit(), now(), names)
    except auth_exceptions.GoogleAuthError:
        raise
    except Exception as error:  # an audit doctor cannot read, it cannot check
        audited = Finding(check="audit", status="cannot-check",
                          found=f"{type(error).__name__}: {error}",
                          todo="may these credentials read the backend's database?")
    return [ran, audited]


def report(findings: list[Finding], echo: Callable[[str], None]) -> bool:
    """Prints each finding (what it found a line each, then what to do), and when some are
    pending, when to run again; returns whether none failed (pending ones do not)."""
    width = max(len(f.check) for f in findings)
    for f in findings:
        status = f.status.upper() if f.status == "fail" else f.status
        lines = f.found.splitlines() or [""]
        echo(f"{status:<12}  {f.check:<{width}}  {lines[0]}")
        for line in [*lines[1:], *([f"what to do: {f.todo}"] if f.todo else [])]:
            echo(f"{'':<12}  {'':<{width}}  {line}")
    waiting = [f for f in findings if f.status == "pending"]
    if waiting:
        echo(f"pending: {', '.join(f.check for f in waiting)} (settling by themselves): run "
             f"doctor again in {max(f.again_in_min for f in waiting)} minutes")
    return not any(f.status == "fail" for f in findings)


# --- the codebase ------------------------------------------------------------------------------


def manifest(codebase: Path, variables: Mapping[str, str] | None = None) -> Json:
    """The codebase's deploy manifest, built as a deploy builds it (its venv, its folder, and
    the `variables` of its .env files, which firebase-tools hands the code it loads)."""
    python = codebase / "venv" / "bin" / "python"
    if not python.exists():
        raise click.ClickException(
            f"{python} not found: firebase-tools loads the codebase from its venv, to deploy "
            f"and in the emulators, and git does not carry it (a clone makes its own): in "
            f"{codebase.parent}, {install.venv_command(codebase.name)}")
    env = {**{k: v for k, v in os.environ.items() if k not in ("FUNCTIONS_EMULATOR",
                                                                "FUNCTION_TARGET")},
           **(variables or {})}
    done = subprocess.run([str(python), "-c", MANIFEST_SCRIPT], cwd=codebase, env=env,
                          capture_output=True, text=True, timeout=MANIFEST_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise click.ClickException(f"{codebase}/main.py does not load: {last}")
    found: Json = json.loads(done.stdout)
    return found


def expected_of(codebase: Path | None, placement: config.Placement, project: str) -> Expected:
    """What the backend in `codebase` deploys to `project`."""
    deploy = (f"firebase deploy --only functions:{placement.function_prefix}"
              if placement.function_prefix else "make deploy")
    if codebase is None:
        return Expected(placement=placement, endpoints=None, deploy=deploy,
                        no_manifest="no backend codebase here: run doctor in the host project's "
                                    "folder (or give --backend)")
    variables = deploy_variables(codebase, project)
    enforced = enforces_app_check(variables.get(ENFORCE_APP_CHECK))
    try:
        endpoints = {placement.function_id(name): endpoint
                     for name, endpoint in manifest(codebase, variables)["endpoints"].items()}
    except click.ClickException as error:
        return Expected(placement=placement, endpoints=None, deploy=deploy,
                        no_manifest=f"no deploy manifest: {error.message}",
                        enforces_app_check=enforced)
    return Expected(placement=placement, endpoints=endpoints, deploy=deploy,
                    runtime_account=variables.get(RUNTIME_ACCOUNT) or None,
                    enforces_app_check=enforced)


def emulated_url(session: Session, name: str) -> str:
    """A function's URL on the Functions emulator of the session's firebase.json."""
    firebase_json = session.firebase_json
    declared = (json.loads(firebase_json.read_text())
                if firebase_json is not None and firebase_json.exists() else {})
    port = declared.get("emulators", {}).get("functions", {}).get("port", 5001)
    host = (session.target.emulator_host or "127.0.0.1").rpartition(":")[0]
    return (f"http://{host}:{port}/{session.target.project}/{config.REGION}/"
            f"{session.placement.function_id(name)}")


def deployed(project: str, placement: config.Placement, codebase: Path | None,
             credentials: auth_credentials.Credentials, ctx: Context,
             db: firestore.Client) -> list[Finding]:
    """Every check of a deployed `project`, through Google's APIs with `credentials` and its
    database through `db` (with the command's context `ctx`)."""
    apis = Apis(authorized_fetch(credentials), project, config.REGION)
    functions = deployed_functions(apis)
    expected = expected_of(codebase, placement, project)
    findings = diagnose(apis, expected, dt.datetime.now(dt.UTC), functions)
    findings.append(check_partitions(functions, placement,
                                     lambda: stored_partitions(db, ctx.names)))
    url = (functions.get(placement.function_id(PROBED), {}).get("url", "")
           if isinstance(functions, dict) else "")
    # A tick task carries an OIDC token for the caller's own service account, which only the
    # runtime account's roles let through (docs/operations.md, "Operator CLI"): with other
    # credentials (a person's) doctor's write enqueues none, and the scheduled rollup publishes.
    try:
        ticks = getattr(credentials, "service_account_email", None) == runtime_account(
            apis, expected)
    except ApiError:
        ticks = False
    return findings + operate(FirestoreCanary(ctx, db, url), lambda: read_audit(db, ctx.names),
                              RealClock(), ticks=ticks, now=lambda: dt.datetime.now(dt.UTC),
                              names=ctx.names)


def credentials_problem(error: auth_exceptions.GoogleAuthError) -> str:
    """One line: what is wrong with the credentials, and the fix."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if isinstance(error, auth_exceptions.DefaultCredentialsError):
        what = "no Application Default Credentials"
    else:
        what = "the Application Default Credentials were refused"
    return (f"{what} ({first[:200]}): run `gcloud auth application-default login` (or set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service account key), then run doctor again")


@click.command()
@click.option("--project", metavar="ID",
              help="The deployed project (default: the command's --project, or "
                   "$GOOGLE_CLOUD_PROJECT); none, or FIRESTORE_EMULATOR_HOST set: the emulators.")
@pass_session
def doctor(session: Session, project: str | None) -> None:
    """Check a deployed backend: what Google's APIs say was deployed against what its code
    deploys, then a canary counter and the exactness audit. Read-only but for the canary, which
    creates and deletes a counter of its own. Exits 1 when a check fails."""
    if project is not None:
        session.target = resolve_target(project, os.environ)
    placement = session.placement
    session.err.print(f"doctor: {session.target.describe()}; database {placement.database}, "
                      f"collection prefix {placement.collection_prefix!r}, function prefix "
                      f"{placement.function_prefix!r}")
    if session.production:
        try:
            findings = deployed(session.target.project, placement, session.backend,
                                default_credentials(), session.context(), session.db())
        except auth_exceptions.GoogleAuthError as error:
            raise click.ClickException(credentials_problem(error)) from None
    else:
        db = session.db()
        findings = [Finding(check=check, status="cannot-check",
                            found="the emulators have no such API: nothing deployed to check",
                            todo="run doctor with --project on a deployed project")
                    for check in CHECKS]
        # The emulator takes any process's tick tasks.
        findings += operate(FirestoreCanary(session.context(), db, emulated_url(session, PROBED)),
                            lambda: read_audit(db, session.names), RealClock(), ticks=True,
                            now=lambda: dt.datetime.now(dt.UTC), names=session.names)
    if not report(findings, click.echo):
        raise SystemExit(1)
