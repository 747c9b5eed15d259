"""What every simulation test shares."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from counting.writepath import partitions


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """Holders log every failure they survive."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture(autouse=True)
def fresh_partitions() -> Iterator[None]:
    """Every model's client names the same project: P cached by another test's process-wide
    cache would pick its writers' stripes."""
    partitions.KNOWN.forget()
    yield
    partitions.KNOWN.forget()
