"""Fixtures for every suite."""

from __future__ import annotations

import pytest
from counting.features.context import Context
from hypothesis import settings

# Hypothesis' per-example deadline is a timing assertion: a busy machine fails it. None here.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")


@pytest.fixture
def ctx() -> Context:
    """The test's own context of the domain. Unit tests and the simulation run without Cloud
    Tasks: its writes wake nothing (a simulated run builds contexts with a waker of its own;
    tests under the stack have theirs, tests/emulator/conftest.py)."""
    return Context.offline()
