"""Fixtures for every suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from counting.writepath import waking
from hypothesis import settings

# Hypothesis' per-example deadline is a timing assertion: a busy machine fails it. None here.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")


@pytest.fixture(autouse=True)
def wake_nothing_offline(request: pytest.FixtureRequest) -> Iterator[None]:
    """Unit tests and the simulation run without Cloud Tasks: the domain's writes wake nothing
    there (a simulated run installs a waker of its own). Under the stack they wake its rollup,
    as the deployed functions do."""
    if request.node.path.parent.name not in ("unit", "sim"):
        yield
        return
    previous = waking.install(waking.Never())
    try:
        yield
    finally:
        waking.install(previous)
