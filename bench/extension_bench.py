"""Extension counters: clients of the Distributed Counter extension writing
`pages/{page}/_counter_shards_/{device}` through the stack's real trigger (the one on each
shard's creation), the moves it makes into the page's `visits` and `counters/visits:{page}`, and
the rollup publishing that counter; priced by `cost_model`, beside the extension's own design
priced alike (`extension_model`).

Each level writes one page of its own: `set({visits: Increment(1)}, merge=True)` into the shard
of a device (a UUID), each device writing the level's `per_device` times, `devices` of them at
once (a device that has written its last is replaced by a new one), at a fixed rate, WARM_S
unmeasured then the level's seconds. Lag: from a write's acknowledgement to a listener on
`counters/visits:{page}` showing a count that includes it (each write adds 1, so the k-th
acknowledged shows once the count is >= k; 0 when the listener showed it before the
acknowledgement arrived), and likewise to a listener on the page's `visits` (what the extension's
clients read). The level `busy_device` is one device writing twice a second for
EXTENSION_BUSY_DEVICE_S (5 minutes): its shard is never quiet, and what every other device reads
of it is the page's field, so its `lag_p99_s` is the page's (target: 2 s).

Cost is what the level did, counted from its effects, over the level's window (its first write
until everything is moved, the shards are gone and the rollup has recorded its usage):

- client writes: the benchmark's own;
- trigger invocations: "Beginning execution" lines of the trigger in the Functions emulator's log
  (.emulators/firebase.log) during the window; their compute from the "Finished ... in N ms"
  lines (start = when the line was read - N), billed as `cost_model.instance_seconds` at the
  triggers' deployment (the callables' global options: 1 vCPU, 512 MiB, 80 at once), each
  event's wait for its move added as its own request (the emulator's trigger waits in a thread
  and logs the wait; a deployed request waits itself);
- moves: committed moves that carried an amount are the `writes` of the counter's shards (each
  such move increments one: the page and a counter shard, two writes); deleted shards (and any
  shard version no client wrote: none, as every take deletes) from a poll of the page's shards
  every SHARD_POLL_S (a listener on them fell minutes behind and slowed the emulator's writes
  down, to lock timeouts); a shard gone is a move's delete, and each trigger invocation is a
  shard's creation, so the deletes billed are the larger of the two;
- the moves' reads: each move logs what its queries read (`extension.MOVED`, the trigger's and
  the sweep's alike: a move of the states events told of reads nothing, one whose told state was
  written since reads the page's shards, once an attempt), each query billed one read at least;
  and each scheduled sweep's query, as many of the page's shards as it held;
- configuration reads as `cost_model.write_path_usd` counts them (counter and P, each once per
  instance every 5 s at most, never more than one per move), task creations for the rollup's
  slots, the rollup's own recorded usage (internal/rollup_usage) and the Scheduler job's share.

Idle: IDLE_S with nothing written, first on the fresh stack: the rollup's recorded usage and the
sweep's one collection-group query a scheduled run, priced per month.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import multiprocessing
import os
import re
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cost_model
from cost_bench import scheduled_between, usage
from counter_bench import shard_writes
from counters_cli.load import percentile
from counting.features import declarations
from counting.features.collections import SHARDS
from counting.features.extension import MOVED, WAITED_IN_BACKGROUND
from counting.foundation import config
from google.api_core import exceptions as gexc
from google.cloud import firestore

OWN = declarations.Declared.of_codebase(declarations.CODEBASE)
VISITS = next(d for d in OWN.declarations if d.extension is not None)
assert VISITS.extension is not None
FIELD = VISITS.extension.field
PAGES = VISITS.documents.split("/")[0]
TRIGGER = next(w for w in OWN.watches_of(VISITS.name) if w.extension_shards).function_name
STATE = Path(__file__).resolve().parent.parent / ".emulators"
FUNCTIONS_LOG = STATE / "firebase.log"
SCHEDULER_LOG = STATE / "scheduler.log"

LEVEL_S = float(os.environ.get("EXTENSION_LEVEL_S", 180))
IDLE_S = float(os.environ.get("EXTENSION_IDLE_S", 300))
WARM_S = float(os.environ.get("EXTENSION_WARM_S", 15))
SENDERS = 64  # threads writing, each write one round trip (slow on a loaded emulator)
WRITE_ATTEMPTS = 5
SHOWN_TIMEOUT_S = 300.0  # after the load, for every write to show
DRAIN_TIMEOUT_S = 360.0  # then for the shards to be gone and the trigger quiet
LAG_TARGET_S = 1.5
BUSY_DEVICE_S = float(os.environ.get("EXTENSION_BUSY_DEVICE_S", 300))
BUSY_DEVICE_LAG_TARGET_S = 2.0  # the page's, p99
SHARD_POLL_S = 1.0  # how often the benchmark reads the page's shards (its count of the moves)


@dataclass(frozen=True)
class Level:
    name: str
    rate: float  # client writes a second, over one page
    devices: int  # devices writing at once, each `per_device` times, devices / rate apart
    seconds: float
    per_device: int = 4


LEVELS = tuple(level for level in (
    Level("trickle", 0.5, 4, LEVEL_S * 5 / 3),  # 1 write every 2 s; a device every 8 s
    Level("busy", 50.0, 200, LEVEL_S),  # a device every 4 s
    # One device writing twice a second for 5 minutes (its shard is never quiet): what every
    # other device reads of it is the page's field, so its lag is the page's.
    Level("busy_device", 2.0, 1, BUSY_DEVICE_S, per_device=10**9),
) if level.name in os.environ.get("EXTENSION_LEVELS", "trickle,busy,busy_device").split(","))


# --- The extension's design, priced -----------------------------------------------------------

# firestore-counter 0.2.15 (github.com/firebase/extensions, firestore-counter/extension.yaml and
# functions/src/*.ts). Its functions are first-generation Node.js functions without a memory
# setting: 256 MB, a sixth of a vCPU, one request at a time.
EXT_VCPU, EXT_GIB = cost_model.GEN1_VCPU_BY_MB[256], 256 / 1024
ONWRITE_RUN_S = 60.0  # index.ts: onWrite runs aggregateContinuously(..., 200, 60000): 60 s each
CONTROLLER_LIMIT = 200  # index.ts/controller.ts: aggregate in-line below 200 shards, else workers
WORKER_RUN_S = 45.0  # worker.ts WORKER_TIMEOUT_MS: each worker run, rescheduled back to back
WORKER_SHARDS = 100  # worker.ts SHARDS_LIMIT: the shards a worker's listener holds
# Aggregations: at most one a second (worker.ts: setInterval(maybeAggregate, 1000); the onWrite
# listener's aggregateOnce runs on a snapshot when none is in flight, a transaction of a few
# round trips: taken as one a second too, which bills the extension the fewest aggregations).
AGGREGATION_S = 1.0
# controllerCore's run when nothing is left to aggregate (one transaction: a read of its
# document, an empty query, a write): billed 0.2 s (two 100 ms steps; its cold starts more).
CONTROLLER_BILLED_S = 0.2


def extension_model(writes: int, load_s: float, window_s: float) -> dict[str, Any]:
    """What the Distributed Counter extension bills for `writes` client increments spread evenly
    over `load_s` seconds, each into a device's shard that the next aggregation takes (devices
    write less often than once a second), counted over `window_s` (the load and what follows
    it). Each term is named after the code that makes it; `terms` gives its count and price.

    Below CONTROLLER_LIMIT shards at once (rate x AGGREGATION_S), the onWrite function aggregates
    (controller mode); above, controllerCore starts workers (`workers` mode)."""
    rate = writes / load_s if load_s > 0 else 0.0
    present = rate * AGGREGATION_S  # shards written and not yet aggregated, at any instant
    workers = math.ceil(rate / WORKER_SHARDS) if present >= CONTROLLER_LIMIT else 0
    aggregations = min(float(writes), load_s / AGGREGATION_S)
    # Each aggregated shard is deleted ("Delete shards that have been aggregated").
    deletes = float(writes)
    # onWrite's trigger is document.write on `{collection}/{counter=**}/_counter_shards_/
    # {shardId}`: a client's write, and the aggregation's delete of the shard, each an event.
    onwrite_events = writes + deletes
    # One onWrite run holds its (only: maxInstances 1) instance for 60 s; while writes come at
    # least once a minute, one run follows another and the instance is billed all the time.
    onwrite_busy_s = min(writes * ONWRITE_RUN_S, load_s + ONWRITE_RUN_S) if writes else 0.0
    onwrite_runs = math.ceil(onwrite_busy_s / ONWRITE_RUN_S)
    controller_runs = window_s / cost_model.SCHEDULE_S  # controllerCore, every minute
    terms: dict[str, tuple[float, float]] = {  # name -> (count, unit price)
        "client_shard_writes": (writes, cost_model.WRITE),
        "onwrite_invocations": (onwrite_events, cost_model.INVOCATION),
        "onwrite_compute_s": (onwrite_busy_s, EXT_VCPU * cost_model.VCPU_S
                              + EXT_GIB * cost_model.GIB_S),
        # aggregateContinuously's query listener on the shards: a read per added or changed
        # shard (a deleted one is not billed), and each run's first snapshot (its controller
        # document, and the shards present).
        "listener_shard_reads": (writes, cost_model.READ),
        "listener_start_reads": (onwrite_runs * (1 + max(1.0, present)), cost_model.READ),
        # aggregateOnce's transaction: the controller document, the shards (each one it
        # aggregates), the counter document; then the counter's write, the controller document's
        # timestamp (which the run's controller listener reads back) and the shards' deletes.
        "tx_shard_reads": (deletes, cost_model.READ),
        "tx_controller_reads": (aggregations, cost_model.READ),
        "tx_counter_reads": (aggregations, cost_model.READ),
        "counter_writes": (aggregations, cost_model.WRITE),
        "controller_writes": (0.0 if workers else aggregations, cost_model.WRITE),
        "controller_listener_reads": (0.0 if workers else aggregations, cost_model.READ),
        "shard_deletes": (deletes, cost_model.DELETE),
        # controllerCore, every minute: an invocation, its transaction (controller document,
        # shard query: at least one read each; the timestamp's write), the Scheduler job.
        "controller_core_invocations": (controller_runs, cost_model.INVOCATION),
        "controller_core_compute_s": (controller_runs * CONTROLLER_BILLED_S,
                                      EXT_VCPU * cost_model.VCPU_S + EXT_GIB * cost_model.GIB_S),
        "controller_core_reads": (2 * controller_runs, cost_model.READ),
        "controller_core_writes": (controller_runs, cost_model.WRITE),
        "scheduler_job_months": (window_s / cost_model.MONTH_S, cost_model.SCHEDULER_JOB_MONTH),
        # Above the controller's limit: workers of 45 s runs back to back (each run's stats
        # write triggers the next: an invocation, a read and a write), each listening to its
        # slice (a read per shard change) and reading its metadata document per aggregation.
        "worker_invocations": (workers * load_s / WORKER_RUN_S, cost_model.INVOCATION),
        "worker_compute_s": (workers * load_s, EXT_VCPU * cost_model.VCPU_S
                             + EXT_GIB * cost_model.GIB_S),
        "worker_listener_reads": (float(writes) if workers else 0.0, cost_model.READ),
        "worker_metadata_reads": (workers * (aggregations + load_s / WORKER_RUN_S),
                                  cost_model.READ),
        "worker_stats_writes": (workers * load_s / WORKER_RUN_S, cost_model.WRITE),
    }
    priced = {name: {"count": count, "usd": count * price} for name, (count, price) in
              terms.items()}
    usd = sum(term["usd"] for term in priced.values())
    return {"mode": "workers" if workers else "controller", "writes": writes,
            "load_s": load_s, "window_s": window_s, "usd": usd,
            "usd_per_million_increments": cost_model.usd_per_million_increments(usd, writes)
            if writes else None,
            "usd_month": usd * cost_model.MONTH_S / window_s, "terms": priced}


def extension_idle_month() -> dict[str, Any]:
    """The extension's month with nothing written: controllerCore every minute."""
    idle = extension_model(0, 0.0, cost_model.MONTH_S)
    return {"usd_per_month_idle": idle["usd"], "terms": {
        name: term for name, term in idle["terms"].items() if term["count"]}}


# --- Observing the stack ----------------------------------------------------------------------


class LogTail:
    """The trigger's lines of the Functions emulator's log from now on, each with when it was
    read (polled every 50 ms)."""

    BEGIN = re.compile(r'Beginning execution of "[\w-]*-' + re.escape(TRIGGER) + '"')
    FINISH = re.compile(r'Finished "[\w-]*-' + re.escape(TRIGGER) + r'" in ([\d.]+)ms')
    # The moves (counting.features.extension) log a move that failed (the trigger's, or the
    # sweep's) with the page's path, and, in the emulator, how long each event's wait for its
    # move took (in a thread of its own: the emulator delivers events one at a time), which a
    # deployed request waits itself.
    FAILED = re.compile(r"could not move its shards")
    WAITED = re.compile(re.escape(WAITED_IN_BACKGROUND) + r" ([\d.]+) ms")
    # Each move (the trigger's, the sweep's) logs the page's path and what it read.
    MOVE = re.compile(r"(\S+): " + re.escape(MOVED) + r" (\d+) in (\d+) queries")

    def __init__(self, path: Path = FUNCTIONS_LOG) -> None:
        self.begun: list[float] = []
        self.finished: list[tuple[float, float]] = []  # (read at, duration s)
        self.waited: list[tuple[float, float]] = []  # (read at, an event's wait for its move)
        self.failed: list[dt.datetime] = []  # when a failed move's line was read
        self.move_reads: dict[str, int] = defaultdict(int)  # page path -> documents read
        self.in_flight = self.max_in_flight = 0
        self._path = path
        self._offset = path.stat().st_size if path.exists() else 0
        self._stop = threading.Event()
        self._rest = ""
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._poll()

    def _poll(self) -> None:
        with self._path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
        self._offset += len(data)
        now, wall = time.monotonic(), dt.datetime.now(dt.UTC)
        *lines, self._rest = (self._rest + data.decode(errors="replace")).split("\n")
        for line in lines:
            if self.BEGIN.search(line):
                self.begun.append(now)
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            elif found := self.FINISH.search(line):
                self.finished.append((now, float(found.group(1)) / 1000))
                self.in_flight = max(0, self.in_flight - 1)
            elif found := self.WAITED.search(line):
                self.waited.append((now, float(found.group(1)) / 1000))
            elif found := self.MOVE.search(line):
                page, read, queries = found.group(1), int(found.group(2)), int(found.group(3))
                # A query bills one read when it returns nothing.
                self.move_reads[page] += max(read, queries)
            elif self.FAILED.search(line):
                self.failed.append(wall)

    def quiet_for(self) -> float:
        """Seconds since the trigger's last line, when every run that began has finished."""
        if len(self.finished) < len(self.begun):
            return 0.0
        last = max([*self.begun, *(t for t, _ in self.finished + self.waited)],
                   default=-math.inf)
        return time.monotonic() - last

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    def requests(self) -> list[cost_model.Request]:
        """The trigger's requests as deployed: each event's run, then its wait for its move."""
        return [(read - duration, duration) for read, duration in self.finished + self.waited]


def scheduled_runs(since: dt.datetime, until: dt.datetime) -> list[dt.datetime]:
    """When the Scheduler stand-in's runs of `rollup` in [since, until) ended (the sweep is the
    last thing a run does)."""
    runs: list[dt.datetime] = []
    if not SCHEDULER_LOG.exists():
        return runs
    for line in SCHEDULER_LOG.read_text(errors="replace").splitlines():
        found = re.match(r"(\S+) .*HTTP \d+ \(([\d.]+) s\)", line)
        if not found:
            continue
        fired = dt.datetime.fromisoformat(found.group(1))
        if since <= fired < until:
            runs.append(fired + dt.timedelta(seconds=float(found.group(2))))
    return runs


@dataclass(frozen=True)
class Change:
    kind: str  # "ADDED", "MODIFIED", "REMOVED"
    shard: str
    value: int
    update_time: dt.datetime


def _plain(at: dt.datetime) -> dt.datetime:
    """A timestamp as a plain datetime (microseconds: the emulator's precision), picklable."""
    return dt.datetime(*at.utctimetuple()[:6], at.microsecond, tzinfo=dt.UTC)


def _listener_process(project: str, page_path: str, counter_path: str, out: Any,
                      done: Any) -> None:
    """The listeners on the counter and the page, and a poll of the page's shards every
    SHARD_POLL_S, in a process of their own (the writers' threads would starve them of the
    interpreter). Sends ("counter" | "page", monotonic time, value); ("shards", read time,
    changes, population): the changes between consecutive polls, from each one's whole result;
    ("restart", target) when a listener that closed (the client library's stops on some stream
    errors) is replaced."""
    db = firestore.Client(project=project)
    page = db.document(page_path)
    shards: dict[str, tuple[int, dt.datetime]] = {}

    def on_counter(docs: list[Any], changes: Any, read_time: Any) -> None:
        now = time.monotonic()
        for d in docs:
            if d.exists:
                out.put(("counter", now, int(d.get("count") or 0)))

    def on_page(docs: list[Any], changes: Any, read_time: Any) -> None:
        now = time.monotonic()
        for d in docs:
            if d.exists:
                out.put(("page", now, int((d.to_dict() or {}).get(FIELD) or 0)))

    def poll_shards() -> None:
        """The page's shards, polled: a listener on them falls minutes behind on the loaded
        emulator (a snapshot a change, seconds apart), which a poll of the whole set does not."""
        nonlocal shards
        found = list(page.collection(SHARDS).stream())
        read_time = _plain(found[0].read_time) if found else dt.datetime.now(dt.UTC)
        now = {d.id: (int((d.to_dict() or {}).get(FIELD) or 0), _plain(d.update_time))
               for d in found}
        seen = [Change("REMOVED", shard, value, at)
                for shard, (value, at) in shards.items() if shard not in now]
        for shard, (value, at) in now.items():
            if shard not in shards:
                seen.append(Change("ADDED", shard, value, at))
            elif shards[shard][1] != at:
                seen.append(Change("MODIFIED", shard, value, at))
        shards = now
        out.put(("shards", read_time, seen, len(found)))

    targets: list[tuple[Any, Callable[..., None]]] = [
        (db.document(counter_path), on_counter), (page, on_page)]
    watches = [target.on_snapshot(callback) for target, callback in targets]
    checked = time.monotonic()
    while not done.wait(max(0.0, checked + SHARD_POLL_S - time.monotonic())):
        checked = time.monotonic()
        poll_shards()
        for i, (target, callback) in enumerate(targets):
            if not watches[i].is_active:
                watches[i] = target.on_snapshot(callback)
                out.put(("restart", i))
    for watch in watches:
        watch.unsubscribe()
    out.put(("end",))


@dataclass
class Observed:
    """What `_listener_process` saw: (monotonic time, value) of the counter and the page, and
    the changes of the page's shards per poll (read time, changes)."""

    counter: list[tuple[float, int]] = field(default_factory=list)
    page: list[tuple[float, int]] = field(default_factory=list)
    shard_snapshots: list[tuple[dt.datetime, list[Change]]] = field(default_factory=list)
    population: int = 0
    restarts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def listen(self, db: firestore.Client, page: firestore.DocumentReference,
               counter: firestore.DocumentReference) -> Callable[[], None]:
        spawn = multiprocessing.get_context("spawn")
        out, done = spawn.Queue(), spawn.Event()
        child = spawn.Process(target=_listener_process, daemon=True, args=(
            db.project, page.path, counter.path, out, done))
        child.start()
        ready = threading.Event()

        def drain() -> None:
            while True:
                item = out.get()
                with self.lock:
                    if item[0] == "end":
                        return
                    if item[0] == "counter":
                        self.counter.append((item[1], item[2]))
                    elif item[0] == "page":
                        self.page.append((item[1], item[2]))
                    elif item[0] == "shards":
                        self.shard_snapshots.append((item[1], item[2]))
                        self.population = item[3]
                        ready.set()
                    elif item[0] == "restart":
                        self.restarts += 1

        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()
        ready.wait(120)  # the first poll of the shards is done: nothing written before

        def stop() -> None:
            done.set()
            drainer.join(60)
            child.join(30)

        return stop

    def first_at_least(self, series: str, value: int) -> float | None:
        with self.lock:
            return next((t for t, v in getattr(self, series) if v >= value), None)


def shown_lags(acks: list[float], seen: list[tuple[float, int]],
               measured_from: float) -> list[tuple[float, float]]:
    """(acknowledged - measured_from, lag) of each write acknowledged after `measured_from`: the
    k-th acknowledged (in order) is shown when the series first reaches k."""
    times, best = [], -1
    values: list[int] = []
    for t, value in seen:
        if value > best:  # the running maximum: when each value was first reached
            times.append(t)
            values.append(value)
            best = value
    lags = []
    for k, acked in enumerate(sorted(acks), start=1):
        i = bisect.bisect_left(values, k)
        if acked >= measured_from and i < len(values):
            lags.append((acked - measured_from, max(0.0, times[i] - acked)))
    return lags


@dataclass(frozen=True)
class Moves:
    """The moves' operations on the shards, counted from the polls of them and the moves' own
    log lines (see the module's docstring)."""

    zeroed: int  # shard versions no client wrote (none: every take deletes or is guarded)
    deleted: int
    created: int
    reads: int  # the moves' logged reads, and each sweep's query of the shards
    sweep_query_reads: int


def count_moves(snapshots: list[tuple[dt.datetime, list[Change]]],
                client_times: dict[str, list[dt.datetime]], sweeps: list[dt.datetime],
                move_reads: int) -> Moves:
    state: dict[str, int] = {}
    population: list[tuple[dt.datetime, int]] = []
    zeroed = created = deleted = 0
    for read_time, changes in snapshots:
        for change in changes:
            if change.kind == "REMOVED":
                state.pop(change.shard, None)
                deleted += 1
                continue
            created += change.kind == "ADDED"
            if change.update_time not in client_times.get(change.shard, []):
                zeroed += 1  # a version of a move's, not a client's
            state[change.shard] = change.value
        population.append((read_time, len(state)))
    times = [t for t, _ in population]

    def held(at: dt.datetime) -> int:
        """The page's shards as of the last snapshot read before `at`."""
        i = bisect.bisect_left(times, at)
        return population[i - 1][1] if i else 0

    sweep = sum(max(1, held(t)) for t in sweeps)
    return Moves(zeroed=zeroed, deleted=deleted, created=created, reads=move_reads + sweep,
                 sweep_query_reads=sweep)


# --- Our design, measured ----------------------------------------------------------------------


def ours_usd(*, writes: int, invocations: int, requests: list[cost_model.Request],
             commits: int, moves: Moves, rollup: dict[str, float], scheduled: float,
             window_s: float) -> dict[str, Any]:
    """The level's bill, term by term (count, usd), from what it counted."""
    instances = cost_model.writer_instances(requests) if requests else 1
    refreshes = instances * math.ceil(window_s / cost_model.CONFIG_CACHE_S)
    config_reads = 2 * min(commits, refreshes)  # the counter's configuration, and P
    trigger_s = cost_model.instance_seconds(requests, cost_model.CALLABLE_CONCURRENCY)
    terms: dict[str, tuple[float, float]] = {
        "client_shard_writes": (writes, cost_model.WRITE),
        "trigger_invocations": (invocations, cost_model.INVOCATION),
        "trigger_compute_s": (trigger_s, cost_model.CALLABLE_VCPU * cost_model.VCPU_S
                              + cost_model.CALLABLE_GIB * cost_model.GIB_S),
        "move_page_and_counter_writes": (2 * commits, cost_model.WRITE),
        "move_zeroings": (moves.zeroed, cost_model.WRITE),
        # Each invocation is a shard's creation, and every shard is gone at the end; a shard
        # created and deleted between two polls is missed by them.
        "move_deletes": (max(moves.deleted, invocations), cost_model.DELETE),
        "move_reads": (moves.reads, cost_model.READ),
        "config_reads": (config_reads, cost_model.READ),
        "task_creations": (cost_model.slot_tasks(rollup, scheduled) * instances,
                           cost_model.TASK_OPERATION),
        "scheduler_job_months": (window_s / cost_model.MONTH_S, cost_model.SCHEDULER_JOB_MONTH),
    }
    priced = {name: {"count": count, "usd": count * price} for name, (count, price) in
              terms.items()}
    priced["rollup"] = {"count": rollup["invocations"],
                        "usd": cost_model.rollup_usd(rollup, scheduled)}
    return {"usd": sum(term["usd"] for term in priced.values()), "terms": priced}


class Load:
    """The machine's 1-minute load average, sampled every 10 s while a phase runs (2 cores)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(10.0):
                return

    def figures(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {"load_mean": sum(self.samples) / len(self.samples),
                "load_max": max(self.samples), "cpus": float(os.cpu_count() or 0)}


def wait_for(done: Callable[[], bool], timeout_s: float, every_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True


def flush_usage(db: firestore.Client) -> None:
    """Wait until the rollup's usage is on record: a holder records at most every
    `usage_flush_s`, so wait that long, then for the next scheduled run (which records its own
    and what was pending)."""
    time.sleep(config.ROLLUP.usage_flush_s + 1)
    before = (usage(db).get("triggers") or {}).get("schedule") or 0
    wait_for(lambda: ((usage(db).get("triggers") or {}).get("schedule") or 0) > before,
             cost_model.SCHEDULE_S + 30, every_s=1.0)


def load(db: firestore.Client, level: Level) -> dict[str, Any]:
    page_id = f"bench-ext-{level.name}-{uuid.uuid4().hex[:6]}"
    page = db.collection(PAGES).document(page_id)
    counter_id = VISITS.counter_id(page_id)
    observed = Observed()
    stop = observed.listen(db, page, db.collection(config.COUNTERS).document(counter_id))
    tail = LogTail()
    machine = Load()
    warm = max(1, round(level.rate * WARM_S))
    total = warm + round(level.rate * level.seconds)
    devices: dict[tuple[int, int], str] = {}
    acks: list[float] = []
    latencies: list[float] = []
    write_errors: list[str] = []
    client_times: dict[str, list[dt.datetime]] = defaultdict(list)
    lock = threading.Lock()
    before = usage(db)
    since = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    measured_from = started + warm / level.rate

    def send(i: int) -> None:
        time.sleep(max(0.0, started + i / level.rate - time.monotonic()))
        key = (i % level.devices, i // level.devices // level.per_device)
        with lock:
            device = devices.setdefault(key, str(uuid.uuid4()))
        sent = time.monotonic()
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:  # the client library retries too; an SDK keeps a write until it lands
                result = page.collection(SHARDS).document(device).set(
                    {FIELD: firestore.Increment(1)}, merge=True)
                break
            except (gexc.Aborted, gexc.DeadlineExceeded, gexc.ServiceUnavailable) as error:
                with lock:
                    write_errors.append(f"{type(error).__name__}: {error}"[:200])
                if attempt == WRITE_ATTEMPTS:
                    return  # never acknowledged: not counted
        acked = time.monotonic()
        with lock:
            acks.append(acked)
            latencies.append(acked - sent)
            client_times[device].append(result.update_time)

    try:
        with ThreadPoolExecutor(SENDERS) as pool:
            for future in [pool.submit(send, i) for i in range(total)]:
                future.result()
        load_s = time.monotonic() - started
        written = len(acks)
        shown = wait_for(lambda: (observed.first_at_least("counter", written) is not None
                                  and observed.first_at_least("page", written) is not None),
                         SHOWN_TIMEOUT_S)
        shown_s = time.monotonic() - started - load_s
        shards = page.collection(SHARDS)
        drained = wait_for(lambda: tail.quiet_for() > 3.0 and not shards.limit(1).get(),
                           DRAIN_TIMEOUT_S, every_s=1.0)
        drained_s = time.monotonic() - started - load_s
        flush_usage(db)
        left = len(list(page.collection(SHARDS).stream()))
        after = usage(db)
        until = dt.datetime.now(dt.UTC)
        window_s = time.monotonic() - started
    finally:
        stop()
        tail.close()
    for times in client_times.values():
        times.sort()
    with observed.lock:
        counter_seen, page_seen = list(observed.counter), list(observed.page)
        snapshots = list(observed.shard_snapshots)
        listened, restarts = observed.population, observed.restarts
    lags = shown_lags(acks, counter_seen, measured_from)
    page_lags = shown_lags(acks, page_seen, measured_from)
    moves = count_moves(snapshots, client_times, scheduled_runs(since, until),
                        tail.move_reads.get(page.path, 0))
    commits = sum(shard_writes(db, counter_id))
    rollup = cost_model.usage_delta(before, after)
    scheduled = scheduled_between(before, after)
    requests = tail.requests()
    bill = ours_usd(writes=len(acks), invocations=len(tail.begun), requests=requests,
                    commits=commits, moves=moves, rollup=rollup, scheduled=scheduled,
                    window_s=window_s)
    model = extension_model(len(acks), load_s, window_s)
    measured = [lag for _, lag in lags]
    durations = sorted(d for _, d in requests)
    figures = {
        "rate": level.rate, "devices_at_once": level.devices,
        "writes_per_device": min(level.per_device, total), "seconds": level.seconds,
        "warm_s": WARM_S,
        "writes": len(acks), "achieved_rate": len(acks) / load_s,
        "lag_p99_s": percentile(measured, 99) if measured else None,
        "lag_p50_s": percentile(measured, 50) if measured else None,
        "lag_max_s": max(measured) if measured else None,
        "unseen": sum(1 for a in acks if a >= measured_from) - len(measured),
        "page_lag_p99_s": percentile([lag for _, lag in page_lags], 99) if page_lags else None,
        "page_lag_p50_s": percentile([lag for _, lag in page_lags], 50) if page_lags else None,
        "all_shown": shown, "shown_after_load_s": shown_s, "drained": drained,
        "drained_after_load_s": drained_s, "shards_left": left,
        "shard_listener_current": listened == left, "listener_restarts": restarts,
        "write_p50_s": percentile(latencies, 50),
        "write_errors": len(write_errors), "write_error_kinds": sorted(set(write_errors))[:3],
        "unacknowledged": total - len(acks),
        "window_s": window_s, "machine_load": machine.figures(),
        "usd_per_million_increments": cost_model.usd_per_million_increments(
            bill["usd"], len(acks)),
        "usd_month": bill["usd"] * cost_model.MONTH_S / window_s,
        "counted": {
            "trigger_invocations": len(tail.begun), "trigger_finished": len(tail.finished),
            "background_waits": len(tail.waited),
            "trigger_p50_s": durations[len(durations) // 2] if durations else None,
            "trigger_max_in_flight": tail.max_in_flight, "failed_moves": len(tail.failed),
            "trigger_max_s": durations[-1] if durations else None,
            "moves_committed": commits, "shards_created": moves.created,
            "shards_zeroed": moves.zeroed, "shards_deleted": moves.deleted,
            "move_reads": moves.reads, "sweep_query_reads": moves.sweep_query_reads,
            "rollup_usage": rollup,
            "scheduled_invocations": scheduled,
        },
        "terms": bill["terms"],
        "extension": model,
        "series": {"counter": lags, "page": page_lags},
    }
    print(f"{level.name}: {figures['achieved_rate']:.2f}/s, lag p99 {figures['lag_p99_s']} s "
          f"(page {figures['page_lag_p99_s']} s), ${figures['usd_per_million_increments']:.2f}/M"
          f" (extension ${model['usd_per_million_increments']:.2f}/M), "
          f"{len(tail.begun)} invocations, {commits} moves", flush=True)
    return figures


def idle(db: firestore.Client) -> dict[str, Any]:
    """IDLE_S with nothing written: the rollup's recorded usage and the sweep's query."""
    time.sleep(config.ROLLUP.usage_flush_s + 5)  # the stack's start is on record
    before = usage(db)
    since = dt.datetime.now(dt.UTC)
    machine = Load()
    time.sleep(IDLE_S)
    after = usage(db)
    rollup = cost_model.usage_delta(before, after)
    scheduled = scheduled_between(before, after)
    sweeps = len(scheduled_runs(since, dt.datetime.now(dt.UTC)))  # one read each: no shard
    usd = cost_model.rollup_usd(rollup, scheduled) + sweeps * cost_model.READ
    return {"idle_s": IDLE_S, "rollup_usage": rollup, "scheduled_invocations": scheduled,
            "sweep_reads": sweeps, "usd_per_month_idle": cost_model.month_usd(usd, IDLE_S),
            "machine_load": machine.figures()}


def code() -> dict[str, Any]:
    """The commit measured, and the files of functions/ that differ from it (the stack runs
    the working tree)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=STATE.parent).stdout.strip()

    return {"commit": git("rev-parse", "HEAD"),
            "functions_changed": git("status", "--porcelain", "--", "functions").splitlines()}


def run() -> dict[str, Any]:
    db = firestore.Client(project=os.environ["GCLOUD_PROJECT"])
    measured_code = code()
    rested = idle(db)  # first, on the fresh stack (as the cost group does)
    levels = {level.name: load(db, level) for level in LEVELS}
    theirs_idle = extension_idle_month()
    device = levels.pop("busy_device", None)
    met = {name: {"lag_p99_s": figures["lag_p99_s"] is not None
                  and figures["lag_p99_s"] <= LAG_TARGET_S,
                  "cheaper_than_extension": figures["usd_per_million_increments"]
                  < figures["extension"]["usd_per_million_increments"]}
           for name, figures in levels.items()}
    busy_device = {}
    if device is not None:
        # What other devices read of it is the page's field: its lag is the page's.
        lag = device["page_lag_p99_s"]
        busy_device = {"busy_device": {
            "lag_p99_s": lag, "counter_lag_p99_s": device["lag_p99_s"],
            "usd_per_million_increments": device["usd_per_million_increments"]}}
        met["busy_device"] = {"lag_p99_s": lag is not None and lag <= BUSY_DEVICE_LAG_TARGET_S}
        levels["busy_device"] = device
    return {
        **{name: {"lag_p99_s": figures["lag_p99_s"],
                  "page_lag_p99_s": figures["page_lag_p99_s"],
                  "usd_per_million_increments": figures["usd_per_million_increments"]}
           for name, figures in levels.items() if name != "busy_device"},
        **busy_device,
        "usd_per_month_idle": rested["usd_per_month_idle"],
        "extension": {
            **{name: {"usd_per_million_increments":
                      figures["extension"]["usd_per_million_increments"]}
               for name, figures in levels.items() if name != "busy_device"},
            "usd_per_month_idle": theirs_idle["usd_per_month_idle"],
        },
        "targets": {"lag_p99_s": LAG_TARGET_S, "usd_per_million_increments": "below the "
                    "extension's at the same level",
                    "busy_device": {"lag_p99_s": BUSY_DEVICE_LAG_TARGET_S}, "met": met},
        "levels": {name: {k: v for k, v in figures.items() if k != "series"}
                   for name, figures in levels.items()},
        "idle": rested,
        "extension_idle": theirs_idle,
        "code": measured_code,
        "code_at_end": code(),
        "series": {name: figures["series"] for name, figures in levels.items()},
    }
