"""The trending tags' commands: track an event, list the top tags."""

from __future__ import annotations

import click
from counting.foundation import config, inputs, kinds
from rich.table import Table

from .session import CLI_UID, Session, iso, json_option, pass_session


def region_name(value: str) -> str:
    """A region as typed: case does not matter (the web page's rule too); the name is then held
    to the callables' rule, which refuses `global`."""
    return inputs.region(value.strip().lower())


def scope_name(value: str | None) -> str | None:
    """A region to read, as typed; `global` (any case) or nothing means every region: None."""
    if value is None or value.strip().lower() == config.GLOBAL_SCOPE:
        return None
    return region_name(value)


@click.command()
@click.argument("region")
@click.argument("tags", nargs=-1, required=True)
@click.option("--request-id", metavar="ID", help="Counts once however often it is retried.")
@json_option
@pass_session
def track(session: Session, region: str, tags: tuple[str, ...], request_id: str | None,
          as_json: bool) -> None:
    """Count one event in REGION carrying TAGS (each once; case and a leading # are ignored)."""
    region = region_name(region)
    counted = inputs.tags(list(tags))
    request_id = inputs.request_id(request_id)
    recorded = session.domain.track(session.context(), session.db(), region, counted,
                                    request_id=request_id, uid=CLI_UID)
    session.report(
        as_json, {"region": region, "tags": counted, "recorded": recorded},
        f"{region}: request {request_id} was applied already; nothing recorded" if recorded == 0
        else f"{region}: recorded {', '.join(counted)}; `counters top --region {region}` lists "
             "it once the rollup has run (about a second)")


@click.command()
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
    ranking = session.domain.top_tags(session.db(), session.names, scope, k, chosen)
    table = Table("#", "tag", "count", title=f"top {k} in {ranking.region}, last {ranking.window}",
                  caption=f"as of {iso(ranking.as_of)}")
    for rank, item in enumerate(ranking.items, 1):
        table.add_row(str(rank), item.tag, str(item.count))
    session.report(as_json, {"region": ranking.region, "window": ranking.window,
                             "items": [{"tag": i.tag, "count": i.count} for i in ranking.items],
                             "as_of": iso(ranking.as_of)},
                   table if ranking.items
                   else f"nothing yet: no tags in {ranking.region} in the last {ranking.window}")
