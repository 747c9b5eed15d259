"""The sharded counters' commands: create, inc, get, reset (`watch` follows one live)."""

from __future__ import annotations

import uuid

import click
from counting.features import counters
from counting.foundation import config, inputs, kinds
from counting.foundation.errors import OutcomeUnknown
from rich.table import Table

from .session import CLI_UID, Session, iso, json_option, pass_session


@click.command()
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
    session.declared.check_plain(counter)
    shards = inputs.shard_count(shards)
    expected_rate = inputs.expected_rate(expected_rate)
    chosen = inputs.choice(strategy, "strategy", kinds.STRATEGIES, kinds.DEFAULT_STRATEGY)
    created = counters.create_counter(session.context(), session.db(), counter, shards=shards,
                                      expected_rate=expected_rate, strategy=chosen)
    session.report(
        as_json, {"counter": counter, "shards": created.shards, "created": created.created},
        f"created {counter} with {created.shards} shards" if created.created
        else f"{counter} exists already with {created.shards} shards: nothing changed")


@click.command()
@click.argument("counter")
@click.option("--by", type=int, default=1, show_default=True, help="Amount (may be negative).")
@click.option("--request-id", metavar="ID",
              help="Counts once however often it is retried (default: a new one, printed).")
@json_option
@pass_session
def inc(session: Session, counter: str, by: int, request_id: str | None, as_json: bool) -> None:
    """Add to COUNTER. Every increment carries a request_id: when Firestore's answer is lost,
    running it again with that id settles it, counting it once."""
    counter = inputs.counter_id(counter)
    by = inputs.increment_by(by)
    request_id = inputs.request_id(request_id) or uuid.uuid4().hex
    try:
        committed = counters.increment(session.context(), session.db(), counter, by,
                                       request_id=request_id, uid=CLI_UID)
    except OutcomeUnknown as error:
        raise click.ClickException(f"{error}: `counters inc {counter} --by {by} --request-id "
                                   f"{request_id}`") from None
    session.report(
        as_json, {"counter": counter, "by": by, "request_id": request_id,
                  "applied": committed is not None, "committed_at": iso(committed)},
        f"{counter}: request {request_id} was applied already; nothing added" if committed is None
        else f"{counter}: {by:+d} applied at {iso(committed)}")


@click.command()
@click.argument("counter")
@click.option("--strong", is_flag=True, help="Also sum the shards (N reads) for the exact value.")
@json_option
@pass_session
def get(session: Session, counter: str, strong: bool, as_json: bool) -> None:
    """Print COUNTER's rollup (one read), and with --strong its exact value."""
    counter = inputs.counter_id(counter)
    db = session.db()
    found = [session.domain.get_count(db, session.names, counter, "rollup")]
    if strong:
        found.append(session.domain.get_count(db, session.names, counter, "strong"))
    table = Table("consistency", "count", "as of", "documents read", title=counter)
    for c in found:
        table.add_row(c.consistency, str(c.count), iso(c.as_of), str(c.documents_read))
    session.report(as_json, {"counter": counter, **{
        c.consistency: {"count": c.count, "as_of": iso(c.as_of),
                        "documents_read": c.documents_read} for c in found}}, table)


@click.command()
@click.argument("counter")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on production.")
@json_option
@pass_session
def reset(session: Session, counter: str, yes: bool, as_json: bool) -> None:
    """Set COUNTER (every shard and the rollup) to 0."""
    counter = inputs.counter_id(counter)
    session.confirm_destructive(f"reset counter {counter}", yes)
    counters.reset_counter(session.context(), session.db(), counter)
    session.report(as_json, {"counter": counter, "count": 0}, f"{counter}: reset to 0")
