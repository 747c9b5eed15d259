"""What clients asked and were told: the record actors write and checkers read.

A `Request` is one thing a client wants done once (an increment, a ticket number, a reset); a
client with a `request_id` makes several `Call`s of one request when it is not told the outcome.
While a call is under way its actor carries it (`virtual.Actor.call`), and the model stamps it
on every commit attempt the call sends, so that a checker can tell which requests a committed
write belongs to, and what each caller was told.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from counting.features.sequences import issuing
from counting.foundation import errors
from google.api_core import exceptions as gexc

from .virtual import Sim


class Answer(enum.Enum):
    OK = "ok"  # it was done
    NO_OP = "no-op"  # done already (a request_id's), or nothing to do (a unique counter's)
    REFUSED = "refused"  # a definite refusal: nothing was written
    RETRY = "retry"  # ABORTED, UNAVAILABLE or INTERNAL: nothing was written, retry
    UNSURE = "unsure"  # may or may not have been done (an error, or no answer at all)


# The domain's refusals: their codes say nothing was written, for good (with a request_id).
REFUSALS: tuple[type[Exception], ...] = (
    errors.InvalidArgument, errors.NotFound, errors.FailedPrecondition, errors.PermissionDenied,
    errors.ResourceExhausted)


# What a caller may be answered; anything else is a crash of the code under test.
EXPECTED: tuple[type[Exception], ...] = (errors.CounterError, gexc.GoogleAPICallError,
                                         gexc.RetryError)


# The requests made through a callable (docs/api.md); the others (triggers, the operator's
# commands, the extension's own clients) hear Firestore's errors as they are.
CALLABLE_KINDS = frozenset({
    "increment", "increment_id", "increment_many", "increment_many_id", "like", "unlike", "view",
    "track", "track_id", "next_number", "next_number_id", "reset_sequence", "reset_counter",
    "configure_counter", "configure_sequence", "create_counter"})


def answer_to(error: BaseException, kind: str) -> Answer:
    unknown = getattr(errors, "OutcomeUnknown", None)
    if unknown is not None and isinstance(error, unknown):
        return Answer.UNSURE
    if isinstance(error, issuing.Unreadable):
        return Answer.UNSURE  # a number was given, which its record can no longer tell
    if isinstance(error, REFUSALS):
        return Answer.REFUSED
    # Anything else the callables answer ABORTED, UNAVAILABLE or INTERNAL (handlers.client_errors),
    # each a promise that nothing was written (docs/api.md, "What an answer promises"); to any
    # other caller only the domain's Aborted says so.
    return Answer.RETRY if kind in CALLABLE_KINDS or isinstance(error, errors.Aborted) \
        else Answer.UNSURE


@dataclass(eq=False, kw_only=True)
class Request:
    """`amounts`: what it asks to add to each counter (`counter id`) or trend key
    (`trend:region:tag`); `tenant` for a sequence's."""

    kind: str
    request_id: str | None = None
    amounts: dict[str, int] = field(default_factory=dict)
    tenant: str | None = None
    # What a configuration asks to be in force: (the document's path, its fields).
    configures: tuple[tuple[str, ...], dict[str, Any]] | None = None
    calls: list[Call] = field(default_factory=list)

    @property
    def acknowledged(self) -> bool:
        """Whether a caller was told it was done (a request_id's NO_OP says so too)."""
        return any(call.answer is Answer.OK or (call.answer is Answer.NO_OP
                                                and self.request_id is not None)
                   for call in self.calls)

    @property
    def refused(self) -> bool:
        """Whether every caller was told it was not done."""
        return bool(self.calls) and all(call.answer in (Answer.REFUSED, Answer.RETRY, Answer.NO_OP)
                                        for call in self.calls) and not self.acknowledged


@dataclass(eq=False, kw_only=True)
class Call:
    request: Request
    actor: str
    sent_us: int
    answered_us: int | None = None
    answer: Answer = Answer.UNSURE  # until answered: a killed caller never is
    value: Any = None
    error: str | None = None

    def __repr__(self) -> str:
        return (f"{self.request.kind}({self.request.request_id or '-'}) by {self.actor} at "
                f"{self.sent_us / 1e6:.3f} s: {self.answer.value}"
                f"{f' {self.error}' if self.error else ''}")


class History:
    def __init__(self, sim: Sim) -> None:
        self._sim = sim
        self.requests: list[Request] = []
        self.crashes: list[str] = []  # calls that failed with an error no caller should get

    def call(self, request: Request, do: Callable[[], Any],
             answer: Callable[[Any], Answer] = lambda _: Answer.OK) -> Call:
        """Make one call of `request` from the current actor: `do()`, its value read by
        `answer`, an error by `answer_to`. Errors are recorded, not raised (Killed is)."""
        if not request.calls:
            self.requests.append(request)
        actor = self._sim.current()
        assert actor is not None
        made = Call(request=request, actor=actor.name, sent_us=self._sim.now_us)
        request.calls.append(made)
        actor.call = made
        try:
            made.value = do()
            made.answer = answer(made.value)
        except Exception as error:
            made.answer = answer_to(error, request.kind)
            made.error = f"{type(error).__name__}: {error}"
            if not isinstance(error, EXPECTED):
                self.crashes.append(f"{made!r}")
        finally:
            actor.call = None
        made.answered_us = self._sim.now_us
        return made
