"""`counters backfill`: count what a collection counter's triggers (or an extension counter's
moves) have not counted; `counters extension-rules`: the rules of the extension counters'
shards."""

from __future__ import annotations

import click
from counting.features import collections, extension

from . import rules
from .session import Session, json_option, pass_session


@click.command()
@click.argument("declaration")
@json_option
@pass_session
def backfill(session: Session, declaration: str, as_json: bool) -> None:
    """Count the documents DECLARATION's counters do not count yet (those written before it was
    declared, or whose event was lost), and uncount deleted ones whose event was lost. Safe
    while documents change, and to run again: a document is never counted twice. For an
    extension counter (`visits:{page}`): move every document's shards and partials into it and
    its counter, and add to the counter what the document's field held before."""
    found = session.declared.declaration(declaration)
    if found is not None and found.extension is not None:
        _backfill_extension(session, found, as_json)
        return
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
    _failed(session, done.failed)


def _backfill_extension(session: Session, declaration: collections.Declaration,
                        as_json: bool) -> None:
    done = extension.backfill(session.context(), session.db(), declaration)
    moved = done.moved
    session.report(
        as_json, {"declarations": [declaration.name], "documents": done.documents,
                  "counted": done.counted, "deltas": done.deltas, "failed": done.failed,
                  "moved": {"shards": moved.shards, "deleted": moved.deleted,
                            "amounts": moved.amounts},
                  "undeclared": sorted(moved.undeclared)},
        f"{declaration.documents}: {done.documents} documents read, {done.counted} whose field "
        f"the counter lacked; {moved.shards} shards and partials moved into their documents",
        *(f"  {counter}: {delta:+d}" for counter, delta in sorted(done.deltas.items())),
        *([f"shards also hold numbers no declaration counts (left where they are): "
           f"{', '.join(sorted(moved.undeclared))}"] if moved.undeclared else []))
    _failed(session, done.failed)


def _failed(session: Session, failed: dict[str, str]) -> None:
    if failed:
        for path, why in sorted(failed.items()):
            session.err.print(f"not applied: {path}: {why}")
        raise click.ClickException(f"{len(failed)} documents were not applied")


@click.command("extension-rules")
@pass_session
def extension_rules(session: Session) -> None:
    """Print the Firestore rules of the extension counters' shards, for the rules file of the
    database their documents live in (a signed-in user writes only the declared fields of a
    shard, each by its declared bound)."""
    click.echo(rules.extension_rules(session.declared.declarations), nl=False)
