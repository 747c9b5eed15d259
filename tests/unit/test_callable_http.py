"""The callables as the runtime serves them, in-process: a Flask request in, an HTTP response out.

There is no App Check emulator and no network here, so token verification is replaced by fakes:
`firebase_admin.app_check.verify_token` and `firebase_admin.auth.verify_id_token`, which the SDK
calls for the X-Firebase-AppCheck and Authorization headers."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import firebase_admin.app_check
import firebase_admin.auth
import flask
import handlers as api
import pytest
from counting.foundation import config

ROOT = Path(__file__).resolve().parents[2]
APP = flask.Flask(__name__)
GOOD_APP_TOKEN = "good-app-check-token"
GOOD_ID_TOKEN = "good-id-token"


def fake_app_check(token: str) -> dict[str, Any]:
    if token != GOOD_APP_TOKEN:
        raise ValueError("Decoding App Check token failed")
    return {"sub": "1:123:web:abc", "aud": ["projects/demo-counters"]}


EXPIRED_ID_TOKEN = "expired-id-token"


def fake_id_token(token: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    if token == EXPIRED_ID_TOKEN:
        raise firebase_admin.auth.ExpiredIdTokenError("Token expired", None)
    if token != GOOD_ID_TOKEN:
        raise firebase_admin.auth.InvalidIdTokenError("Decoding Firebase ID token failed")
    return {"uid": "user-1", "firebase": {"sign_in_provider": "anonymous"}}


@pytest.fixture(autouse=True)
def fake_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(firebase_admin.app_check, "verify_token", fake_app_check)
    monkeypatch.setattr(firebase_admin.auth, "verify_id_token", fake_id_token)


def loaded(enforce: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """handlers.counters loaded with ENFORCE_APP_CHECK=`enforce`, as a deploy would load it;
    reloaded as the other tests expect it afterwards."""
    monkeypatch.setenv("ENFORCE_APP_CHECK", enforce)
    module = importlib.reload(importlib.import_module("handlers.counters"))
    yield module
    monkeypatch.delenv("ENFORCE_APP_CHECK")
    importlib.reload(module)


@pytest.fixture
def enforcing(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    yield from loaded("true", monkeypatch)


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    yield from loaded("false", monkeypatch)


def respond(view: Any, body: bytes | str,
            headers: Mapping[str, str | None] | None = None) -> flask.Response:
    """POST `body` to a callable's view, with a good ID token unless `headers` says otherwise
    (None: no such header); its response."""
    sent = {"Authorization": f"Bearer {GOOD_ID_TOKEN}", **(headers or {})}
    with APP.test_request_context("/", method="POST", data=body, content_type="application/json",
                                  headers={k: v for k, v in sent.items() if v is not None}):
        return APP.make_response(view(flask.request))


def post(view: Any, body: bytes | str,
         headers: Mapping[str, str | None] | None = None) -> tuple[int, Any]:
    """POST `body` to a callable's view; its status and decoded JSON body."""
    response = respond(view, body, headers)
    return response.status_code, json.loads(response.get_data())


def error_of(view: Any, body: bytes | str, headers: Mapping[str, str | None] | None = None) -> str:
    status, answer = post(view, body, headers)
    assert status >= 400, answer
    return str(answer["error"]["status"])


def refusal(view: Any, body: bytes | str, headers: Mapping[str, str | None]) -> tuple[str, str]:
    status, answer = post(view, body, headers)
    assert status == 401, answer
    return answer["error"]["status"], answer["error"]["message"]


# A valid body that the handler rejects before using Firestore: it reached the handler.
INVALID_DATA = json.dumps({"data": {"counter": "likes", "by": 1.5}})
DEEP = 100_000


@pytest.mark.parametrize(("body", "why"), [
    ('{"data": {"counter": "likes"', "not valid JSON"),
    ("", "not valid JSON"),
    (b'{"data": {"counter": "\xff"}}', "not valid JSON"),
    ('{"data": {"counter": "likes", "by": ' + "9" * 5000 + "}}", "digits"),
    ('{"data": {"counter": "likes", "by": ' + "1" * (config.MAX_JSON_DIGITS + 1) + "}}",
     "digits"),
    ('{"data": {"counter": "likes", "by": 1e999}}', "range"),
    ('{"data": {"counter": "likes", "by": NaN}}', "not JSON"),
    ('{"data": {"counter": "likes", "by": -Infinity}}', "not JSON"),
    ('{"data": ' + "[" * DEEP + "]" * DEEP + "}", "nested deeper"),
    ('{"data": ' + "[" * (config.MAX_JSON_DEPTH) + "]" * config.MAX_JSON_DEPTH + "}",
     "nested deeper"),
    ('"xdata"', "one field"),
    ("[1]", "one field"),
    ('{"data": {}, "extra": 1}', "one field"),
    ('{"data": {"counter": "' + "a" * config.MAX_BODY_BYTES + '"}}', "larger than"),
], ids=lambda value: str(value)[:40])
def test_a_bad_body_is_invalid_argument_not_internal(body: str | bytes, why: str) -> None:
    """Bodies the SDK would answer INTERNAL (or parse at great cost) are INVALID_ARGUMENT with a
    reason, before any token is checked or the handler runs."""
    from handlers.counters import increment

    status, answer = post(increment, body)
    assert status == 400
    assert answer["error"]["status"] == "INVALID_ARGUMENT"
    assert answer["error"]["message"].startswith("body:")
    assert why in answer["error"]["message"]


def test_bodies_at_the_bounds_reach_the_handler() -> None:
    """The largest number of digits, nesting and size the check allows pass through to the handler
    (which rejects them as data, naming the field)."""
    from handlers.counters import increment

    digits = '{"data": {"counter": "likes", "by": ' + "1" * config.MAX_JSON_DIGITS + "}}"
    nested = ('{"data": {"counter": "likes", "by": ' + "[" * (config.MAX_JSON_DEPTH - 2)
              + "]" * (config.MAX_JSON_DEPTH - 2) + "}}")
    padding = config.MAX_BODY_BYTES - len('{"data": {"counter": "likes", "by": 1.5, "x": ""}}')
    large = '{"data": {"counter": "likes", "by": 1.5, "x": "' + "a" * padding + '"}}'
    assert len(large) == config.MAX_BODY_BYTES
    for body in (digits, nested, large):
        status, answer = post(increment, body, {"X-Firebase-AppCheck": GOOD_APP_TOKEN})
        assert (status, answer["error"]["status"]) == (400, "INVALID_ARGUMENT"), answer
        assert not answer["error"]["message"].startswith("body:"), answer


def test_every_callable_checks_its_body() -> None:
    """Each exported callable runs the body check (a non-callable, such as the rollup, does not
    take a JSON body)."""
    main = importlib.import_module("main")
    for name in main.__all__:
        function = getattr(main, name)
        if function.__firebase_endpoint__.callableTrigger is None:
            continue
        assert function.__code__ is api.client_callable(lambda req: {}).__code__, name
        assert error_of(function, '{"data": ') == "INVALID_ARGUMENT", name


def test_every_error_answer_is_formatted_as_the_sdk_formats_one() -> None:
    """A bad body's answer, given before the SDK runs, and an ID token's refusal, which replaces
    the SDK's, have the JSON layout, headers and CORS of the errors the SDK answers itself."""
    from handlers.counters import increment

    origin = {"Origin": "https://app.example", "X-Firebase-AppCheck": GOOD_APP_TOKEN}
    handled = respond(increment, INVALID_DATA, origin)  # the handler's error, as the SDK says it
    answers = [respond(increment, '{"data": ', origin),
               respond(increment, INVALID_DATA, {**origin, "Authorization": "Bearer garbage"})]
    for answer in answers:
        message = answer.get_json()["error"]["message"]
        layout = answer.get_data(as_text=True).replace(message, "M").replace(
            "UNAUTHENTICATED", "INVALID_ARGUMENT")
        assert layout == handled.get_data(as_text=True).replace(
            handled.get_json()["error"]["message"], "M")
        assert {k: v for k, v in answer.headers if k != "Content-Length"} == {
            k: v for k, v in handled.headers if k != "Content-Length"}


@pytest.mark.parametrize(("authorization", "message"), [
    (None, "ID token: missing (sign in first)"),
    ("Bearer garbage", "ID token: invalid (sign in again)"),
    (f"Bearer {EXPIRED_ID_TOKEN}", "ID token: expired (refresh it, or sign in again)"),
    (GOOD_ID_TOKEN, "ID token: the Authorization header must be `Bearer <ID token>`"),
])
def test_a_refused_id_token_says_what_is_wrong(lenient: ModuleType, authorization: str | None,
                                               message: str) -> None:
    """Missing, invalid, expired or badly sent: UNAUTHENTICATED with a message that says which."""
    assert refusal(lenient.increment, INVALID_DATA, {"Authorization": authorization}) == (
        "UNAUTHENTICATED", message)


def test_app_check_enforced_rejects_a_missing_or_bad_token(enforcing: ModuleType) -> None:
    refused = ("UNAUTHENTICATED", "App Check token: missing or invalid")
    assert refusal(enforcing.increment, INVALID_DATA, {}) == refused
    assert refusal(enforcing.increment, INVALID_DATA, {"X-Firebase-AppCheck": "forged"}) == refused
    assert refusal(enforcing.increment, INVALID_DATA, {
        "X-Firebase-AppCheck": "forged", "Authorization": "Bearer garbage"}) == (
        "UNAUTHENTICATED", "ID token: invalid (sign in again)")  # the SDK checks it first


def test_app_check_enforced_lets_a_valid_token_through(enforcing: ModuleType) -> None:
    assert error_of(enforcing.increment, INVALID_DATA,
                    {"X-Firebase-AppCheck": GOOD_APP_TOKEN}) == "INVALID_ARGUMENT"


def test_app_check_off_lets_a_request_without_a_token_through(lenient: ModuleType) -> None:
    assert error_of(lenient.increment, INVALID_DATA) == "INVALID_ARGUMENT"


def test_app_check_is_on_for_a_deploy_and_off_for_the_emulators() -> None:
    """A deploy reads functions/.env (and .env.<project>): enforcing; the Functions emulator
    reads functions/.env.local last: off."""
    assert api.ENFORCE_APP_CHECK.default is True
    assert "ENFORCE_APP_CHECK=true" in (ROOT / "functions/.env").read_text().splitlines()
    assert "ENFORCE_APP_CHECK=false" in (ROOT / "functions/.env.local").read_text().splitlines()


@pytest.mark.parametrize(("value", "enforced"), [
    (None, True), ("true", True), ("1", True), ("yes", True), ("TRUE", True), ("garbage", True),
    ("false", False), ("False", False), ("0", False), ("no", False)])
def test_app_check_fails_closed(value: str | None, enforced: bool,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an explicit false turns App Check off (the deploy CLI reads "1" and "yes" as true,
    the SDK's BoolParam anything but "true" as false)."""
    if value is None:
        monkeypatch.delenv("ENFORCE_APP_CHECK", raising=False)
    else:
        monkeypatch.setenv("ENFORCE_APP_CHECK", value)
    assert api.app_check_enforced() is enforced
