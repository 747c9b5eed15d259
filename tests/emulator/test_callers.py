"""Who is calling, through the real callables: refused ID tokens say why, and every error answer
has the callable protocol's one format."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from callables import Callables, CallError, functions_url


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
