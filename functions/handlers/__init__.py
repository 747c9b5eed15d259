"""Callable and scheduled handlers: validate, call the domain, shape the result.

This package is the only one that imports `firebase_functions`. Domain errors become
`HttpsError`s here, with the code docs/api.md gives each. It is the composition root: the
codebase's placement (`placement`), the clients on its databases and the instance's context of
the domain are made here, once, and passed to every call of the domain.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import flask
from counting.features.context import Context
from counting.features.declarations import Declared
from counting.foundation import config
from counting.foundation.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutcomeUnknown,
    PermissionDenied,
    ResourceExhausted,
)
from firebase_admin import auth as firebase_auth
from firebase_admin import exceptions as fexc
from firebase_functions import https_fn, logger, params
from flask_cors import cross_origin
from google.api_core import exceptions as gexc
from google.cloud import firestore

Code = https_fn.FunctionsErrorCode
Request = https_fn.CallableRequest[Any]
Handler = TypeVar("Handler", bound=Callable[[Request], dict[str, Any]])
log = logging.getLogger(__name__)

_CODES: list[tuple[type[Exception], https_fn.FunctionsErrorCode]] = [
    (InvalidArgument, Code.INVALID_ARGUMENT),
    (NotFound, Code.NOT_FOUND),
    (FailedPrecondition, Code.FAILED_PRECONDITION),
    (PermissionDenied, Code.PERMISSION_DENIED),
    (ResourceExhausted, Code.RESOURCE_EXHAUSTED),
    (Aborted, Code.ABORTED),
]


# The backend codebase these handlers are part of: the folder of main.py, beside which its
# PLACEMENT_FILE lies (this repository's functions/, or an install's folder).
CODEBASE = Path(__file__).resolve().parents[1]


@functools.cache
def placement() -> config.Placement:
    """Where this codebase's backend lives, as its PLACEMENT_FILE says: read once, by main.py
    before anything else (PlacementError without the file: the functions do not start)."""
    return config.Placement.read(CODEBASE)


@functools.cache
def declared() -> Declared:
    """The codebase's collection counters (declarations.json beside main.py)."""
    return Declared.of_codebase(CODEBASE, placement())


@functools.cache
def db() -> firestore.Client:
    """The instance's Firestore client, on the backend's database (anonymous credentials under
    the emulator)."""
    return firestore.Client(database=placement().database)


@functools.cache
def context() -> Context:
    """The instance's context of the domain: the placement, its caches, P as it knows it, and
    the Cloud Tasks waker of the rollup, made on first use and passed to every call of the
    domain."""
    return Context.for_process(placement=placement())


@functools.cache
def watched_db() -> firestore.Client:
    """The client of the database holding the documents collection counters count."""
    if placement().watched_database == placement().database:
        return db()
    return firestore.Client(database=placement().watched_database)


# Firestore errors that are transient by nature (contention, overload, an outage) reach the
# client as codes its retry loop knows, rather than INTERNAL; any other stays INTERNAL.
_RETRYABLE: list[tuple[tuple[type[Exception], ...], https_fn.FunctionsErrorCode, str]] = [
    ((gexc.Aborted,), Code.ABORTED, "a concurrent change got in the way: retry"),
    ((gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.TooManyRequests, gexc.RetryError),
     Code.UNAVAILABLE, "Firestore is unavailable or overloaded: retry later"),
    ((fexc.UnavailableError, fexc.DeadlineExceededError),
     Code.UNAVAILABLE, "Firebase Auth is unavailable: retry later"),
]


def client_errors(handler: Handler) -> Handler:
    """Turn the domain's errors into the callable error codes of docs/api.md, and Firestore's
    transient ones into ABORTED or UNAVAILABLE (the SDK would answer INTERNAL)."""

    @functools.wraps(handler)
    def wrapped(req: Request) -> dict[str, Any]:
        try:
            return handler(req)
        except OutcomeUnknown as error:
            # Neither a success nor a refusal: the write may have applied. `details` says so to
            # a program, with the request_id whose retry settles it (docs/api.md).
            details = {"outcome": "unknown", **({} if error.request_id is None
                                                else {"request_id": error.request_id})}
            raise https_fn.HttpsError(Code.UNKNOWN, str(error), details) from error
        except tuple(error for error, _ in _CODES) as error:
            code = next(code for kind, code in _CODES if isinstance(error, kind))
            raise https_fn.HttpsError(code, str(error)) from error
        except tuple(kind for kinds, _, _ in _RETRYABLE for kind in kinds) as error:
            code, message = next((code, message) for kinds, code, message in _RETRYABLE
                                 if isinstance(error, kinds))
            log.warning("%s: %r", message, error)
            raise https_fn.HttpsError(code, message) from error

    return wrapped  # type: ignore[return-value]


# Every callable verifies the caller's App Check token in production. functions/.env says true
# (a deploy without a terminal needs a value); functions/.env.local, which only the emulators
# read, turns it off locally: there is no App Check emulator (docs/deploy.md).
ENFORCE_APP_CHECK = params.BoolParam(
    "ENFORCE_APP_CHECK", default=True,
    description="Reject callable requests without a valid App Check token.")


def app_check_enforced() -> bool:
    """ENFORCE_APP_CHECK, failing closed: only an explicit false turns App Check off (the SDK's
    BoolParam reads anything but "true" as false, while the CLI takes "1" or "yes" for true)."""
    value = os.environ.get(ENFORCE_APP_CHECK.name, "true").strip().lower()
    return value not in ("false", "0", "no", "n")


def client_callable(handler: Callable[[Request], dict[str, Any]]) -> Callable[..., Any]:
    """A callable function: the request body checked (`body_problem`), App Check enforced as
    ENFORCE_APP_CHECK says when the module is loaded, the domain's errors mapped to codes, and
    the SDK's bare "Unauthenticated" explained (`refused_token`)."""
    app_check = app_check_enforced()
    # The SDK types the result as the handler it wraps; it is a Flask view.
    endpoint: Callable[[flask.Request], Any] = https_fn.on_call(  # type: ignore[assignment]
        enforce_app_check=app_check)(client_errors(handler))

    @functools.wraps(endpoint)
    def guarded(request: flask.Request) -> Any:
        problem = body_problem(request) if request.method == "POST" else None
        if problem is not None:
            return error_answer(https_fn.HttpsError(Code.INVALID_ARGUMENT, problem))
        answer = endpoint(request)
        if answer.status_code == 401 and answer.get_json(silent=True) == SDK_REFUSAL:
            return error_answer(https_fn.HttpsError(
                Code.UNAUTHENTICATED, refused_token(request, app_check=app_check)))
        return answer

    return guarded


# How the SDK answers a request whose ID token, or App Check token, it refused before the handler
# runs: one message for every case.
SDK_REFUSAL = {"error": {"status": "UNAUTHENTICATED", "message": "Unauthenticated"}}


@cross_origin(methods="POST", origins="*")  # the CORS headers on_call gives its answers
def error_answer(error: https_fn.HttpsError) -> flask.Response:
    """An error answered before or after the SDK's handler, exactly as the SDK answers one
    (`https_fn._on_call_handler`): the same JSON, HTTP status and headers."""
    return flask.make_response(flask.jsonify(error=error._as_dict()),
                               error._http_error_code.status)


def refused_token(request: flask.Request, *, app_check: bool) -> str:
    """Which token the SDK refused, which its answer does not say: the ID token, which it checks
    first, or else the App Check token. The ID token is checked again, on this failure path
    only, the way the SDK checks it."""
    authorization = request.headers.get("Authorization")
    if authorization is not None:
        if not authorization.startswith("Bearer "):
            return "ID token: the Authorization header must be `Bearer <ID token>`"
        try:
            firebase_auth.verify_id_token(authorization.removeprefix("Bearer "))
        except firebase_auth.ExpiredIdTokenError:
            return "ID token: expired (refresh it, or sign in again)"
        except (ValueError, fexc.FirebaseError):
            return "ID token: invalid (sign in again)"
    if app_check:
        return "App Check token: missing or invalid"
    return "ID token: could not be verified (retry)"


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > config.MAX_JSON_DIGITS:
        raise ValueError(f"an integer of more than {config.MAX_JSON_DIGITS} digits")
    return int(text)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is out of a double's range")
    return number


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def body_problem(request: flask.Request) -> str | None:
    """Why a callable's request body is not one the SDK can take safely, or None.

    The SDK answers INTERNAL for a body it cannot parse (truncated JSON, nesting deeper than
    Python's recursion limit, an integer over Python's 4,300-digit limit, a top level that is not
    an object), so this check runs in front of it and answers INVALID_ARGUMENT instead, for those
    and for bodies past the bounds of config (size, nesting, digits, NaN and infinities)."""
    if (request.content_length or 0) > config.MAX_BODY_BYTES:
        return f"body: larger than {config.MAX_BODY_BYTES} bytes"
    raw = request.get_data(cache=True)
    if len(raw) > config.MAX_BODY_BYTES:
        return f"body: larger than {config.MAX_BODY_BYTES} bytes"
    try:
        body = json.loads(raw, parse_int=_integer, parse_float=_finite, parse_constant=_constant)
    except RecursionError:
        return f"body: nested deeper than {config.MAX_JSON_DEPTH} levels"
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return f"body: not valid JSON ({error})"
    if not isinstance(body, dict) or set(body) != {"data"}:
        return 'body: must be an object with the one field "data"'
    if _depth(body) > config.MAX_JSON_DEPTH:
        return f"body: nested deeper than {config.MAX_JSON_DEPTH} levels"
    return None


def _depth(value: object) -> int:
    deepest, level = 0, [(value, 1)]
    while level:
        item, depth = level.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, list) else ()
        level.extend((child, depth + 1) for child in children)
    return deepest


def caller(req: Request) -> tuple[str, dict[str, Any]]:
    """The signed-in caller's uid and claims; anonymous users count as signed in."""
    if req.auth is None or not req.auth.uid:
        raise https_fn.HttpsError(Code.UNAUTHENTICATED, "ID token: missing (sign in first)")
    return req.auth.uid, dict(req.auth.token or {})


def is_admin(claims: dict[str, Any]) -> bool:
    return claims.get("admin") is True


def require_admin(req: Request, denied: str = "this operation needs the admin claim") -> str:
    """The caller's uid when they are an admin now: the ID token's admin claim, then the account
    as Firebase Auth has it (one lookup, `still_admin`), so that a role taken back, revoked
    sessions or a disabled account refuse at once rather than when the token expires."""
    uid, claims = caller(req)
    if not is_admin(claims):
        raise PermissionDenied(denied)
    try:
        account = firebase_auth.get_user(uid)
    except firebase_auth.UserNotFoundError:
        raise https_fn.HttpsError(Code.UNAUTHENTICATED, "ID token: its account no longer "
                                  "exists") from None
    still_admin(claims, account, denied)
    return uid


def still_admin(token: dict[str, Any], account: firebase_auth.UserRecord, denied: str) -> None:
    """Refuse an admin's ID token that its account no longer backs: what
    `verify_id_token(check_revoked=True)` checks (the account disabled, or its sessions revoked
    after the token was issued, to the second), then the admin claim the account has now."""
    if account.disabled:
        raise https_fn.HttpsError(Code.UNAUTHENTICATED, "ID token: the account is disabled")
    if int(token.get("iat", 0)) * 1000 < account.tokens_valid_after_timestamp:
        raise https_fn.HttpsError(Code.UNAUTHENTICATED, "ID token: revoked (sign in again)")
    if not is_admin(account.custom_claims or {}):
        raise PermissionDenied(f"{denied} (taken back since this ID token was issued)")


class _CloudLogging(logging.Handler):
    """Python's logging, as structured entries Cloud Logging reads (functions-framework
    configures no logging, so a deployed function's `logging.info` would be dropped)."""

    def emit(self, record: logging.LogRecord) -> None:
        entry: dict[str, Any] = {
            "severity": record.levelname, "message": self.format(record), "logger": record.name,
            # When it happened (Cloud Logging's receive time can lag; local logs have none).
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
        }
        figures = getattr(record, "figures", None)
        if isinstance(figures, dict):
            entry.update(figures)
        logger.write(entry)  # type: ignore[arg-type]


def cloud_logging(level: int) -> None:
    """Send the domain's log records (the `counting` loggers) to Cloud Logging."""
    domain = logging.getLogger("counting")
    domain.setLevel(level)
    domain.addHandler(_CloudLogging())
    domain.propagate = False


def rfc3339(instant: dt.datetime) -> str:
    return instant.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
