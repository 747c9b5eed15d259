"""tools/stack.py's process handling, with real processes: nothing it started may outlive it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import stack


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not stack.alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_stopping_a_group_stops_descendants_in_sessions_of_their_own() -> None:
    """A grandchild started with setsid (as firebase starts its JVM and workers) is stopped too."""
    script = ("import subprocess, time; subprocess.Popen(['setsid', 'sleep', '300']); "
              "time.sleep(300)")
    parent = stack.start_group([sys.executable, "-c", script], {}, None)
    deadline = time.monotonic() + 10
    while not (found := stack.descendants(parent.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert found
    stack.stop_group(parent, grace_s=2.0)
    assert all(wait_gone(pid) for pid in found | {parent.pid})


def test_a_dead_runners_leftovers_are_stopped_by_the_next_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes noted by a runner that was killed outright are stopped; a pid now used by
    another command is left alone."""
    monkeypatch.setattr(stack, "PIDS", tmp_path / "stack.pids")
    left = subprocess.Popen(["sleep", "300"], start_new_session=True)
    other = subprocess.Popen(["sleep", "301"], start_new_session=True)
    stack.remember([left])
    with stack.PIDS.open("a") as noted:
        noted.write(f"{other.pid} some other command\n")
    stack.reap_leftovers()
    assert wait_gone(left.pid)
    left.wait()
    assert stack.alive(other.pid) and not stack.PIDS.exists()
    other.kill()
    other.wait()


def test_firebase_runs_with_no_keep_alive_to_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Node, started with firebase's environment, opens a new connection per request (a reused
    one races gunicorn's 2 s keep-alive close), and an operator's NODE_OPTIONS are kept."""
    monkeypatch.setenv("NODE_OPTIONS", "--max-old-space-size=2048")
    env = stack.firebase_env()
    assert env["NODE_OPTIONS"].endswith("--max-old-space-size=2048")
    assert int(env["FUNCTIONS_DISCOVERY_TIMEOUT"]) > 30  # firebase-tools' default
    probe = ("const http = require('http'); "
             "console.log(JSON.stringify([http.globalAgent.keepAlive, "
             "http.request({host: '127.0.0.1', port: 1}).on('error', () => {}).agent.keepAlive]))")
    shown = subprocess.run(["node", "-e", probe], env={**os.environ, **env},
                           capture_output=True, text=True, check=True, timeout=30).stdout
    assert shown.strip() == "[false,false]"


def test_firebase_outlives_an_unhandled_rejection() -> None:
    """A rejected promise nobody handles (the Emulator Hub's flush of running functions after
    60 s) is logged, and the process goes on instead of taking every emulator down."""
    probe = ("Promise.reject(new Error('flush timed out')); "
             "setTimeout(() => console.log('still running'), 100)")
    done = subprocess.run(["node", "-e", probe], env={**os.environ, **stack.firebase_env()},
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and "still running" in done.stdout
    assert "flush timed out" in done.stderr


def test_the_newest_downloaded_firestore_jar_is_taken_by_its_version() -> None:
    """v1.19.10 is newer than v1.19.9, which a sort of the names would put last."""
    jars = [Path(f"cloud-firestore-emulator-v{v}.jar") for v in ("1.19.9", "1.19.10", "1.2.0")]
    assert max(jars, key=stack.jar_version).name == "cloud-firestore-emulator-v1.19.10.jar"
