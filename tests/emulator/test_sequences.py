"""Resetting sequences against the Emulator Suite: through the callables, the rules, and the
domain in-process with an injected clock for business-day boundaries."""

from __future__ import annotations

import datetime as dt
import os
import threading
import zoneinfo
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from callables import Callables, CallError, User, sign_up
from counting.features.context import Context
from counting.features.sequences import documents, housekeeping, issuing, limits, opening, resetting
from counting.foundation import config
from counting.foundation.config import Names
from google.cloud import firestore

from ..waiting import eventually

NAMES = Names()  # the collection ids of the default placement, which these run on

NEW_YORK = "America/New_York"


@pytest.fixture
def tenant(suffix: str) -> str:
    return f"shop-{suffix}"


@pytest.fixture
def member_user(tenant: str) -> User:
    return sign_up({"tenants": ["elsewhere", tenant]})


@pytest.fixture
def member(member_user: User) -> Callables:
    return Callables(member_user.id_token)


@pytest.fixture
def configured(admin: Callables, tenant: str) -> str:
    admin.call("configure_sequence", tenant=tenant, timezone="Europe/Paris", reset_time="04:00")
    return tenant


def status_of(call: Callable[[], Any]) -> str:
    with pytest.raises(CallError) as raised:
        call()
    return raised.value.status


def in_parallel(workers: int, task: Callable[[int], Any]) -> list[Any]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(task, range(workers)))


# --- Through the callables ----------------------------------------------------------------------


def test_configure_returns_the_rule_and_opens_the_day(
    admin: Callables, tenant: str, db: firestore.Client
) -> None:
    """configure_sequence echoes the rule and the tenant's document shows an open day at 0."""
    result = admin.call("configure_sequence", tenant=tenant, timezone=NEW_YORK)
    assert result == {"tenant": tenant, "timezone": NEW_YORK, "reset_time": "00:00"}
    doc = db.collection("sequences").document(tenant).get().to_dict() or {}
    assert doc["timezone"] == NEW_YORK and doc["reset_time"] == "00:00"
    assert doc["last_number"] == 0
    today = dt.datetime.now(dt.UTC).astimezone(zoneinfo.ZoneInfo(NEW_YORK)).date()
    assert doc["business_day"] in {today.isoformat(), (today - dt.timedelta(days=1)).isoformat()}


def test_eight_concurrent_clients_get_exactly_one_to_120(
    configured: str, member_user: User, db: firestore.Client
) -> None:
    """8 clients x 15 numbers give each of 1..120 exactly once, all in one business day."""

    def fifteen(_: int) -> list[dict[str, Any]]:
        client = Callables(member_user.id_token)
        return [client.call("next_number", tenant=configured) for _ in range(15)]

    results = [r for batch in in_parallel(8, fifteen) for r in batch]
    assert sorted(r["number"] for r in results) == list(range(1, 121))
    assert len({r["business_day"] for r in results}) == 1
    assert {r["tenant"] for r in results} == {configured}
    doc = db.collection("sequences").document(configured).get().to_dict() or {}
    assert doc["last_number"] == 120
    assert doc["business_day"] == results[0]["business_day"]


def test_a_retried_request_id_returns_its_first_number(
    configured: str, member: Callables
) -> None:
    """The same request_id gets the same number; the next request gets the next number."""
    first = member.call("next_number", tenant=configured, request_id="order-17")
    again = member.call("next_number", tenant=configured, request_id="order-17")
    other = member.call("next_number", tenant=configured, request_id="order-18")
    plain = member.call("next_number", tenant=configured)
    assert again == first
    assert [first["number"], other["number"], plain["number"]] == [1, 2, 3]


def test_concurrent_retries_of_one_request_share_one_number(
    configured: str, member_user: User, member: Callables
) -> None:
    """Six simultaneous calls with one request_id get one number, and no number is skipped."""

    def call(_: int) -> dict[str, Any]:
        return Callables(member_user.id_token).call("next_number", tenant=configured,
                                                    request_id="same-order")

    results = in_parallel(6, call)
    assert {r["number"] for r in results} == {1}
    assert member.call("next_number", tenant=configured)["number"] == 2


def test_reset_restarts_at_one_within_the_day(
    configured: str, member: Callables, db: firestore.Client
) -> None:
    """After reset_sequence numbering restarts at 1 and the document shows it."""
    numbers = [member.call("next_number", tenant=configured)["number"] for _ in range(3)]
    reset = member.call("reset_sequence", tenant=configured)
    after = member.call("next_number", tenant=configured)
    assert numbers == [1, 2, 3]
    assert after == {"tenant": configured, "number": 1, "business_day": reset["business_day"]}
    doc = db.collection("sequences").document(configured).get().to_dict() or {}
    assert doc["last_number"] == 1 and doc["business_day"] == reset["business_day"]
    assert [r["issued_before"] for r in doc["resets"]] == [3]


def test_next_number_on_an_unconfigured_tenant_fails_precondition(
    member: Callables, tenant: str, db: firestore.Client
) -> None:
    """A tenant nobody configured has no numbers to give, and nothing is written."""
    assert status_of(lambda: member.call("next_number", tenant=tenant)) == "FAILED_PRECONDITION"
    assert status_of(lambda: member.call("reset_sequence", tenant=tenant)) == \
        "FAILED_PRECONDITION"
    assert not db.collection("sequences").document(tenant).get().exists


def test_roles(configured: str, member: Callables, user: Callables, admin: Callables,
               anonymous: Callables, suffix: str) -> None:
    """Members and admins number; other tenants' members, plain users and admins-only calls
    are refused with the right codes."""
    outsider = Callables(sign_up({"tenants": [f"other-{suffix}"]}).id_token)
    assert admin.call("next_number", tenant=configured)["number"] == 1
    assert member.call("next_number", tenant=configured)["number"] == 2
    for caller in (outsider, user):
        for name in ("next_number", "reset_sequence"):
            with pytest.raises(CallError) as raised:
                caller.call(name, tenant=configured)
            assert raised.value.status == "PERMISSION_DENIED"
    assert status_of(lambda: anonymous.call("next_number", tenant=configured)) == \
        "UNAUTHENTICATED"
    assert status_of(lambda: member.call("configure_sequence", tenant=configured,
                                         timezone="UTC")) == "PERMISSION_DENIED"
    assert member.call("next_number", tenant=configured)["number"] == 3


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
        ({"timezone": "+02:00"}, "timezone"),
        ({"timezone": 1}, "timezone"),
        ({}, "timezone"),
        ({"timezone": "UTC", "reset_time": "24:00"}, "reset_time"),
        ({"timezone": "UTC", "reset_time": "4:30"}, "reset_time"),
        ({"timezone": "UTC", "reset_time": 430}, "reset_time"),
        ({"timezone": "UTC", "color": "red"}, "color"),
    ],
)
def test_bad_configuration_is_invalid_and_writes_nothing(
    admin: Callables, tenant: str, db: firestore.Client, data: dict[str, Any], field: str
) -> None:
    """A bad timezone or reset_time is INVALID_ARGUMENT naming the field; nothing is written."""
    with pytest.raises(CallError) as raised:
        admin.call("configure_sequence", tenant=tenant, **data)
    assert raised.value.status == "INVALID_ARGUMENT"
    assert raised.value.message.startswith(f"{field}:")
    assert not db.collection("sequences").document(tenant).get().exists


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"tenant": "a/b"}, "tenant"),
        ({"tenant": ".hidden"}, "tenant"),
        ({"tenant": ""}, "tenant"),
        ({}, "tenant"),
        ({"tenant": "shop", "request_id": "has space"}, "request_id"),
        ({"tenant": "shop", "request_id": 7}, "request_id"),
    ],
)
def test_bad_number_requests_are_invalid(admin: Callables, data: dict[str, Any],
                                         field: str) -> None:
    """Malformed tenant ids and request ids are INVALID_ARGUMENT naming the field."""
    with pytest.raises(CallError) as raised:
        admin.call("next_number", **data)
    assert raised.value.status == "INVALID_ARGUMENT"
    assert raised.value.message.startswith(f"{field}:")


# --- Security rules, through the Firestore emulator's REST API ----------------------------------


def rest_url(path: str) -> str:
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    project = os.environ["GCLOUD_PROJECT"]
    return f"http://{host}/v1/projects/{project}/databases/(default)/documents/{path}"


def rest(method: str, path: str, token: str | None, body: dict[str, Any] | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reply = requests.request(method, rest_url(path), headers=headers, json=body, timeout=10)
    return reply.status_code


def test_rules_let_members_and_admins_read_and_nobody_write(
    configured: str, member_user: User, admin_user: User, plain_user: User, suffix: str,
    member: Callables,
) -> None:
    """Members and admins read sequences/{tenant}; others cannot; no client writes anything."""
    member.call("next_number", tenant=configured, request_id="rules-check")
    path = f"sequences/{configured}"
    outsider = sign_up({"tenants": [f"other-{suffix}"]})
    assert rest("GET", path, member_user.id_token) == 200
    assert rest("GET", path, admin_user.id_token) == 200
    assert rest("GET", path, outsider.id_token) == 403
    assert rest("GET", path, plain_user.id_token) == 403
    assert rest("GET", path, None) == 403
    write = {"fields": {"last_number": {"integerValue": "999"}}}
    for token in (member_user.id_token, admin_user.id_token, None):
        assert rest("PATCH", path, token, write) == 403
        assert rest("DELETE", path, token) == 403
    assert rest("GET", f"{path}/number_requests", member_user.id_token) == 403
    assert rest("GET", f"{path}/business_days", admin_user.id_token) == 403


def test_the_document_reflects_each_number(
    configured: str, member: Callables, db: firestore.Client
) -> None:
    """sequences/{tenant} carries the contract's fields and follows the numbers."""
    member.call("next_number", tenant=configured)
    last = member.call("next_number", tenant=configured)

    def current() -> dict[str, Any] | None:
        doc = db.collection("sequences").document(configured).get().to_dict() or {}
        return doc if doc.get("last_number") == last["number"] else None

    doc = eventually(current)
    assert {k: doc[k] for k in ("business_day", "last_number", "timezone", "reset_time")} == {
        "business_day": last["business_day"], "last_number": 2,
        "timezone": "Europe/Paris", "reset_time": "04:00",
    }


# --- In-process, with an injected clock ---------------------------------------------------------


def utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)


def test_numbers_restart_when_a_business_day_ends(isolated_db: firestore.Client,
                                                  ctx: Context) -> None:
    """Crossing the reset time (here a skipped DST hour) starts the next day at 1 and archives
    the closed day with a TTL date; a retried request_id still gets its first number."""
    db, tenant = isolated_db, "bistro"
    # New York skips 02:00-03:00 on 2024-03-10: a 02:30 reset starts that day at 03:30 EDT.
    opening.configure_sequence(ctx, db, tenant, timezone=NEW_YORK, reset_time="02:30",
                               now=utc("2024-03-09T20:00"))
    before = [issuing.next_number(ctx, db, tenant,
                                  now=utc("2024-03-10T07:29:59")) for _ in range(3)]
    kept = issuing.next_number(ctx, db, tenant, request_id="r1", uid="u",
                               now=utc("2024-03-10T07:29:59"))
    after = [issuing.next_number(ctx, db, tenant, now=utc("2024-03-10T07:30")) for _ in range(2)]
    retried = issuing.next_number(ctx, db, tenant, request_id="r1", uid="u",
                                  now=utc("2024-03-10T07:31"))

    assert [(t.business_day.isoformat(), t.number) for t in [*before, kept, *after]] == [
        ("2024-03-09", 1), ("2024-03-09", 2), ("2024-03-09", 3), ("2024-03-09", 4),
        ("2024-03-10", 1), ("2024-03-10", 2),
    ]
    assert retried == kept
    doc = documents.sequence_ref(db, NAMES, tenant).get().to_dict() or {}
    assert (doc["business_day"], doc["last_number"], doc["issued"]) == ("2024-03-10", 2, 2)
    closed = documents.business_day_ref(db, NAMES, tenant,
                                        dt.date(2024, 3, 9)).get().to_dict() or {}
    assert (closed["last_number"], closed["issued"]) == (4, 4)
    # Expires the retention period after the day's end (2024-03-10 03:30 EDT = 07:30 UTC).
    assert closed[config.EXPIRES_AT] == utc("2024-03-10T07:30") + dt.timedelta(
        days=config.SEQUENCE_RETENTION_DAYS)


def test_concurrent_requests_across_the_boundary_open_the_day_once(
    isolated_db: firestore.Client, ctx: Context,
) -> None:
    """8 threads whose clocks straddle midnight: no duplicate in either day, and the new day
    counts 1..n with no gap (it was opened exactly once)."""
    db, tenant = isolated_db, "diner"
    opening.configure_sequence(ctx, db, tenant, timezone="UTC", now=utc("2024-05-01T12:00"))
    clocks = [utc("2024-05-01T23:59:59"), utc("2024-05-02T00:00:00")]
    tickets: list[documents.Ticket] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        for n in range(10):
            ticket = issuing.next_number(ctx, db, tenant, now=clocks[(i + n) % 2 if n < 5 else 1])
            with lock:
                tickets.append(ticket)

    in_parallel(8, worker)
    by_day: dict[str, list[int]] = {}
    for ticket in tickets:
        assert ticket.epoch == 0
        by_day.setdefault(ticket.business_day.isoformat(), []).append(ticket.number)
    new_day = sorted(by_day["2024-05-02"])
    assert new_day == list(range(1, len(new_day) + 1))
    old_day = sorted(by_day.get("2024-05-01", []))
    assert old_day == list(range(1, len(old_day) + 1))
    assert len(tickets) == 80


def test_a_reset_keeps_earlier_numbers_on_record(isolated_db: firestore.Client,
                                                 ctx: Context) -> None:
    """Numbers before a reset keep their epoch; the day's record says how many came before."""
    db, tenant = isolated_db, "cafe"
    now = utc("2024-07-01T10:00")
    opening.configure_sequence(ctx, db, tenant, timezone="Asia/Tokyo", reset_time="05:00",
                               now=now)
    first = [issuing.next_number(ctx, db, tenant, now=now) for _ in range(5)]
    reset = resetting.reset_sequence(ctx, db, tenant, uid="manager", now=now)
    second = [issuing.next_number(ctx, db, tenant, now=now) for _ in range(2)]
    assert [(t.epoch, t.number) for t in first + second] == [
        (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 1), (1, 2)]
    assert (reset.business_day, reset.epoch) == (dt.date(2024, 7, 1), 1)
    doc = documents.sequence_ref(db, NAMES, tenant).get().to_dict() or {}
    assert (doc["last_number"], doc["issued"], doc["epoch"]) == (2, 7, 1)
    assert [(r["epoch"], r["issued_before"], r["by"]) for r in doc["resets"]] == [
        (1, 5, "manager")]


def issue_without_answer(db: firestore.Client, tenant: str, request_id: str) -> None:
    """What a call whose answer was lost (or that died before recording its number) leaves:
    the record created (with its claim's nonce) and the number issued, naming that claim, in one
    commit, and no number in the record."""
    nonce = f"nonce-{request_id}"
    batch = db.batch()
    batch.create(documents.request_ref(db, NAMES, tenant, "u", request_id),
                 {"uid": "u", "request_id": request_id, "state": "issuing", "nonce": nonce,
                  "claimed_at": firestore.SERVER_TIMESTAMP})
    batch.update(documents.sequence_ref(db, NAMES, tenant),
                 {"day": firestore.Increment(0), "epoch": firestore.Increment(0),
                  "issued": firestore.Increment(1), "last_number": firestore.Increment(1),
                  "last_claim": nonce})
    batch.commit()


def test_a_retry_gets_the_number_a_lost_answer_carried(isolated_db: firestore.Client,
                                                       ctx: Context) -> None:
    """A retry of a request whose number was issued but never answered gets that number (read
    back from the sequence as the request's own commit left it), and no other is used up."""
    db, tenant = isolated_db, "kiosk"
    opening.configure_sequence(ctx, db, tenant, timezone="UTC")
    assert issuing.next_number(ctx, db, tenant).number == 1
    issue_without_answer(db, tenant, "lost")
    issuing.next_number(ctx, db, tenant)  # 3: the lost one was 2
    first = issuing.next_number(ctx, db, tenant, request_id="lost", uid="u")
    again = issuing.next_number(ctx, db, tenant, request_id="lost", uid="u")
    assert first.number == 2 and again == first
    assert issuing.next_number(ctx, db, tenant).number == 4
    doc = documents.sequence_ref(db, NAMES, tenant).get().to_dict() or {}
    assert doc["issued"] == 4


def test_a_number_goes_into_its_record_with_the_next_commit_or_the_housekeeping(
        isolated_db: firestore.Client) -> None:
    """Numbers for request ids, in one process: each commit carries the numbers issued before
    it into their records; the last, which no commit carried, is written by the housekeeping
    once `record_after_s` old (read back at its record's create time), as is one whose process
    went away. A retry gets its number either way, once."""
    db, ctx = isolated_db, Context.offline()
    opening.configure_sequence(ctx, db, "shop", timezone="UTC")

    def number(request_id: str, context: Context = ctx) -> int:
        return issuing.next_number(context, db, "shop", request_id=request_id,
                                   uid="u").number

    def record(request_id: str) -> dict[str, Any]:
        return documents.request_ref(db, NAMES, "shop", "u", request_id).get().to_dict() or {}

    assert [number(r) for r in ("a", "b", "c")] == [1, 2, 3]
    assert [record(r).get("number") for r in ("a", "b")] == [1, 2]
    assert record("c")["state"] == "issuing"
    now = dt.datetime.now(dt.UTC)
    # Too young: its process's to carry.
    assert housekeeping.record_issued(db, NAMES, now).recorded == 0
    assert number("c") == 3  # a retry before the housekeeping reads it back, and records it
    assert record("c")["number"] == 3
    assert number("d") == 4
    assert number("e", Context.offline()) == 5  # another process: "d" is not its to carry
    assert (record("d")["state"], record("e")["state"]) == ("issuing", "issuing")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=limits.LIMITS.record_after_s)
    assert housekeeping.record_issued(db, NAMES, later).recorded == 2
    assert (record("d")["number"], record("e")["number"]) == (4, 5)
    assert (number("d"), number("e"), number("f")) == (4, 5, 6)
    assert housekeeping.lost_records(db, NAMES) == 0  # the count `counters status` shows


def test_a_retried_reset_resets_once(configured: str, member: Callables,
                                     db: firestore.Client) -> None:
    """reset_sequence retried with its request_id after a number was issued answers the same
    business day and restarts nothing: the numbers go on, one reset on record."""
    member.call("next_number", tenant=configured)
    first = member.call("reset_sequence", tenant=configured, request_id="shift-2")
    assert member.call("next_number", tenant=configured)["number"] == 1
    assert member.call("reset_sequence", tenant=configured, request_id="shift-2") == first
    assert member.call("next_number", tenant=configured)["number"] == 2
    doc = db.collection("sequences").document(configured).get().to_dict() or {}
    assert [r["issued_before"] for r in doc["resets"]] == [1]
