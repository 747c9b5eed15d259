"""The collection counters' Firestore triggers: one per watched path pattern, generated from
`counting.features.declarations` (docs/architecture.md, "Collection counters"). An extension
counter's shards get a trigger of their own, on each shard's creation, that moves the shards'
amounts into their document and the counter (`counting.features.extension`).

Each runs with the callables' global options (main.py: one vCPU, 80 events at once; an event is
two Firestore round trips). Delivery is at least once, and the document's record makes a
redelivery count nothing twice. The Python SDK (firebase-functions 0.6.0) deploys Firestore
triggers with `retry: false` and has no option to change it: an event whose handler fails (after
its own retries, `count_event`) is not delivered again, and the document stays counted at its
previous state until its next write or the next `counters backfill`, which repairs it exactly.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, cast

from cloudevents.http import CloudEvent
from counting.features import collections, extension
from counting.features.collections import Counting, Observed, Watch
from counting.foundation import config
from counting.foundation.errors import Aborted, OutcomeUnknown
from firebase_functions import firestore_fn
from firebase_functions.core import Change
from google.api_core import exceptions as gexc
from google.cloud.firestore import DocumentSnapshot
from google.events.cloud.firestore import DocumentEventData

from handlers import context, db, declared, placement, watched_db

Event: TypeAlias = "firestore_fn.Event[Change[DocumentSnapshot[Any] | None]]"
CreatedEvent: TypeAlias = "firestore_fn.Event[DocumentSnapshot[Any] | None]"
log = logging.getLogger(__name__)


@functools.cache
def counting(watch: Watch) -> Counting:
    return Counting(context(), db(), watch, source=watched_db())


# What a retry may fix: contention (lost races on the record, Firestore's ABORTED) and outages
# (a lost answer included: applying the state again is a no-op when the first had applied).
TRANSIENT = (Aborted, OutcomeUnknown, gexc.Aborted, gexc.DeadlineExceeded, gexc.InternalServerError,
             gexc.ServiceUnavailable, gexc.TooManyRequests, gexc.RetryError)


def count_event(watch: Watch, event: Event,
                pauses: Sequence[float] = config.COLLECTION_RETRY_PAUSES_S,
                sleep: Callable[[float], None] = time.sleep) -> collections.Applied:
    """Apply the state one event leads to, once (its writes ask for their second's tick). Transient
    failures are retried here, after each of `pauses`: the deployed trigger is never retried by
    the platform, and applying a state again is safe (the record's compare-and-set)."""
    change = event.data
    snapshot = change.after if change.after is not None else change.before
    assert snapshot is not None  # an event changes a document
    observed = Observed.of_change(snapshot.reference.path, change.before, change.after)
    for pause in (*pauses, None):
        try:
            applied = counting(watch).apply(observed, event=event.id)
            break
        except TRANSIENT as error:
            if pause is None:
                raise
            log.warning("%s: %r; trying again in %.1f s", observed.path, error, pause)
            sleep(pause)
    return applied


def exact_document(raw: CloudEvent) -> None:
    """Take the document's path from the event's payload rather than its `document` attribute.

    The attribute travels in an HTTP header (binary-mode CloudEvents), which WSGI decodes as
    Latin-1 (PEP 3333): an id with non-ASCII characters (`été`) reaches the SDK garbled
    (`Ã©tÃ©`), and would be counted under the wrong counter. The payload's resource name is
    exact (protobuf, UTF-8)."""
    data = raw.get_data()
    if not isinstance(data, bytes):
        return
    parsed = DocumentEventData.deserialize(data)
    name = parsed.value.name or parsed.old_value.name
    _, found, path = name.partition("/documents/")
    if found and path:
        raw["document"] = path


@functools.cache
def movers(watch: Watch) -> extension.Movers:
    """The instance's moves of the extension counters' shards into their documents."""
    return extension.Movers(
        lambda path, written, on_move: extension.move_until_clear(
            context(), db(), db().document(path), watch.declarations, written=written,
            on_move=on_move),
        # The emulator runs a function's events one after the other (counting/features/
        # extension/movers.py).
        background=os.environ.get("FUNCTIONS_EMULATOR") == "true")


def move_created(watch: Watch, event: CreatedEvent) -> None:
    """A shard (or partial) of an extension counter was created: move it (and its siblings)
    into the document and the counters, once a move of this instance takes it."""
    shard = event.data
    if shard is None or not shard.exists or shard.reference.parent.parent is None:
        return
    written = extension.Written(ref=shard.reference, data=shard.to_dict() or {},
                                update_time=shard.update_time)
    movers(watch).after_write(shard.reference.parent.parent.path, written)


def trigger(watch: Watch) -> Callable[[CloudEvent], None]:
    if watch.extension_shards:
        def created(event: CreatedEvent) -> None:
            move_created(watch, event)

        created.__name__ = created.__qualname__ = watch.function_name
        sdk_entry = cast(Callable[[CloudEvent], None], firestore_fn.on_document_created(
            document=watch.documents, database=placement().watched_database)(created))
    else:
        def handler(event: Event) -> None:
            count_event(watch, event)

        handler.__name__ = handler.__qualname__ = watch.function_name
        # The SDK types its entry as the handler; what it deploys takes the raw CloudEvent.
        sdk_entry = cast(Callable[[CloudEvent], None], firestore_fn.on_document_written(
            document=watch.documents, database=placement().watched_database)(handler))

    @functools.wraps(sdk_entry)  # keeps the SDK's endpoint description for the deploy
    def entry(raw: CloudEvent) -> None:
        exact_document(raw)
        sdk_entry(raw)

    return entry


# Trigger name -> function; main.py exports each under its name.
TRIGGERS: dict[str, Callable[[CloudEvent], None]] = {
    watch.function_name: trigger(watch) for watch in declared().watches
}
