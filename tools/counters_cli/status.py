"""`counters status`: the rollup's health, for people, scripts and probes."""

from __future__ import annotations

import click
from counting.status import read_status
from rich.table import Table

from .session import Session, iso, json_option, pass_session


@click.command()
@json_option
@pass_session
def status(session: Session, as_json: bool) -> None:
    """Print the rollup's health; exit 1 when it looks stuck (for scripts and probes)."""
    found = read_status(session.db())
    figures = {
        "state": "active" if found.active else "idle (ticks when written)",
        "holder": found.holder,
        "holder_since": iso(found.holder_since),
        "last_tick_at": iso(found.last_tick_at),
        "last_tick_age_s": None if found.last_tick_age_s is None else round(
            found.last_tick_age_s, 1),
        "tick_s": found.tick_s,
        "lag_s": found.lag_s,
        "stale": found.stale,
        "errors": found.errors,
    }
    table = Table("", "", title="rollup", show_header=False)
    for key, value in figures.items():
        if key != "errors":
            table.add_row(key, "-" if value is None else str(value))
    session.report(as_json, figures, table,
                   *([f"  {error}" for error in found.errors] or ["no recent errors"]))
    if found.stale:
        raise click.ClickException(f"the rollup is stale: {found.stale}")
