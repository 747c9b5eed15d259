"""What the counters cost, and how fresh they are, at four levels of traffic, measured through
the stack's real triggers (the `increment` callable, `rolluptick` delivered by the Cloud Tasks
emulator, `rollup` fired by the Scheduler stand-in) and priced by `cost_model`.

Each loaded level sends increments (each with a request id) at a fixed rate, round robin over
its counters, for WARM_S unmeasured (the emulator's workers start, the rollup meets the
counters), then for at least three minutes measured; lag is acknowledgement -> a listener on
the counters showing it. The rollup's figures are what it recorded in internal/rollup_usage over
the level: a holder records at most every `usage_flush_s`, so after the load the level waits
that long and makes one more increment, whose tick records the rest (it is counted in the
level). Idle: IDLE_S with nothing written, priced per month, and the first increment after it,
IDLE_TRIALS times (`first_after_idle_s` is the worst), the emulator's workers started by one
increment before (`first_on_fresh_stack_s`: its wait, two workers' start). Idle comes first,
on the fresh stack:
after the levels, the scheduled runs go on sweeping what they wrote (5.5 minutes) and shrinking
and folding their counters (after a 10-minute cool-down), which is the levels' cost, not idle's.

`*_usd_month` is the rollup's month at that level (compute, invocations, its Firestore
operations and Cloud Tasks operations, the Scheduler job); `*_total_usd_month` adds the write
path (the callables, their shard writes, request markers and the markers' TTL deletes).
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import cost_model
from callables import Callables, sign_up
from counter_bench import lag_figures
from counting.foundation import config
from counting.foundation.config import Names
from counting.rollup import cadence
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath

NAMES = Names()  # the collection ids of the default placement, which these run on

LEVEL_S = float(os.environ.get("COST_LEVEL_S", 180))
IDLE_S = float(os.environ.get("COST_IDLE_S", 600))
# At least three: one trial is one draw of where the wake-up fell (see rollup_lag).
IDLE_TRIALS = max(3, int(os.environ.get("COST_IDLE_TRIALS", 3)))
SENDERS = 16  # the Functions emulator starts a worker process per request in flight
WARM_S = 15.0  # each level first runs this long unmeasured: workers started, counters met


@dataclass(frozen=True)
class Level:
    name: str
    rate: float  # increments a second
    counters: int
    seconds: float


LEVELS = (
    Level("trickle", 0.1, 1, LEVEL_S * 5 / 3),  # 300 s: 30 increments
    Level("steady", 1.0, 1, LEVEL_S),
    Level("busy", 100.0, 100, LEVEL_S),
    Level("hot", 100.0, 1, LEVEL_S),  # one counter at 100/s: the lag of a viral post
)


class Watch:
    """One listener on every counter whose id starts with `prefix`: (time, count) per counter."""

    def __init__(self, db: firestore.Client, prefix: str) -> None:
        self.counts: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self._lock = threading.Lock()
        ids = FieldPath.document_id()
        coll = db.collection(config.COUNTERS)
        query = (coll.where(filter=FieldFilter(ids, ">=", coll.document(prefix)))
                 .where(filter=FieldFilter(ids, "<", coll.document(prefix + "~"))))
        self._watch = query.on_snapshot(self._on)

    def _on(self, docs: list[Any], changes: Any, read_time: Any) -> None:
        now = time.monotonic()
        with self._lock:
            for change in changes:
                doc = change.document
                self.counts[doc.id].append((now, int(doc.get("count") or 0)))

    def shown(self, counter: str, value: int, after: float) -> float | None:
        with self._lock:
            return next((t for t, count in self.counts[counter] if count >= value and t >= after),
                        None)

    def close(self) -> None:
        self._watch.unsubscribe()  # type: ignore[no-untyped-call]


def wait_shown(watch: Watch, counter: str, value: int, after: float,
               timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = watch.shown(counter, value, after)
        if shown is not None:
            return shown
        time.sleep(0.02)
    return None


def usage(db: firestore.Client) -> dict[str, Any]:
    return usage_at(db)[0]


def usage_at(db: firestore.Client) -> tuple[dict[str, Any], float]:
    """The rollup's usage on record, and when it was recorded (epoch seconds; 0: never): a
    holder records it every `usage_flush_s`, so it leaves out the ticks since."""
    snapshot = cadence.usage_ref(db, NAMES).get()
    return snapshot.to_dict() or {}, snapshot.update_time.timestamp() if snapshot.exists else 0.0


def scheduled_between(before: dict[str, Any], after: dict[str, Any]) -> float:
    return float(((after.get("triggers") or {}).get("schedule") or 0)
                 - ((before.get("triggers") or {}).get("schedule") or 0))


def record_pending(db: firestore.Client, admin: Callables, counter: str,
                   watch: Watch, value: int) -> None:
    """Make the stack's tick holder record what it has pending: one more increment after
    `usage_flush_s`, and wait until its invocation is on record."""
    time.sleep(config.ROLLUP.usage_flush_s + 1)
    before = usage(db).get("invocations") or 0
    sent = time.monotonic()
    admin.call("increment", counter=counter, request_id=uuid.uuid4().hex)
    wait_shown(watch, counter, value, sent, 30)
    deadline = time.monotonic() + 30
    while (usage(db).get("invocations") or 0) <= before and time.monotonic() < deadline:
        time.sleep(0.2)


def load(db: firestore.Client, admin: Callables, level: Level) -> dict[str, Any]:
    prefix = f"bench-cost-{level.name}-{uuid.uuid4().hex[:6]}-"
    names = [f"{prefix}{n:03d}" for n in range(level.counters)]
    for name in names:
        admin.call("create_counter", counter=name)
    watch = Watch(db, prefix)
    acks: dict[str, list[float]] = defaultdict(list)
    requests: list[tuple[float, float]] = []
    lock = threading.Lock()
    callers = [Callables(admin.token) for _ in range(SENDERS)]
    warm = max(1, round(level.rate * WARM_S))
    total = warm + round(level.rate * level.seconds)
    started = time.monotonic()
    before: dict[str, Any] = {}
    began, recorded = math.inf, 0.0
    acked_at: list[float] = []  # every increment's, warm-up too (epoch seconds)

    def send(i: int) -> None:
        nonlocal before, began, recorded
        time.sleep(max(0.0, started + i / level.rate - time.monotonic()))
        if i == warm:
            (before, recorded), began = usage_at(db), time.monotonic()
        counter = names[i % len(names)]
        sent = time.monotonic()
        callers[i % SENDERS].call("increment", counter=counter, request_id=uuid.uuid4().hex)
        acked = time.monotonic()
        with lock:
            acked_at.append(time.time())
        if i >= warm:
            with lock:
                acks[counter].append(acked)
                requests.append((sent, acked - sent))

    try:
        with ThreadPoolExecutor(SENDERS) as pool:
            for future in [pool.submit(send, i) for i in range(total)]:
                future.result()
        sent_s = time.monotonic() - began
        lags: list[tuple[float, float]] = []
        for n, counter in enumerate(names):
            times = sorted(acks[counter])
            earlier = len(range(n, warm, len(names)))  # its warm-up increments
            wait_shown(watch, counter, earlier + len(times), began, 30)
            for k, acked in enumerate(times, start=earlier + 1):
                shown = watch.shown(counter, k, acked)
                if shown is not None:
                    lags.append((acked - began, shown - acked))
        record_pending(db, admin, names[0], watch,
                       len(range(0, warm, len(names))) + len(acks[names[0]]) + 1)
    finally:
        watch.close()
    after = usage(db)
    rollup = cost_model.usage_delta(before, after)
    # The rollup's usage from its record before the window (up to `usage_flush_s` into the
    # warm-up) to the one after: its cost is that of the increments since (the last one, of
    # `record_pending`, included), not of the window's alone (a 60 s run overstated it by 12%).
    rolled = 1 + sum(1 for at in acked_at if at > recorded)
    share = len(requests) / rolled  # of the usage on record: the window's increments'
    scheduled = scheduled_between(before, after)
    rollup_usd = cost_model.rollup_usd(rollup, scheduled) * share
    slots = cost_model.slot_tasks(rollup, scheduled) * share
    write_usd = cost_model.write_path_usd(requests, slots, len(names))
    window = level.seconds
    figures = {
        "rate": level.rate, "counters": level.counters, "seconds": window,
        "increments": len(requests), "achieved_rate": len(requests) / sent_s,
        **lag_figures([lag for _, lag in lags], len(requests)),
        "rollup_usage": rollup, "rollup_increments": rolled, "scheduled_invocations": scheduled,
        "callable_p50_s": sorted(d for _, d in requests)[len(requests) // 2],
        "usd_month": cost_model.month_usd(rollup_usd, window),
        "total_usd_month": cost_model.month_usd(rollup_usd + write_usd, window),
        "rollup_usd_per_million": cost_model.usd_per_million_increments(
            rollup_usd, len(requests)),
        "usd_per_million_increments": cost_model.usd_per_million_increments(
            rollup_usd + write_usd, len(requests)),
        # Each counter changes in every second it is written: min(its rate, 1) seconds a second.
        "floor_usd_per_million": cost_model.usd_per_million_increments(
            cost_model.floor_usd(len(requests), window * level.counters
                                 * min(1.0, level.rate / level.counters)), len(requests)),
        "compute_floor_usd_per_million": cost_model.usd_per_million_increments(
            cost_model.compute_floor_usd(requests), len(requests)),
        "lags": lags,
    }
    print(f"{level.name}: {figures['achieved_rate']:.2f}/s, lag p99 {figures['lag_p99_s']:.2f} s,"
          f" rollup ${figures['usd_month']:.2f}/month, all ${figures['total_usd_month']:.2f}/month,"
          f" ${figures['usd_per_million_increments']:.2f}/M", flush=True)
    return figures


def idle(db: firestore.Client, admin: Callables) -> dict[str, Any]:
    """IDLE_TRIALS idle spells of IDLE_S, each ended by one increment: the rollup's cost while
    idle, and how long each first increment takes to show."""
    counter = f"bench-cost-idle-{uuid.uuid4().hex[:6]}-"
    admin.call("create_counter", counter=counter)
    watch = Watch(db, counter)
    spent: dict[str, float] = defaultdict(float)
    firsts: list[float] = []
    try:
        # The fresh stack's first increment starts the emulator's workers of `increment` and
        # `rolluptick` (a Python process each, ~1.5 s of imports): the stack's start, not idle's.
        sent = time.monotonic()
        admin.call("increment", counter=counter, request_id=uuid.uuid4().hex)
        shown = wait_shown(watch, counter, 1, sent, 60)
        cold = math.inf if shown is None else shown - sent
        print(f"the fresh stack's first increment showed after {cold:.2f} s", flush=True)
        for trial in range(IDLE_TRIALS):
            time.sleep(config.ROLLUP.usage_flush_s + 5)  # the last invocations are recorded
            before = usage(db)
            time.sleep(IDLE_S)
            after = usage(db)
            for key, value in cost_model.usage_delta(before, after).items():
                spent[key] += value
            spent["scheduled"] += scheduled_between(before, after)
            sent = time.monotonic()
            admin.call("increment", counter=counter, request_id=uuid.uuid4().hex)
            shown = wait_shown(watch, counter, trial + 2, sent, 60)
            firsts.append(math.inf if shown is None else shown - sent)
            print(f"idle {trial + 1}: {IDLE_S:.0f} s, then the first increment showed after "
                  f"{firsts[-1]:.2f} s", flush=True)
    finally:
        watch.close()
    usd = cost_model.rollup_usd(spent, spent["scheduled"])
    return {"idle_s": IDLE_S * IDLE_TRIALS, "idle_usage": dict(spent),
            "idle_usd_month": cost_model.month_usd(usd, IDLE_S * IDLE_TRIALS),
            "first_after_idle_s": max(firsts), "first_after_idle_trials_s": firsts,
            "first_on_fresh_stack_s": cold}


def run() -> dict[str, Any]:
    db = firestore.Client(project=os.environ["GCLOUD_PROJECT"])
    admin = Callables(sign_up({"admin": True}).id_token)
    # Idle first: after the levels, the scheduled runs would still be shrinking and folding
    # their counters (10 minutes after their load ends), which is not what idle costs.
    rested = idle(db, admin)
    levels = {level.name: load(db, admin, level) for level in LEVELS}
    busy = levels["busy"]
    return {
        **{f"{name}_usd_month": figures["usd_month"] for name, figures in levels.items()},
        "idle_usd_month": rested["idle_usd_month"],
        **{f"{name}_total_usd_month": figures["total_usd_month"]
           for name, figures in levels.items()},
        "rollup_usd_per_million": busy["rollup_usd_per_million"],
        "usd_per_million_increments": busy["usd_per_million_increments"],
        "floor_usd_per_million": busy["floor_usd_per_million"],
        "compute_floor_usd_per_million": busy["compute_floor_usd_per_million"],
        **{f"lag_p99_s_{name}": figures["lag_p99_s"] for name, figures in levels.items()},
        "first_after_idle_s": rested["first_after_idle_s"],
        "levels": {name: {k: v for k, v in figures.items() if k != "lags"}
                   for name, figures in levels.items()},
        "idle": rested,
        "lags": {name: figures["lags"] for name, figures in levels.items()},
    }
