"""`make deploy PROJECT=<id>`: preflight checks, then the deploy steps in the order that is safe.

1. The runtime service account into functions/.env.<project> (RUNTIME_SERVICE_ACCOUNT, the
   project's default compute account): the deploy manifest names it as the invoker of every
   tick function (`rolluptick`, `rolluptick1` ..., one per partition index of the rollup up to
   ROLLUP_PARTITIONS_MAX: handlers/task_queues.py), and firebase-tools reads the value there.
2. Rules and indexes (and TTL policies): the rollup's and Top-K's queries fail in production
   until their composite indexes exist, and the new callables expect the new rules.
3. Functions: the callables, the scheduled rollup and the tick functions, each with its own task
   queue. firebase-tools grants the runtime account the Cloud Tasks enqueuer role on each queue
   and the Cloud Run invoker role on each tick function.
4. Hosting: `firebase.json`'s predeploy builds web/dist for production first.
5. What firebase-tools does not grant: the runtime account may act as itself
   (roles/iam.serviceAccountUser), which enqueueing a task with its OIDC token requires.
6. `counters doctor` (counters_cli/doctor.py): what was deployed against what the code deploys
   (the functions, the task queues and their roles, every tick function running as the runtime
   account, the database, indexes, TTL policies, rules, the scheduler job), a canary counter and
   the exactness audit; the deploy fails, naming every broken part, if a check fails.

Steps 1, 5 and 6 call Google's REST APIs with the Firebase CLI's credentials
(tools/access_token.cjs). The preflight stops before anything is deployed when: the project is
missing or an emulator-only `demo-` one, the Firebase CLI has no login, the project has no web
app (Hosting's `/__/firebase/init.json` would be empty), or the local checks (lint, unit,
webunit with its check that a production bundle names no emulator, runtime-check) fail.
`--dry-run` prints the steps without running them. docs/deploy.md walks through the first deploy.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import google.oauth2.credentials
from counters_cli import doctor, installed_backend
from counters_cli.canary import Finding
from counters_cli.doctor import ACT_AS, ENQUEUER, INVOKER
from counters_cli.google_apis import POLICY_V3
from counters_cli.session import Session, Target
from counting.features.context import Context
from google.cloud import firestore

ROOT = Path(__file__).resolve().parent.parent
FIREBASE = str(ROOT / "node_modules/.bin/firebase")

# The parameter the tick functions' manifests name as their invoker
# (handlers/task_queues.py).
RUNTIME_ACCOUNT = "RUNTIME_SERVICE_ACCOUNT"
# An access token from the Firebase CLI is used for this long before the next is asked for.
TOKEN_LIFE = dt.timedelta(minutes=30)

Json = dict[str, Any]
# A Google REST call: method, URL, JSON body (None: none) -> the JSON answer.
Call = Callable[[str, str, Json | None], Json]
Run = Callable[[Sequence[str]], None]
Step = tuple[str, Callable[[], object]]


def problem_with(project: str | None) -> str | None:
    """Why `project` cannot be deployed to, from its name alone."""
    if not project:
        return "name the project: make deploy PROJECT=<firebase project id>"
    if project.startswith("demo-"):
        return f"{project} is an emulator-only project (the demo- prefix): it cannot be deployed"
    return None


def firebase_json(*args: str) -> object:
    """The `result` of a firebase CLI command run with --json."""
    done = subprocess.run([FIREBASE, *args, "--json"], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    try:
        return json.loads(done.stdout).get("result")
    except (ValueError, AttributeError):
        raise click.ClickException(f"firebase {' '.join(args)} failed: "
                                   f"{(done.stderr or done.stdout).strip()[:300]}") from None


def access_token() -> str:
    """An access token from the Firebase CLI's credentials (its login, FIREBASE_TOKEN or
    Application Default Credentials, as `firebase deploy` picks them)."""
    done = subprocess.run(["node", str(ROOT / "tools/access_token.cjs")], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    if done.returncode != 0 or not done.stdout:
        raise click.ClickException(f"no access token from the Firebase CLI's credentials: "
                                   f"{done.stderr.strip()[:300]}")
    return done.stdout.strip()


def google_api(token: Callable[[], str]) -> Call:
    """Calls Google's REST APIs with a fresh `token()` each (a deploy outlasts a token)."""

    def call(method: str, url: str, body: Json | None) -> Json:
        request = urllib.request.Request(
            url, method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token()}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                found: Json = json.loads(answer.read() or b"{}")
                return found
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError, KeyError, TypeError):  # Google's error shape
                detail = str(json.loads(detail)["error"]["message"])
            raise click.ClickException(f"{method} {url}: HTTP {error.code}: {detail[:300]}") \
                from None
        except urllib.error.URLError as error:
            raise click.ClickException(f"{method} {url}: {error.reason}") from None

    return call


def account_url(project: str, account: str) -> str:
    return f"https://iam.googleapis.com/v1/projects/{project}/serviceAccounts/{account}"


def default_compute_account(call: Call, project: str) -> str:
    """The account 2nd-gen functions run as when they name none, as ours do (a manifest test)."""
    found = call("GET", f"https://cloudresourcemanager.googleapis.com/v1/projects/{project}", None)
    return f"{found['projectNumber']}-compute@developer.gserviceaccount.com"


def declared_account(env_file: Path) -> str | None:
    """RUNTIME_SERVICE_ACCOUNT as functions/.env.<project> sets it, if it does."""
    if not env_file.exists():
        return None
    for line in env_file.read_text().splitlines():
        found = re.fullmatch(rf"\s*(?:export\s+)?{RUNTIME_ACCOUNT}\s*=\s*['\"]?([^'\"#\s]*)"
                             r"['\"]?\s*(?:#.*)?", line)
        if found:
            return found[1]
    return None


def declare_account(call: Call, project: str, env_file: Path) -> str:
    """Makes `env_file` (functions/.env.<project>) name the runtime service account, which
    firebase-tools reads for the manifest's RUNTIME_SERVICE_ACCOUNT; returns the account."""
    account = default_compute_account(call, project)
    declared = declared_account(env_file)
    if declared == account:
        return account
    if declared is not None:
        raise click.ClickException(
            f"functions/{env_file.name} sets {RUNTIME_ACCOUNT}={declared}, but the functions run "
            f"as {account}, the project's default compute account: correct the line, or remove "
            "it and make deploy writes it")
    text = env_file.read_text() if env_file.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    env_file.write_text(
        f"{text}# The account the functions run as: the tick functions' invoker (make deploy "
        "wrote it).\n"
        f"{RUNTIME_ACCOUNT}={account}\n")
    click.echo(f"wrote {RUNTIME_ACCOUNT}={account} into functions/{env_file.name}", err=True)
    return account


def grant_act_as(call: Call, project: str, account: str) -> bool:
    """Lets `account` act as itself (roles/iam.serviceAccountUser on the account): creating a
    task whose OIDC token names an account requires iam.serviceAccounts.actAs on it, and the
    Admin SDK names the caller's own. Returns whether the policy changed."""
    url = account_url(project, account)
    policy = call("POST", f"{url}:getIamPolicy", POLICY_V3)
    if doctor.grants(policy, ACT_AS, account):
        return False
    bindings = [dict(binding) for binding in policy.get("bindings", ())]
    mine = next((binding for binding in bindings
                 if binding["role"] == ACT_AS and "condition" not in binding), None)
    if mine is None:
        bindings.append({"role": ACT_AS, "members": [f"serviceAccount:{account}"]})
    else:
        mine["members"] = [*mine.get("members", ()), f"serviceAccount:{account}"]
    # The policy's etag makes a concurrent change fail this call rather than be overwritten.
    call("POST", f"{url}:setIamPolicy", {"policy": {**policy, "bindings": bindings}})
    click.echo(f"granted {account} {ACT_AS} on itself", err=True)
    return True


def plan(project: str, run: Run, call: Call, check: Callable[[], list[Finding]],
         functions: Path) -> list[Step]:
    """The deploy's steps in order: each as --dry-run prints it (a firebase command, or as a
    comment what make deploy does through Google's APIs) and what running it does. `check` is
    counters doctor on the deployed project."""
    env_file = functions / f".env.{project}"

    def account() -> str:
        declared = declared_account(env_file)
        assert declared is not None, "the first step writes it"
        return declared

    def firebase(only: str) -> Step:
        command = [FIREBASE, "deploy", "--project", project, "--only", only]
        return " ".join(command), lambda: run(command)

    return [
        (f"# {RUNTIME_ACCOUNT}=<project number>-compute@developer.gserviceaccount.com into "
         f"functions/{env_file.name} (Resource Manager projects.get), unless it is there",
         lambda: declare_account(call, project, env_file)),
        firebase("firestore"),
        firebase("functions"),
        firebase("hosting"),
        (f"# grant: {ACT_AS} on the runtime account to itself (IAM serviceAccounts."
         "getIamPolicy, setIamPolicy)", lambda: grant_act_as(call, project, account())),
        (f"# doctor: counters doctor --project {project} (the functions, the tick functions' "
         f"queues and their roles ({ENQUEUER}, {INVOKER}, {ACT_AS}), the database, indexes, "
         "TTL policies, rules and scheduler job against what the code deploys; a canary "
         "counter; the exactness audit)",
         lambda: verify(project, check)),
    ]


def verify(project: str, check: Callable[[], list[Finding]]) -> None:
    """Runs doctor; a failed check fails the deploy, after everything is deployed."""
    if not doctor.report(check(), lambda line: click.echo(line, err=True)):
        raise click.ClickException(
            f"deployed to {project}, but doctor found the problems above (docs/deploy.md, "
            "\"Reading counters doctor\"); index builds, TTL policies and the scheduler's first "
            f"run settle within minutes: run `functions/venv/bin/counters doctor --project "
            f"{project}` again")


def cli_credentials() -> google.oauth2.credentials.Credentials:
    """The Firebase CLI's credentials (access_token), refreshed as google-auth needs."""

    def refresh(request: object, scopes: object) -> tuple[str, dt.datetime]:
        # A token from the CLI lives an hour; google-auth compares naive UTC times.
        return access_token(), dt.datetime.now(dt.UTC).replace(tzinfo=None) + TOKEN_LIFE

    return google.oauth2.credentials.Credentials(  # type: ignore[no-untyped-call]
        token=None, refresh_handler=refresh)


def check_deployed(project: str, here: Path = ROOT) -> list[Finding]:
    """counters doctor on the backend in `project` that the CLI finds from `here` (the codebase
    this repository's firebase.json lists, its placement checked as every command checks it)."""
    session = Session(Target(project=project, emulator_host=None, origin="--project"))
    session.use_backend(installed_backend(here))
    credentials = cli_credentials()
    placement = session.placement
    db = firestore.Client(project=project, database=placement.database, credentials=credentials)
    return doctor.deployed(project, placement, session.backend, credentials,
                           Context.for_process(placement=placement), db)


def preflight(project: str, run: Run) -> None:
    if not (os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("FIREBASE_TOKEN")
            or firebase_json("login:list")):
        raise click.ClickException("the Firebase CLI is not logged in: npx firebase login")
    if not firebase_json("apps:list", "WEB", "--project", project):
        raise click.ClickException(
            f"{project} has no web app: add one (console, Project settings, Your apps) so that "
            "Hosting serves its configuration at /__/firebase/init.json")
    run(["make", "lint", "unit", "webunit", "runtime-check"])


@click.command()
@click.option("--project", envvar="PROJECT", help="The Firebase project (or $PROJECT).")
@click.option("--dry-run", is_flag=True, help="Print the deploy steps; run nothing.")
def main(project: str | None, dry_run: bool) -> None:
    """Deploy rules and indexes, then functions, then hosting, to PROJECT, and wire the
    rollup's task queues."""
    problem = problem_with(project)
    if problem is not None:
        raise click.UsageError(problem)
    assert project is not None

    def run(command: Sequence[str]) -> None:
        click.echo("+ " + " ".join(command), err=True)
        if subprocess.run(command, cwd=ROOT, check=False).returncode != 0:
            raise click.ClickException(f"{command[0]} failed: nothing after it was deployed")

    steps = plan(project, run, google_api(access_token), lambda: check_deployed(project),
                 functions=installed_backend(ROOT))
    if dry_run:
        for shown, _ in steps:
            click.echo(shown)
        return
    preflight(project, run)
    for shown, step in steps:
        if shown.startswith("#"):
            click.echo(shown[2:], err=True)
        step()
    click.echo(f"deployed to {project}: https://{project}.web.app", err=True)


if __name__ == "__main__":
    sys.exit(main())
