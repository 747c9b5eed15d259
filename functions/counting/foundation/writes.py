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

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core.gapic_v1 import method as gapic_method
from google.cloud import firestore

from counting.foundation.clock import Clock
from counting.foundation.config import Protections
from counting.foundation.errors import OutcomeUnknown

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
# One attempt waits this long for Firestore's answer (the library's default is 60 s, a
# callable's whole time): a stuck attempt leaves room for a resend, or for an UNKNOWN answer.
COMMIT_TIMEOUT_S = 10.0
# The refusals a guarded commit meets when its marker is not as the attempt expected: the
# caller reads the marker to tell why.
PRECONDITIONS: tuple[type[Exception], ...] = (gexc.AlreadyExists, gexc.FailedPrecondition,
                                              gexc.NotFound)

# `retry=` of a commit that may be applied twice: the library's own policy.
IDEMPOTENT: Any = gapic_method.DEFAULT


def once(protections: Protections) -> Any:
    """`retry=` of a commit that must not be applied twice: None (one attempt), unless the
    simulation switched the protection off to show it needed (then the library's resend)."""
    return None if protections.single_attempt else gapic_method.DEFAULT


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


def send(batch: firestore.WriteBatch, protections: Protections) -> list[Any]:
    """One attempt at a commit that must not apply twice: the library does not resend it, and
    it waits at most COMMIT_TIMEOUT_S for an answer (so that resends fit in a request)."""
    results: list[Any] = batch.commit(retry=once(protections), timeout=COMMIT_TIMEOUT_S)
    return results


def commit_once(batch: firestore.WriteBatch, protections: Protections, *,
                request_id: str | None = None) -> list[Any]:
    """Commit a batch that must not apply twice and has no marker to tell: one attempt. An error
    that leaves the outcome unknown becomes `OutcomeUnknown` (with `request_id`, for the answer)."""
    try:
        return send(batch, protections)
    except FAILED as error:
        if refused(error):
            raise
        raise lost(request_id) from error


def lost(request_id: str | None) -> OutcomeUnknown:
    return OutcomeUnknown("the write may or may not have been applied: Firestore's answer was "
                          "lost" + ("" if request_id is None else
                                    "; retry with the same request_id to settle it"),
                          request_id=request_id)


@contextlib.contextmanager
def after_applied(request_id: str | None, protections: Protections, *,
                  what: str) -> Iterator[None]:
    """Around the later steps of an operation whose first commit applied (`what` it did): any
    failure there is `OutcomeUnknown`, never a code that says nothing was written. Each later
    step is idempotent, so a retry with `request_id` finds the first commit applied and runs
    them again (docs/api.md, "What an answer promises"). (With `unknown_after_applied` off, the
    simulation's negative control, the failure goes out as it is.)"""
    if not protections.unknown_after_applied:
        yield
        return
    try:
        yield
    except OutcomeUnknown:
        raise
    except Exception as error:
        raise OutcomeUnknown(
            f"{what}, but a later step failed ({type(error).__name__}); "
            + ("retry with the same request_id to finish it" if request_id is not None else
               "it is in force: do not repeat it (with a request_id, its retry finishes it)"),
            request_id=request_id) from error


def resending(attempt: Callable[[], T], *, request_id: str | None, clock: Clock) -> T:
    """Run `attempt` (a guarded commit) until it gives an answer: again after an error that
    leaves its outcome unknown, or after ABORTED (contention: nothing written), for up to
    RESEND_FOR_S. Each attempt is the same guarded commit, so at most one of them applies, and
    an attempt that fails its precondition because an earlier one applied finds out from the
    marker's nonce: the precondition's error is raised for the caller to read, marked
    `after_unknown` when an earlier attempt's outcome was unknown (`finding_out`). Any other
    refusal after an unknown outcome, or the time running out, is `OutcomeUnknown`: a retry
    with `request_id` settles it. `clock` measures the time and waits the pauses."""
    deadline = clock.monotonic() + RESEND_FOR_S
    pauses = iter(RESEND_PAUSES_S)
    uncertain = False
    while True:
        try:
            return attempt()
        except FAILED as error:
            if isinstance(error, PRECONDITIONS):
                error.after_unknown = uncertain  # type: ignore[attr-defined]
                raise
            if refused(error) and not isinstance(error, gexc.Aborted):
                if uncertain:
                    raise lost(request_id) from error
                raise
            uncertain = uncertain or unknown(error)
            pause = next(pauses, RESEND_PAUSES_S[-1])
            if clock.monotonic() + pause > deadline:
                if uncertain:
                    raise lost(request_id) from error
                raise
            clock.sleep(pause)


@contextlib.contextmanager
def finding_out(error: BaseException, *, request_id: str | None) -> Iterator[None]:
    """Around the reads that follow a failed precondition: when an earlier attempt's outcome
    was unknown, a read that fails too leaves it unknown (`OutcomeUnknown`), never a refusal."""
    try:
        yield
    except FAILED as failure:
        if getattr(error, "after_unknown", False):
            raise lost(request_id) from failure
        raise
