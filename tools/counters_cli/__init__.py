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
from .session import CommandGroup, Session, resolve_target

# The commands that add, remove or load an install rather than operate one.
PROJECT_COMMANDS = {"init", "remove", "emulator-rules"}


@click.group(cls=CommandGroup)
@click.option("--project", metavar="ID",
              help="A real Firebase project (default: $GOOGLE_CLOUD_PROJECT), reached with "
                   "Application Default Credentials. Without one, or with "
                   "FIRESTORE_EMULATOR_HOST set, the emulator (default 127.0.0.1:8080, "
                   "project demo-counters).")
@click.option("--backend", metavar="DIR", type=click.Path(file_okay=False, path_type=Path),
              help="An install's folder in a host project (counters init): its database, "
                   "collection prefix and declarations. Default: the install of the project "
                   "this directory is in (its firebase.json's folder), else this repository's "
                   "backend; a project with several installs must name one.")
@click.pass_context
def cli(ctx: click.Context, project: str | None, backend: Path | None) -> None:
    """Operate distributed counters, ticket sequences and trending tags."""
    ctx.obj = Session(resolve_target(project, os.environ))
    if ctx.invoked_subcommand in PROJECT_COMMANDS:
        return  # they work on a host project's files, whatever state its install is in
    if backend is None:
        backend = installed_backend(Path.cwd())
        if backend is not None:
            ctx.obj.err.print(f"backend: the install in {backend.resolve()}")
    if backend is not None:
        ctx.obj.use_backend(backend)


def installed_backend(here: Path) -> Path | None:
    """The install this directory's project holds (`counters init` leaves its record in its
    folder beside firebase.json, in this directory or a parent), None when the project holds
    none (this repository's own backend). Fails closed: a project with several installs names
    one with --backend, rather than the command guessing where the data lives."""
    for root in (here, *here.parents):
        if (root / "firebase.json").exists():
            found = sorted(record.parent for record in root.glob(f"*/{install.RECORD}"))
            if len(found) > 1:
                raise click.UsageError(
                    f"{root} holds several installs ({', '.join(f.name for f in found)}): "
                    "name one with --backend DIR")
            return found[0] if found else None
    return None


for command in (counters.create, counters.inc, counters.get, counters.reset, watch.watch,
                trends.track, trends.top, sequences.seq, collections.backfill, claims.claims,
                status.status, status.partitions_command, status.audit_command, load.load,
                doctor.doctor, install.init, install.remove, install.emulator_rules):
    cli.add_command(command)


def main() -> None:
    """The console script `counters`."""
    cli(prog_name="counters")
