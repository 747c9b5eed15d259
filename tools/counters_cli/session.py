"""What every command shares: the target it talks to, the session (client, domain calls and
consoles), domain errors as one-line messages, and how an answer is printed (JSON or text)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from counting.features import declarations
from counting.features.context import Context
from counting.features.counters import Count, get_count
from counting.features.sequences.housekeeping import lost_records
from counting.features.trends import TopTags, top_tags, track
from counting.foundation import config
from counting.foundation.errors import CounterError
from counting.rollup import audit
from counting.rollup.repartition import Changed, change
from counting.rollup.status import RollupStatus, read_statuses
from counting.writepath.partitions import Part, read_count
from counting.writepath.waking import enqueue_tick
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore
from rich.console import Console, RenderableType

DEFAULT_PROJECT = "demo-counters"
DEFAULT_EMULATOR_HOST = "127.0.0.1:8080"
# Cloud Tasks' default emulator port, where the backend's project's firebase.json names none.
TASKS_PORT = 9499
# Request ids are scoped to a user (the callables use the caller's uid); the CLI's own requests
# are those of this uid, so they never collide with a client's.
CLI_UID = "operator-cli"


@dataclass(frozen=True, kw_only=True)
class Target:
    """The Firestore the command talks to: an emulator (`emulator_host`) or production (None)."""

    project: str
    emulator_host: str | None
    # What gave the project ("--project", "$GOOGLE_CLOUD_PROJECT", a .firebaserc's path), said
    # beside it; "" for DEFAULT_PROJECT, which nothing gave.
    origin: str = dataclasses.field(default="", compare=False)

    def describe(self) -> str:
        origin = (f"from {self.origin}" if self.origin
                  else "no --project, $GOOGLE_CLOUD_PROJECT or .firebaserc names one")
        if self.emulator_host is not None:
            return (f"target: Firestore emulator {self.emulator_host}, project {self.project} "
                    f"({origin})")
        return f"target: PRODUCTION Firestore, project {self.project} ({origin})"


def resolve_target(project: str | None, env: Mapping[str, str]) -> Target:
    """The emulator unless a project is named (`--project` or GOOGLE_CLOUD_PROJECT) and no
    FIRESTORE_EMULATOR_HOST is set. A `demo-` project never leaves the emulator: Firebase reserves
    the prefix for emulator-only projects."""
    host = env.get("FIRESTORE_EMULATOR_HOST") or None
    given = [(value, origin) for value, origin in (
        (project, "--project"), (env.get("GOOGLE_CLOUD_PROJECT"), "$GOOGLE_CLOUD_PROJECT"),
        (env.get("GCLOUD_PROJECT"), "$GCLOUD_PROJECT")) if value]
    named, origin = given[0] if given else (DEFAULT_PROJECT, "")
    if origin in ("--project", "$GOOGLE_CLOUD_PROJECT") and host is None \
            and not named.startswith("demo-"):
        return Target(project=named, emulator_host=None, origin=origin)
    return Target(project=named, emulator_host=host or DEFAULT_EMULATOR_HOST, origin=origin)


def default_project(firebaserc: Path) -> str | None:
    """The project a Firebase project folder's .firebaserc names as its default alias (the one
    `firebase emulators:start` runs as), None without one."""
    try:
        found = json.loads(firebaserc.read_text())
    except (OSError, ValueError):
        return None
    projects = found.get("projects") if isinstance(found, dict) else None
    default = projects.get("default") if isinstance(projects, dict) else None
    return default if isinstance(default, str) and default else None


@dataclass(frozen=True, kw_only=True)
class Domain:
    """The client's maker and the reads and calls whose answers the commands that test_cli
    covers print (`get`, `track`, `top`, `status`, `partitions`; `real_domain`). Those commands
    make them through their session, not by importing them, so that a test gives fakes
    (`CliRunner.invoke(cli, ..., obj=Domain(...))`). The other commands call the domain
    themselves, on the client `connect` makes (a fake's too); `watched_db` and the context's
    waker are not in it."""

    connect: Callable[..., firestore.Client]
    get_count: Callable[..., Count]
    track: Callable[..., int]
    top_tags: Callable[..., TopTags]
    read_statuses: Callable[..., list[tuple[Part, RollupStatus]]]
    audit_state: Callable[..., dict[str, Any]]
    lost_records: Callable[..., int]
    read_count: Callable[..., int]
    repartition: Callable[..., Changed]
    enqueue_tick: Callable[..., bool]


def real_domain() -> Domain:
    """The real calls: a client of the target, and the domain's functions (`counting`)."""
    return Domain(connect=connect, get_count=get_count, track=track, top_tags=top_tags,
                  read_statuses=read_statuses, audit_state=audit_state,
                  lost_records=lost_records, read_count=read_count, repartition=change,
                  enqueue_tick=enqueue_tick)


def audit_state(db: firestore.Client, names: config.Names) -> dict[str, Any]:
    """The exactness audit's record (internal/audit; {} before its first run)."""
    return audit.audit_ref(db, names).get().to_dict() or {}


class Session:
    """Per-invocation state: the target, its client (made on first use), the domain's calls and
    the consoles."""

    def __init__(self, target: Target, domain: Domain | None = None) -> None:
        self.target = target
        self.domain = domain or real_domain()
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self._db: firestore.Client | None = None
        self._context: Context | None = None
        # The backend codebase operated (`use_backend`): there is no default, so that no command
        # writes to a placement nobody stated.
        self.backend: Path | None = None
        self._placement: config.Placement | None = None
        self._declared: declarations.Declared | None = None
        self.firebase_json: Path | None = None

    def use_backend(self, folder: Path, named: bool = False) -> None:
        """Operate the backend codebase in `folder` (an install's, or this repository's
        functions/): its placement (placement.json, checked against install.json and the
        host's firebase.json as its functions check it) and declarations, and the emulators of
        its project's firebase.json. `named`: --backend gave it."""
        try:
            placement = config.Placement.read(folder)
            declared = declarations.Declared.of_codebase(folder, placement)
        except (ValueError, CounterError) as error:
            raise click.UsageError(f"{'--backend: ' if named else ''}{error}") from None
        self._placement, self._declared = placement, declared
        self.backend = folder.resolve()
        self.firebase_json = self.backend.parent / "firebase.json"
        # Nothing named a project: the one the backend's project runs its emulators as.
        firebaserc = self.backend.parent / ".firebaserc"
        if not self.target.origin and (project := default_project(firebaserc)) is not None:
            self.target = dataclasses.replace(self.target, project=project, origin=str(firebaserc))
        # The project's own Firestore emulator, where firebase.json gives it and nothing else
        # named one (a host may move it off 8080).
        if (self.target.emulator_host == DEFAULT_EMULATOR_HOST
                and not os.environ.get("FIRESTORE_EMULATOR_HOST")):
            entry = emulators_of(self.firebase_json).get("firestore", {})
            if isinstance(entry, dict) and str(entry.get("port", "")).isdigit():
                self.target = dataclasses.replace(
                    self.target, emulator_host=f"{entry.get('host', '127.0.0.1')}:{entry['port']}")

    @property
    def placement(self) -> config.Placement:
        """Where the operated backend lives (a UsageError before `use_backend`)."""
        if self._placement is None:
            raise click.UsageError("no backend to operate: give its folder with --backend DIR")
        return self._placement

    @property
    def declared(self) -> declarations.Declared:
        """The operated backend's collection counters."""
        self.placement  # noqa: B018 (says there is no backend)
        assert self._declared is not None
        return self._declared

    def db(self) -> firestore.Client:
        """The Firestore client; announces the target first (the first line of output)."""
        if self._db is None:
            self.err.print(f"{self.target.describe()}; backend {self.backend}",
                           style="bold red" if self.production else None)
            self._db = self.domain.connect(self.target, self.placement, self.firebase_json)
        return self._db

    def context(self) -> Context:
        """The command's context of the domain (made on first use), at the backend's
        placement: its writes wake the backend's rollup through Cloud Tasks, as the functions'
        do."""
        if self._context is None:
            self._context = Context.for_process(placement=self.placement)
        return self._context

    @property
    def names(self) -> config.Names:
        """The backend's collection ids."""
        return self.placement.names

    def watched_db(self) -> firestore.Client:
        """The client of the database whose documents collection counters count."""
        database = self.placement.watched_database
        if database == self.placement.database:
            return self.db()
        return firestore.Client(project=self.target.project, database=database,
                                credentials=self.db()._credentials)

    @property
    def production(self) -> bool:
        return self.target.emulator_host is None

    def confirm_destructive(self, what: str, yes: bool) -> None:
        """Ask before a destructive operation on production (`--yes` skips the question)."""
        self.db()
        if self.production and not yes:
            click.confirm(f"{what} in PRODUCTION project {self.target.project}?", abort=True,
                          err=True)

    def report(self, as_json: bool, figures: Mapping[str, Any], *human: RenderableType) -> None:
        """A command's answer on stdout: with --json, `figures` as one plain line of JSON (for
        programs such as jq, not for rich's console); else `human`, each a line or a table."""
        if as_json:
            click.echo(json.dumps(figures))
            return
        for part in human:
            self.out.print(part)


pass_session = click.make_pass_decorator(Session)
HELP_ASKED = "counters.help_asked"
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


# A line of a functions .env file as firebase-tools reads it: `[export] KEY=VALUE`, the value
# in single or double quotes or bare up to a `#` comment.
_ENV_LINE = re.compile(r"""\s*(?:export\s+)?([\w./]+)\s*=[ \t]*"""
                       r"""('(?:\\'|[^'])*'|"(?:\\"|[^"])*"|[^#\r\n]*)\s*(?:#.*)?""")


def dotenv(text: str) -> dict[str, str]:
    """The variables of a functions .env file (escapes in quoted values are not expanded)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _ENV_LINE.fullmatch(line)
        if match is None or line.lstrip().startswith("#"):
            continue
        value = match[2].strip()
        quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
        found[match[1]] = value[1:-1] if quoted else value
    return found


def deploy_variables(codebase: Path, project: str, *, emulated: bool = False) -> dict[str, str]:
    """The variables a deploy of `codebase` to `project` reads: its .env, then .env.<project>;
    the Functions emulator's (`emulated`) then .env.local."""
    variables: dict[str, str] = {}
    for name in (".env", f".env.{project}", *([".env.local"] if emulated else [])):
        if (codebase / name).exists():
            variables.update(dotenv((codebase / name).read_text()))
    return variables


def connect(target: Target, placement: config.Placement,
            firebase_json: Path | None) -> firestore.Client:
    """A client of `placement`'s database in the target."""
    if target.emulator_host is not None:
        # The client library switches to the emulator (anonymous credentials) on this variable.
        os.environ["FIRESTORE_EMULATOR_HOST"] = target.emulator_host
        # The domain's writes enqueue their second's tick tasks (one per partition written to):
        # to the stack's Cloud Tasks emulator, beside the Firestore one.
        tasks_port = emulators_of(firebase_json).get("tasks", {}).get("port", TASKS_PORT)
        host = target.emulator_host.rpartition(":")[0]
        os.environ.setdefault("CLOUD_TASKS_EMULATOR_HOST", f"{host}:{tasks_port}")
        check_reachable(target.emulator_host, start=start_command(firebase_json))
        return firestore.Client(project=target.project, database=placement.database)
    try:
        return firestore.Client(project=target.project, database=placement.database)
    except auth_exceptions.DefaultCredentialsError as exc:
        raise click.ClickException(
            "no Application Default Credentials: run `gcloud auth application-default login` "
            f"or set GOOGLE_APPLICATION_CREDENTIALS ({exc})"
        ) from None


def emulators_of(firebase_json: Path | None) -> dict[str, Any]:
    """The `emulators` entry of a project's firebase.json ({} without one)."""
    try:
        found = json.loads(firebase_json.read_text()) if firebase_json is not None else {}
    except (OSError, ValueError):
        return {}
    emulators = found.get("emulators") if isinstance(found, dict) else None
    return emulators if isinstance(emulators, dict) else {}


def start_command(firebase_json: Path | None) -> str:
    """How the project's emulators start: this repository's `make dev`, else firebase-tools'."""
    folder = firebase_json.parent if firebase_json is not None else None
    makefile = folder / "Makefile" if folder is not None else None
    if makefile is not None and makefile.is_file() and re.search(
            r"^dev:", makefile.read_text(errors="replace"), re.MULTILINE):
        return "`make dev`"
    where = f" in {folder}" if folder is not None else ""
    return f"`firebase emulators:start`{where}"


def check_reachable(host_port: str, emulator: str = "Firestore",
                    start: str = "`firebase emulators:start`") -> None:
    """Fail at once rather than after the client's minute of retries when nothing listens."""
    host, _, port = host_port.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
    except (OSError, ValueError):
        raise click.ClickException(
            f"no {emulator} emulator at {host_port}: start the emulators with {start}"
        ) from None


def iso(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


class CommandGroup(click.Group):
    """Turns domain and Firestore errors into one-line messages with exit status 1; notes a
    `--help` of a subcommand (HELP_ASKED), which needs no backend."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[HELP_ASKED] = "--help" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CounterError as exc:
            raise click.ClickException(str(exc)) from None
        except gexc.GoogleAPICallError as exc:
            raise click.ClickException(f"Firestore: {exc}") from None
