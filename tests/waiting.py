"""Bounded polls for asynchronous effects (never a fixed sleep), shared by the test suites."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def eventually(check: Callable[[], Any], timeout_s: float = 30.0, every_s: float = 0.1) -> Any:
    """Poll `check` until it returns a truthy value; fail with its last value at the timeout."""
    deadline = time.monotonic() + timeout_s
    value = check()
    while not value and time.monotonic() < deadline:
        time.sleep(every_s)
        value = check()
    assert value, f"condition not met within {timeout_s} s (last value {value!r})"
    return value


def always(check: Callable[[], Any], for_s: float, every_s: float = 0.1) -> None:
    """Poll `check` for `for_s` seconds; fail the first time it is falsy."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        value = check()
        assert value, f"condition broken (value {value!r})"
        time.sleep(every_s)
