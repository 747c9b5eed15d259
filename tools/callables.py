"""A small Python client for the callables and the Auth emulator, used by tests and benchmarks.

It speaks the callable protocol over HTTP exactly as the Firebase SDKs do: POST `{"data": ...}`
with `Authorization: Bearer <ID token>`, and reads `{"result": ...}` or `{"error": ...}`.
It finds the stack through the variables `make exec` exports, and otherwise through firebase.json
(emulator hosts and ports) and .firebaserc (project id), the files the stack itself is started
from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
# The functions' region (set in functions/main.py); firebase.json does not name it.
REGION = "us-central1"
# A call's deadline: the callables' own 60 s timeout, plus the start of a new Functions emulator
# worker, which on a cold machine with many starting at once can take a minute or two
# (tools/stack.py allows 120 s).
CALL_TIMEOUT_S = 180


def _config(name: str) -> Any:
    return json.loads((ROOT / name).read_text())


def emulator_host(emulator: str) -> str:
    """`host:port` of an emulator, as firebase.json declares it."""
    declared = _config("firebase.json")["emulators"][emulator]
    return f"{declared['host']}:{declared['port']}"


PROJECT: str = os.environ.get("GCLOUD_PROJECT") or _config(".firebaserc")["projects"]["default"]


class CallError(Exception):
    def __init__(self, status: str, message: str, http_status: int) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.http_status = http_status


def functions_url() -> str:
    return (os.environ.get("COUNTERS_FUNCTIONS_URL")
            or f"http://{emulator_host('functions')}/{PROJECT}/{REGION}")


def auth_url() -> str:
    return "http://" + (os.environ.get("FIREBASE_AUTH_EMULATOR_HOST") or emulator_host("auth"))


@dataclass
class User:
    uid: str
    id_token: str
    refresh_token: str


def sign_up(claims: dict[str, Any] | None = None, *, email: str | None = None,
            password: str | None = None, project: str = PROJECT) -> User:
    """An Auth emulator user of `project`, with custom claims set and present in its ID token:
    anonymous, or with `email`/`password` (signed in instead when the account exists already)."""
    identity = f"{auth_url()}/identitytoolkit.googleapis.com/v1"
    account: dict[str, Any] = {"returnSecureToken": True}
    if email is not None:
        account.update(email=email, password=password)
    reply = requests.post(f"{identity}/accounts:signUp?key=emulator", json=account, timeout=10)
    if email is not None and not reply.ok and "EMAIL_EXISTS" in reply.text:
        reply = requests.post(f"{identity}/accounts:signInWithPassword?key=emulator",
                              json=account, timeout=10)
    reply.raise_for_status()
    body = reply.json()
    user = User(uid=body["localId"], id_token=body["idToken"], refresh_token=body["refreshToken"])
    if claims:
        update = requests.post(
            f"{identity}/projects/{project}/accounts:update",
            headers={"Authorization": "Bearer owner"},
            json={"localId": user.uid, "customAttributes": json.dumps(claims)},
            timeout=10,
        )
        update.raise_for_status()
        refreshed = requests.post(
            f"{auth_url()}/securetoken.googleapis.com/v1/token?key=emulator",
            data={"grant_type": "refresh_token", "refresh_token": user.refresh_token},
            timeout=10,
        )
        refreshed.raise_for_status()
        user.id_token = refreshed.json()["id_token"]
    return user


@dataclass
class Callables:
    """Calls the deployed (or emulated) callables as one user; `token=None` calls signed out."""

    token: str | None
    base_url: str = field(default_factory=functions_url)
    session: requests.Session = field(default_factory=requests.Session)

    def call(self, name: str, **data: Any) -> dict[str, Any]:
        # A new connection per call: the emulator's Node server closes a kept-alive connection
        # after 5 s idle, and a call sent on one as it closes is reset before it is read (seen
        # with 12 calls racing on connections idle through the checks between two races).
        headers = {"Content-Type": "application/json", "Connection": "close"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        reply = self.session.post(f"{self.base_url}/{name}", json={"data": data},
                                  headers=headers, timeout=CALL_TIMEOUT_S)
        try:
            body = reply.json()
        except ValueError:
            body = {}
        if "result" in body and reply.ok:
            result: dict[str, Any] = body["result"]
            return result
        error = body.get("error") or {}
        raise CallError(error.get("status", f"HTTP_{reply.status_code}"),
                        error.get("message", reply.text[:200]), reply.status_code)
