"""`counters backfill`: count what a collection counter's triggers have not counted;
`counters extension-rules`: the rules of the extension counters' shards."""

from __future__ import annotations

import click
from counting.features import collections, extension

from .session import Session, json_option, pass_session


@click.command()
@click.argument("declaration")
@json_option
@pass_session
def backfill(session: Session, declaration: str, as_json: bool) -> None:
    """Count the documents DECLARATION's counters do not count yet (those written before it was
    declared, or whose event was lost), and uncount deleted ones whose event was lost. Safe
    while documents change, and to run again: a document is never counted twice. For an
    extension counter (`visits:{page}`), that is its documents, their shards and partials; then
    the amounts found in shards are moved into their documents, where the extension's clients
    read them."""
    total = collections.Backfilled()
    declared: list[str] = []
    lines: list[str] = []
    moved: int | None = None
    for watch in session.declared.watches_of(declaration):
        names = None if declaration == watch.function_name else [
            d.name for d in watch.declarations if declaration in (d.name, d.counter)]
        declared += [n for n in names or [d.name for d in watch.declarations] if n not in declared]
        counting = collections.Counting(session.context(), session.db(), watch,
                                        source=session.watched_db())

        def progress(done: collections.Backfilled) -> None:
            if not as_json:
                session.err.print(f"{done.documents} documents read, {done.counted} counted")

        done = collections.backfill(counting, names, progress)
        if watch.extension_shards:
            moved = (moved or 0) + _move(session, watch, done)
        total.documents += done.documents
        total.counted += done.counted
        total.removed += done.removed
        total.failed.update(done.failed)
        for counter, delta in done.deltas.items():
            total.deltas[counter] = total.deltas.get(counter, 0) + delta
        lines.append(f"{watch.documents}: {done.documents} documents read, {done.counted} "
                     f"counted now (the others were counted already), {done.removed} deleted "
                     "documents uncounted")
    deltas = {counter: delta for counter, delta in total.deltas.items() if delta}
    session.report(
        as_json, {"declarations": declared, "documents": total.documents,
                  "counted": total.counted, "removed": total.removed, "deltas": deltas,
                  "failed": total.failed, **({"moved": moved} if moved is not None else {})},
        *lines, *(f"  {counter}: {delta:+d}" for counter, delta in sorted(deltas.items())),
        *([f"moved the shards of {moved} documents into them"] if moved is not None else []))
    if total.failed:
        for path, why in sorted(total.failed.items()):
            session.err.print(f"not applied: {path}: {why}")
        raise click.ClickException(f"{len(total.failed)} documents were not applied")


def _move(session: Session, watch: collections.Watch, done: collections.Backfilled) -> int:
    """Move the shards of every document whose shards the backfill read into it (the triggers
    move only shards they are told of)."""
    source = session.watched_db()
    parents = sorted(done.parents)
    for parent in parents:
        extension.move_all(session.context().writing, source, source.document(parent),
                           watch.declarations)
    return len(parents)


@click.command("extension-rules")
@pass_session
def extension_rules(session: Session) -> None:
    """Print the Firestore rules of the extension counters' shards, for the rules file of the
    database their documents live in (a signed-in user writes only the declared fields of a
    shard, each by its declared bound)."""
    click.echo(extension.rules(session.declared.declarations), nl=False)
