"""tools/stack.py's `firestore_alone`: the scale benchmark's emulator of its own per run."""

from __future__ import annotations

from pathlib import Path

import pytest
import stack
from google.cloud import firestore


def test_an_emulator_of_its_own_serves_apart_from_the_stacks_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new JVM on a free port: what is written there is not in the stack's emulator, and
    nothing of it outlives the block."""
    stacks = firestore.Client(project="demo-alone")
    with stack.firestore_alone(tmp_path / "firestore.log") as (host, pid):
        assert host != stack.emulator_env()["FIRESTORE_EMULATOR_HOST"]
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", host)
        alone = firestore.Client(project="demo-alone")
        alone.document("things/one").set({"n": 1})
        assert alone.document("things/one").get().to_dict() == {"n": 1}
        assert not stacks.document("things/one").get().exists
        assert stack.alive(pid)
    assert not stack.alive(pid)
