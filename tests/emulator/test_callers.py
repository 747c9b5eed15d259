"""Who is calling, through the real callables: refused ID tokens say why, every error answer has
the callable protocol's one format, and an admin's role is confirmed with Firebase Auth (the Auth
emulator here), so that taking it back works at once."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import firebase_admin
import pytest
import requests
from callables import PROJECT, Callables, CallError, User, functions_url, sign_up
from firebase_admin import auth

from ..waiting import eventually


@pytest.fixture(scope="module")
def users() -> Iterator[auth.Client]:
    """The Admin SDK's user management, on the Auth emulator."""
    app = firebase_admin.initialize_app(options={"projectId": PROJECT}, name="test-callers")
    yield auth.Client(app)
    firebase_admin.delete_app(app)


def refusal(client: Callables, name: str, **data: Any) -> tuple[str, str]:
    with pytest.raises(CallError) as refused:
        client.call(name, **data)
    return refused.value.status, refused.value.message


def test_a_missing_or_invalid_id_token_says_which(suffix: str) -> None:
    """No ID token and a garbage one are both UNAUTHENTICATED, each with its own reason."""
    for name in ("increment", "create_counter", "get_count"):
        assert refusal(Callables(None), name, counter=f"c-{suffix}") == (
            "UNAUTHENTICATED", "ID token: missing (sign in first)")
        assert refusal(Callables("garbage"), name, counter=f"c-{suffix}") == (
            "UNAUTHENTICATED", "ID token: invalid (sign in again)")


def test_every_error_answer_has_one_format(user: Callables, suffix: str) -> None:
    """A malformed body, a refused or missing ID token and a handler's error are answered in the
    same JSON layout, with the same headers."""
    url = f"{functions_url()}/increment"
    json_type = {"Content-Type": "application/json", "Origin": "http://127.0.0.1:5000"}
    signed_in = {**json_type, "Authorization": f"Bearer {user.token}"}
    garbage = {**json_type, "Authorization": "Bearer garbage"}
    unknown = json.dumps({"data": {"counter": f"none-{suffix}"}})
    answers = [(status, requests.post(url, data=body, headers=headers, timeout=60))
               for status, body, headers in [("NOT_FOUND", unknown, signed_in),
                                             ("INVALID_ARGUMENT", '{"data": ', signed_in),
                                             ("UNAUTHENTICATED", unknown, garbage),
                                             ("UNAUTHENTICATED", unknown, json_type)]]
    layouts, headers = set(), set()
    for status, answer in answers:
        error = answer.json()["error"]
        assert error["status"] == status, error
        layouts.add(answer.text.replace(error["message"], "M").replace(status, "S"))
        headers.add(tuple(answer.headers.get(name) for name in (
            "Content-Type", "Access-Control-Allow-Origin", "Vary")))
    assert len(layouts) == 1, layouts
    assert len(headers) == 1, headers


def admin_now(users: auth.Client, suffix: str, name: str) -> User:
    """A new admin, with an email and a password to sign in again with."""
    email, password = f"{name}-{suffix}@example.test", "secret-pass"
    user = sign_up({"admin": True}, email=email, password=password)
    assert users.get_user(user.uid).custom_claims == {"admin": True}
    return user


def issued_at(token: str) -> int:
    payload = token.split(".")[1]
    issued: int = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["iat"]
    return issued


# Every call an admin claim opens, given that the counter and the tenant exist.
ADMIN_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("create_counter", {"counter": "new"}),
    ("configure_counter", {"counter": "it", "policy": {"by": [1, 9]}}),
    ("reset_counter", {"counter": "it"}),
    ("get_count", {"counter": "it", "consistency": "strong"}),
    ("configure_sequence", {"tenant": "shop", "timezone": "Europe/Paris"}),
    ("next_number", {"tenant": "shop"}),  # the admin is not a member
    ("reset_sequence", {"tenant": "shop"}),
]


def admin_calls(client: Callables, suffix: str) -> Iterator[tuple[str, Any]]:
    """Each of ADMIN_CALLS by `client` on this test's counter and tenant: its name and what it
    answered (a result, or the CallError)."""
    for name, data in ADMIN_CALLS:
        named = {key: f"{value}-{suffix}" if key in ("counter", "tenant") else value
                 for key, value in data.items()}
        try:
            yield name, client.call(name, **named)
        except CallError as error:
            yield name, error


def setting_up(client: Callables, suffix: str) -> None:
    client.call("create_counter", counter=f"it-{suffix}")
    client.call("configure_sequence", tenant=f"shop-{suffix}", timezone="Europe/Paris")


def test_an_admin_whose_role_is_taken_back_is_refused_at_once(
    users: auth.Client, suffix: str
) -> None:
    """Once the admin claim is removed, every admin call with the admin's still-valid ID token is
    PERMISSION_DENIED; the same token still serves what any user may do."""
    person = admin_now(users, suffix, "demoted")
    admin = Callables(person.id_token)
    setting_up(admin, suffix)
    assert all(not isinstance(answer, CallError) for _, answer in admin_calls(admin, suffix))
    users.set_custom_user_claims(person.uid, None)
    for name, answer in admin_calls(admin, suffix):
        assert isinstance(answer, CallError), name
        assert answer.status == "PERMISSION_DENIED", (name, answer)
        assert answer.message.endswith("(taken back since this ID token was issued)"), name
    assert admin.call("get_count", counter=f"it-{suffix}")["consistency"] == "rollup"


def test_an_admin_whose_sessions_are_revoked_is_refused_until_signing_in_again(
    users: auth.Client, suffix: str
) -> None:
    """Revoking an admin's refresh tokens refuses their ID tokens issued before (UNAUTHENTICATED);
    a token from signing in again works."""
    person = admin_now(users, suffix, "revoked")
    admin = Callables(person.id_token)
    setting_up(admin, suffix)
    # Revocation counts in whole seconds: revoke in a second after the token's.
    eventually(lambda: int(time.time()) > issued_at(person.id_token), timeout_s=5)
    users.revoke_refresh_tokens(person.uid)
    for name, answer in admin_calls(admin, suffix):
        assert isinstance(answer, CallError), name
        assert (answer.status, answer.message) == (
            "UNAUTHENTICATED", "ID token: revoked (sign in again)"), name
    again = Callables(sign_up(email=f"revoked-{suffix}@example.test",
                              password="secret-pass").id_token)
    assert all(not isinstance(answer, CallError) for _, answer in admin_calls(again, suffix))


def test_a_disabled_admin_is_refused_at_once(users: auth.Client, suffix: str) -> None:
    person = admin_now(users, suffix, "disabled")
    admin = Callables(person.id_token)
    admin.call("create_counter", counter=f"it-{suffix}")
    users.update_user(person.uid, disabled=True)
    assert refusal(admin, "reset_counter", counter=f"it-{suffix}") == (
        "UNAUTHENTICATED", "ID token: the account is disabled")
