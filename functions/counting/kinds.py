"""The closed sets of names a caller picks from: shard strategy, read consistency, trend window.

Each is a `Literal` of the very strings stored in Firestore and sent over the wire, so a value
needs no conversion anywhere and mypy checks every one a caller writes. config.py lists the
strategies and windows (each window with its buckets) and the defaults; here are the defaults
typed as their kinds, and a unit test keeps config's lists equal to these.
"""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

from . import config

Strategy = Literal["random", "round_robin", "least_loaded"]
Consistency = Literal["rollup", "strong"]  # one document read, or every shard read at once
Window = Literal["1h", "24h"]

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
CONSISTENCIES: tuple[Consistency, ...] = get_args(Consistency)
WINDOWS: tuple[Window, ...] = get_args(Window)

Name = TypeVar("Name", bound=str)


def member(value: object, names: tuple[Name, ...]) -> Name | None:
    """The one of `names` that equals `value` (typed as its kind), or None."""
    return next((name for name in names if name == value), None)


def _default(value: str, names: tuple[Name, ...]) -> Name:
    found = member(value, names)
    if found is None:
        raise ValueError(f"config.py's default {value!r} is not one of {names}")
    return found


DEFAULT_STRATEGY: Strategy = _default(config.DEFAULT_STRATEGY, STRATEGIES)
DEFAULT_WINDOW: Window = _default(config.DEFAULT_WINDOW, WINDOWS)
