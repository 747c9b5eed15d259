"""Collection counters' pure logic: counter ids from any value, what a document counts, and the
record's plan for an observed state (order, redelivery, moves, deletions)."""

from __future__ import annotations

import datetime as dt
import importlib
import random
from typing import Any, cast

import pytest
from cloudevents.http import CloudEvent
from counting.features import collections, declarations
from counting.features.collections import Declaration, Entry, Observed, escape, plan, unescape
from counting.features.shard_choice import CounterConfig
from counting.foundation import inputs
from counting.foundation.errors import FailedPrecondition, InvalidArgument
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore
from google.events.cloud import firestore as events
from hypothesis import given
from hypothesis import strategies as st

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

COMMENTS, ORDERS, REVENUE, VISITS = OWN.declarations
ORDER_DECLARATIONS = [ORDERS, REVENUE]
POST = "posts/p1/comments/c1"
ORDER = "orders/o1"


def order_params() -> dict[str, str]:
    return {"order": "o1"}


def amounts(declaration: Declaration, data: dict[str, Any] | None,
            params: dict[str, str] | None = None) -> dict[str, int]:
    return declaration.amounts(params or order_params(), data)


@pytest.mark.parametrize(("value", "escaped"), [
    ("p1", "p1"),
    ("Paid_Out-2", "Paid_Out-2"),
    ("", ""),
    ("in transit", "in.20transit"),
    ("v1.2", "v1.2E2"),
    ("a:b", "a.3Ab"),
    ("café", "caf.C3.A9"),
    ("日本", ".E6.97.A5.E6.9C.AC"),
    (".hidden", ".2Ehidden"),
    ("_x", "_x"),
    ("..", ".2E.2E"),
])
def test_values_escape_to_the_counter_id_alphabet(value: str, escaped: str) -> None:
    """Kept characters stay, every other UTF-8 byte is `.HH`; the value comes back."""
    assert escape(value, 100) == escaped
    assert unescape(escaped) == value


@given(st.text(max_size=300))
def test_any_value_makes_a_valid_stable_counter_id(value: str) -> None:
    """Whatever the value (unicode, dots, very long, empty), the id is valid and the same each
    time; ids that are not hashed give the value back."""
    for declaration in (ORDERS, COMMENTS):
        counter = declaration.counter_id(value)
        assert inputs.counter_id(counter) == counter
        assert counter == declaration.counter_id(value)
        part = counter[len(declaration.owns):]
        if collections.HASH_MARK not in part:
            assert unescape(part) == value


@given(st.text(min_size=1, max_size=200), st.text(min_size=1, max_size=200))
def test_distinct_values_make_distinct_ids(a: str, b: str) -> None:
    """The escaping is one-to-one (hashed ids differ unless SHA-256 collides)."""
    if a != b:
        assert ORDERS.counter_id(a) != ORDERS.counter_id(b)


def test_a_long_value_keeps_its_head_and_a_hash() -> None:
    """Past 128 characters: the escaped head, `..`, 32 hex digits; no escape is cut in half."""
    first, second = "é" * 100 + "a", "é" * 100 + "b"
    ids = [ORDERS.counter_id(first), ORDERS.counter_id(second)]
    assert all(len(counter) <= 128 for counter in ids)
    assert ids[0] != ids[1]
    head, _, digest = ids[0][len("orders:"):].partition("..")
    assert len(digest) == 32 and head.startswith(".C3.A9") and len(head) % 3 == 0
    with pytest.raises(ValueError, match="hashed"):
        unescape(ids[0][len("orders:"):])


@pytest.mark.parametrize(("data", "expected"), [
    ({"status": "paid", "amount": 250}, {"orders:paid": 1, "revenue:paid": 250}),
    ({"status": "", "amount": 5}, {"orders:": 1, "revenue:": 5}),
    ({"status": "in transit", "amount": -3}, {"orders:in.20transit": 1,
                                              "revenue:in.20transit": -3}),
    ({"status": 7, "amount": 5}, {}),
    ({"status": None, "amount": 5}, {}),
    ({"status": ["paid"], "amount": 5}, {}),
    ({"amount": 5}, {}),
    ({"status": "paid"}, {"orders:paid": 1, "revenue:paid": 0}),
    ({"status": "paid", "amount": 1.5}, {"orders:paid": 1, "revenue:paid": 0}),
    ({"status": "paid", "amount": "3"}, {"orders:paid": 1, "revenue:paid": 0}),
    ({"status": "paid", "amount": True}, {"orders:paid": 1, "revenue:paid": 0}),
    ({"status": "paid", "amount": 10**9 + 1}, {"orders:paid": 1, "revenue:paid": 0}),
    (None, {}),
])
def test_what_an_order_counts(data: dict[str, Any] | None, expected: dict[str, int]) -> None:
    """A string status counts the order; only a bounded integer amount (not a bool) is summed;
    anything else in status counts nowhere."""
    assert {**amounts(ORDERS, data), **amounts(REVENUE, data)} == expected


def test_a_comment_counts_for_its_post() -> None:
    """comments:{post} takes the post's id from the path, whatever the comment holds."""
    params = collections.match(COMMENTS.documents, "posts/my post/comments/c1")
    assert params == {"post": "my post", "comment": "c1"}
    assert COMMENTS.amounts(params, {}) == {"comments:my.20post": 1}
    assert collections.match(COMMENTS.documents, "posts/p/likes/c1") is None
    assert collections.match(COMMENTS.documents, "posts/p") is None


def state(data: dict[str, Any] | None, version: int, path: str = ORDER) -> Observed:
    return Observed(path=path, data=data, version=version)


def apply_all(states: list[Observed], declared: list[Declaration] = ORDER_DECLARATIONS,
              ) -> tuple[dict[str, Entry], dict[str, int]]:
    """Apply states in the given order as the record would: the entries and the counters."""
    entries: dict[str, Entry] = {}
    totals: dict[str, int] = {}
    for observed in states:
        change = plan(declared, entries, observed, order_params())
        if change is None:
            continue
        entries = change.entries
        for counter, delta in change.deltas.items():
            totals[counter] = totals.get(counter, 0) + delta
    return entries, {c: v for c, v in totals.items() if v}


def test_a_status_change_moves_the_count_and_the_sum() -> None:
    """One plan holds every counter's delta: -1/+1 on orders, the amount moved on revenue."""
    entries, _ = apply_all([state({"status": "paid", "amount": 100}, 1)])
    change = plan(ORDER_DECLARATIONS, entries, state({"status": "shipped", "amount": 120}, 2),
                  order_params())
    assert change is not None
    assert change.deltas == {"orders:paid": -1, "orders:shipped": 1, "revenue:paid": -100,
                             "revenue:shipped": 120}
    assert change.counters == {"orders:shipped": "orders", "revenue:shipped": "revenue"}


def test_a_redelivered_or_older_state_plans_nothing() -> None:
    """The record only moves forward: the same state again, or an older one, is a no-op."""
    entries, _ = apply_all([state({"status": "paid", "amount": 1}, 5)])
    assert plan(ORDER_DECLARATIONS, entries, state({"status": "paid", "amount": 1}, 5),
                order_params()) is None
    assert plan(ORDER_DECLARATIONS, entries, state({"status": "new", "amount": 1}, 4),
                order_params()) is None


def test_an_unrelated_edit_moves_the_record_but_no_counter() -> None:
    """A newer state that counts the same is recorded (an older one must not win later)."""
    entries, _ = apply_all([state({"status": "paid", "amount": 1}, 5)])
    change = plan(ORDER_DECLARATIONS, entries, state({"status": "paid", "amount": 1, "x": 2}, 6),
                  order_params())
    assert change is not None and change.deltas == {}
    assert {e.version for e in change.entries.values()} == {6}


def test_a_deletion_comes_after_the_state_it_deletes() -> None:
    """Deleted at version v: the state read at v (a backfill's late read) counts nothing; a
    later re-creation counts again."""
    written = state({"status": "paid", "amount": 7}, 3)
    deleted = state(None, 3)
    assert written.key < deleted.key < state({"status": "x"}, 4).key
    entries, totals = apply_all([written, deleted, written])
    assert totals == {} and all(e.deleted for e in entries.values())
    _, totals = apply_all([written, deleted, state({"status": "new", "amount": 2}, 9)])
    assert totals == {"orders:new": 1, "revenue:new": 2}


def test_a_deletion_of_a_document_never_counted_counts_nothing() -> None:
    """A document written before its declaration and deleted after: nothing to take away."""
    entries, totals = apply_all([state(None, 8)])
    assert totals == {} and entries["orders"].deleted


history = st.lists(
    st.tuples(st.sampled_from(["paid", "shipped", "", None]), st.integers(-5, 5),
              st.booleans()),
    min_size=1, max_size=12)


@given(history, st.randoms(use_true_random=False), st.integers(0, 3))
def test_any_delivery_order_with_duplicates_counts_the_latest_state(
    steps: list[tuple[str | None, int, bool]], rng: random.Random, duplicates: int,
) -> None:
    """Events delivered in any order, some twice, and backfill reads of any version: the
    counters end at what the document's last state counts."""
    states = []
    for version, (status, amount, deleted) in enumerate(steps, 1):
        data = None if deleted else ({"amount": amount} if status is None
                                     else {"status": status, "amount": amount})
        states.append(state(data, version))
    delivered = states + [rng.choice(states) for _ in range(duplicates)]
    rng.shuffle(delivered)
    _, totals = apply_all(delivered)
    last = states[-1].data
    expected = {c: v for c, v in {**amounts(ORDERS, last), **amounts(REVENUE, last)}.items() if v}
    assert totals == expected


def test_a_new_declaration_fills_its_own_entry() -> None:
    """A record made before revenue was declared gains revenue's entry from the next state (or
    the backfill), without touching orders' count."""
    entries, _ = apply_all([state({"status": "paid", "amount": 40}, 1)], [ORDERS])
    change = plan(ORDER_DECLARATIONS, entries, state({"status": "paid", "amount": 40}, 1),
                  order_params())
    assert change is not None and change.deltas == {"revenue:paid": 40}


def test_entries_round_trip_through_their_document() -> None:
    """A record entry is stored as plain lists (counter ids hold dots) and read back."""
    entry = Entry(version=12345678901234, deleted=False, amounts={"orders:a.2Eb": 1})
    assert Entry.from_document(entry.to_document("orders")) == entry


def test_commit_times_keep_their_nanoseconds() -> None:
    """Versions order commits a microsecond apart and nanoseconds apart alike."""
    with_nanos = cast(Any, DatetimeWithNanoseconds)  # the class is untyped
    base = with_nanos(2026, 11, 22, 10, 0, 0, nanosecond=123456789, tzinfo=dt.UTC)
    later = with_nanos(2026, 11, 22, 10, 0, 0, nanosecond=123456790, tzinfo=dt.UTC)
    assert collections.nanos(later) - collections.nanos(base) == 1
    plain = dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=dt.UTC)
    assert collections.nanos(plain) == collections.nanos(base) - 789


@pytest.mark.parametrize("fields", [
    {"counter": "orders", "documents": "orders/{order}"},
    {"counter": "orders:{status}", "documents": "orders/{order}"},
    {"counter": "orders:{order}", "documents": "orders"},
    {"counter": "orders:{order}", "documents": "orders/fixed"},
    {"counter": ".x:{order}", "documents": "orders/{order}"},
    {"counter": "orders:{status}", "documents": "orders/{order}", "group_by": "state"},
])
def test_malformed_declarations_are_refused(fields: dict[str, Any]) -> None:
    """A declaration whose ids or documents cannot work fails at import, not at the first event."""
    with pytest.raises(InvalidArgument):
        Declaration(**fields)


def test_the_demo_declarations_make_three_triggers() -> None:
    """One watch per pattern (an extension counter's: its documents' shards); names are unique
    and the ids they keep are recognised."""
    assert [(w.function_name, [d.name for d in w.declarations])
            for w in OWN.watches] == [("count_posts_comments", ["comments"]),
                                      ("count_orders", ["orders", "revenue"]),
                                      ("count_pages_counter_shards", ["visits"])]
    assert [w.extension_shards for w in OWN.watches] == [False, False, True]
    with pytest.raises(InvalidArgument, match="twice"):
        collections.watches([ORDERS, ORDERS])
    assert OWN.owner("revenue:paid") == "revenue"
    assert OWN.owner("likes") is None
    with pytest.raises(FailedPrecondition):
        OWN.check_plain("comments:p1")


def test_collection_counters_refuse_direct_writes() -> None:
    """increment and reset on a collection counter are FAILED_PRECONDITION."""
    CounterConfig(counter="x", num_shards=1, strategy="random").check_writable()
    with pytest.raises(FailedPrecondition, match="collection counter"):
        CounterConfig(counter="orders:paid", num_shards=1, strategy="random",
                      collection="orders").check_writable()


def snapshot(data: dict[str, Any], version: int) -> Any:
    at = dt.datetime.fromtimestamp(version / 1e9, dt.UTC)
    return firestore.DocumentSnapshot(None, data, True, at, at, at)  # no reference needed


def test_an_event_leads_to_its_after_state_or_a_deletion_after_its_before() -> None:
    """A write's state is its after (at its update time); a deletion is versioned by the state
    it deleted, so it sorts after it."""
    before = snapshot({"status": "paid"}, 1_000_000_000)
    after = snapshot({"status": "shipped"}, 2_000_000_000)
    written = Observed.of_change(ORDER, before, after)
    assert (written.data, written.version) == ({"status": "shipped"}, 2_000_000_000)
    deleted = Observed.of_change(ORDER, after, None)
    assert deleted.data is None and deleted.key > written.key
    with pytest.raises(ValueError, match="neither"):
        Observed.of_change(ORDER, None, None)


def test_the_trigger_takes_the_document_path_from_the_payload() -> None:
    """An id with non-ASCII characters arrives Latin-1-garbled in the `document` header; the
    payload's resource name is exact and wins."""
    api = importlib.import_module("handlers.collections")  # after main.py's global options
    path = "posts/été/comments/c1"
    name = f"projects/demo-unit/databases/(default)/documents/{path}"
    payload = events.DocumentEventData(value=events.Document(name=name))
    raw = CloudEvent({"type": "t", "source": "s", "document": path.encode().decode("latin-1")},
                     events.DocumentEventData.serialize(payload))
    api.exact_document(raw)
    assert raw["document"] == path


class FlakyCounting:
    """A stand-in for Counting whose apply fails with each of `failures` in turn, then works."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0

    def apply(self, observed: Observed, *, event: str) -> collections.Applied:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return collections.Applied()


def event_of(path: str) -> Any:
    doc = firestore.DocumentSnapshot(
        firestore.Client(project="demo-unit").document(path), {"status": "paid"}, True,
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    change = type("Change", (), {"before": None, "after": doc})()
    return type("Event", (), {"data": change, "id": "event-1"})()


def test_a_trigger_retries_transient_failures_and_gives_up_on_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Contention and outages are retried after each pause (the platform never redelivers a
    failed Python Firestore trigger); a permanent failure is raised at once; retries run out."""
    from counting.foundation.errors import Aborted
    from google.api_core import exceptions as gexc

    api = importlib.import_module("handlers.collections")
    watch = OWN.watches[0]
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")
    slept: list[float] = []
    down: Exception = gexc.ServiceUnavailable("down")  # type: ignore[no-untyped-call]
    flaky = FlakyCounting([Aborted("lost races"), down])
    monkeypatch.setattr(api, "counting", lambda _: flaky)
    api.count_event(watch, event_of("orders/o1"), pauses=(1.0, 2.0, 4.0), sleep=slept.append)
    assert (flaky.calls, slept) == (3, [1.0, 2.0])

    permanent = FlakyCounting([FailedPrecondition("a hand-made counter")])
    monkeypatch.setattr(api, "counting", lambda _: permanent)
    with pytest.raises(FailedPrecondition):
        api.count_event(watch, event_of("orders/o1"), pauses=(1.0,), sleep=slept.append)
    assert permanent.calls == 1

    hopeless = FlakyCounting([down] * 5)
    monkeypatch.setattr(api, "counting", lambda _: hopeless)
    with pytest.raises(gexc.ServiceUnavailable):
        api.count_event(watch, event_of("orders/o1"), pauses=(1.0, 1.0), sleep=slept.append)
    assert hopeless.calls == 3
