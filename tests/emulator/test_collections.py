"""Collection counters through the real Firestore triggers of the Functions emulator: creates,
deletes, updates and moves, odd ids, redelivered events, and a backfill under concurrent writes.

Each test counts in counters of its own (a unique status or post id), in the stack's project,
where the triggers and the rollup run.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import os
import random
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from callables import Callables, CallError
from counting.features import collections, counters, declarations, shard_choice
from counting.features.context import Context
from counting.foundation.config import Names
from counting.foundation.errors import FailedPrecondition
from google.cloud import firestore
from google.events.cloud import firestore as events
from google.protobuf import timestamp_pb2

from ..waiting import eventually

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

NAMES = Names()  # the collection ids of the default placement, which these run on

COMMENTS, ORDERS, REVENUE, _ = OWN.declarations
ORDERS_WATCH = OWN.watch_of("orders")
COMMENTS_WATCH = OWN.watch_of("comments")
# A trigger's event reaches the rollup within seconds; the first event also starts a worker.
PUBLISHED_S = 60.0


def rollup(db: firestore.Client, counter: str) -> int | None:
    """The published count (counters/{id}.count), None while the counter does not exist."""
    snapshot = db.collection("counters").document(counter).get()
    return int((snapshot.to_dict() or {})["count"]) if snapshot.exists else None


def strong(db: firestore.Client, counter: str) -> int:
    """The exact sum of the counter's shards."""
    shards = db.collection("counters", counter, "shards").stream()
    return sum(int((s.to_dict() or {}).get("count", 0)) for s in shards)


def settled(db: firestore.Client, expected: dict[str, int]) -> bool:
    """Every counter publishes its expected value (and its shards sum to it)."""
    return all(rollup(db, c) == n for c, n in expected.items()) and all(
        strong(db, c) == n for c, n in expected.items())


def wait_for(db: firestore.Client, expected: dict[str, int]) -> None:
    eventually(lambda: settled(db, expected), timeout_s=PUBLISHED_S, every_s=0.2)


def expected_of(db: firestore.Client, refs: list[firestore.DocumentReference],
                declared: list[collections.Declaration]) -> dict[str, int]:
    """What the declarations count for these documents as they are now."""
    totals: dict[str, int] = {}
    for snapshot in db.get_all(refs):
        data = snapshot.to_dict() if snapshot.exists else None
        params = collections.match(declared[0].documents, snapshot.reference.path)
        assert params is not None
        for declaration in declared:
            for counter, amount in declaration.amounts(params, data).items():
                totals[counter] = totals.get(counter, 0) + amount
    return totals


def test_orders_are_counted_and_summed_through_creates_updates_moves_and_deletes(
    db: firestore.Client, suffix: str,
) -> None:
    """Every change is reflected exactly: a status change moves the count and the sum, an amount
    change moves the sum, a deletion or a non-string status takes the order out."""
    paid, shipped = f"paid-{suffix}", f"shipped-{suffix}"
    orders = [db.collection("orders").document(f"{suffix}-{n}") for n in range(4)]
    orders[0].set({"status": paid, "amount": 100})
    orders[1].set({"status": paid, "amount": 20})
    orders[2].set({"status": shipped, "amount": 5})
    wait_for(db, {f"orders:{paid}": 2, f"revenue:{paid}": 120,
                  f"orders:{shipped}": 1, f"revenue:{shipped}": 5})

    orders[0].update({"status": shipped})  # a move
    orders[1].update({"amount": 25})  # a sum change
    orders[2].update({"note": "gift"})  # counts the same
    orders[3].set({"status": paid, "amount": 1.5})  # counted, not summed
    wait_for(db, {f"orders:{paid}": 2, f"revenue:{paid}": 25,
                  f"orders:{shipped}": 2, f"revenue:{shipped}": 105})

    orders[0].delete()
    orders[1].update({"status": 42})  # no longer a string: counted nowhere
    orders[3].update({"amount": True})  # a bool is not an amount
    wait_for(db, {f"orders:{paid}": 1, f"revenue:{paid}": 0,
                  f"orders:{shipped}": 1, f"revenue:{shipped}": 5})


def test_comments_count_per_post_with_odd_ids(db: firestore.Client, suffix: str) -> None:
    """Post ids with spaces, dots, colons and unicode, and a very long one, map to valid ids;
    comments come and go."""
    posts = [f"my post.été:{suffix}", f"{suffix}-" + "x" * 300]
    ids = [COMMENTS.counter_id(post) for post in posts]
    assert ids[0] == f"comments:my.20post.2E.C3.A9t.C3.A9.3A{suffix}"
    assert len(ids[1]) == 128 and ".." in ids[1]
    comments = [db.collection("posts", post, "comments") for post in posts]
    for n in range(3):
        for collection in comments:
            collection.document(f"c{n}").set({"author": "someone", "text": f"comment {n}"})
    wait_for(db, {ids[0]: 3, ids[1]: 3})
    comments[0].document("c1").delete()
    comments[1].document("c3").set({"author": "someone", "text": "one more"})
    wait_for(db, {ids[0]: 2, ids[1]: 4})


def test_odd_statuses_get_their_own_counters(db: firestore.Client, suffix: str) -> None:
    """A unicode status and a 400-character one count in counters of their own."""
    odd = [f"État {suffix}", f"{suffix}" + "é/" * 200]
    for n, status in enumerate(odd):
        db.collection("orders").document(f"{suffix}-odd-{n}").set({"status": status, "amount": 3})
    wait_for(db, {ORDERS.counter_id(s): 1 for s in odd} | {REVENUE.counter_id(s): 3 for s in odd})


def test_collection_counters_refuse_direct_writes(
    db: firestore.Client, admin: Callables, suffix: str
) -> None:
    """increment, a batch increment and reset_counter answer FAILED_PRECONDITION; creating a
    counter with a declared id too."""
    status = f"paid-{suffix}"
    db.collection("orders").document(suffix).set({"status": status, "amount": 1})
    counter = f"orders:{status}"
    wait_for(db, {counter: 1})
    calls: list[dict[str, Any]] = [
        {"name": "increment", "counter": counter},
        {"name": "increment", "increments": [{"counter": counter, "by": 1}]},
        {"name": "reset_counter", "counter": counter},
        {"name": "create_counter", "counter": f"comments:new-{suffix}"},
    ]
    for call in calls:
        with pytest.raises(CallError) as caught:
            admin.call(**call)
        assert caught.value.status == "FAILED_PRECONDITION", call
    assert strong(db, counter) == 1


# --- Redelivery: events POSTed to the Functions emulator as the Firestore emulator sends them ---


def timestamp(version: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=version // 10**9, nanos=version % 10**9)


def document(path: str, fields: dict[str, Any], version: int) -> events.Document:
    values = {name: events.Value(string_value=value) if isinstance(value, str)
              else events.Value(integer_value=value) for name, value in fields.items()}
    return events.Document(
        name=f"projects/{os.environ['GCLOUD_PROJECT']}/databases/(default)/documents/{path}",
        fields=values, create_time=timestamp(version), update_time=timestamp(version))


def deliver(event_id: str, path: str, before: tuple[dict[str, Any], int] | None,
            after: tuple[dict[str, Any], int] | None, function: str = "count_orders") -> None:
    """Deliver one document-written event to the trigger, as the Firestore emulator does (a
    binary-mode CloudEvent with a base64 protobuf body); returns once the handler has run."""
    data = events.DocumentEventData(
        value=document(path, *after) if after else None,
        old_value=document(path, *before) if before else None)
    project = os.environ["GCLOUD_PROJECT"]
    origin = urlsplit(os.environ["COUNTERS_FUNCTIONS_URL"])
    headers = {
        "Content-Type": "application/protobuf",
        "ce-specversion": "1.0", "ce-id": event_id,
        "ce-type": "google.cloud.firestore.document.v1.written",
        "ce-source": f"//firestore.googleapis.com/projects/{project}/databases/(default)",
        "ce-subject": f"documents/{path}",
        "ce-time": dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z"),
        "ce-location": "us-central1", "ce-project": project, "ce-namespace": "(default)",
        "ce-database": "(default)", "ce-document": path,
    }
    body = base64.b64encode(events.DocumentEventData.serialize(data))
    # The emulator numbers a trigger's records (-0); switching background triggers off and on
    # (the backfill test) adds an enabled one (-1, ...) beside the disabled one, which answers 204.
    for record in range(10):
        reply = requests.post(
            f"{origin.scheme}://{origin.netloc}/functions/projects/{project}/triggers/"
            f"us-central1-{function}-{record}", data=body, headers=headers, timeout=60)
        if reply.status_code != 204:
            break
    assert reply.status_code == 200, reply.text


def record(db: firestore.Client, path: str) -> dict[str, Any]:
    snapshot = collections.record_ref(db, NAMES, path).get()
    assert snapshot.exists
    return snapshot.to_dict() or {}


def test_an_event_delivered_twice_counts_once(db: firestore.Client, suffix: str) -> None:
    """The same event delivered again (with its id) counts nothing more, as does one delivered
    after a newer event of its document."""
    status = f"paid-{suffix}"
    once = {f"orders:{status}": 1, f"revenue:{status}": 7}
    phantom = f"orders/{suffix}-phantom"  # delivered directly: no document write behind it
    for _ in range(3):
        deliver(f"e-{suffix}", phantom, None, ({"status": status, "amount": 7}, 10**18))
        assert {c: strong(db, c) for c in once} == once

    ref = db.collection("orders").document(suffix)
    ref.set({"status": status, "amount": 7})
    doubled = {c: 2 * n for c, n in once.items()}
    wait_for(db, doubled)
    created = ref.get()
    version = collections.nanos(created.update_time)
    first_event = record(db, ref.path)["event"]
    deliver(first_event, ref.path, None, ({"status": status, "amount": 7}, version))
    assert {c: strong(db, c) for c in once} == doubled

    moved = f"shipped-{suffix}"
    ref.update({"status": moved})
    wait_for(db, once | {f"orders:{moved}": 1, f"revenue:{moved}": 7})
    # The creation again, now older than the document's state: nothing.
    deliver(first_event, ref.path, None, ({"status": status, "amount": 7}, version))
    deliver(f"other-{suffix}", ref.path, None, ({"status": status, "amount": 7}, version))
    assert {c: strong(db, c) for c in [*once, f"orders:{moved}"]} == {
        **once, f"orders:{moved}": 1}


# --- Backfill -----------------------------------------------------------------------------------


def switch_triggers(on: bool) -> None:
    """The Emulator Hub's switch of the Functions emulator's background triggers: while they
    are off, documents written are as documents written before their counters were declared.

    Switching off takes effect as the hub receives the request; the hub then waits for every
    running function to finish before it answers, and the rollup's invocations run for a
    minute, so its answer is not awaited (nor is an answer that never comes, after the hub
    gives up at 60 s). The events of earlier writes were awaited by the tests already."""
    hub = os.environ.get("FIREBASE_EMULATOR_HUB", "127.0.0.1:4400")
    path = "enableBackgroundTriggers" if on else "disableBackgroundTriggers"
    try:
        requests.put(f"http://{hub}/functions/{path}", timeout=(10, 60 if on else 10)
                     ).raise_for_status()
    except requests.ReadTimeout:
        if on:
            raise


@contextlib.contextmanager
def triggers_off(db: firestore.Client, suffix: str) -> Iterator[None]:
    """Triggers off for the block; back on (and seen to count again) after it."""
    switch_triggers(False)
    try:
        yield
    finally:
        switch_triggers(True)
    probe = f"probe-{suffix}"
    db.collection("orders").document(f"{suffix}-probe").set({"status": probe, "amount": 1})
    wait_for(db, {f"orders:{probe}": 1})


def test_backfill_counts_old_documents_once_while_documents_change(
    db: firestore.Client, suffix: str, ctx: Context,
) -> None:
    """Documents written with no trigger running are counted by the backfill; documents
    created, deleted, moved and re-summed while it runs (before and after it reads them) are
    counted exactly once; a second backfill counts nothing."""
    statuses = [f"a-{suffix}", f"b-{suffix}", f"c-{suffix}"]
    rng = random.Random(suffix)
    refs = [db.collection("orders").document(f"{suffix}-{n:03d}") for n in range(240)]
    post = f"bf-{suffix}"
    with triggers_off(db, suffix):
        batch = db.batch()
        for ref in refs:
            batch.set(ref, {"status": rng.choice(statuses[:2]), "amount": rng.randrange(100)})
        for n in range(30):
            batch.set(db.collection("posts", post, "comments").document(f"c{n}"),
                      {"author": "someone", "text": "old"})
        batch.commit()
    assert all(rollup(db, c) is None for c in expected_of(db, refs, [ORDERS, REVENUE]))

    done = threading.Event()
    written: list[firestore.DocumentReference] = []

    def change(rng: random.Random) -> None:
        ref = rng.choice(refs)
        kind = rng.randrange(4)
        if kind == 0:
            ref.delete()
        elif kind == 1:  # a move, or a re-creation
            ref.set({"status": rng.choice(statuses), "amount": rng.randrange(100)})
        elif kind == 2:  # a new amount, if it still exists
            ref.set({"amount": rng.randrange(100)}, merge=True) if ref.get().exists else None
        else:
            new = db.collection("orders").document(f"{suffix}-new-{uuid.uuid4().hex[:6]}")
            new.set({"status": rng.choice(statuses), "amount": rng.randrange(100)})
            written.append(new)

    def writer() -> None:
        own = random.Random(rng.random())
        while not done.is_set():
            change(own)

    pages: list[int] = []

    def progress(so_far: collections.Backfilled) -> None:
        # Between pages: change documents read already and documents not read yet.
        pages.append(so_far.documents)
        for _ in range(20):
            change(rng)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        collections.backfill(collections.Counting(ctx, db, ORDERS_WATCH), progress=progress,
                             page=50)
    finally:
        done.set()
        thread.join()
    assert len(pages) >= 4  # the writes interleaved with several pages
    expected = expected_of(db, refs + written, [ORDERS, REVENUE])
    wait_for(db, expected)

    again = collections.backfill(collections.Counting(ctx, db, ORDERS_WATCH))
    assert not {c for c in again.deltas if c.endswith(suffix)}
    comments = collections.backfill(collections.Counting(ctx, db, COMMENTS_WATCH))
    assert comments.deltas.get(COMMENTS.counter_id(post)) == 30
    wait_for(db, expected | {COMMENTS.counter_id(post): 30})


def test_backfill_uncounts_a_document_whose_delete_event_was_lost(
    db: firestore.Client, suffix: str, ctx: Context,
) -> None:
    """A document deleted while no trigger ran stays counted until a backfill, which uncounts it
    once (and a second backfill changes nothing); a document re-created afterwards counts."""
    status = f"lost-{suffix}"
    kept, lost = (db.collection("orders").document(f"{suffix}-{n}") for n in ("kept", "lost"))
    kept.set({"status": status, "amount": 5})
    lost.set({"status": status, "amount": 7})
    wait_for(db, {f"orders:{status}": 2, f"revenue:{status}": 12})
    with triggers_off(db, suffix):
        lost.delete()
    repaired = collections.backfill(collections.Counting(ctx, db, ORDERS_WATCH))
    assert repaired.removed >= 1 and not repaired.failed
    assert repaired.deltas[f"orders:{status}"] == -1
    assert repaired.deltas[f"revenue:{status}"] == -7
    wait_for(db, {f"orders:{status}": 1, f"revenue:{status}": 5})
    again = collections.backfill(collections.Counting(ctx, db, ORDERS_WATCH))
    assert not {c for c in again.deltas if c.endswith(suffix)}
    lost.set({"status": status, "amount": 1})
    wait_for(db, {f"orders:{status}": 2, f"revenue:{status}": 6})


# --- The apply step in-process, on a project of its own (no trigger, no rollup there) -----------


def test_racing_first_events_create_a_counter_once_and_count_each(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """16 instances (each with its own configuration cache) apply the first comments of a post
    at once: one creates the counter, the others find it, every comment counts."""
    def instance(n: int) -> collections.Applied:
        own = Context.of(ctx.writing)  # an instance's own caches and picker
        counting = collections.Counting(own, isolated_db, COMMENTS_WATCH)
        return counting.apply(collections.Observed(
            path=f"posts/p/comments/c{n}", data={"text": "hi"}, version=1_000 + n), event=f"e{n}")

    with ThreadPoolExecutor(16) as pool:
        applied = list(pool.map(instance, range(16)))
    assert all(a.deltas == {"comments:p": 1} for a in applied)
    assert strong(isolated_db, "comments:p") == 16
    data = isolated_db.collection("counters").document("comments:p").get().to_dict() or {}
    assert data["collection"] == "comments"


def test_racing_states_of_one_document_end_at_the_newest(isolated_db: firestore.Client,
                                                         ctx: Context) -> None:
    """Thirty states of one order, applied at once in any order and some twice: the counters
    hold what the newest state counts."""
    rng = random.Random(7)
    states = [collections.Observed(path="orders/o", version=v, data=None if v % 7 == 0 else {
        "status": rng.choice(["a", "b", "c"]), "amount": rng.randrange(50)}) for v in range(1, 31)]
    delivered = states + rng.sample(states, 10)
    rng.shuffle(delivered)

    def deliver_one(observed: collections.Observed) -> collections.Applied:
        return collections.Counting(ctx, isolated_db, ORDERS_WATCH).apply(observed, event="e")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(deliver_one, delivered))
    last = states[-1].data
    expected = {**ORDERS.amounts({}, last), **REVENUE.amounts({}, last)}
    for status in "abc":
        for counter in (f"orders:{status}", f"revenue:{status}"):
            exists = isolated_db.collection("counters").document(counter).get().exists
            assert (strong(isolated_db, counter) if exists else 0) == expected.get(counter, 0)


def test_a_hand_made_counter_under_a_declared_id_is_not_counted_into(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """A plain counter created with a declared id before the declaration: the event is refused
    and nothing is written."""
    counters.create_counter(ctx, isolated_db, "orders:legacy", shards=1)
    counting = collections.Counting(dataclasses.replace(ctx, configs=shard_choice.ConfigCache()),
                                    isolated_db, ORDERS_WATCH)
    with pytest.raises(FailedPrecondition, match="not maintained by declaration"):
        counting.apply(collections.Observed(path="orders/o", data={"status": "legacy"},
                                            version=1), event="e")
    assert strong(isolated_db, "orders:legacy") == 0
    assert not collections.record_ref(isolated_db, NAMES, "orders/o").get().exists
