"""The rollup's production cadence, measured through the stack's real triggers (the Functions
emulator serving `rollup` and `rolluptick`, the Cloud Tasks emulator, the Scheduler stand-in).

1. Steady load: STEADY_RATE increments/s through the `increment` callable for STEADY_S, spanning
   several handovers. Lag is acknowledgement -> the counter's listener showing it; a publish gap
   is the time between two updates of the counter document; handovers are the lease owner's
   changes, seen by a listener on the lease document. A gap counts only while an acknowledged
   increment waits for the next publish; pauses of the load itself are reported apart.
2. Idle: no writes for IDLE_S. What the rollup's invocations did meanwhile (internal/rollup_usage)
   is priced per month by `cost_model`.
3. Wake-up: the first increment after the idle period, then after WAKE_TRIALS - 1 shorter sleeps,
   until the rollup shows it.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cost_model
from callables import Callables, sign_up
from counter_bench import lag_figures
from counters_cli.load import percentile
from counting import cadence, config
from counting.lease import state_ref
from google.cloud import firestore

STEADY_RATE = 20.0
STEADY_S = float(os.environ.get("CADENCE_STEADY_S", 200))
CLIENTS = 4
IDLE_S = float(os.environ.get("CADENCE_IDLE_S", 600))
WAKE_TRIALS = 4
# Between the later trials: asleep, then this long more (a scheduler minute may come between).
SHORT_SLEEP_S = (15.0, 45.0, 75.0)


class Watch:
    """Listeners on the counter document and the lease: (time, count) and (time, owner)."""

    def __init__(self, db: firestore.Client, counter: str) -> None:
        self.counts: list[tuple[float, int]] = []
        self.owners: list[tuple[float, str | None]] = []
        self._lock = threading.Lock()
        self._watches = [
            db.collection(config.COUNTERS).document(counter).on_snapshot(self._on_count),
            state_ref(db).on_snapshot(self._on_lease),
        ]

    def _on_count(self, docs: list[Any], changes: Any, read_time: Any) -> None:
        now = time.monotonic()
        with self._lock:
            self.counts += [(now, int(doc.get("count") or 0)) for doc in docs if doc.exists]

    def _on_lease(self, docs: list[Any], changes: Any, read_time: Any) -> None:
        now = time.monotonic()
        with self._lock:
            for doc in docs:
                owner = (doc.to_dict() or {}).get("owner")
                if owner and (not self.owners or self.owners[-1][1] != owner):
                    self.owners.append((now, owner))

    def shown(self, value: int, after: float) -> float | None:
        with self._lock:
            return next((t for t, count in self.counts if count >= value and t >= after), None)

    def close(self) -> None:
        for watch in self._watches:
            watch.unsubscribe()  # type: ignore[no-untyped-call]


def wait_shown(watch: Watch, value: int, after: float, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = watch.shown(value, after)
        if shown is not None:
            return shown
        time.sleep(0.02)
    return None


def wait_asleep(db: firestore.Client, timeout_s: float = 120.0) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        state = state_ref(db).get().to_dict() or {}
        if state.get("awake") is False and state.get("owner") is None:
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(f"the rollup did not fall asleep within {timeout_s:.0f} s")


def usage(db: firestore.Client) -> dict[str, Any]:
    return cadence.usage_ref(db).get().to_dict() or {}


def steady(admin: Callables, counter: str, watch: Watch) -> dict[str, Any]:
    acks: list[float] = []
    latencies: list[float] = []
    requests: list[tuple[float, float]] = []  # (start, duration) of each increment, for pricing
    lock = threading.Lock()
    interval = CLIENTS / STEADY_RATE
    began = time.monotonic()
    stop_at = began + STEADY_S

    def client() -> None:
        caller = Callables(admin.token)
        next_at = time.monotonic()
        while next_at < stop_at:
            sent = time.monotonic()
            caller.call("increment", counter=counter, request_id=uuid.uuid4().hex)
            acked = time.monotonic()
            with lock:
                acks.append(acked)
                latencies.append(acked - sent)
                requests.append((sent, acked - sent))
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    with ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(client) for _ in range(CLIENTS)]:
            future.result()
    wait_shown(watch, len(acks), began, 30.0)
    acks.sort()
    lags: list[tuple[float, float]] = []
    for i, acked in enumerate(acks, start=1):
        shown = watch.shown(i, acked)
        if shown is not None:
            lags.append((acked - began, shown - acked))
    # A publish gap counts only while the rollup had something to publish: an increment
    # acknowledged in it that the previous publish did not show yet (a pause of the load
    # generator is not a gap). From the rollup's first publish on (the counter starts at 0;
    # before that the rollup was waking up).
    publishes = [(t, count) for t, count in watch.counts if count > 0
                 and began <= t <= stop_at + 5]
    gaps = [(b - a, a - began) for (a, shown), (b, _) in itertools.pairwise(publishes)
            if any(a < acked < b for acked in acks[shown:])]
    pauses = [b - a for a, b in itertools.pairwise(acks)]
    handovers = [t - began for t, _ in watch.owners if began < t <= stop_at]
    return {
        "increments": len(acks),
        "achieved_rate": len(acks) / STEADY_S,
        **lag_figures([lag for _, lag in lags], len(acks)),
        "max_publish_gap_s": max(gap for gap, _ in gaps),
        "max_load_pause_s": max(pauses),
        # The longest gaps and when they began (seconds into the run), to set beside handovers.
        "longest_gaps": [[round(gap, 2), round(at, 1)] for gap, at in sorted(gaps)[-5:]],
        "handovers": len(handovers),
        "callable_p50_s": percentile(latencies, 50),
        "requests": requests,
        "lags": lags,
        "handover_times_s": handovers,
    }


def first_after_idle(admin: Callables, counter: str, watch: Watch, target: int) -> float:
    sent = time.monotonic()
    admin.call("increment", counter=counter, request_id=uuid.uuid4().hex)
    shown = wait_shown(watch, target, sent, 60.0)
    return math.inf if shown is None else shown - sent


def run() -> dict[str, Any]:
    db = firestore.Client(project=os.environ["GCLOUD_PROJECT"])
    admin = Callables(sign_up({"admin": True}).id_token)
    counter = f"bench-cadence-{uuid.uuid4().hex[:8]}"
    admin.call("create_counter", counter=counter, shards=40)
    watch = Watch(db, counter)
    try:
        before, from_s = usage(db), time.monotonic()
        load = steady(admin, counter, watch)
        during, steady_s = usage(db), time.monotonic() - from_s
        print(f"steady: p99 lag {load['lag_p99_s']:.2f} s, max gap "
              f"{load['max_publish_gap_s']:.2f} s, {load['handovers']} handovers", flush=True)
        wait_asleep(db)
        idle_from = usage(db)
        print(f"asleep; idle for {IDLE_S:.0f} s", flush=True)
        time.sleep(IDLE_S)
        idle_to = usage(db)
        target = load["increments"]
        wakes = []
        for trial in range(WAKE_TRIALS):
            if trial:
                wait_asleep(db)
                time.sleep(SHORT_SLEEP_S[(trial - 1) % len(SHORT_SLEEP_S)])
            target += 1
            wakes.append(first_after_idle(admin, counter, watch, target))
            print(f"wake-up {trial + 1}: {wakes[-1]:.2f} s", flush=True)
    finally:
        watch.close()
    idle = cost_model.usage_delta(idle_from, idle_to)
    steady_rollup = cost_model.usage_delta(before, during)
    # Asleep, every invocation was the scheduler's; under load, about one a minute was.
    idle_usd = cost_model.rollup_usd(idle, scheduled=idle["invocations"])
    scheduled = steady_s / cost_model.SCHEDULE_S
    rollup_usd = cost_model.rollup_usd(steady_rollup, scheduled)
    write_path_usd = cost_model.write_path_usd(
        load["requests"], cost_model.slot_tasks(steady_rollup, scheduled), counters=1)
    return {
        **{k: v for k, v in load.items() if k not in ("lags", "handover_times_s", "requests")},
        "first_after_idle_s": max(wakes),
        "wake_trials_s": wakes,
        "idle_s": IDLE_S,
        "idle_usage": idle,
        "idle_usd_month": cost_model.month_usd(idle_usd, IDLE_S),
        "usd_per_million_increments": cost_model.usd_per_million_increments(
            write_path_usd + rollup_usd, load["increments"]),
        "rollup_usd_per_million": cost_model.usd_per_million_increments(
            rollup_usd, load["increments"]),
        "steady_rollup_usage": steady_rollup,
        "lags": load["lags"],
        "handover_times_s": load["handover_times_s"],
    }
