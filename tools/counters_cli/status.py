"""`counters status`: the rollup's health, for people, scripts and probes; `counters partitions`:
how many partitions share the rollup's work, and changing it."""

from __future__ import annotations

from typing import Any

import click
from counting import partitions, waking
from counting.partitions import Part
from counting.status import RollupStatus, read_statuses
from rich.table import Table

from .session import Session, iso, json_option, pass_session


def figures_of(found: RollupStatus) -> dict[str, Any]:
    return {
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


def table_of(title: str, figures: dict[str, Any]) -> Table:
    table = Table("", "", title=title, show_header=False)
    for key, value in figures.items():
        if key != "errors":
            table.add_row(key, "-" if value is None else str(value))
    return table


@click.command()
@json_option
@pass_session
def status(session: Session, as_json: bool) -> None:
    """Print the rollup's health, per partition; exit 1 when one looks stuck (for scripts and
    probes)."""
    found = read_statuses(session.db())
    stale = next((f"partition {part}: {state.stale}" if len(found) > 1 else state.stale
                  for part, state in found if state.stale), None)
    errors = [f"{part}: {error}" if len(found) > 1 else error
              for part, state in found for error in state.errors]
    if len(found) == 1:
        figures = figures_of(found[0][1])
        tables = [table_of("rollup", figures)]
    else:
        each = [figures_of(state) for _, state in found]
        figures = {"partitions": len(found),
                   "state": "active" if any(state.active for _, state in found)
                   else "idle (ticks when written)",
                   "stale": stale, "errors": errors, "by_partition": each}
        tables = [table_of(f"rollup partition {part}", one)
                  for (part, _), one in zip(found, each, strict=True)]
    session.report(as_json, figures, *tables,
                   *([f"  {error}" for error in errors] or ["no recent errors"]))
    if stale:
        raise click.ClickException(f"the rollup is stale: {stale}")


@click.command(name="partitions")
@click.argument("count", type=click.Choice([str(n) for n in partitions.CHOICES]), required=False)
@json_option
@pass_session
def partitions_command(session: Session, count: str | None, as_json: bool) -> None:
    """Print how many partitions share the rollup's work, or set it to COUNT (docs/operations.md,
    "Partitions"). Setting it retires the current partitions' leases and starts the new ones
    where the oldest of them was: no count is lost or doubled."""
    db = session.db()
    if count is None:
        current = partitions.read_count(db)
        session.report(as_json, {"partitions": current}, f"partitions: {current}")
        return
    changed = partitions.change(db, int(count))
    woken = 0
    if changed.after != changed.before:
        for part in partitions.parts(changed.after):
            woken += wake(db, part)
    figures = {"before": changed.before, "partitions": changed.after,
               "watermark": iso(changed.watermark), "spread": changed.spread,
               "narrow_at": iso(changed.narrow_at), "woken": woken}
    session.report(as_json, figures,
                   f"partitions: {changed.before} -> {changed.after}" + (
                       f" (each starts at {iso(changed.watermark)})"
                       if changed.after != changed.before else " (unchanged)"))


def wake(db: Any, part: Part) -> bool:
    """Ask for a tick of `part` at once (the scheduled run ticks it within a minute anyway)."""
    try:
        return waking.enqueue_tick(db, "partitions", part)
    except Exception as error:
        click.echo(f"could not enqueue a tick of partition {part} (the scheduled run ticks it "
                   f"within a minute): {error!r}", err=True)
        return False
