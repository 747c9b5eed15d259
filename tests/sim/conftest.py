"""What every simulation test shares."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """Holders log every failure they survive."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)
