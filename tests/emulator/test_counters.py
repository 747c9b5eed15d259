"""Sharded counters through the real callables, as clients call them."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from callables import Callables, CallError, User
from counting.features import counters
from counting.features.context import Context
from counting.features.counters import shards_for
from counting.foundation import config, encoding, kinds
from counting.foundation.config import Names
from counting.writepath import shards
from counting.writepath.policy import Policy
from google.api_core import exceptions as gexc
from google.cloud import firestore

from ..waiting import eventually

NAMES = Names()  # the collection ids of the default placement, which these run on


def count(client: Callables, counter: str, consistency: str = "strong") -> int:
    value: int = client.call("get_count", counter=counter, consistency=consistency)["count"]
    return value


def error_of(client: Callables, name: str, **data: Any) -> CallError:
    with pytest.raises(CallError) as caught:
        client.call(name, **data)
    return caught.value


@pytest.mark.parametrize("strategy", kinds.STRATEGIES)
def test_concurrent_increments_sum_exactly(
    admin: Callables, user_token: str, suffix: str, strategy: str
) -> None:
    """8 clients x 30 increments of mixed sizes sum exactly, strong and in the rollup."""
    counter = f"likes-{strategy}-{suffix}"
    admin.call("create_counter", counter=counter, shards=5, strategy=strategy,
               policy={"by": [-2, 4]})

    def client(n: int) -> int:
        caller = Callables(user_token)
        added = 0
        for i in range(30):
            by = (n + i) % 7 - 2
            caller.call("increment", counter=counter, by=by)
            added += by
        return added

    with ThreadPoolExecutor(8) as pool:
        expected = sum(pool.map(client, range(8)))
    assert count(admin, counter) == expected
    eventually(lambda: count(admin, counter, "rollup") == expected)


def test_retried_request_id_counts_once(user: Callables, admin: Callables, suffix: str) -> None:
    """A request id applied again, in sequence or concurrently, counts once."""
    counter = f"votes-{suffix}"
    admin.call("create_counter", counter=counter, shards=3, policy={"by": [1, 5]})
    first = user.call("increment", counter=counter, by=5, request_id=f"r-{suffix}")
    again = user.call("increment", counter=counter, by=5, request_id=f"r-{suffix}")
    assert (first["applied"], again["applied"]) == (True, False)
    assert again["committed_at"] == first["committed_at"]  # the retry learns when it applied
    assert "committed_at" not in user.call("get_count", counter=counter)

    rid = f"storm-{suffix}"
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(
            lambda _: Callables(user.token).call("increment", counter=counter, request_id=rid),
            range(8)))
    assert sorted(r["applied"] for r in results) == [False] * 7 + [True]
    assert len({r["committed_at"] for r in results}) == 1
    assert count(admin, counter) == 6
    eventually(lambda: count(admin, counter, "rollup") == 6)


def test_committed_at_tells_whether_the_rollup_includes_an_increment(
    user: Callables, admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """The rollup counts an acknowledged increment exactly when its committed_at <= updated_at."""
    counter = f"ack-{suffix}"
    admin.call("create_counter", counter=counter, shards=4, policy={"by": [1, 100]})
    acks = [user.call("increment", counter=counter, by=by) for by in (1, 10, 100)]
    committed = [dt.datetime.fromisoformat(ack["committed_at"]) for ack in acks]
    assert committed == sorted(committed)
    ref = db.collection(config.COUNTERS).document(counter)
    seen: set[int] = set()

    def consistent_until_caught_up() -> bool:
        doc = ref.get()
        included = sum(by for by, at in zip((1, 10, 100), committed, strict=True)
                       if at <= doc.get("updated_at"))
        assert doc.get("count") == included  # never more, never less
        seen.add(included)
        return included == 111

    eventually(consistent_until_caught_up)
    assert seen <= {0, 1, 11, 111}


def test_a_retry_answers_when_it_applied_after_the_emulator_reimports_its_data(
    user: Callables, plain_user: User, admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """A `make dev` restart re-creates every document (the export's fields, the import's time):
    a retry still answers a committed_at that the rollup including the increment covers."""
    counter, request_id = f"reimport-{suffix}", f"r-{suffix}"
    admin.call("create_counter", counter=counter, shards=2)
    first = dt.datetime.fromisoformat(
        user.call("increment", counter=counter, request_id=request_id)["committed_at"])
    ref = db.collection(config.COUNTERS).document(counter)
    eventually(lambda: ref.get().get("count") == 1)
    # A restart takes longer than a commit can follow its request.
    overlap = dt.timedelta(seconds=shards.MARKER_COMMIT_SLACK_S)
    eventually(lambda: dt.datetime.now(dt.UTC) > first + overlap, timeout_s=5)
    marker = shards.request_marker_ref(db, NAMES, plain_user.uid, request_id)
    exported = marker.get().to_dict()
    assert exported is not None
    marker.delete()
    marker.create(exported)  # what the import does
    again = user.call("increment", counter=counter, request_id=request_id)
    assert again["applied"] is False
    answered = dt.datetime.fromisoformat(again["committed_at"])
    assert first - overlap <= answered <= first <= ref.get().get("updated_at")
    assert count(admin, counter) == 1


def test_request_ids_belong_to_their_user(user: Callables, admin: Callables, suffix: str) -> None:
    """Another user's identical request id is a different request."""
    counter = f"scoped-{suffix}"
    admin.call("create_counter", counter=counter, shards=1)
    assert user.call("increment", counter=counter, request_id="same")["applied"]
    assert admin.call("increment", counter=counter, request_id="same")["applied"]
    assert count(admin, counter) == 2


def test_batch_applies_all_once(user: Callables, admin: Callables, suffix: str) -> None:
    """A batch adds every item atomically, and its retry adds nothing."""
    a, b = f"a-{suffix}", f"b-{suffix}"
    for counter in (a, b):
        admin.call("create_counter", counter=counter, shards=2)
    items = [{"counter": a, "by": 2}, {"counter": b}, {"counter": a, "by": -1}]
    assert user.call("increment", increments=items, request_id=f"b-{suffix}") == {
        "applied": True, "count": 3}
    assert user.call("increment", increments=items, request_id=f"b-{suffix}") == {
        "applied": False, "count": 0}
    assert (count(admin, a), count(admin, b)) == (1, 1)


def test_full_batch_of_distinct_counters(
    user: Callables, admin: Callables, db: firestore.Client, suffix: str, ctx: Context
) -> None:
    """500 increments to 500 counters plus the request marker commit as one batch, once."""
    names = [f"wide-{suffix}-{n}" for n in range(500)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: counters.create_counter(ctx, db, name, shards=1,
                                                           policy=Policy(by=(1, 2))), names))
    items = [{"counter": name, "by": 2} for name in names]
    assert user.call("increment", increments=items, request_id=f"w-{suffix}")["count"] == 500
    assert user.call("increment", increments=items, request_id=f"w-{suffix}")["count"] == 0
    assert {count(admin, name) for name in names[::50]} == {2}


def test_batch_with_an_unknown_counter_writes_nothing(
    user: Callables, admin: Callables, suffix: str
) -> None:
    """One unknown counter fails the whole batch with NOT_FOUND and adds nothing."""
    known = f"known-{suffix}"
    admin.call("create_counter", counter=known, shards=1)
    items = [{"counter": known, "by": 4}, {"counter": f"ghost-{suffix}", "by": 1}]
    assert error_of(user, "increment", increments=items).status == "NOT_FOUND"
    assert count(admin, known) == 0


@pytest.mark.parametrize(
    ("name", "data", "field"),
    [
        ("create_counter", {}, "counter"),
        ("create_counter", {"counter": ""}, "counter"),
        ("create_counter", {"counter": "x" * 129}, "counter"),
        ("create_counter", {"counter": "_private"}, "counter"),
        ("create_counter", {"counter": "a/b"}, "counter"),
        ("create_counter", {"counter": "NEW", "shards": 0}, "shards"),
        ("create_counter", {"counter": "NEW", "shards": 1001}, "shards"),
        ("create_counter", {"counter": "NEW", "shards": 2.5}, "shards"),
        ("create_counter", {"counter": "NEW", "shards": True}, "shards"),
        ("create_counter", {"counter": "NEW", "expected_rate": -1}, "expected_rate"),
        ("create_counter", {"counter": "NEW", "expected_rate": "fast"}, "expected_rate"),
        ("create_counter", {"counter": "NEW", "strategy": "fastest"}, "strategy"),
        ("create_counter", {"counter": "NEW", "colour": "red"}, "colour"),
        ("increment", {"counter": "OLD", "by": True}, "by"),
        ("increment", {"counter": "OLD", "by": 1.5}, "by"),
        ("increment", {"counter": "OLD", "by": "1"}, "by"),
        ("increment", {"counter": "OLD", "by": 10**9 + 1}, "by"),
        ("increment", {"counter": "OLD", "request_id": "has space"}, "request_id"),
        ("increment", {"counter": "OLD", "request_id": "x" * 129}, "request_id"),
        ("increment", {"counter": "OLD", "request_id": ""}, "request_id"),
        ("increment", {"by": 1}, "counter"),
        ("increment", {"increments": []}, "increments"),
        ("increment", {"increments": [{"counter": "OLD", "by": 1}] * 501}, "increments"),
        ("increment", {"increments": [{"counter": "OLD", "by": 1.5}]}, "increments[0].by"),
        ("increment", {"increments": [{"counter": "OLD"}, {"counter": "."}]},
         "increments[1].counter"),
        ("increment", {"increments": [{"counter": "OLD"}], "counter": "OLD"}, "increments"),
        ("get_count", {"counter": "OLD", "consistency": "eventual"}, "consistency"),
        ("get_count", {}, "counter"),
        ("reset_counter", {"counter": 5}, "counter"),
    ],
)
def test_bad_input_is_invalid_argument_and_writes_nothing(
    admin: Callables, suffix: str, name: str, data: dict[str, Any], field: str
) -> None:
    """Each malformed field gives INVALID_ARGUMENT naming it, and nothing changes."""
    old, new = f"old-{suffix}", f"new-{suffix}"
    admin.call("create_counter", counter=old, shards=2)
    admin.call("increment", counter=old, by=3)

    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return {"OLD": old, "NEW": new}.get(value, value) if isinstance(value, str) else value

    error = error_of(admin, name, **rename(data))
    assert error.status == "INVALID_ARGUMENT"
    assert error.message.startswith(f"{field}:"), error.message
    assert count(admin, old) == 3
    assert error_of(admin, "get_count", counter=new).status == "NOT_FOUND"


@pytest.mark.parametrize("body", [
    b'{"data": {"counter": "x"', b'{"data": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
    b'{"data": {"counter": "x", "by": ' + b"9" * 5000 + b"}}", b'"data"',
], ids=["truncated", "deep", "digits", "not an object"])
def test_a_bad_body_is_invalid_argument_through_the_emulator(admin: Callables, body: bytes
                                                             ) -> None:
    """Bodies the SDK would answer INTERNAL get INVALID_ARGUMENT from the deployed entry point,
    with the CORS header a browser needs to read it."""
    reply = admin.session.post(f"{admin.base_url}/increment", data=body, timeout=60,
                               headers={"Content-Type": "application/json",
                                        "Authorization": f"Bearer {admin.token}",
                                        "Origin": "http://127.0.0.1:5000"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert reply.headers["Access-Control-Allow-Origin"] in ("*", "http://127.0.0.1:5000")


def test_unknown_counter_is_not_found(user: Callables, admin: Callables, suffix: str) -> None:
    """Every operation on a counter that does not exist answers NOT_FOUND."""
    ghost = f"ghost-{suffix}"
    assert error_of(user, "increment", counter=ghost).status == "NOT_FOUND"
    assert error_of(user, "increment", counter=ghost, request_id="r1").status == "NOT_FOUND"
    assert error_of(user, "get_count", counter=ghost).status == "NOT_FOUND"
    assert error_of(admin, "get_count", counter=ghost, consistency="strong").status == "NOT_FOUND"
    assert error_of(admin, "reset_counter", counter=ghost).status == "NOT_FOUND"


def test_roles(user: Callables, anonymous: Callables, admin: Callables, suffix: str) -> None:
    """Users increment and read; only admins create and reset; nobody acts signed out."""
    counter = f"roles-{suffix}"
    assert error_of(user, "create_counter", counter=counter).status == "PERMISSION_DENIED"
    admin.call("create_counter", counter=counter, shards=1)
    assert user.call("increment", counter=counter)["applied"]
    assert error_of(user, "reset_counter", counter=counter).status == "PERMISSION_DENIED"
    for name in ("create_counter", "increment", "get_count", "reset_counter"):
        assert error_of(anonymous, name, counter=counter).status == "UNAUTHENTICATED"
        forged = Callables("not-a-token")
        assert error_of(forged, name, counter=counter).status == "UNAUTHENTICATED"
    assert count(admin, counter) == 1


def test_create_counter_is_idempotent(admin: Callables, suffix: str) -> None:
    """Creating an existing counter reports created=false and resets nothing."""
    counter = f"idem-{suffix}"
    default_policy = {"writers": "users", "by": [1, 1], "unique": False, "min_interval_s": 0}
    assert admin.call("create_counter", counter=counter, shards=3) == {
        "counter": counter, "shards": 3, "created": True, "policy": default_policy}
    admin.call("increment", counter=counter, by=7)
    assert admin.call("create_counter", counter=counter, shards=9,
                      policy={"unique": True}) == {
        "counter": counter, "shards": 3, "created": False, "policy": default_policy}
    assert count(admin, counter) == 7


def test_shards_are_sized_from_the_expected_rate(admin: Callables, suffix: str) -> None:
    """Without `shards`, the count follows expected_rate (or the default)."""
    sized = admin.call("create_counter", counter=f"rate-{suffix}", expected_rate=40)
    default = admin.call("create_counter", counter=f"default-{suffix}")
    assert sized["shards"] == shards_for(40) == 80
    assert default["shards"] == shards_for(None)


def test_reset_zeroes_strong_and_rollup(admin: Callables, suffix: str) -> None:
    """reset_counter leaves 0 in the shards at once and in the rollup at its next tick, and
    later increments count from 0."""
    counter = f"reset-{suffix}"
    admin.call("create_counter", counter=counter, shards=4)
    for _ in range(5):
        admin.call("increment", counter=counter, by=10)
    eventually(lambda: count(admin, counter, "rollup") == 50)
    assert admin.call("reset_counter", counter=counter) == {"counter": counter, "count": 0}
    assert count(admin, counter) == 0
    eventually(lambda: count(admin, counter, "rollup") == 0)
    admin.call("increment", counter=counter, by=2)
    eventually(lambda: count(admin, counter, "rollup") == 2)


def test_get_count_reports_its_instant(admin: Callables, suffix: str) -> None:
    """Results carry an RFC 3339 UTC `as_of` and the consistency asked for."""
    counter = f"asof-{suffix}"
    admin.call("create_counter", counter=counter, shards=2)
    for consistency in ("rollup", "strong"):
        result = admin.call("get_count", counter=counter, consistency=consistency)
        assert result["consistency"] == consistency
        assert result["as_of"].endswith("Z") and "T" in result["as_of"]


def test_listener_sees_the_new_total(
    admin: Callables, user: Callables, db: firestore.Client, suffix: str
) -> None:
    """An on_snapshot listener on counters/{id} receives the rolled-up total."""
    counter = f"live-{suffix}"
    admin.call("create_counter", counter=counter, shards=4, policy={"by": [1, 3]})
    seen: list[int] = []
    arrived = threading.Event()

    def on_snapshot(docs: list[Any], changes: Any, read_time: Any) -> None:
        for doc in docs:
            seen.append(doc.get("count"))
            if doc.get("count") == 12:
                arrived.set()

    watch = db.collection("counters").document(counter).on_snapshot(on_snapshot)
    try:
        for _ in range(4):
            user.call("increment", counter=counter, by=3, request_id=uuid.uuid4().hex)
        assert arrived.wait(15), f"listener saw {seen}"
    finally:
        watch.unsubscribe()  # type: ignore[no-untyped-call]
    assert seen[-1] == 12


def test_a_unary_read_answers_as_the_clients_get(isolated_db: firestore.Client) -> None:
    """`encoding.get` (GetDocument) returns what `DocumentReference.get` (BatchGetDocuments)
    does, for a document with every kind of value the markers hold and for a missing one, and
    its version is one a conditional write takes."""
    ref = isolated_db.collection("reads").document("one")
    ref.set({"uid": "u", "at": firestore.SERVER_TIMESTAMP, "n": 3, "nonces": ["a", "b"],
             "expires_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC), "counted": True})
    unary, streamed = encoding.get(ref), ref.get()
    assert unary.exists and unary.to_dict() == streamed.to_dict()
    assert (unary.update_time, unary.create_time) == (streamed.update_time,
                                                      streamed.create_time)
    assert type(unary.update_time) is type(streamed.update_time)
    batch = isolated_db.batch()
    encoding.update_at(batch, isolated_db, ref, {"n": 4}, unary.update_time)
    batch.commit()
    batch = isolated_db.batch()
    encoding.update_at(batch, isolated_db, ref, {"n": 5}, unary.update_time)  # stale now
    with pytest.raises(gexc.FailedPrecondition):
        batch.commit()
    missing = encoding.get(isolated_db.collection("reads").document("none"))
    assert not missing.exists and missing.to_dict() is None


def test_a_retried_reset_and_configure_apply_once(admin: Callables, suffix: str) -> None:
    """The admin operations take a request_id: a reset retried with its id after a newer
    increment leaves that increment counted, and a configuration retried after a newer one
    leaves the newer in force."""
    counter = f"reset-id-{suffix}"
    admin.call("create_counter", counter=counter, shards=2)
    admin.call("increment", counter=counter, by=5)
    reset = {"counter": counter, "count": 0}
    assert admin.call("reset_counter", counter=counter, request_id="reset-1") == reset
    admin.call("increment", counter=counter, by=3)
    assert admin.call("reset_counter", counter=counter, request_id="reset-1") == reset
    assert count(admin, counter) == 3
    narrow, wide = {"by": [1, 5]}, {"by": [1, 9]}
    admin.call("configure_counter", counter=counter, policy=narrow, request_id="conf-1")
    admin.call("configure_counter", counter=counter, policy=wide)
    admin.call("configure_counter", counter=counter, policy=narrow, request_id="conf-1")
    assert admin.call("increment", counter=counter, by=7)["applied"] is True
