"""The rollup under faults, through the stack's real triggers: ~50 increments/s over 20 counters
(autoscaling active) for LOAD_S while the rollup's holder is paused (SIGSTOP 15 s), killed
(SIGKILL), Firestore is made unreachable (its emulator paused 70 s) and the rollup's triggers are
delivered twice (two tasks and two scheduler executions at once).

Clients retry a failed increment with the same request_id until it is acknowledged, as the web
client does, so every increment is acknowledged exactly once. Afterwards, per counter: the
strong sum against the acknowledged increments, then (after 10 s of quiet) the rollup against
the strong sum. `lost` and `doubled` add up the shortfalls and excesses of both comparisons.
Recovery is the time from the end of a fault until every counter's rollup shows what was
acknowledged by then.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from callables import Callables, CallError, sign_up
from counting.features import counter_refs, counters
from counting.foundation import config
from counting.foundation.config import Names, Placement
from counting.rollup import status
from counting.rollup.lease import state_ref
from counting.writepath import waking
from google.cloud import firestore

NAMES = Names()  # the collection ids of the default placement, which these run on

COUNTERS = 20
RATE = 50.0
CLIENTS = 10
LOAD_S = 320.0
QUIET_S = 10.0
RETRY_FOR_S = 240.0  # an increment is retried (same request_id) this long at most
# Seconds into the load: (start, what).
FAULTS = [(40.0, "pause_holder"), (100.0, "kill_holder"), (150.0, "pause_firestore"),
          (260.0, "duplicate_triggers")]
PAUSE_HOLDER_S = 15.0
PAUSE_FIRESTORE_S = 70.0


class Load:
    """Clients sending increments at RATE, each retried until acknowledged."""

    def __init__(self, token: str, names: list[str]) -> None:
        self.token = token
        self.names = names
        self.acked: dict[str, int] = defaultdict(int)
        self.retries = 0
        self.unresolved = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def client(self, seed: int) -> None:
        caller = Callables(self.token)
        rng = random.Random(seed)
        interval = CLIENTS / RATE
        next_at = time.monotonic()
        while not self.stop.is_set():
            counter, request = rng.choice(self.names), uuid.uuid4().hex
            if self.send(caller, counter, request):
                with self.lock:
                    self.acked[counter] += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    def send(self, caller: Callables, counter: str, request: str) -> bool:
        give_up = time.monotonic() + RETRY_FOR_S
        while time.monotonic() < give_up:
            try:
                caller.call("increment", counter=counter, request_id=request)
                return True  # applied now, or already (a retry of an applied one)
            except (CallError, requests.RequestException):
                with self.lock:
                    self.retries += 1
                time.sleep(0.5)
        with self.lock:
            self.unresolved += 1
        return False

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.acked)


def holder_pid(db: firestore.Client) -> int | None:
    owner = (state_ref(db, NAMES).get().to_dict() or {}).get("owner")
    return int(owner.rsplit("-", 2)[1]) if owner else None


def firestore_pid() -> int:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "java" in text and "firestore" in text.lower() and "--port" in text:
            return int(cmdline.parent.name)
    raise RuntimeError("no Firestore emulator process found")


def wait_holder(db: firestore.Client) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pid = holder_pid(db)
        if pid is not None:
            return pid
        time.sleep(0.2)
    raise RuntimeError("no rollup holder within 60 s")


def rollup_counts(db: firestore.Client, names: list[str]) -> dict[str, int]:
    refs = [counter_refs.counter_ref(db, NAMES, name) for name in names]
    return {s.id: int((s.to_dict() or {}).get("count") or 0) for s in db.get_all(refs)}


def recovery(db: firestore.Client, names: list[str], load: Load, ended: float) -> float:
    """Seconds from `ended` until every rollup shows what was acknowledged at `ended`."""
    target = load.snapshot()
    while time.monotonic() - ended < 180:
        shown = rollup_counts(db, names)
        if all(shown[name] >= target.get(name, 0) for name in names):
            return time.monotonic() - ended
        time.sleep(0.25)
    return float("inf")


def inject(kind: str, db: firestore.Client) -> float:
    """Do one fault; returns when it ended (monotonic)."""
    if kind == "pause_holder":
        pid = wait_holder(db)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(PAUSE_HOLDER_S)
        os.kill(pid, signal.SIGCONT)
    elif kind == "kill_holder":
        os.kill(wait_holder(db), signal.SIGKILL)
    elif kind == "pause_firestore":
        pid = firestore_pid()
        os.kill(pid, signal.SIGSTOP)
        time.sleep(PAUSE_FIRESTORE_S)
        os.kill(pid, signal.SIGCONT)
    elif kind == "duplicate_triggers":
        url = f"{os.environ['COUNTERS_FUNCTIONS_URL']}/rollup-0"
        headers = {"X-CloudScheduler-JobName": "firebase-schedule-rollup-us-central1"}
        def fire() -> None:
            requests.post(url, json={}, headers=headers, timeout=config.ROLLUP_TIMEOUT_S)

        def enqueue() -> None:
            waking.enqueue_tick(db, Placement(), "chaos")  # unnamed: delivered at once, twice

        with ThreadPoolExecutor(4) as pool:
            for future in [pool.submit(deliver) for deliver in (enqueue, enqueue, fire, fire)]:
                future.result()
    return time.monotonic()


def run() -> dict[str, Any]:
    db = firestore.Client(project=os.environ["GCLOUD_PROJECT"])
    token = sign_up({"admin": True}).id_token
    admin = Callables(token)
    tag = uuid.uuid4().hex[:6]
    names = [f"chaos-{tag}-{n}" for n in range(COUNTERS)]
    for name in names:
        admin.call("create_counter", counter=name, shards=1)
    load = Load(token, names)
    began = time.monotonic()
    backlog: list[tuple[float, int]] = []  # (seconds in, acknowledged but not in the rollup)

    def sample() -> None:
        while not load.stop.is_set():
            with_acks, shown = load.snapshot(), rollup_counts(db, names)
            backlog.append((time.monotonic() - began,
                            sum(max(0, with_acks.get(n, 0) - shown[n]) for n in names)))
            time.sleep(0.5)

    pool = ThreadPoolExecutor(CLIENTS + 1)
    workers = [pool.submit(load.client, seed) for seed in range(CLIENTS)]
    sampler = pool.submit(sample)
    faults: list[dict[str, Any]] = []
    for at, kind in FAULTS:
        time.sleep(max(0.0, began + at - time.monotonic()))
        print(f"fault: {kind} at {time.monotonic() - began:.0f} s", flush=True)
        started = time.monotonic() - began
        ended = inject(kind, db)
        recovered = recovery(db, names, load, ended)
        faults.append({"kind": kind, "at_s": round(started, 1),
                       "ended_s": round(ended - began, 1), "recovery_s": round(recovered, 2)})
        print(f"  recovered in {recovered:.1f} s", flush=True)
    time.sleep(max(0.0, began + LOAD_S - time.monotonic()))
    load.stop.set()
    for worker in workers:
        worker.result()
    sampler.result()
    pool.shutdown()
    time.sleep(QUIET_S)
    acked = load.snapshot()
    strong = {name: counters.get_count(db, NAMES, name, "strong").count for name in names}
    shown = rollup_counts(db, names)
    lost = sum(max(0, acked.get(n, 0) - strong[n]) + max(0, strong[n] - shown[n]) for n in names)
    doubled = sum(max(0, strong[n] - acked.get(n, 0)) + max(0, shown[n] - strong[n])
                  for n in names)
    shards = [int((s.to_dict() or {}).get("num_shards") or 0)
              for s in db.get_all([counter_refs.counter_ref(db, NAMES, n) for n in names])]
    total = sum(acked.values())
    return {
        "increments": total,
        "achieved_rate": total / LOAD_S,
        "counters": COUNTERS,
        "lost": lost,
        "doubled": doubled,
        "unresolved": load.unresolved,
        "retries": load.retries,
        "faults": len(faults),
        "max_recovery_s": max(f["recovery_s"] for f in faults),
        "fault_log": faults,
        "max_num_shards": max(shards),
        "health_errors": status.read_status(db, NAMES).errors,
        "backlog": backlog,
    }
