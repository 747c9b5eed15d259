"""The `counters` operator command: counters, ticket sequences, trending tags and a load generator.

It holds Admin-SDK privileges and calls the domain (`counting`) directly, with the same input
validation as the callables (`counting.inputs`); domain errors become a one-line message and exit
status 1. It talks to the Firestore emulator unless it is given a real project and no emulator
host, and its first line (on stderr) says which.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import queue
import socket
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import firebase_admin
from counting import (
    collections,
    config,
    counters,
    declarations,
    inputs,
    kinds,
    sequences,
    trends,
)
from counting.errors import CounterError, NotFound
from counting.status import read_status
from firebase_admin import auth as firebase_auth
from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exceptions
from google.cloud import firestore
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

DEFAULT_PROJECT = "demo-counters"
DEFAULT_EMULATOR_HOST = "127.0.0.1:8080"
# Where the stack's Cloud Tasks emulator listens (firebase.json), beside the Firestore one: the
# domain's writes enqueue a `rolluptick` there to wake a sleeping rollup.
DEFAULT_TASKS_EMULATOR_PORT = 9499
DEFAULT_AUTH_EMULATOR_HOST = "127.0.0.1:9099"
CLI_APP = "counters-cli"  # the firebase_admin app the claims commands use
# Request ids are scoped to a user (the callables use the caller's uid); the CLI's own requests
# are those of this uid, so they never collide with a client's.
CLI_UID = "operator-cli"


# --- Target selection ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Target:
    """The Firestore the command talks to: an emulator (`emulator_host`) or production (None)."""

    project: str
    emulator_host: str | None

    def describe(self) -> str:
        if self.emulator_host is not None:
            return f"target: Firestore emulator {self.emulator_host}, project {self.project}"
        return f"target: PRODUCTION Firestore, project {self.project}"


def resolve_target(project: str | None, env: Mapping[str, str]) -> Target:
    """The emulator unless a project is named (`--project` or GOOGLE_CLOUD_PROJECT) and no
    FIRESTORE_EMULATOR_HOST is set. A `demo-` project never leaves the emulator: Firebase reserves
    the prefix for emulator-only projects."""
    host = env.get("FIRESTORE_EMULATOR_HOST") or None
    named = project or env.get("GOOGLE_CLOUD_PROJECT") or None
    if named is not None and host is None and not named.startswith("demo-"):
        return Target(project=named, emulator_host=None)
    return Target(
        project=named or env.get("GCLOUD_PROJECT") or DEFAULT_PROJECT,
        emulator_host=host or DEFAULT_EMULATOR_HOST,
    )


class Session:
    """Per-invocation state: the target, its client (made on first use) and the consoles."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self._db: firestore.Client | None = None

    def db(self) -> firestore.Client:
        """The Firestore client; announces the target first (the first line of output)."""
        if self._db is None:
            self.err.print(self.target.describe(), style="bold red" if self.production else None)
            self._db = connect(self.target)
        return self._db

    @property
    def production(self) -> bool:
        return self.target.emulator_host is None

    def confirm_destructive(self, what: str, yes: bool) -> None:
        """Ask before a destructive operation on production (`--yes` skips the question)."""
        self.db()
        if self.production and not yes:
            click.confirm(f"{what} in PRODUCTION project {self.target.project}?", abort=True,
                          err=True)


def connect(target: Target) -> firestore.Client:
    if target.emulator_host is not None:
        # The client library switches to the emulator (anonymous credentials) on this variable.
        os.environ["FIRESTORE_EMULATOR_HOST"] = target.emulator_host
        host = target.emulator_host.rpartition(":")[0]
        os.environ.setdefault("CLOUD_TASKS_EMULATOR_HOST", f"{host}:{DEFAULT_TASKS_EMULATOR_PORT}")
        _check_reachable(target.emulator_host)
        return firestore.Client(project=target.project)
    try:
        return firestore.Client(project=target.project)
    except auth_exceptions.DefaultCredentialsError as exc:
        raise click.ClickException(
            "no Application Default Credentials: run `gcloud auth application-default login` "
            f"or set GOOGLE_APPLICATION_CREDENTIALS ({exc})"
        ) from None


def _check_reachable(host_port: str, emulator: str = "Firestore") -> None:
    """Fail at once rather than after the client's minute of retries when nothing listens."""
    host, _, port = host_port.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
    except (OSError, ValueError):
        raise click.ClickException(
            f"no {emulator} emulator at {host_port}: start the stack with `make dev`"
        ) from None


# --- Output helpers -----------------------------------------------------------------------------


def _iso(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _print_json(session: Session, value: Mapping[str, Any]) -> None:
    # Plain, one line: this output is for programs (jq), not for rich's console.
    click.echo(json.dumps(value))


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")


# --- The command group --------------------------------------------------------------------------


class _Group(click.Group):
    """Turns domain and Firestore errors into one-line messages with exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CounterError as exc:
            raise click.ClickException(str(exc)) from None
        except gexc.GoogleAPICallError as exc:
            raise click.ClickException(f"Firestore: {exc}") from None


@click.group(cls=_Group)
@click.option("--project", metavar="ID",
              help="A real Firebase project (default: $GOOGLE_CLOUD_PROJECT), reached with "
                   "Application Default Credentials. Without one, or with "
                   "FIRESTORE_EMULATOR_HOST set, the emulator (default 127.0.0.1:8080, "
                   "project demo-counters).")
@click.pass_context
def cli(ctx: click.Context, project: str | None) -> None:
    """Operate distributed counters, ticket sequences and trending tags."""
    ctx.obj = Session(resolve_target(project, os.environ))


pass_session = click.make_pass_decorator(Session)


@cli.command()
@click.argument("counter")
@click.option("--shards", type=int, help=f"Shard count ({config.MIN_SHARDS}..{config.MAX_SHARDS}).")
@click.option("--expected-rate", type=float, metavar="R",
              help="Size the shards for R writes/s instead.")
@click.option("--strategy", help=f"Shard choice: {', '.join(kinds.STRATEGIES)} "
                                 f"(default {kinds.DEFAULT_STRATEGY}).")
@json_option
@pass_session
def create(session: Session, counter: str, shards: int | None, expected_rate: float | None,
           strategy: str | None, as_json: bool) -> None:
    """Create COUNTER (an existing counter is left as it is)."""
    if shards is not None and expected_rate is not None:
        raise click.UsageError("give --shards or --expected-rate, not both")
    counter = inputs.counter_id(counter)
    declarations.check_plain(counter)
    shards = inputs.shard_count(shards)
    expected_rate = inputs.expected_rate(expected_rate)
    chosen = inputs.choice(strategy, "strategy", kinds.STRATEGIES, kinds.DEFAULT_STRATEGY)
    created = counters.create_counter(session.db(), counter, shards=shards,
                                      expected_rate=expected_rate, strategy=chosen)
    if as_json:
        _print_json(session, {"counter": counter, "shards": created.shards,
                              "created": created.created})
    elif created.created:
        session.out.print(f"created {counter} with {created.shards} shards")
    else:
        session.out.print(f"{counter} exists already with {created.shards} shards: "
                          "nothing changed")


@cli.command()
@click.argument("counter")
@click.option("--by", type=int, default=1, show_default=True, help="Amount (may be negative).")
@click.option("--request-id", metavar="ID", help="Counts once however often it is retried.")
@json_option
@pass_session
def inc(session: Session, counter: str, by: int, request_id: str | None, as_json: bool) -> None:
    """Add to COUNTER."""
    counter = inputs.counter_id(counter)
    by = inputs.increment_by(by)
    request_id = inputs.request_id(request_id)
    committed = counters.increment(session.db(), counter, by, request_id=request_id, uid=CLI_UID)
    if as_json:
        _print_json(session, {"counter": counter, "by": by, "applied": committed is not None,
                              "committed_at": _iso(committed)})
    elif committed is None:
        session.out.print(f"{counter}: request {request_id} was applied already; nothing added")
    else:
        session.out.print(f"{counter}: {by:+d} applied at {_iso(committed)}")


@cli.command()
@json_option
@pass_session
def status(session: Session, as_json: bool) -> None:
    """Print the rollup's health; exit 1 when it looks stuck (for scripts and probes)."""
    found = read_status(session.db())
    figures = {
        "state": "awake" if found.awake else "asleep",
        "holder": found.holder,
        "holder_since": _iso(found.holder_since),
        "last_tick_at": _iso(found.last_tick_at),
        "last_tick_age_s": None if found.last_tick_age_s is None else round(
            found.last_tick_age_s, 1),
        "tick_s": found.tick_s,
        "lag_s": found.lag_s,
        "stale": found.stale,
        "errors": found.errors,
    }
    if as_json:
        _print_json(session, figures)
    else:
        table = Table("", "", title="rollup", show_header=False)
        for key, value in figures.items():
            if key != "errors":
                table.add_row(key, "-" if value is None else str(value))
        session.out.print(table)
        for error in found.errors:
            session.out.print(f"  {error}")
        if not found.errors:
            session.out.print("no recent errors")
    if found.stale:
        raise click.ClickException(f"the rollup is stale: {found.stale}")


@cli.command()
@click.argument("counter")
@click.option("--strong", is_flag=True, help="Also sum the shards (N reads) for the exact value.")
@json_option
@pass_session
def get(session: Session, counter: str, strong: bool, as_json: bool) -> None:
    """Print COUNTER's rollup (one read), and with --strong its exact value."""
    counter = inputs.counter_id(counter)
    db = session.db()
    found = [counters.get_count(db, counter, "rollup")]
    if strong:
        found.append(counters.get_count(db, counter, "strong"))
    if as_json:
        _print_json(session, {"counter": counter, **{
            c.consistency: {"count": c.count, "as_of": _iso(c.as_of),
                            "documents_read": c.documents_read} for c in found}})
        return
    table = Table("consistency", "count", "as of", "documents read", title=counter)
    for c in found:
        table.add_row(c.consistency, str(c.count), _iso(c.as_of), str(c.documents_read))
    session.out.print(table)


@cli.command()
@click.argument("counter")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on production.")
@json_option
@pass_session
def reset(session: Session, counter: str, yes: bool, as_json: bool) -> None:
    """Set COUNTER (every shard and the rollup) to 0."""
    counter = inputs.counter_id(counter)
    session.confirm_destructive(f"reset counter {counter}", yes)
    counters.reset_counter(session.db(), counter)
    if as_json:
        _print_json(session, {"counter": counter, "count": 0})
    else:
        session.out.print(f"{counter}: reset to 0")


# --- watch --------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Seen:
    data: dict[str, Any] | None
    updates: int = 0


def _watch_table(counter: str, seen: _Seen) -> Table:
    table = Table("field", "value", title=f"counters/{counter}")
    data = seen.data
    if data is None:
        table.add_row("document", "deleted")
    else:
        updated = data.get("updated_at")
        table.add_row("count", str(data.get("count")))
        table.add_row("num_shards", str(data.get("num_shards")))
        table.add_row("updated_at", _iso(updated) if isinstance(updated, dt.datetime) else "-")
        table.add_row("rate (writes/s)", f"{float(data.get('rate') or 0.0):.1f}")
    table.add_row("updates received", str(seen.updates))
    table.caption = "Ctrl-C to stop"
    return table


def _watch_line(seen: _Seen) -> str:
    if seen.data is None:
        return "deleted"
    updated = seen.data.get("updated_at")
    return (f"count={seen.data.get('count')} num_shards={seen.data.get('num_shards')} "
            f"updated_at={_iso(updated) if isinstance(updated, dt.datetime) else '-'}")


@cli.command()
@click.argument("counter")
@click.option("--for", "duration", type=float, metavar="SECONDS",
              help="Stop after SECONDS (default: until Ctrl-C).")
@pass_session
def watch(session: Session, counter: str, duration: float | None) -> None:
    """Follow COUNTER's rollup document live, through a listener (as clients do).

    On a terminal it is a live table; otherwise one line per update."""
    counter = inputs.counter_id(counter)
    db = session.db()
    counters.get_count(db, counter)  # NotFound before listening to a document that isn't there
    updates: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def on_snapshot(docs: list[Any], changes: Any, read_time: Any) -> None:
        for doc in docs:
            updates.put(doc.to_dict() if doc.exists else None)

    listener = counters.counter_ref(db, counter).on_snapshot(on_snapshot)
    deadline = None if duration is None else time.monotonic() + duration
    seen = _Seen(data=None)
    printed = ""
    live = None
    if session.out.is_terminal:
        live = Live(_watch_table(counter, seen), console=session.out, auto_refresh=False)
        live.start()
    try:
        while deadline is None or time.monotonic() < deadline:
            timeout = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))
            try:
                seen.data = updates.get(timeout=timeout)
            except queue.Empty:
                continue
            seen.updates += 1
            if live is not None:
                live.update(_watch_table(counter, seen), refresh=True)
            elif (line := _watch_line(seen)) != printed:
                # The rollup also rewrites the document for fields not shown (rate, shard load).
                session.out.print(line)
                printed = line
    except KeyboardInterrupt:
        pass
    finally:
        listener.unsubscribe()  # type: ignore[no-untyped-call]  # untyped in google-cloud-firestore
        if live is not None:
            live.stop()


# --- trends -------------------------------------------------------------------------------------


def region_name(value: str) -> str:
    """A region as typed: case does not matter (the web page's rule too); the name is then held
    to the callables' rule, which refuses `global`."""
    return inputs.region(value.strip().lower())


def scope_name(value: str | None) -> str | None:
    """A region to read, as typed; `global` (any case) or nothing means every region: None."""
    if value is None or value.strip().lower() == config.GLOBAL_SCOPE:
        return None
    return region_name(value)


@cli.command("track")
@click.argument("region")
@click.argument("tags", nargs=-1, required=True)
@click.option("--request-id", metavar="ID", help="Counts once however often it is retried.")
@json_option
@pass_session
def track_event(session: Session, region: str, tags: tuple[str, ...], request_id: str | None,
                as_json: bool) -> None:
    """Count one event in REGION carrying TAGS (each once; case and a leading # are ignored)."""
    region = region_name(region)
    counted = inputs.tags(list(tags))
    request_id = inputs.request_id(request_id)
    recorded = trends.track(session.db(), region, counted, request_id=request_id, uid=CLI_UID)
    if as_json:
        _print_json(session, {"region": region, "tags": counted, "recorded": recorded})
    elif recorded == 0:
        session.out.print(f"{region}: request {request_id} was applied already; nothing recorded")
    else:
        session.out.print(f"{region}: recorded {', '.join(counted)}; `counters top --region "
                          f"{region}` lists it once the rollup has run (about a second)")


@cli.command()
@click.option("--region", help="A region, any case (default: global, the sum of all regions).")
@click.option("-k", "k", type=int, help="How many tags, 1..100 (default 10).")
@click.option("--window", help="1h or 24h (default 24h).")
@json_option
@pass_session
def top(session: Session, region: str | None, k: int | None, window: str | None,
        as_json: bool) -> None:
    """The top K tags of a region (or of all regions) in a window."""
    scope = scope_name(region)
    k = inputs.top_k(k)
    chosen = inputs.choice(window, "window", kinds.WINDOWS, kinds.DEFAULT_WINDOW)
    ranking = trends.top_tags(session.db(), scope, k, chosen)
    if as_json:
        _print_json(session, {"region": ranking.region, "window": ranking.window,
                              "items": [{"tag": i.tag, "count": i.count} for i in ranking.items],
                              "as_of": _iso(ranking.as_of)})
        return
    if not ranking.items:
        session.out.print(f"nothing yet: no tags in {ranking.region} in the last "
                          f"{ranking.window}")
        return
    table = Table("#", "tag", "count", title=f"top {k} in {ranking.region}, last {ranking.window}",
                  caption=f"as of {_iso(ranking.as_of)}")
    for rank, item in enumerate(ranking.items, 1):
        table.add_row(str(rank), item.tag, str(item.count))
    session.out.print(table)


# --- collection counters ------------------------------------------------------------------------


@cli.command("backfill")
@click.argument("declaration")
@json_option
@pass_session
def backfill_cmd(session: Session, declaration: str, as_json: bool) -> None:
    """Count the documents DECLARATION's counters do not count yet (those written before it was
    declared, or whose event was lost), and uncount deleted ones whose event was lost. Safe
    while documents change, and to run again: a document is never counted twice."""
    watch = declarations.watch_of(declaration)
    names = None if declaration == watch.function_name else [declaration]
    counting = collections.Counting(session.db(), watch)

    def progress(done: collections.Backfilled) -> None:
        if not as_json:
            session.err.print(f"{done.documents} documents read, {done.counted} counted")

    done = collections.backfill(counting, names, progress)
    if as_json:
        _print_json(session, {"declarations": names or [d.name for d in watch.declarations],
                              "documents": done.documents, "counted": done.counted,
                              "removed": done.removed, "deltas": done.deltas,
                              "failed": done.failed})
    else:
        session.out.print(f"{watch.documents}: {done.documents} documents read, {done.counted} "
                          f"counted now (the others were counted already), {done.removed} "
                          "deleted documents uncounted")
        for counter, delta in sorted(done.deltas.items()):
            session.out.print(f"  {counter}: {delta:+d}")
    if done.failed:
        for path, why in sorted(done.failed.items()):
            session.err.print(f"not applied: {path}: {why}")
        raise click.ClickException(f"{len(done.failed)} documents were not applied")


# --- seq ----------------------------------------------------------------------------------------


@cli.group(cls=_Group)
def seq() -> None:
    """Per-tenant ticket numbers that restart every business day."""


@seq.command("configure")
@click.argument("tenant")
@click.option("--timezone", required=True, metavar="TZ", help="IANA name, e.g. Europe/Paris.")
@click.option("--reset-time", metavar="HH:MM",
              help=f"Local time the business day starts (default {config.DEFAULT_RESET_TIME}).")
@json_option
@pass_session
def seq_configure(session: Session, tenant: str, timezone: str, reset_time: str | None,
                  as_json: bool) -> None:
    """Set TENANT's business-day rule."""
    tenant = inputs.tenant_id(tenant)
    timezone = inputs.timezone(timezone)
    reset_time = inputs.reset_time(reset_time)
    found = sequences.configure_sequence(session.db(), tenant, timezone=timezone,
                                         reset_time=reset_time)
    if as_json:
        _print_json(session, {"tenant": found.tenant, "timezone": found.timezone,
                              "reset_time": found.reset_time})
    else:
        session.out.print(f"{found.tenant}: business day starts at {found.reset_time} "
                          f"{found.timezone}")


@seq.command("next")
@click.argument("tenant")
@click.option("--request-id", metavar="ID", help="A retry returns the number it got first.")
@json_option
@pass_session
def seq_next(session: Session, tenant: str, request_id: str | None, as_json: bool) -> None:
    """Issue TENANT's next number."""
    tenant = inputs.tenant_id(tenant)
    request_id = inputs.request_id(request_id)
    ticket = sequences.next_number(session.db(), tenant, request_id=request_id, uid=CLI_UID)
    if as_json:
        _print_json(session, {"tenant": ticket.tenant, "number": ticket.number,
                              "business_day": ticket.business_day.isoformat()})
    else:
        session.out.print(f"{ticket.tenant}: number {ticket.number} "
                          f"(business day {ticket.business_day.isoformat()})")


@seq.command("reset")
@click.argument("tenant")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on production.")
@json_option
@pass_session
def seq_reset(session: Session, tenant: str, yes: bool, as_json: bool) -> None:
    """Restart TENANT's numbering at 1 within the business day (a shift change)."""
    tenant = inputs.tenant_id(tenant)
    session.confirm_destructive(f"restart numbering of {tenant}", yes)
    done = sequences.reset_sequence(session.db(), tenant, uid=CLI_UID)
    if as_json:
        _print_json(session, {"tenant": done.tenant,
                              "business_day": done.business_day.isoformat()})
    else:
        session.out.print(f"{done.tenant}: numbering restarts at 1 "
                          f"(business day {done.business_day.isoformat()})")


# --- claims -------------------------------------------------------------------------------------


def auth_client(session: Session) -> firebase_auth.Client:
    """Firebase Auth of the session's project: the Auth emulator when the target is an emulator
    (FIREBASE_AUTH_EMULATOR_HOST, default firebase.json's), else production with Application
    Default Credentials."""
    session.db()  # announces the target
    if session.production:
        os.environ.pop("FIREBASE_AUTH_EMULATOR_HOST", None)
    else:
        host = os.environ.get("FIREBASE_AUTH_EMULATOR_HOST") or DEFAULT_AUTH_EMULATOR_HOST
        _check_reachable(host, "Auth")
        os.environ["FIREBASE_AUTH_EMULATOR_HOST"] = host
    try:
        app = firebase_admin.get_app(CLI_APP)
    except ValueError:
        app = firebase_admin.initialize_app(options={"projectId": session.target.project},
                                            name=CLI_APP)
    return firebase_auth.Client(app)


def find_user(auth: firebase_auth.Client, who: str) -> firebase_auth.UserRecord:
    """A user by email (anything with an @) or by uid."""
    try:
        return auth.get_user_by_email(who) if "@" in who else auth.get_user(who)
    except firebase_auth.UserNotFoundError:
        raise click.ClickException(f"no user {who!r} in Firebase Auth") from None


def changed_claims(claims: Mapping[str, Any], *, grant: bool, admin: bool,
                   tenant: str | None) -> dict[str, Any]:
    """`claims` with the admin role or one tenant granted or revoked; other claims are kept."""
    result = dict(claims)
    if admin:
        if grant:
            result["admin"] = True
        else:
            result.pop("admin", None)
    if tenant is not None:
        tenants = [t for t in result.get("tenants") or [] if t != tenant]
        if grant:
            tenants.append(tenant)
        if tenants:
            result["tenants"] = tenants
        else:
            result.pop("tenants", None)
    return result


@cli.command()
@click.argument("action", type=click.Choice(["grant", "revoke", "show"]))
@click.argument("user")
@click.option("--admin", is_flag=True, help="The administrator role.")
@click.option("--tenant", metavar="T", help="A tenant the user works for.")
@json_option
@pass_session
def claims(session: Session, action: str, user: str, admin: bool, tenant: str | None,
           as_json: bool) -> None:
    """Roles in Firebase Auth custom claims: grant or revoke USER (a uid or an email) the admin
    role (--admin) or one tenant (--tenant T); show prints USER's claims."""
    if action != "show" and admin == (tenant is not None):
        raise click.UsageError(f"{action} takes --admin or --tenant T")
    if tenant is not None:
        tenant = inputs.tenant_id(tenant)
    auth = auth_client(session)
    record = find_user(auth, user)
    found = record.custom_claims or {}
    if action != "show":
        found = changed_claims(found, grant=action == "grant", admin=admin, tenant=tenant)
        try:
            auth.set_custom_user_claims(record.uid, found or None)
        except ValueError as error:  # e.g. the claims would pass Firebase's 1,000-byte limit
            raise click.ClickException(str(error)) from None
    if as_json:
        _print_json(session, {"uid": record.uid, "claims": dict(found)})
        return
    session.out.print(f"{record.uid}: {json.dumps(dict(found), sort_keys=True)}")
    if action != "show":
        session.err.print("The user's next ID token carries them (within an hour, or at once "
                          "after signing in again).")


# --- load ---------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolated linearly between ranks; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(kw_only=True)
class LoadResult:
    attempted: int = 0
    applied: int = 0
    errors: Tally[str] = field(default_factory=Tally)
    first_error: str | None = None
    latencies_ms: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0  # from the start to the last call that completed

    def summary(self) -> dict[str, Any]:
        return {
            "attempted": self.attempted,
            "applied": self.applied,
            "errors": sum(self.errors.values()),
            "errors_by_type": dict(self.errors),
            "first_error": self.first_error,
            "elapsed_s": round(self.elapsed_s, 3),
            "rate_per_s": round(self.applied / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            **{f"latency_p{q}_ms": _round(percentile(self.latencies_ms, q)) for q in (50, 95, 99)},
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def run_load(call: Callable[[], bool], *, rate: float | None, seconds: float, concurrency: int,
             tick: Callable[[LoadResult, float], None] = lambda result, elapsed: None,
             clock: Callable[[], float] = time.monotonic) -> LoadResult:
    """Call `call` from `concurrency` threads for `seconds`: the i-th call starts at i / rate
    seconds (open loop, so a slow call delays only its thread), or back to back without a rate.
    `call` returns whether it applied; its exceptions are counted by type. `tick` sees the
    running result about 10 times a second (the progress bar)."""
    result = LoadResult()
    lock = threading.Lock()
    issued = 0
    start = clock()
    stop_at = start + seconds

    def next_slot() -> float | None:
        nonlocal issued
        with lock:
            due = start + issued / rate if rate else clock()
            if due >= stop_at:
                return None
            issued += 1
            return due

    def worker() -> None:
        while (due := next_slot()) is not None:
            time.sleep(max(0.0, due - clock()))
            began = clock()
            try:
                applied = call()
            except Exception as exc:  # every failure is an outcome to count, not to raise
                with lock:
                    result.attempted += 1
                    result.elapsed_s = clock() - start
                    result.errors[type(exc).__name__] += 1
                    result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"
                continue
            took_ms = (clock() - began) * 1000
            with lock:
                result.attempted += 1
                result.applied += applied
                result.latencies_ms.append(took_ms)
                result.elapsed_s = clock() - start

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    while threads:
        threads[0].join(0.1)
        threads = [thread for thread in threads if thread.is_alive()]
        tick(result, clock() - start)
    return result


@cli.command()
@click.argument("counter")
@click.option("--rate", type=float, default=100.0, show_default=True,
              help="Increments per second to attempt (0: as fast as the threads go).")
@click.option("--seconds", type=float, default=10.0, show_default=True)
@click.option("--concurrency", type=int, default=8, show_default=True, help="Threads.")
@click.option("--by", type=int, default=1, show_default=True)
@click.option("--check/--no-check", default=True, show_default=True,
              help="Compare the strong count after the load with the count before + applied.")
@json_option
@pass_session
def load(session: Session, counter: str, rate: float, seconds: float, concurrency: int, by: int,
         check: bool, as_json: bool) -> None:
    """Drive increments of COUNTER through the domain's write path and summarise them.

    The check assumes nothing else writes to COUNTER meanwhile; exit status 1 when it fails."""
    counter = inputs.counter_id(counter)
    by = inputs.increment_by(by)
    if rate < 0 or seconds <= 0 or not 1 <= concurrency <= 256:
        raise click.UsageError("--rate must be >= 0, --seconds > 0, --concurrency 1..256")
    db = session.db()
    try:
        counters.get_count(db, counter)
    except NotFound:
        # One error before starting, rather than a summary of nothing but failed increments.
        raise click.ClickException(f"counter: {counter!r} does not exist (`counters create "
                                   f"{counter}` creates it)") from None
    before = counters.get_count(db, counter, "strong").count if check else None

    def call() -> bool:
        applied = counters.increment(db, counter, by) is not None
        return applied

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[status]}"), console=session.err,
                  transient=True) as progress:
        task = progress.add_task(f"load {counter}", total=seconds, status="")

        def tick(running: LoadResult, elapsed: float) -> None:
            progress.update(task, completed=min(elapsed, seconds),
                            status=f"applied {running.applied}  errors "
                                   f"{sum(running.errors.values())}")

        result = run_load(call, rate=rate or None, seconds=seconds, concurrency=concurrency,
                          tick=tick)
    summary: dict[str, Any] = {"counter": counter, "by": by,
                               "target_rate_per_s": rate or None, **result.summary()}
    if before is not None:
        after = counters.get_count(db, counter, "strong").count
        expected = before + result.applied * by
        summary.update(strong_before=before, strong_after=after, expected=expected,
                       check="ok" if after == expected else "MISMATCH")
    if as_json:
        _print_json(session, summary)
    else:
        table = Table("", "", title=f"load on {counter}", show_header=False)
        for key, value in summary.items():
            if key != "errors_by_type" and value is not None:
                table.add_row(key, str(value))
        for kind, n in result.errors.items():
            table.add_row(f"  {kind}", str(n))
        session.out.print(table)
    if summary.get("check") == "MISMATCH":
        raise click.ClickException(
            f"strong count {summary['strong_after']} != expected {summary['expected']}"
        )


def main() -> None:
    """The console script `counters`."""
    cli(prog_name="counters")
