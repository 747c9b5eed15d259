"""The callable handlers in-process: error codes, who may call, and bad input rejected before
any Firestore access (the handlers' Firestore client fails the test if it is asked for).
Firebase Auth, which admin operations ask about the caller's account, is a fake: accounts are
as their ID tokens say unless a test says otherwise."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import firebase_admin.auth
import flask
import handlers as api
import pytest
from counting.foundation.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
)
from firebase_admin import exceptions as fexc
from firebase_functions import https_fn
from google.api_core import exceptions as gexc

Code = https_fn.FunctionsErrorCode
Handler = Callable[[api.Request], dict[str, Any]]

USER = https_fn.AuthData(uid="user-1", token={"firebase": {"sign_in_provider": "password"}})
ANONYMOUS = https_fn.AuthData(uid="anon-1", token={"firebase": {"sign_in_provider": "anonymous"}})
ADMIN_UID = "admin-1"
ADMIN = https_fn.AuthData(uid=ADMIN_UID, token={"admin": True})


def request(data: Any = None, auth: https_fn.AuthData | None = USER) -> api.Request:
    return https_fn.CallableRequest(data=data, raw_request=flask.Request({}), auth=auth)


def account(uid: str, claims: dict[str, Any] | None = None, *, disabled: bool = False,
            valid_since: int | None = None) -> firebase_admin.auth.UserRecord:
    """A Firebase Auth account as the Admin SDK returns it."""
    data: dict[str, Any] = {"localId": uid, "disabled": disabled,
                            "customAttributes": json.dumps(claims or {})}
    if valid_since is not None:
        data["validSince"] = str(valid_since)
    return firebase_admin.auth.UserRecord(data)


@pytest.fixture(autouse=True)
def accounts(monkeypatch: pytest.MonkeyPatch) -> dict[str, firebase_admin.auth.UserRecord]:
    """Firebase Auth's accounts by uid; ADMIN's is an admin's, and a missing one does not exist."""
    found = {ADMIN_UID: account(ADMIN_UID, {"admin": True})}

    def get_user(uid: str) -> firebase_admin.auth.UserRecord:
        if uid not in found:
            raise firebase_admin.auth.UserNotFoundError(f"no user {uid}")
        return found[uid]

    monkeypatch.setattr(firebase_admin.auth, "get_user", get_user)
    return found


def handlers(name: str) -> ModuleType:
    """A module of callables, imported when a test runs rather than when tests are collected: the
    SDK reads the global options as it decorates a callable, and the manifest test needs main.py
    to have set them first."""
    return importlib.import_module(f"handlers.{name}")


def handler(name: str) -> Handler:
    """What the deployed callable `module.function` runs once the SDK has checked the request:
    the handler inside `client_errors` (asserted to be the innermost decorator)."""
    module, function = name.split(".")
    layers = [getattr(handlers(module), function)]
    while hasattr(layers[-1], "__wrapped__"):
        layers.append(layers[-1].__wrapped__)
    inner: Handler = layers[-2]
    assert inner.__code__ is api.client_errors(layers[-1]).__code__
    return inner


def raising(error: Exception) -> Handler:
    def failing(req: api.Request) -> dict[str, Any]:
        raise error

    return api.client_errors(failing)


@pytest.mark.parametrize(("error", "code"), [
    (InvalidArgument("counter: required"), Code.INVALID_ARGUMENT),
    (NotFound("counter: 'c' does not exist"), Code.NOT_FOUND),
    (FailedPrecondition("tenant: 't' has no sequence"), Code.FAILED_PRECONDITION),
    (PermissionDenied("this operation needs the admin claim"), Code.PERMISSION_DENIED),
    (Aborted("counter: 'c': a concurrent request got in the way; retry"), Code.ABORTED),
])
def test_each_domain_error_becomes_its_code_with_its_message(error: Exception, code: Code) -> None:
    """A domain error reaches the client as an HttpsError with its code and message."""
    with pytest.raises(https_fn.HttpsError) as raised:
        raising(error)(request())
    assert raised.value.code == code
    assert raised.value.message == str(error)


@pytest.mark.parametrize(("request_id", "details"), [
    ("r-1", {"outcome": "unknown", "request_id": "r-1"}), (None, {"outcome": "unknown"})])
def test_an_unknown_outcome_says_so_with_the_request_id_that_settles_it(
    request_id: str | None, details: dict[str, str]
) -> None:
    """Neither success nor refusal: UNKNOWN, with details a program reads."""
    with pytest.raises(https_fn.HttpsError) as raised:
        raising(OutcomeUnknown("the write may or may not have been applied",
                               request_id=request_id))(request())
    assert (raised.value.code, raised.value.details) == (Code.UNKNOWN, details)


@pytest.mark.parametrize("error", [RuntimeError("boom"), ValueError("int too big to convert"),
                                   https_fn.HttpsError(Code.UNAVAILABLE, "later"),
                                   gexc.FailedPrecondition("the query requires an index")])  # type: ignore[no-untyped-call]
def test_other_exceptions_pass_through_unchanged(error: Exception) -> None:
    """An error that is not the domain's is left for the SDK (which reports INTERNAL)."""
    with pytest.raises(type(error)) as raised:
        raising(error)(request())
    assert raised.value is error


@pytest.mark.parametrize("auth", [None, https_fn.AuthData(uid="", token={}),
                                  https_fn.AuthData(uid=None, token={})])
def test_a_caller_without_a_signed_in_user_is_unauthenticated(
    auth: https_fn.AuthData | None
) -> None:
    """No ID token, or one without a uid, is UNAUTHENTICATED for users and admins alike."""
    for check in (api.caller, api.require_admin):
        with pytest.raises(https_fn.HttpsError) as raised:
            check(request(auth=auth))
        assert raised.value.code == Code.UNAUTHENTICATED


def test_an_anonymous_user_counts_as_signed_in() -> None:
    """An anonymous account's uid and claims are the caller's."""
    uid, claims = api.caller(request(auth=ANONYMOUS))
    assert uid == "anon-1"
    assert claims["firebase"]["sign_in_provider"] == "anonymous"


def test_an_admin_claim_of_true_makes_an_admin() -> None:
    """require_admin returns the admin's uid."""
    assert api.require_admin(request(auth=ADMIN)) == "admin-1"


def refusal(call: Callable[[], Any]) -> https_fn.HttpsError:
    with pytest.raises(https_fn.HttpsError) as raised:
        api.client_errors(lambda req: call())(request())
    return raised.value


def test_an_admin_whose_claim_was_taken_back_is_permission_denied(
    accounts: dict[str, firebase_admin.auth.UserRecord]
) -> None:
    """An ID token with the admin claim does not make an admin once the account lost it."""
    accounts[ADMIN_UID] = account(ADMIN_UID, {"tenants": ["shop"]})
    error = refusal(lambda: api.require_admin(request(auth=ADMIN)))
    assert error.code == Code.PERMISSION_DENIED
    assert error.message == ("this operation needs the admin claim (taken back since this ID "
                             "token was issued)")


@pytest.mark.parametrize(("iat", "valid_since", "refused"), [
    (1_700_000_000, 1_700_000_001, True), (1_700_000_000, 1_700_000_000, False),
    (1_700_000_001, 1_700_000_000, False)])
def test_an_admin_token_issued_before_its_sessions_were_revoked_is_unauthenticated(
    accounts: dict[str, firebase_admin.auth.UserRecord], iat: int, valid_since: int,
    refused: bool
) -> None:
    """Revoking an admin's sessions refuses their ID tokens issued before the revocation's second,
    as verify_id_token(check_revoked=True) does."""
    accounts[ADMIN_UID] = account(ADMIN_UID, {"admin": True}, valid_since=valid_since)
    admin = https_fn.AuthData(uid=ADMIN_UID, token={"admin": True, "iat": iat})
    if not refused:
        assert api.require_admin(request(auth=admin)) == ADMIN_UID
        return
    error = refusal(lambda: api.require_admin(request(auth=admin)))
    assert (error.code, error.message) == (Code.UNAUTHENTICATED,
                                           "ID token: revoked (sign in again)")


def test_a_disabled_or_deleted_admin_account_is_unauthenticated(
    accounts: dict[str, firebase_admin.auth.UserRecord]
) -> None:
    accounts[ADMIN_UID] = account(ADMIN_UID, {"admin": True}, disabled=True)
    error = refusal(lambda: api.require_admin(request(auth=ADMIN)))
    assert (error.code, error.message) == (Code.UNAUTHENTICATED,
                                           "ID token: the account is disabled")
    del accounts[ADMIN_UID]
    error = refusal(lambda: api.require_admin(request(auth=ADMIN)))
    assert (error.code, error.message) == (Code.UNAUTHENTICATED,
                                           "ID token: its account no longer exists")


def test_a_tenant_member_is_not_looked_up_and_an_admin_outside_the_tenant_is(
    accounts: dict[str, firebase_admin.auth.UserRecord]
) -> None:
    """Membership comes from the ID token alone; an admin's access to any tenant is confirmed."""
    require_member = handlers("sequences").require_member
    member = https_fn.AuthData(uid="staff-1", token={"tenants": ["shop"]})
    assert require_member(request(auth=member), "shop") == "staff-1"  # no account: no lookup
    assert require_member(request(auth=ADMIN), "shop") == ADMIN_UID
    accounts[ADMIN_UID] = account(ADMIN_UID)
    error = refusal(lambda: require_member(request(auth=ADMIN), "shop"))
    assert error.code == Code.PERMISSION_DENIED
    assert error.message.startswith("tenant: this operation needs 'shop' in the tenants claim")


@pytest.mark.parametrize("claims", [{}, {"admin": False}, {"admin": "true"}, {"admin": 1},
                                    {"admin": [True]}])
def test_only_an_admin_claim_of_exactly_true_makes_an_admin(claims: dict[str, Any]) -> None:
    """Any other admin claim, or none, is PERMISSION_DENIED (through client_errors)."""
    auth = https_fn.AuthData(uid="user-1", token=claims)
    with pytest.raises(https_fn.HttpsError) as raised:
        api.client_errors(lambda req: {"uid": api.require_admin(req)})(request(auth=auth))
    assert raised.value.code == Code.PERMISSION_DENIED


class Unreachable:
    """A Firestore client that fails the test when anything is asked of it."""

    def __getattr__(self, name: str) -> Any:
        pytest.fail(f"the handler used Firestore ({name}) before rejecting its input")


@pytest.fixture
def no_firestore(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every handler module's Firestore client (`db`, bound when it imports it) is Unreachable."""
    for name in ("counters", "sequences", "trends"):
        monkeypatch.setattr(handlers(name), "db", Unreachable)


@pytest.mark.parametrize(("function", "auth", "data", "field"), [
    ("counters.create_counter", ADMIN, "likes", "data"),
    ("counters.create_counter", ADMIN, {"counter": "likes", "colour": "red"}, "colour"),
    ("counters.create_counter", ADMIN, {"counter": ""}, "counter"),
    ("counters.create_counter", ADMIN, {"counter": "likes", "shards": 0}, "shards"),
    ("counters.create_counter", ADMIN, {"counter": "likes", "expected_rate": -1},
     "expected_rate"),
    ("counters.create_counter", ADMIN, {"counter": "likes", "strategy": "fastest"}, "strategy"),
    ("counters.increment", USER, {}, "counter"),
    ("counters.increment", USER, {"counter": "likes", "by": 1.5}, "by"),
    ("counters.increment", USER, {"counter": "likes", "request_id": "a b"}, "request_id"),
    ("counters.increment", USER, {"increments": []}, "increments"),
    ("counters.increment", USER, {"counter": "likes", "increments": [{"counter": "a"}]},
     "increments"),
    ("counters.increment", USER, {"increments": [{"counter": "a", "by": True}]},
     "increments[0].by"),
    ("counters.get_count", USER, {"counter": "likes", "consistency": "eventual"},
     "consistency"),
    ("counters.reset_counter", ADMIN, {"counter": "_likes"}, "counter"),
    ("sequences.configure_sequence", ADMIN, {"tenant": "shop"}, "timezone"),
    ("sequences.configure_sequence", ADMIN, {"tenant": "shop", "timezone": "Mars/Olympus"},
     "timezone"),
    ("sequences.configure_sequence", ADMIN,
     {"tenant": "shop", "timezone": "Europe/Paris", "reset_time": "24:00"}, "reset_time"),
    ("sequences.next_number", USER, {"tenant": ""}, "tenant"),
    ("sequences.next_number", USER, {"tenant": "shop", "request_id": "a/b"}, "request_id"),
    ("sequences.reset_sequence", USER, {"tenant": 7}, "tenant"),
    ("trends.track", USER, {"region": "global", "tags": ["a"]}, "region"),
    ("trends.track", USER, {"region": "eu", "tags": []}, "tags"),
    ("trends.track", USER, {"region": "eu", "tags": ["#"]}, "tags[0]"),
    ("trends.top_tags", USER, {"region": "EU"}, "region"),
    ("trends.top_tags", USER, {"k": 0}, "k"),
    ("trends.top_tags", USER, {"window": "7d"}, "window"),
])
@pytest.mark.usefixtures("no_firestore")
def test_bad_input_is_invalid_argument_before_any_firestore_access(
    function: str, auth: https_fn.AuthData, data: Any, field: str
) -> None:
    """Malformed data is INVALID_ARGUMENT naming the field, and nothing is read or written."""
    with pytest.raises(https_fn.HttpsError) as raised:
        handler(function)(request(data, auth))
    assert raised.value.code == Code.INVALID_ARGUMENT
    assert raised.value.message.startswith(f"{field}:"), raised.value.message


@pytest.mark.parametrize(("kind", "code"), [
    (gexc.Aborted, Code.ABORTED),
    (gexc.ServiceUnavailable, Code.UNAVAILABLE),
    (gexc.DeadlineExceeded, Code.UNAVAILABLE),
    (gexc.RetryError, Code.UNAVAILABLE),
])
def test_firestore_contention_and_outages_are_retryable_codes_not_internal(
    kind: type[Exception], code: Code
) -> None:
    """A transient Firestore error (contention, an outage) reaches the client as ABORTED or
    UNAVAILABLE, codes its retry loop knows, and not as INTERNAL; any other Firestore error
    (a missing index, say) stays INTERNAL, as a retry would not fix it."""
    error = kind("Firestore said no", None)
    with pytest.raises(https_fn.HttpsError) as raised:
        raising(error)(request())
    assert raised.value.code == code
    assert "retry" in raised.value.message


@pytest.mark.parametrize("kind", [fexc.UnavailableError, fexc.DeadlineExceededError])
def test_an_auth_outage_is_unavailable_not_internal(kind: type[fexc.FirebaseError]) -> None:
    """Firebase Auth failing while an admin's account is looked up is retryable UNAVAILABLE."""
    with pytest.raises(https_fn.HttpsError) as raised:
        raising(kind("Auth said no", None))(request())
    assert raised.value.code == Code.UNAVAILABLE
    assert raised.value.message == "Firebase Auth is unavailable: retry later"
