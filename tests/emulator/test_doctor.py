"""`counters doctor` on the stack: its canary round trip on the emulators (the callables serve,
an increment of a counter of doctor's own is published by a tick, the counter is gone after), and
the checks that need Google's APIs said to be cannot-check. Its verdicts on recorded API answers
are unit tests (tests/unit/test_doctor.py)."""

from __future__ import annotations

import re

from click.testing import CliRunner
from counters_cli import cli
from counters_cli.doctor import CHECKS
from counting.foundation import config
from google.cloud import firestore


def test_doctor_runs_its_canary_on_the_emulators(db: firestore.Client) -> None:
    before = {snapshot.id for snapshot in db.collection(config.COUNTERS).stream()}
    result = CliRunner().invoke(cli, ["doctor"])
    assert "Traceback" not in result.output
    lines = result.stdout.splitlines()
    canary = next(line for line in lines if re.match(r"\S+\s+canary\s", line))
    assert re.match(r"pass\s+canary\s+get_count serves; an increment was published "
                    r"\d+\.\d s later \(by a tick\)", canary), result.stdout
    for check in CHECKS:
        assert any(re.match(rf"cannot-check\s+{check}\s+the emulators have no such API", line)
                   for line in lines), (check, result.stdout)
    assert any(re.match(r"\S+\s+audit\s", line) for line in lines)
    assert result.exit_code == (1 if any(line.startswith("FAIL") for line in lines) else 0)
    after = {snapshot.id for snapshot in db.collection(config.COUNTERS).stream()}
    assert not {c for c in after - before if c.startswith("doctor-canary-")}
