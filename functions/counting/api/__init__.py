"""Callable and scheduled handlers: validate, call the domain, shape the result.

This package is the only one that imports `firebase_functions`. Domain errors become
`HttpsError`s here, with the code docs/api.md gives each.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from firebase_functions import https_fn, logger
from google.cloud import firestore

from .. import cadence
from ..errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)

Code = https_fn.FunctionsErrorCode
Request = https_fn.CallableRequest[Any]
Handler = TypeVar("Handler", bound=Callable[[Request], dict[str, Any]])

_CODES: list[tuple[type[Exception], https_fn.FunctionsErrorCode]] = [
    (InvalidArgument, Code.INVALID_ARGUMENT),
    (NotFound, Code.NOT_FOUND),
    (FailedPrecondition, Code.FAILED_PRECONDITION),
    (PermissionDenied, Code.PERMISSION_DENIED),
    (ResourceExhausted, Code.RESOURCE_EXHAUSTED),
]


@functools.cache
def db() -> firestore.Client:
    """The instance's Firestore client (anonymous credentials under the emulator)."""
    return firestore.Client()


def client_errors(handler: Handler) -> Handler:
    """Turn the domain's errors into the callable error codes of docs/api.md."""

    @functools.wraps(handler)
    def wrapped(req: Request) -> dict[str, Any]:
        try:
            return handler(req)
        except tuple(error for error, _ in _CODES) as error:
            code = next(code for kind, code in _CODES if isinstance(error, kind))
            raise https_fn.HttpsError(code, str(error)) from error

    return wrapped  # type: ignore[return-value]


def caller(req: Request) -> tuple[str, dict[str, Any]]:
    """The signed-in caller's uid and claims; anonymous users count as signed in."""
    if req.auth is None or not req.auth.uid:
        raise https_fn.HttpsError(Code.UNAUTHENTICATED, "sign in first: no valid ID token")
    return req.auth.uid, dict(req.auth.token or {})


def is_admin(claims: dict[str, Any]) -> bool:
    return claims.get("admin") is True


def require_admin(req: Request) -> str:
    uid, claims = caller(req)
    if not is_admin(claims):
        raise PermissionDenied("this operation needs the admin claim")
    return uid


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


@functools.cache
def waker() -> cadence.Waker:
    """The instance's rollup waker (writers call it after each write)."""
    return cadence.tasks_waker()


def rfc3339(instant: dt.datetime) -> str:
    return instant.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
