"""`counters backfill`: count what a collection counter's triggers have not counted."""

from __future__ import annotations

import click
from counting.features import collections

from .session import Session, json_option, pass_session


@click.command()
@click.argument("declaration")
@json_option
@pass_session
def backfill(session: Session, declaration: str, as_json: bool) -> None:
    """Count the documents DECLARATION's counters do not count yet (those written before it was
    declared, or whose event was lost), and uncount deleted ones whose event was lost. Safe
    while documents change, and to run again: a document is never counted twice."""
    watch = session.declared.watch_of(declaration)
    names = None if declaration == watch.function_name else [declaration]
    counting = collections.Counting(session.context(), session.db(), watch,
                                    source=session.watched_db())

    def progress(done: collections.Backfilled) -> None:
        if not as_json:
            session.err.print(f"{done.documents} documents read, {done.counted} counted")

    done = collections.backfill(counting, names, progress)
    session.report(
        as_json, {"declarations": names or [d.name for d in watch.declarations],
                  "documents": done.documents, "counted": done.counted, "removed": done.removed,
                  "deltas": done.deltas, "failed": done.failed},
        f"{watch.documents}: {done.documents} documents read, {done.counted} counted now (the "
        f"others were counted already), {done.removed} deleted documents uncounted",
        *(f"  {counter}: {delta:+d}" for counter, delta in sorted(done.deltas.items())))
    if done.failed:
        for path, why in sorted(done.failed.items()):
            session.err.print(f"not applied: {path}: {why}")
        raise click.ClickException(f"{len(done.failed)} documents were not applied")
