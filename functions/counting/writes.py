"""How the domain sends a commit, and what an error after sending it means.

google-cloud-firestore resends a Commit on UNAVAILABLE and RESOURCE_EXHAUSTED by default (its
transport's retry, up to 60 s). A commit whose first attempt applied and whose answer was lost
is then applied again: an `Increment` counts twice. So every commit of the domain says how it
may be sent:

- `IDEMPOTENT`: applying it twice is applying it once (absolute values, a touch, a merge of the
  same fields). The library resends it as it likes.
- `ONCE`: anything else. Sent once (`retry=None`). Its outcome after an error is one of:
  refused (the error says nothing was written: a failed precondition, ABORTED, a bad value),
  or unknown (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL...: it may have applied, or may still
  apply: Firestore does not say how late a commit can land after its answer was lost).

A commit guarded by a precondition on a marker document (a request marker created, a voter or
pacing marker created or rewritten at the version read, a collection counter's record) may be
sent again as it is: of all its attempts, at most one applies, since each needs the marker as
it was before any applied. Every such marker carries the request's `nonce`, so an attempt that
fails its precondition reads the marker and tells "an earlier attempt of mine applied" from
"another request got there first" (`Guarded`). A commit with no marker (a plain increment
without a request_id) cannot be sent again: its unknown outcome is the caller's answer
(`OutcomeUnknown`), which a retry with a request_id would have settled. docs/architecture.md,
"Exactly once".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core.gapic_v1 import method as gapic_method
from google.cloud import firestore

from . import config
from .errors import OutcomeUnknown

T = TypeVar("T")

# The field a guarded commit writes into its marker: which request it was.
NONCE = "nonce"
# Errors that say nothing was written. Anything else a commit raises (UNAVAILABLE, a deadline,
# INTERNAL, RESOURCE_EXHAUSTED, the library's RetryError, a broken connection) leaves the
# outcome unknown: the request may have reached Firestore.
REFUSED: tuple[type[Exception], ...] = (
    gexc.Aborted, gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound,
    gexc.InvalidArgument, gexc.PermissionDenied, gexc.Unauthenticated, gexc.OutOfRange,
    ValueError)
# How long a guarded write keeps sending its commit again while Firestore's answers are lost, and
# the pauses between attempts: within a callable's 60 s, with room for the rest of the request.
RESEND_FOR_S = 20.0
RESEND_PAUSES_S = (0.1, 0.3, 1.0, 2.0, 4.0)

# `retry=` of a commit that may be applied twice: the library's own policy.
IDEMPOTENT: Any = gapic_method.DEFAULT


def once() -> Any:
    """`retry=` of a commit that must not be applied twice: None (one attempt), unless the
    simulation switched the protection off to show it needed (then the library's resend)."""
    return None if config.PROTECTIONS.single_attempt else gapic_method.DEFAULT


def new_nonce() -> str:
    return uuid.uuid4().hex


# What a request to Firestore raises when it failed; of those, REFUSED say nothing was written.
FAILED: tuple[type[Exception], ...] = (gexc.GoogleAPICallError, gexc.RetryError, OSError,
                                       ValueError)


def refused(error: BaseException) -> bool:
    """Whether a commit that raised `error` certainly wrote nothing."""
    return isinstance(error, REFUSED)


def unknown(error: BaseException) -> bool:
    """Whether a commit that raised `error` may have applied (or may still apply)."""
    return isinstance(error, FAILED) and not refused(error)


def commit_once(batch: firestore.WriteBatch, *, request_id: str | None = None) -> list[Any]:
    """Commit a batch that must not apply twice and has no marker to tell: one attempt. An error
    that leaves the outcome unknown becomes `OutcomeUnknown` (with `request_id`, for the answer)."""
    try:
        results: list[Any] = batch.commit(retry=once())
    except FAILED as error:
        if refused(error):
            raise
        raise OutcomeUnknown("the write may or may not have been applied: Firestore's answer "
                             "was lost" + ("" if request_id is None else
                                           "; retry with the same request_id to settle it"),
                             request_id=request_id) from error
    return results


def resending(attempt: Callable[[], T], *, request_id: str | None,
              sleep: Callable[[float], None] = time.sleep,
              monotonic: Callable[[], float] = time.monotonic) -> T:
    """Run `attempt` (a guarded commit and what follows it) until it gives an answer: again after
    an error that leaves its outcome unknown, for up to RESEND_FOR_S. Each attempt is the same
    guarded commit, so at most one of them applies, and the attempt that fails its precondition
    because an earlier one applied finds out from the marker's nonce. Then `OutcomeUnknown`:
    Firestore stayed out of reach, and a retry with `request_id` settles it."""
    deadline = monotonic() + RESEND_FOR_S
    pauses = iter(RESEND_PAUSES_S)
    while True:
        try:
            return attempt()
        except FAILED as error:
            if refused(error):
                raise
            pause = next(pauses, RESEND_PAUSES_S[-1])
            if monotonic() + pause > deadline:
                raise OutcomeUnknown(
                    "the write may or may not have been applied: Firestore did not answer"
                    + ("" if request_id is None else
                       "; retry with the same request_id to settle it"),
                    request_id=request_id) from error
            sleep(pause)
