"""`counters watch`: follow a counter's rollup document live, through a listener as clients do."""

from __future__ import annotations

import datetime as dt
import queue
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import click
from counting.features import counter_refs
from counting.foundation import inputs
from counting.rollup import ledger
from rich.live import Live
from rich.table import Table

from .session import Session, iso, pass_session


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
        table.add_row("updated_at", iso(updated) if isinstance(updated, dt.datetime) else "-")
        table.add_row("rate (writes/s)", f"{shown_rate(data):.1f}")
    table.add_row("updates received", str(seen.updates))
    table.caption = "Ctrl-C to stop"
    return table


def shown_rate(data: dict[str, Any]) -> float:
    """The counter's write rate now, decayed from its instant as the rollup decays it (from
    `updated_at` on a document from before `rate_at`)."""
    at = data.get("rate_at") or data.get("updated_at")
    return ledger.publishable(ledger.shown_rate(
        float(data.get("rate") or 0.0), at.timestamp() if isinstance(at, dt.datetime) else None,
        time.time()))


def _watch_line(seen: _Seen) -> str:
    if seen.data is None:
        return "deleted"
    updated = seen.data.get("updated_at")
    return (f"count={seen.data.get('count')} num_shards={seen.data.get('num_shards')} "
            f"updated_at={iso(updated) if isinstance(updated, dt.datetime) else '-'}")


@click.command()
@click.argument("counter")
@click.option("--for", "duration", type=float, metavar="SECONDS",
              help="Stop after SECONDS (default: until Ctrl-C).")
@pass_session
def watch(session: Session, counter: str, duration: float | None) -> None:
    """Follow COUNTER's rollup document live, through a listener (as clients do).

    On a terminal it is a live table; otherwise one line per update."""
    counter = inputs.counter_id(counter)
    db = session.db()
    # NotFound before listening to a document that isn't there.
    session.domain.get_count(db, session.names, counter)
    updates: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def on_snapshot(docs: list[Any], changes: Any, read_time: Any) -> None:
        for doc in docs:
            updates.put(doc.to_dict() if doc.exists else None)

    # Ctrl-C asks the loop to stop: a KeyboardInterrupt raised wherever the main thread happens to
    # be (inside a lock the listener's thread needs, for one) could leave the exit hanging.
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    listener = counter_refs.counter_ref(db, session.names, counter).on_snapshot(on_snapshot)
    deadline = None if duration is None else time.monotonic() + duration
    seen = _Seen(data=None)
    printed = ""
    live = None
    if session.out.is_terminal:
        live = Live(_watch_table(counter, seen), console=session.out, auto_refresh=False)
        live.start()
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            timeout = 0.25 if deadline is None else max(0.0, min(0.25, deadline - time.monotonic()))
            try:
                seen.data = updates.get(timeout=timeout)
            except queue.Empty:
                if live is not None and seen.data is not None:
                    # No write for a falling rate: the table decays it as time passes.
                    live.update(_watch_table(counter, seen), refresh=True)
                continue
            seen.updates += 1
            if live is not None:
                live.update(_watch_table(counter, seen), refresh=True)
            elif (line := _watch_line(seen)) != printed:
                # The rollup also rewrites the document for fields not shown (the rate).
                session.out.print(line)
                printed = line
    finally:
        signal.signal(signal.SIGINT, previous)
        listener.unsubscribe()  # type: ignore[no-untyped-call]  # untyped in google-cloud-firestore
        if live is not None:
            live.stop()
