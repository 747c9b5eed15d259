"""The closed sets of names a caller picks from (shard strategy, read consistency, trend window)
and their defaults: the one definition of each name.

Each is a `Literal` of the very strings stored in Firestore and sent over the wire, so a value
needs no conversion anywhere and mypy checks every one a caller writes (config.py's per-window
tables are keyed by `Window`).
"""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

Strategy = Literal["random", "round_robin", "least_loaded"]
Consistency = Literal["rollup", "strong"]  # one document read, or every shard read at once
Window = Literal["1h", "24h"]

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
CONSISTENCIES: tuple[Consistency, ...] = get_args(Consistency)
WINDOWS: tuple[Window, ...] = get_args(Window)

DEFAULT_STRATEGY: Strategy = "random"
DEFAULT_WINDOW: Window = "24h"

Name = TypeVar("Name", bound=str)


def member(value: object, names: tuple[Name, ...]) -> Name | None:
    """The one of `names` that equals `value` (typed as its kind), or None."""
    return next((name for name in names if name == value), None)
