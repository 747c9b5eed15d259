"""The domain's error hierarchy; the handlers map each class to one callable error code."""

from __future__ import annotations


class CounterError(Exception):
    """Base of every error the domain raises on purpose."""


class InvalidArgument(CounterError, ValueError):
    """Malformed client input; the message names the field."""


class NotFound(CounterError, LookupError):
    """The named counter (or other resource) does not exist."""


class FailedPrecondition(CounterError):
    """The request is well formed but the system is not in a state to serve it."""


class PermissionDenied(CounterError):
    """The caller lacks the role the operation needs."""


class ResourceExhausted(CounterError):
    """A rate limit: the caller must wait before this succeeds."""


class Aborted(CounterError):
    """A race with the rollup or another request of the same user; nothing was written and a
    retry (with the same request_id) succeeds."""


class OutcomeUnknown(CounterError):
    """Firestore's answer to a write was lost: it may have applied, or may still apply. With a
    `request_id`, a retry with that id settles it (it counts once either way); without one,
    nothing can (docs/api.md, "Exactly once")."""

    def __init__(self, message: str, *, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


def refusal_named(name: str, message: str) -> CounterError:
    """The refusal a request was answered, from the name of its class (kept in a request's
    tombstone: `counting.writepath.shards.answer_final`); a name this version does not know is a
    FailedPrecondition."""
    kinds: dict[str, type[CounterError]] = {kind.__name__: kind for kind in (
        InvalidArgument, NotFound, FailedPrecondition, PermissionDenied, ResourceExhausted)}
    return kinds.get(name, FailedPrecondition)(message)
