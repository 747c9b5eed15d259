"""How commits are sent: once when a resend would apply them twice, again when each attempt is
guarded, and what a lost answer becomes."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import pytest
from counting.foundation import writes
from counting.foundation.clock import Clock
from counting.foundation.config import Protections
from counting.foundation.errors import OutcomeUnknown
from google.api_core import exceptions as gexc

ALL = Protections()  # production's: every protection on


def error(kind: type[Exception], message: str) -> Exception:
    """An error as the client library raises it (its constructors are untyped)."""
    if kind is gexc.RetryError:
        return gexc.RetryError(message, None)  # type: ignore[no-untyped-call]
    return kind(message)


class Batch:
    """A batch whose commits answer `answers` in turn (an exception is raised)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.retries: list[Any] = []
        self.timeouts: list[Any] = []

    def commit(self, retry: Any = "unset", timeout: Any = None) -> Any:
        self.retries.append(retry)
        self.timeouts.append(timeout)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_a_commit_that_must_not_apply_twice_is_sent_once() -> None:
    """The library is told not to resend it (retry=None), and to wait COMMIT_TIMEOUT_S at most
    for its answer."""
    batch = Batch(["result"])
    assert writes.commit_once(batch, ALL) == ["result"]  # type: ignore[arg-type]
    assert (batch.retries, batch.timeouts) == ([None], [writes.COMMIT_TIMEOUT_S])


@pytest.mark.parametrize("lost", [
    error(gexc.ServiceUnavailable, "lost"), error(gexc.DeadlineExceeded, "late"),
    error(gexc.InternalServerError, "?"), error(gexc.ResourceExhausted, "busy"),
    error(gexc.RetryError, "gave up"), ConnectionResetError()])
def test_a_lost_answer_is_an_unknown_outcome(lost: Exception) -> None:
    """An error that does not say nothing was written is neither a success nor a refusal."""
    with pytest.raises(OutcomeUnknown) as raised:
        writes.commit_once(Batch(lost), ALL, request_id="r1")  # type: ignore[arg-type]
    assert raised.value.request_id == "r1"


@pytest.mark.parametrize("refusal", [
    error(gexc.Aborted, "contention"), error(gexc.AlreadyExists, "marker"),
    error(gexc.FailedPrecondition, "changed"), error(gexc.NotFound, "folded"),
    error(gexc.InvalidArgument, "bad")])
def test_a_refusal_is_raised_as_it_is(refusal: Exception) -> None:
    """Errors that say nothing was written keep their meaning (the caller plans again)."""
    with pytest.raises(type(refusal)):
        writes.commit_once(Batch(refusal), ALL)  # type: ignore[arg-type]


def resend(batch: Batch, slept: list[float]) -> Any:
    return writes.resending(lambda: writes.send(batch, ALL), request_id="r",  # type: ignore[arg-type]
                            clock=Clock(sleep=slept.append, monotonic=lambda: sum(slept)))


def test_a_guarded_commit_is_sent_again_until_it_is_answered() -> None:
    """Lost answers and contention are followed by the same commit, after growing pauses, until
    one answers: here the precondition of the fourth attempt fails, which is the caller's to
    read, marked as following an unknown outcome."""
    batch = Batch(error(gexc.ServiceUnavailable, "lost"), error(gexc.Aborted, "contention"),
                  error(gexc.DeadlineExceeded, "lost"),
                  error(gexc.AlreadyExists, "an earlier attempt applied"))
    slept: list[float] = []
    with pytest.raises(gexc.AlreadyExists) as raised:
        resend(batch, slept)
    assert len(batch.retries) == 4 and slept == list(writes.RESEND_PAUSES_S[:3])
    assert getattr(raised.value, "after_unknown", None) is True


def test_a_refusal_after_a_lost_answer_is_unknown() -> None:
    """After an attempt that may have applied, a refusal of a later one says nothing about the
    first: the outcome stays unknown, never "not applied"."""
    batch = Batch(error(gexc.ServiceUnavailable, "lost"), error(gexc.InvalidArgument, "?"))
    with pytest.raises(OutcomeUnknown):
        resend(batch, [])


def test_contention_alone_is_still_a_refusal() -> None:
    """Attempts refused for contention only, until the time runs out: nothing was written."""
    batch = Batch(*[error(gexc.Aborted, "contention")] * 100)
    with pytest.raises(gexc.Aborted):
        resend(batch, [])


def test_a_guarded_commit_gives_up_as_unknown_after_its_time() -> None:
    """While Firestore stays out of reach, the attempts stop within RESEND_FOR_S."""
    batch = Batch(*[error(gexc.ServiceUnavailable, "down")] * 100)
    slept: list[float] = []
    with pytest.raises(OutcomeUnknown, match="same request_id"):
        resend(batch, slept)
    assert sum(slept) <= writes.RESEND_FOR_S


def test_reads_after_a_lost_answer_that_fail_leave_it_unknown() -> None:
    """Finding out reads the marker: when that read fails too, the outcome is unknown."""
    failed = error(gexc.AlreadyExists, "marker")
    failed.after_unknown = True  # type: ignore[attr-defined]
    with pytest.raises(OutcomeUnknown), writes.finding_out(failed, request_id="r"):
        raise error(gexc.ServiceUnavailable, "down")
    with pytest.raises(gexc.ServiceUnavailable), \
            writes.finding_out(error(gexc.AlreadyExists, "marker"), request_id="r"):
        raise error(gexc.ServiceUnavailable, "down")


def test_a_bug_is_not_taken_for_a_lost_answer() -> None:
    """Only what a request to Firestore raises counts as a lost answer."""
    with pytest.raises(KeyError):
        writes.commit_once(Batch(KeyError("bug")), ALL)  # type: ignore[arg-type]


def test_a_markers_nonces_are_kept_by_time_and_old_ones_are_read() -> None:
    """A voter or pacing marker keeps the nonces written in the last NONCE_KEEP_S (at most
    MAX_NONCES); one written before times were kept (plain nonces, no `nonces_ms`) is read and
    kept, never fails the write."""
    from types import SimpleNamespace

    from counting.writepath import shards

    def marker(data: dict[str, object]) -> shards.Snapshot:
        return cast(shards.Snapshot, SimpleNamespace(exists=True, to_dict=lambda: data))

    now = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
    ms = round(now.timestamp() * 1000)
    old = marker({shards.NONCES: [f"{n:032x}" for n in range(8)]})
    kept = shards.recent_nonces(old, "new", now)
    assert kept[shards.NONCES] == [*(f"{n:032x}" for n in range(8)), "new"]
    assert kept[shards.NONCES_MS] == [*([0] * 8), ms]
    timed = marker({shards.NONCES: ["stale", "fresh"],
                    shards.NONCES_MS: [ms - shards.NONCE_KEEP_S * 1000 - 1, ms - 1000]})
    assert shards.nonces_of(timed) == ["stale", "fresh"]
    assert shards.recent_nonces(timed, "new", now)[shards.NONCES] == ["fresh", "new"]
    many = marker({shards.NONCES: [str(n) for n in range(100)],
                   shards.NONCES_MS: [ms] * 100})
    assert len(shards.recent_nonces(many, "new", now)[shards.NONCES]) == shards.MAX_NONCES
