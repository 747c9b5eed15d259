"""`make deploy PROJECT=<id>`: preflight checks, then the deploy steps in the order that is safe.

1. Rules and indexes (and TTL policies) first: the rollup's and Top-K's queries fail in production
   until their composite indexes exist, and the new callables expect the new rules.
2. Functions: the callables, the scheduled rollup and its task queue.
3. Hosting: `firebase.json`'s predeploy builds web/dist for production first.

The preflight stops before anything is deployed when: the project is missing or an emulator-only
`demo-` one, the Firebase CLI has no login, the project has no web app (Hosting's
`/__/firebase/init.json` would be empty), or the local checks (lint, unit, webunit with its
check that a production bundle names no emulator, runtime-check) fail.
`--dry-run` prints the steps without running them. docs/deploy.md walks through the first deploy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
FIREBASE = str(ROOT / "node_modules/.bin/firebase")
STEPS: tuple[tuple[str, str], ...] = (
    ("rules, indexes and TTL policies", "firestore"),
    ("functions", "functions"),
    ("web client (built by the predeploy)", "hosting"),
)


def deploy_commands(project: str) -> list[list[str]]:
    """The firebase commands of a deploy, in order."""
    return [[FIREBASE, "deploy", "--project", project, "--only", only] for _, only in STEPS]


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


def preflight(project: str, run: Callable[[Sequence[str]], None]) -> None:
    if not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") and not firebase_json("login:list"):
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
    """Deploy rules and indexes, then functions, then hosting, to PROJECT."""
    problem = problem_with(project)
    if problem is not None:
        raise click.UsageError(problem)
    assert project is not None

    def run(command: Sequence[str]) -> None:
        click.echo("+ " + " ".join(command), err=True)
        if subprocess.run(command, cwd=ROOT, check=False).returncode != 0:
            raise click.ClickException(f"{command[0]} failed: nothing after it was deployed")

    if dry_run:
        for command in deploy_commands(project):
            click.echo(" ".join(command))
        return
    preflight(project, run)
    for (what, _), command in zip(STEPS, deploy_commands(project), strict=True):
        click.echo(f"deploying {what}", err=True)
        run(command)
    click.echo(f"deployed to {project}: https://{project}.web.app", err=True)


if __name__ == "__main__":
    sys.exit(main())
