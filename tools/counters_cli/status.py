"""`counters status`: the rollup's health, for people, scripts and probes; `counters partitions`:
how many partitions share the rollup's work, and changing it."""

from __future__ import annotations

from typing import Any

import click
from counting.foundation import inputs
from counting.rollup import audit
from counting.rollup.status import RollupStatus
from counting.writepath import partitions
from counting.writepath.partitions import Part
from rich.table import Table

from .session import Session, deploy_variables, iso, json_option, pass_session


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
    found = session.domain.read_statuses(session.db(), session.names)
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
    audited = audit_figures(session.domain.audit_state(session.db(), session.names))
    figures["audit"] = audited
    # The sequences' housekeeping: request ids whose number it could never read back into
    # their records, marked lost, of the last SEQUENCE_RETENTION_DAYS (docs/operations.md).
    figures["sequences"] = numbered = {
        "records_lost": session.domain.lost_records(session.db(), session.names)}
    session.report(as_json, figures, *tables,
                   *([f"  {error}" for error in errors] or ["no recent errors"]),
                   table_of("exactness audit", {k: v for k, v in audited.items()
                                                if k != "drift"}),
                   *([f"  drift: {entry}" for entry in audited["drift"]] or ["no drift found"]),
                   table_of("sequence numbers", numbered))
    if stale:
        raise click.ClickException(f"the rollup is stale: {stale}")
    if audited["drift"]:
        raise click.ClickException(f"the audit found drift: {audited['drift'][-1]}")


def audit_figures(state: dict[str, Any]) -> dict[str, Any]:
    """The exactness audit's state (internal/audit) as shown: its last run, suspects and
    drift."""
    return {"last_run_at": iso(state.get("last_run_at")), "checked": state.get("checked", 0),
            "suspects": sorted(state.get("suspects") or {}),
            "last_drift_at": iso(state.get("last_drift_at")),
            "drift": [{**entry, "as_of": iso(entry.get("as_of")),
                       "found_at": iso(entry.get("found_at"))}
                      for entry in state.get("drift") or []]}


@click.command(name="audit")
@click.argument("counter", required=False)
@json_option
@pass_session
def audit_command(session: Session, counter: str | None, as_json: bool) -> None:
    """Compare COUNTER's published count with the sum of its shards at the publish's instant,
    now; without COUNTER, run the scheduled audit once (the next counters of its rotation and
    its suspects, recorded in internal/audit). Exit 1 on a mismatch (one COUNTER) or on drift.
    A single mismatch may be a write still joining the rollup: run it again a few minutes
    later (docs/operations.md, "The exactness audit")."""
    db = session.db()
    if counter is not None:
        found = audit.check_counter(db, session.names, inputs.counter_id(counter))
        if found is None:
            raise click.ClickException(f"counter: {counter!r} does not exist or was never "
                                       "published")
        figures = {"counter": found.counter, "published": found.published,
                   "shards": found.shards, "as_of": iso(found.as_of), "exact": found.exact}
        session.report(as_json, figures, table_of(f"audit of {counter}", figures))
        if not found.exact:
            raise click.ClickException(f"{counter}: published {found.published}, its shards "
                                       f"sum to {found.shards} at {iso(found.as_of)}")
        return
    done = audit.run(session.context().writing, db)
    names = [c.counter for c in done.checked]
    figures = {"checked": names, "suspects": done.suspects,
               "drift": [c.entry(c.as_of) | {"as_of": iso(c.as_of), "found_at": None}
                         for c in done.drift]}
    session.report(as_json, figures, f"checked {', '.join(names) or 'nothing'}; "
                   f"suspects: {', '.join(done.suspects) or 'none'}; drift: "
                   f"{len(done.drift)}")
    if done.drift:
        raise click.ClickException(f"drift: {figures['drift']}")


def deployed_max(session: Session) -> int:
    """The largest P the operated backend's deploy serves (ROLLUP_PARTITIONS_MAX of its .env
    files, as its deploy or its emulator reads them)."""
    assert session.backend is not None  # `placement` refused before
    try:
        return partitions.deployed_max(deploy_variables(
            session.backend, session.target.project, emulated=not session.production))
    except ValueError as error:
        raise click.ClickException(f"{session.backend}/.env: {error}") from None


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
        current = session.domain.read_count(db, session.names)
        session.report(as_json, {"partitions": current}, f"partitions: {current}")
        return
    most = deployed_max(session)
    if int(count) > most:
        raise click.ClickException(
            f"partitions: {count} is more than the {most} tick functions the deploy makes: set "
            f"{partitions.MAX_ENV}={count} in {session.backend}/.env and deploy first")
    changed = session.domain.repartition(db, session.names, int(count),
                                         known=session.context().writing.known)
    woken = 0
    if changed.after != changed.before:
        for part in partitions.parts(changed.after):
            woken += wake(session, part)
    figures = {"before": changed.before, "partitions": changed.after,
               "watermark": iso(changed.watermark), "spread": changed.spread,
               "narrow_at": iso(changed.narrow_at), "woken": woken}
    session.report(as_json, figures,
                   f"partitions: {changed.before} -> {changed.after}" + (
                       f" (each starts at {iso(changed.watermark)})"
                       if changed.after != changed.before else " (unchanged)"))


def wake(session: Session, part: Part) -> bool:
    """Ask for a tick of `part` at once (the scheduled run ticks it within a minute anyway)."""
    try:
        return session.domain.enqueue_tick(session.db(), session.placement, "partitions", part)
    except Exception as error:
        click.echo(f"could not enqueue a tick of partition {part} (the scheduled run ticks it "
                   f"within a minute): {error!r}", err=True)
        return False
