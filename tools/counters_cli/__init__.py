"""The `counters` operator command: counters, ticket sequences, trending tags, collection
counters, roles, the rollup's health, a load generator and a check of a deployment (doctor).

It holds Admin-SDK privileges and calls the domain (`counting`) directly, with the same input
validation as the callables (`counting.foundation.inputs`); domain errors become a one-line message
and exit status 1. It talks to the Firestore emulator unless it is given a real project and no
emulator host, and its first line (on stderr) says which (docs/operations.md, operator CLI).

This module only assembles the command: one module per command group, and `session` for what
they share.
"""

from __future__ import annotations

import os
from pathlib import Path

import click
from counting.foundation import config

from . import (
    claims,
    collections,
    counters,
    doctor,
    install,
    load,
    sequences,
    status,
    trends,
    watch,
)
from .session import HELP_ASKED, CommandGroup, Session, resolve_target

# The commands that add, remove or load an install rather than operate one.
PROJECT_COMMANDS = {"init", "remove", "emulator-rules"}


@click.group(cls=CommandGroup)
@click.option("--project", metavar="ID",
              help="A real Firebase project (default: $GOOGLE_CLOUD_PROJECT), reached with "
                   "Application Default Credentials. Without one, or with "
                   "FIRESTORE_EMULATOR_HOST set, the emulator (the one the project's "
                   "firebase.json names, else 127.0.0.1:8080), as the project its .firebaserc "
                   "names by default (else demo-counters); the first line says which.")
@click.option("--backend", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="A backend codebase's folder (an install's, from counters init): its "
                   "placement.json, declarations and project. Default: the backend codebase "
                   "that the firebase.json of the project this directory is in lists; a project "
                   "with several must name one, and without one the command refuses.")
@click.pass_context
def cli(ctx: click.Context, project: str | None, backend: Path | None) -> None:
    """Operate distributed counters, ticket sequences and trending tags."""
    # A test's invocation gives the domain it fakes as the context's object (else None).
    ctx.obj = Session(resolve_target(project, os.environ), ctx.obj)
    if ctx.invoked_subcommand in PROJECT_COMMANDS or ctx.meta.get(HELP_ASKED):
        return  # they work on a host project's files, whatever state its install is in
    named = backend is not None
    if backend is None:
        backend = installed_backend(Path.cwd())
    ctx.obj.use_backend(backend, named=named)


def installed_backend(here: Path) -> Path:
    """The backend codebase of the project this directory is in: the one codebase its
    firebase.json (here or in a parent folder) lists whose folder holds a placement.json or an
    install.json (an install's, or this repository's functions/, which states the placement
    of its own stack). Fails closed: with none, or several, it refuses (--backend names one),
    rather than the command guessing where the data lives."""
    for root in (here, *here.parents):
        if (root / "firebase.json").exists():
            found = backends(root)
            if len(found) > 1:
                raise click.UsageError(
                    f"{root} holds several backends ({', '.join(f.name for f in found)}): "
                    "name one with --backend DIR")
            if not found:
                raise click.UsageError(
                    f"{root / 'firebase.json'} lists no counters backend (a functions codebase "
                    f"whose folder holds {config.PLACEMENT_FILE}): run `counters init` in "
                    f"{root} first (docs/adopt.md), or name the backend's folder with "
                    "--backend DIR")
            return found[0]
    raise click.UsageError(
        f"no Firebase project here: no firebase.json in {here} or a folder above it. Run "
        "counters in the folder of the project the backend is installed in, or name the "
        "backend's folder with --backend DIR (it never falls back to a default placement)")


def backends(root: Path) -> list[Path]:
    """The codebases `root`'s firebase.json lists that hold a backend's placement or record."""
    found = []
    for entry in install.as_list(install.read_firebase_json(root).get("functions")):
        source = entry.get("source") if isinstance(entry, dict) else None
        folder = root / source if isinstance(source, str) else None
        if folder is not None and any((folder / name).exists() for name in (
                config.PLACEMENT_FILE, install.RECORD)):
            found.append(folder)
    return sorted(found)


for command in (counters.create, counters.inc, counters.get, counters.reset, watch.watch,
                trends.track, trends.top, sequences.seq, collections.backfill,
                collections.extension_rules, claims.claims,
                status.status, status.partitions_command, status.audit_command, load.load,
                doctor.doctor, install.init, install.remove, install.emulator_rules):
    cli.add_command(command)


def main() -> None:
    """The console script `counters`."""
    cli(prog_name="counters")
