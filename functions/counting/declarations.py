"""The app's collection counters: adding one is adding a declaration here (docs/api.md,
"Collection counters"). Each pattern gets one Firestore trigger, `count_` and its collection ids
(`counting.collections.Watch`), which the deploy picks up from main.py."""

from __future__ import annotations

from .collections import Declaration, Watch, watches
from .errors import FailedPrecondition, NotFound

DECLARATIONS = (
    # How many comments each post has.
    Declaration(counter="comments:{post}", documents="posts/{post}/comments/{comment}"),
    # How many orders have each status, and the sum of their amounts.
    Declaration(counter="orders:{status}", documents="orders/{order}", group_by="status"),
    Declaration(counter="revenue:{status}", documents="orders/{order}", group_by="status",
                sum="amount"),
)

WATCHES: tuple[Watch, ...] = tuple(watches(DECLARATIONS))


def owner(counter: str) -> str | None:
    """The declaration whose ids `counter` has the form of, if any."""
    return next((d.name for d in DECLARATIONS if counter.startswith(d.owns)), None)


def watch_of(name: str) -> Watch:
    """The watch that holds the declaration `name`, or whose trigger is named `name`."""
    for watch in WATCHES:
        if name == watch.function_name or any(d.name == name for d in watch.declarations):
            return watch
    known = sorted({d.name for d in DECLARATIONS} | {w.function_name for w in WATCHES})
    raise NotFound(f"no declaration {name!r}; declared: {', '.join(known)}")


def check_plain(counter: str) -> None:
    """A counter created by hand may not take an id a declaration keeps."""
    declared = owner(counter)
    if declared is not None:
        raise FailedPrecondition(f"counter: {counter!r} has the form of declaration "
                                 f"{declared!r}'s ids: its trigger creates it")
