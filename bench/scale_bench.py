"""Does the rollup grow with its partitions? What one holder absorbs, what P holders absorb side
by side, how evenly the partitions share the counters, the lag at 1,000 distinct counters a
second, and 50,000 counters changed once (docs/benchmarks.md, "Scale").

Each part runs on a project of its own, where no trigger of the stack ticks; each capacity run
and the lag run on a Firestore emulator of its own, warmed first (`fresh_emulator`). Its holders are
`cadence.Holder`s ticked on command, or `cadence.loop`s ticking every second, each in a spawned
process with its own Firestore client: holders in threads of one process would share one GIL.
Writes go through the domain's batch increment (`counters.increment_many`, at most MAX_BATCH
distinct counters a commit) from a thread pool; the commit time of each comes from the hook every
domain write path ends in (the waker of the writer's context). Only the public pieces are used
(create_counter, increment_many, Holder/loop with a partition, TickStats,
repartition.change/home_of/parts), so that the rollup's internals may change under the benchmark.

Sizes come from the environment (SCALE_COUNTERS, SCALE_DISTINCT, SCALE_LAG_S, SCALE_RATE,
SCALE_ROUNDS; SCALE_WHY says why they were scaled down); the figures say which were used.
SCALE_PARTS (a comma-separated subset of PARTS) runs some parts alone; their figures replace
those of the same parts in the saved bench/results/scale.json, whose other parts are kept.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import random
import statistics
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import capacity_model
import stack
from counter_bench import own_db
from counters_cli.load import percentile
from counting.features import counter_refs, counters, shard_choice
from counting.features.context import Context
from counting.features.sequences.caching import SequenceCache
from counting.foundation import config
from counting.foundation.config import AutoscaleParams, Names
from counting.rollup import cadence, repartition
from counting.rollup.lease import Lease, state_ref
from counting.rollup.ledger import Ledger, ShardValue
from counting.rollup.store import Store
from counting.rollup.tick import Rollup, TickStats, to_micros
from counting.writepath import partitions, waking
from counting.writepath.context import Writing
from google.cloud import firestore

NAMES = Names()  # the collection ids of the default placement, which these run on

# Counters of a capacity run, at the Capacity table's shape: CAPACITY_SHARDS shards each (round
# robin), every one written when the counter changes (CAPACITY_TOUCHED increments). The emulator
# answers each holder's change query with 16 scans of every shard (below), which costs each tick
# about 0.15 ms of CPU per shard document on a slow day here. At 250 counters of 8 shards every
# P's largest step ticked within the period (P = 1: 0.12 s empty, 0.69 s with 250 changed): lower
# bounds all; at 750 one holder's empty tick took 0.57 s in a round, over EMPTY_TICK_LIMIT_S: not
# measured, any P. 400 lies between.
DEFAULT_COUNTERS = 400
CAPACITY_SHARDS = 8
CAPACITY_TOUCHED = 8
COUNTERS = int(os.environ.get("SCALE_COUNTERS", DEFAULT_COUNTERS))
DISTINCT = int(os.environ.get("SCALE_DISTINCT", 50_000))  # of the first meeting
# The first meeting's partitions: every partition meets its share of the burst in its first tick,
# which reads at most DOCUMENT_LOADS_PER_TICK (5,000) documents of counters it has not met and
# defers the others to whole reads, FIRST_LOADS_PER_TICK (200) a tick. At P = 4, 50,000 counters
# are 12,500 a partition: 38 ticks of catch-up, a minute each on the emulator (below). At P = 16
# they are about 3,125 a partition: one tick.
FIRST_MEETING_P = int(os.environ.get("SCALE_FIRST_MEETING_P", 16))
# The emulator answers a change query by building, for each value of its `in` filter, a sorted
# table of every document of the collection group (FirestoreEmulatorQueryExecutor.
# materializeIndexTable), whatever the query returns: 16 x about 0.9 s of CPU at 50,000 shards.
# P holders pay that each tick, so a round of ticks at P = 16 takes minutes here (production reads
# an index: a query costs what it returns).
FIRST_MEETING_TIMEOUT_S = 3600.0
SCALED_DOWN = os.environ.get("SCALE_WHY", "")  # why the sizes were scaled down, when they were
PARTS = ("capacity", "lag", "first_meeting", "waker", "ledger", "watch", "meeting", "handover",
         "shape")
# The waker's part: a write touching every partition, each task creation taking this long.
WAKER_CREATE_S = 0.05
WAKER_WRITES = 20
LAG_S = float(os.environ.get("SCALE_LAG_S", 30))
RATE = int(os.environ.get("SCALE_RATE", 1000))  # distinct counters a second, in the lag run
LAG_COUNTERS = 3 * RATE  # each changed every 3 s on average: warm, and distinct within a second
STEPS = (0, 125, 250, 500, 1000, 2000, 4000)  # changed counters per tick (0: its fixed cost)
REPEATS = 3  # ticks per step; the step's figure is their median
PARTITIONS = (1, 2, 4)
# The runs of PARTITIONS, in rounds of alternating order (1, 2, 4, 4, 2, 1, ...): this machine's
# speed drifts by tens of percent within minutes, and the emulator slows as a run's writes add up,
# so a point measured once, early or late, differs from the others by when it ran. Alternating
# the order cancels a drift linear in time; each step's figures are the mean over the rounds.
ROUNDS = int(os.environ.get("SCALE_ROUNDS", 4))
# Each run has a new emulator, warmed first on a small project (`fresh_emulator`): a new JVM
# compiles its hot code in its first minutes, on the idle core. In a stack's first run it spent
# 0.53 s of CPU on an empty P = 1 tick (1.8 cores busy), in later ones 0.24 s; measured then, P =
# 1's CPU overstated what P holders need.
WARM_UP_COUNTERS = 500
WARM_UP_STEPS = [0, 125, 250, 500]
# One shard per counter in the lag and first-meeting parts, and holders that measure rates but do
# not scale: a counter changed every second would grow in the first ticks (two commits and a
# read, once per counter: the autoscale benchmark's; `make sim-scale` charges autoscaling's grows
# at the table's shape), and the emulator answers each change query by scanning every shard, so
# more shards would measure the emulator (production reads the index).
SHARDS = 1
NO_GROWTH = AutoscaleParams(enabled=False)
BALANCE_P = 4
TICK_LIMIT_S = 1.0  # a holder keeps up while its ticks take less than their period
# A run whose empty tick takes half the period or more measures the machine, not the holders:
# its capacity is saved as not measured, with the reason.
EMPTY_TICK_LIMIT_S = TICK_LIMIT_S / 2
SETTLED_CORES, SETTLE_WINDOW_S, SETTLE_LIMIT_S = 0.15, 0.25, 5.0  # `settle`
PERIOD_S = 1.0
LAG_BATCHES_PER_S = 40  # 1,000 a second: 25 distinct counters a commit, every 25 ms
WRITE_THREADS = 8
CREATE_THREADS = 32
DRAIN_TIMEOUT_S = 300.0
ANSWER_TIMEOUT_S = 600.0  # a holder process that does not answer a command by then is stuck
STOP_JOIN_S = 60.0


# -- holders, each in a process of its own --


def tick_record(stats: TickStats) -> dict[str, Any]:
    """What a holder process reports of one tick (picklable)."""
    return {"as_of": stats.as_of.timestamp(), "end": time.time(), "seconds": stats.seconds,
            "changed": stats.changed_counters, "written": stats.written, "owed": stats.owed,
            "reads": stats.usage.reads, "problems": list(stats.problems)}


def serve(conn: Connection, project: str, count: int, index: int) -> None:
    """A holder of partition `index` of `count`, in its own process: `tick` ticks once (wall and
    CPU seconds around it), `loop` runs `cadence.loop` every PERIOD_S in a thread until `stop`
    (`progress` reports its ticks so far), `close` lets the lease go and ends the process."""
    writing = Writing.offline()
    db = firestore.Client(project=project)
    part = partitions.Part(count, index)
    holder: cadence.Holder | None = None
    ticks: list[dict[str, Any]] = []
    stop = threading.Event()
    looping: threading.Thread | None = None
    cpu_at_start = 0.0
    while True:
        command = conn.recv()
        if command == "tick":
            if holder is None:
                holder = cadence.Holder(db, writing=writing, part=part, scaling=NO_GROWTH,
                                        on_tick=lambda stats: ticks.append(tick_record(stats)))
            ticks.clear()
            began, cpu = time.monotonic(), time.process_time()
            try:
                outcome, error = str(holder.tick_slot(None, trigger="bench").outcome), None
            except Exception as failure:
                outcome, error = "failed", repr(failure)
            conn.send({"wall": time.monotonic() - began, "cpu": time.process_time() - cpu,
                       "outcome": outcome, "error": error, "ticks": list(ticks)})
        elif command == "loop":
            cpu_at_start = time.process_time()
            looping = threading.Thread(target=cadence.loop, args=(db,), kwargs={
                "writing": writing, "period_s": PERIOD_S, "stop": stop, "part": part,
                "scaling": NO_GROWTH, "on_tick": lambda stats: ticks.append(tick_record(stats))})
            looping.start()
            conn.send(None)
        elif command == "progress":
            conn.send(list(ticks))
        elif command == "stop":
            stop.set()
            if looping is not None:
                looping.join(STOP_JOIN_S)  # a tick under way may take long: not waited for
            conn.send({"ticks": list(ticks), "cpu": time.process_time() - cpu_at_start})
        elif command == "close":
            if holder is not None:
                holder.close()
            conn.send(None)
            return


class Holders:
    """The P holder processes of a project: commands go to all of them at once."""

    def __init__(self, project: str, count: int) -> None:
        context = multiprocessing.get_context("spawn")  # gRPC clients do not survive a fork
        self.count = count
        self._pipes: list[Connection] = []
        self._processes: list[Any] = []
        for part in partitions.parts(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=serve, args=(theirs, project, count, part.index),
                                      daemon=True)
            process.start()
            self._pipes.append(mine)
            self._processes.append(process)

    def ask(self, command: str) -> list[Any]:
        for pipe in self._pipes:
            pipe.send(command)
        answers = []
        for pipe in self._pipes:
            if not pipe.poll(ANSWER_TIMEOUT_S):
                raise TimeoutError(f"a holder process did not answer {command!r}")
            answers.append(pipe.recv())
        return answers

    def close(self) -> None:
        try:
            self.ask("close")
        finally:
            for process in self._processes:
                process.join(30)
                if process.is_alive():
                    process.terminate()


def clear(project: str) -> None:
    """Delete every document of the project from the emulator (what a part leaves behind is not
    the next part's to scan)."""
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    url = f"http://{host}/emulator/v1/projects/{project}/databases/(default)/documents"
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=120).read()


@contextmanager
def holders_of(project: str, count: int) -> Iterator[Holders]:
    holders = Holders(project, count)
    try:
        yield holders
    finally:
        holders.close()


# -- the write path --


class Writer:
    """Domain batch increments of distinct counters from a thread pool, each batch with its
    commit time (the process's waker while it is installed: `settle` hands every domain write's
    commit time to it, in the writing thread)."""

    def __init__(self, db: firestore.Client, threads: int = WRITE_THREADS) -> None:
        self._db = db
        # Trusted for the whole run: this one process stands for the many instances of a busy
        # app, whose caches are warm; re-reading 500 configurations a batch every
        # CONFIG_CACHE_TTL_S would measure the cache, not the rollup. No counter here changes
        # its shards (one write every few seconds is far below a shard's rate).
        self.ctx = Context(writing=Writing(known=partitions.Known(), waker=self),
                           configs=shard_choice.ConfigCache(ttl_s=24 * 3600),
                           picker=shard_choice.ShardPicker(), sequences=SequenceCache())
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="scale-writer")
        self._local = threading.local()
        self.sent: defaultdict[str, int] = defaultdict(int)  # increments acknowledged
        self._lock = threading.Lock()

    def after_write(self, db: firestore.Client, committed_at: dt.datetime,
                    homes: Iterable[int] = ()) -> bool:
        self._local.committed_at = committed_at
        return False

    def prime(self, names: list[str]) -> float:
        """Read every configuration once, in parallel; returns the seconds it took."""
        began = time.monotonic()
        list(self._pool.map(lambda name: self.ctx.configs.get(self._db, NAMES, name), names))
        return time.monotonic() - began

    def batch(self, names: list[str]) -> float:
        """One commit of +1 on each of `names` (distinct): its commit time, epoch seconds."""
        counters.increment_many(self.ctx, self._db, [(name, 1) for name in names])
        committed: dt.datetime = self._local.committed_at
        with self._lock:
            for name in names:
                self.sent[name] += 1
        return committed.timestamp()

    def submit(self, names: list[str]) -> Future[float]:
        return self._pool.submit(self.batch, names)

    def write(self, names: list[str]) -> list[tuple[float, list[str]]]:
        """+1 on each of `names` (distinct), MAX_BATCH a commit, as fast as the pool goes:
        (commit time, names) per commit."""
        chunks = [names[i:i + config.MAX_BATCH] for i in range(0, len(names), config.MAX_BATCH)]
        return list(zip(self._pool.map(self.batch, chunks), chunks, strict=True))

    def changes(self, names: list[str]) -> None:
        """CAPACITY_TOUCHED passes of `write`: each moves every counter's round-robin cursor to
        its next shard, so that each of a counter's CAPACITY_SHARDS is written once."""
        for _ in range(CAPACITY_TOUCHED):
            self.write(names)

    def close(self) -> None:
        self._pool.shutdown()


@contextmanager
def writer_of(db: firestore.Client) -> Iterator[Writer]:
    writer = Writer(db)
    try:
        yield writer
    finally:
        writer.close()


def create(db: firestore.Client, count: int, shards: int = SHARDS) -> tuple[list[str], float]:
    """`count` counters of `shards` shards each, round robin (names spread over the homes by
    their hash); returns their names and the seconds it took."""
    names = [f"scale-{n:06d}" for n in range(count)]
    ctx = Context.offline()
    began = time.monotonic()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(lambda name: counters.create_counter(ctx, db, name, shards=shards,
                                                           strategy="round_robin"), names))
    return names, time.monotonic() - began


def exactness(db: firestore.Client, sent: dict[str, int], names: list[str]) -> dict[str, Any]:
    """Every counter's published `count` against its shard sum and the increments sent to it
    (two streamed reads)."""
    published = {snapshot.id: int((snapshot.to_dict() or {}).get("count") or 0)
                 for snapshot in db.collection(config.COUNTERS).select(["count"]).stream()}
    sums: defaultdict[str, int] = defaultdict(int)
    for shard in db.collection_group(config.SHARDS).select(["count"]).stream():
        parent = shard.reference.parent.parent
        if parent is not None and parent.parent.id == config.COUNTERS:
            sums[parent.id] += int((shard.to_dict() or {}).get("count") or 0)
    wrong = [name for name in names
             if not published.get(name) == sums[name] == sent.get(name, 0)]
    return {"exact": not wrong, "wrong": len(wrong),
            "examples": [{"counter": name, "count": published.get(name), "shard_sum": sums[name],
                          "sent": sent.get(name, 0)} for name in wrong[:5]]}


def wait_drained(holders: Holders, last_commit: float,
                 timeout_s: float = DRAIN_TIMEOUT_S) -> list[list[dict[str, Any]]]:
    """Poll the looping holders until each has ticked at or after `last_commit` and owes
    nothing; returns their ticks so far."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = holders.ask("progress")
        if all(ticks and ticks[-1]["as_of"] >= last_commit and ticks[-1]["owed"] == 0
               for ticks in progress) or time.monotonic() > deadline:
            return list(progress)
        time.sleep(0.5)


def machine_busy() -> tuple[float, float]:
    """The machine's CPU seconds (all cores) spent busy and in all, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [float(value) for value in stat.readline().split()[1:]]
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def cores_busy(before: tuple[float, float], after: tuple[float, float]) -> float:
    """How many cores were busy on average between two `machine_busy` readings."""
    spent = after[1] - before[1]
    return (after[0] - before[0]) / spent * (os.cpu_count() or 1) if spent > 0 else 0.0


def settle() -> float:
    """Wait (at most SETTLE_LIMIT_S) until the machine is quiet: under SETTLED_CORES busy over a
    window of SETTLE_WINDOW_S. The writes before a timed tick leave the emulator busy after their
    commits (its collections, its bookkeeping), which would be timed as the tick's and counted
    as its CPU. Returns the cores busy in the last window."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    while True:
        before = machine_busy()
        time.sleep(SETTLE_WINDOW_S)
        busy = cores_busy(before, machine_busy())
        if busy < SETTLED_CORES or time.monotonic() >= deadline:
            return busy


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user and system) the processes have used."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def problems_of(ticks: Iterable[dict[str, Any]]) -> list[str]:
    return [problem for tick in ticks for problem in tick["problems"]]


# -- capacity --


def capacity_at(db: firestore.Client, count: int, names: list[str], writer: Writer,
                rng: random.Random, java: list[int], steps: list[int] | None = None
                ) -> dict[str, Any]:
    """P = `count` holders, each ticking in its process: warm them (every counter changed once,
    ticks until none owes a first load), then per step k, REPEATS times: change k distinct
    counters (CAPACITY_TOUCHED increments each, one on each of its shards), tick every holder at
    once and time them (and the CPU of `java`, the emulator's
    process). Stops after the first step whose ticks take TICK_LIMIT_S or more, or runs exactly
    `steps` (the warm-up's)."""
    repartition.change(db, NAMES, count, known=writer.ctx.writing.known)
    warm_began = time.monotonic()
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    problems: list[str] = []
    with holders_of(db.project, count) as holders:
        writer.changes(names)
        warm_ticks = 0
        while True:
            results = holders.ask("tick")
            warm_ticks += 1
            failures += [r["error"] for r in results if r["error"]]
            if warm_ticks > 200 or all(not r["error"] and all(t["owed"] == 0 for t in r["ticks"])
                                       for r in results):
                break
        warm_s = time.monotonic() - warm_began
        for k in steps if steps is not None else steps_for(len(names)):
            reps: list[list[dict[str, Any]]] = []
            busy: list[float] = []
            ours: list[float] = []
            emulator: list[float] = []
            quiet: list[float] = []
            for _ in range(REPEATS):
                writer.changes(rng.sample(names, k))
                quiet.append(settle())
                before, emulator_before, began = machine_busy(), cpu_of(java), time.monotonic()
                results = holders.ask("tick")
                busy.append(cores_busy(before, machine_busy()))
                emulator.append(cpu_of(java) - emulator_before)
                ours.append((emulator[-1] + sum(r["cpu"] for r in results))
                            / (time.monotonic() - began))
                failures += [r["error"] for r in results if r["error"]]
                problems += problems_of(t for r in results for t in r["ticks"])
                reps.append(results)
            slowest = [max(r["wall"] for r in results) for results in reps]
            changed = [sum(t["changed"] for r in results for t in r["ticks"]) for results in reps]
            cpu = [sum(r["cpu"] for r in results) for results in reps]
            per_counter = [c / n for c, n in zip(cpu, changed, strict=True) if n]
            rows.append({
                "k": k,
                "tick_s": statistics.median(slowest),  # the slowest holder's, median of REPEATS
                "tick_s_per_holder": [statistics.median(results[i]["wall"] for results in reps)
                                      for i in range(count)],
                "changed_counters": statistics.median(changed),
                "cpu_s_per_changed_counter": statistics.median(per_counter) if per_counter
                else None,
                "emulator_cpu_s": statistics.median(emulator) if java else None,
                # Cores the emulator and the holders kept busy during the concurrent ticks, and
                # the whole machine's (other work on it included).
                "cores_ours": statistics.median(ours) if java else None,
                "cores_busy": statistics.median(busy),
                "cores_busy_before": statistics.median(quiet),  # settled, or SETTLE_LIMIT_S passed
            })
            print(f"   P={count} k={k}: tick {rows[-1]['tick_s']:.3f} s, "
                  f"changed {rows[-1]['changed_counters']}, cores ours "
                  f"{rows[-1]['cores_ours'] or 0:.2f}, busy {rows[-1]['cores_busy']:.2f}",
                  flush=True)
            if steps is None and (rows[-1]["tick_s"] >= TICK_LIMIT_S
                                  or rows[0]["tick_s"] >= EMPTY_TICK_LIMIT_S):
                break
    return {"partitions": count, "capacity": capacity_of(rows, count), "warm_s": warm_s,
            "warm_ticks": warm_ticks, "steps": rows, "failures": failures,
            "problems": problems[:10]}


def capacity_of(rows: list[dict[str, Any]], count: int = 1) -> dict[str, Any]:
    """The largest k whose ticks take less than TICK_LIMIT_S, interpolated linearly between the
    last step under it and the first step over it; with no step over it, the largest step
    (`bounded`: false, the capacity is at least that). Not measured (None, with the reason)
    when the empty tick took EMPTY_TICK_LIMIT_S or more: `count` holders and the emulator then
    fill the machine before any counter changes."""
    empty = rows[0]
    if empty["k"] == 0 and empty["tick_s"] >= EMPTY_TICK_LIMIT_S:
        cores = empty.get("cores_busy")
        return {"counters_per_s": None, "bounded": True, "measured": False,
                "reason": f"an empty tick took {empty['tick_s']:.2f} s with {count} holder"
                          f"{'s' if count > 1 else ''} beside the emulator"
                          + ("" if cores is None else f" ({cores:.2f} of {os.cpu_count()} "
                                                       "cores busy)")
                          + f": at {EMPTY_TICK_LIMIT_S} s or more the machine, not the "
                            "holders, bounds the point"}
    under = [row for row in rows if row["tick_s"] < TICK_LIMIT_S]
    over = [row for row in rows if row["tick_s"] >= TICK_LIMIT_S]
    if not under:
        first = over[0]
        return {"counters_per_s": first["k"] * TICK_LIMIT_S / first["tick_s"], "bounded": True,
                "note": "every step was over the limit: extrapolated down from the first"}
    low = under[-1]
    if not over:
        return {"counters_per_s": low["k"], "bounded": False}
    high = over[0]
    share = (TICK_LIMIT_S - low["tick_s"]) / (high["tick_s"] - low["tick_s"])
    return {"counters_per_s": low["k"] + share * (high["k"] - low["k"]), "bounded": True}


def capacity_run(count: int, rng: random.Random) -> dict[str, Any]:
    """One measured run of P = `count`: a project of COUNTERS counters on an emulator of its own."""
    with fresh_emulator() as (java, warm_up):
        run = project_run(count, COUNTERS, rng, [java], None)
    return {**run, "warm_up_emulator_cpu_s": warm_up}


@contextmanager
def fresh_emulator() -> Iterator[tuple[int, list[float]]]:
    """A Firestore emulator of its own (a new JVM), warmed, for clients made inside: its pid and
    the warm-up's emulator CPU per tick. Runs do not share one: the emulator slowed with every
    project it had held, deleted or not (docs/benchmarks.md, "Scale: partitions of the rollup").
    A new JVM compiles its hot code in its first minutes, so a warm-up on a small project of its
    own comes first (WARM_UP_COUNTERS counters, P = 1, WARM_UP_STEPS twice; not measured, its
    project deleted)."""
    with stack.firestore_alone(stack.STATE / "scale-firestore.log") as (host, java), \
            emulator_at(host):
        warm_up = project_run(1, WARM_UP_COUNTERS, random.Random(0), [java], WARM_UP_STEPS * 2)
        yield java, [row["emulator_cpu_s"] for row in warm_up["steps"]]


@contextmanager
def emulator_at(host: str) -> Iterator[None]:
    """Clients made inside (this process's and the holders' it spawns) talk to `host`."""
    before = os.environ["FIRESTORE_EMULATOR_HOST"]
    os.environ["FIRESTORE_EMULATOR_HOST"] = host
    try:
        yield
    finally:
        os.environ["FIRESTORE_EMULATOR_HOST"] = before


def project_run(count: int, counters: int, rng: random.Random, java: list[int],
                steps: list[int] | None) -> dict[str, Any]:
    """`capacity_at` on a project of its own, with `counters` counters made for it and deleted
    after it."""
    db = own_db()
    try:
        names, create_s = create(db, counters, CAPACITY_SHARDS)
        with writer_of(db) as writer:
            prime_s = writer.prime(names)
            run = capacity_at(db, count, names, writer, rng, java, steps)
            check = exactness(db, writer.sent, names)
    finally:
        clear(db.project)
    return {**run, "create_s": create_s, "config_prime_s": prime_s, "exact": check}


def capacity_runs() -> tuple[dict[str, Any], dict[str, Any]]:
    """capacity_per_holder (the P = 1 runs) and capacity_by_partitions: ROUNDS runs of each P,
    in alternating order, each on a project of its own."""
    rng = random.Random(1)
    rounds: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for count in round_order():
        rounds[count].append(capacity_run(count, rng))
    runs = {str(count): merged(rounds[count]) for count in PARTITIONS}
    every = [run for done in rounds.values() for run in done]
    wrong = [run["exact"] for run in every if not run["exact"]["exact"]]
    check = {"exact": not wrong, "wrong": sum(c["wrong"] for c in wrong),
             "examples": [e for c in wrong for e in c["examples"]][:5], "runs": len(every)}
    one = runs["1"]
    per_holder = {
        "counters_per_s": one["capacity"]["counters_per_s"],
        "bounded": one["capacity"]["bounded"],
        "counters": COUNTERS, "shards_per_counter": CAPACITY_SHARDS,
        "touched_per_change": CAPACITY_TOUCHED, "steps": one["steps"],
        "method": "P = 1 of capacity_by_partitions: one warm holder in its own process; k "
                  "distinct counters changed (domain batch increments), then one tick timed; "
                  f"median of {REPEATS} per step, mean over {ROUNDS} rounds of alternating "
                  f"order, each run on a warmed emulator and a project of its own; "
                  f"linear between the steps around {TICK_LIMIT_S} s",
    }
    base = one["capacity"]["counters_per_s"]
    by_partitions: dict[str, Any] = {
        "counters": COUNTERS,
        "create_s": statistics.median(run["create_s"] for run in every),
        "config_prime_s": statistics.median(run["config_prime_s"] for run in every),
        "aggregate_counters_per_s": {p: run["capacity"]["counters_per_s"]
                                     for p, run in runs.items()},
        "speedup": {p: None if base is None or run["capacity"]["counters_per_s"] is None
                    else run["capacity"]["counters_per_s"] / base for p, run in runs.items()},
        "not_measured": {p: run["capacity"]["reason"] for p, run in runs.items()
                         if run["capacity"]["counters_per_s"] is None},
        "cpu_s_per_changed_counter": {p: median_cpu(run) for p, run in runs.items()},
        "cores": os.cpu_count(),
        "warm_up": {  # each run's, on its emulator before the measured project: not measured
            "counters": WARM_UP_COUNTERS, "steps": WARM_UP_STEPS * 2,
            "emulator_cpu_s": {p: [run["warm_up_emulator_cpu_s"] for run in rounds[int(p)]]
                               for p in runs}},
        "runs": runs,
        "exact": check,
    }
    by_partitions["limit"] = limit_of(by_partitions)
    return per_holder, by_partitions


def round_order() -> list[int]:
    """The runs' P in ROUNDS rounds, every other one reversed: 1, 2, 4, 4, 2, 1, ..."""
    return [count for r in range(ROUNDS) for count in (PARTITIONS[::-1] if r % 2 else PARTITIONS)]


def mean_of(values: list[Any]) -> Any:
    """The mean of the rounds' figures for one step (lists element by element; None if a round
    has none)."""
    if any(value is None for value in values):
        return None
    if isinstance(values[0], list):
        return [mean_of(list(items)) for items in zip(*values, strict=True)]
    return statistics.fmean(values)


def steps_for(counters: int) -> list[int]:
    """The steps of STEPS a run of `counters` counters takes, and all of them last: the largest
    step is never capped below the counters there are."""
    return sorted({k for k in STEPS if k <= counters} | {counters})


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One P's rounds as one run. Each round stops at its own step over the limit; the steps all
    rounds ran have their figures' means over the rounds (every round's tick beside them: the
    model's costs come from these). The capacity is the mean of the rounds' capacities: a lower
    bound (`bounded`: false) if any round's was one, not measured if any round's was not."""
    steps = [{"k": rows[0]["k"],
              **{key: mean_of([row[key] for row in rows]) for key in rows[0] if key != "k"},
              "tick_s_by_round": [row["tick_s"] for row in rows]}
             for rows in zip(*(run["steps"] for run in runs), strict=False)]
    capacities = [run["capacity"] for run in runs]
    unmeasured = next((c for c in capacities if c["counters_per_s"] is None), None)
    capacity = unmeasured or {
        "counters_per_s": statistics.fmean(c["counters_per_s"] for c in capacities),
        "bounded": all(c["bounded"] for c in capacities)}
    return {"partitions": runs[0]["partitions"], "capacity": capacity,
            "rounds": len(runs), "warm_s": sum(run["warm_s"] for run in runs),
            "warm_ticks": sum(run["warm_ticks"] for run in runs), "steps": steps,
            "capacity_by_round": [c["counters_per_s"] for c in capacities],
            "failures": [f for run in runs for f in run["failures"]],
            "problems": [p for run in runs for p in run["problems"]][:10]}


def median_cpu(run: dict[str, Any]) -> float | None:
    """A run's holder CPU seconds per changed counter, over the steps that changed some (None
    when even its empty tick took over the limit)."""
    found = [row["cpu_s_per_changed_counter"] for row in run["steps"]
             if row["cpu_s_per_changed_counter"] is not None]
    return statistics.median(found) if found else None


def limit_of(figures: dict[str, Any]) -> str:
    """Which limit stops the aggregate from growing: the machine's cores (busy during the
    concurrent ticks at the capacity) or the design (cores to spare, yet no growth)."""
    runs = figures["runs"]
    widest = runs[str(PARTITIONS[-1])]
    last = widest["steps"]
    at_limit = next((row for row in last if row["tick_s"] >= TICK_LIMIT_S), last[-1])
    cores = figures["cores"] or 1
    speedup = figures["speedup"][str(PARTITIONS[-1])]
    ours, busy = at_limit["cores_ours"], at_limit["cores_busy"]
    gain = "not measured" if speedup is None else f"{speedup:.2f} over P = 1"
    where = (f"at P = {PARTITIONS[-1]}, k = {at_limit['k']}, speedup {gain}; "
             f"during the concurrent ticks the emulator and the holders kept "
             f"{'?' if ours is None else f'{ours:.2f}'} of {cores} cores busy, the whole machine "
             f"{busy:.2f}")
    if not widest["capacity"]["bounded"]:
        return f"not reached: the largest step took less than {TICK_LIMIT_S} s ({where})"
    if ours is not None and ours >= 0.8 * cores:
        return f"machine: the emulator and the holders share the cores ({where})"
    if busy >= 0.8 * cores:
        return f"machine: its cores were busy, partly with work of others ({where})"
    return f"design: cores to spare, yet no growth ({where})"


# -- lag and balance --


def lag_run() -> dict[str, Any]:
    """P = BALANCE_P holders looping every second, each in its process; RATE distinct counters a
    second (of LAG_COUNTERS) for LAG_S; per write, its commit -> the end of the first tick of its
    partition whose instant is at or after the commit."""
    rng = random.Random(2)
    with fresh_emulator() as (_, warm_up):
        db = own_db()
        names, create_s = create(db, LAG_COUNTERS)
        repartition.change(db, NAMES, BALANCE_P, known=partitions.Known())
        writes: list[tuple[float, list[str]]] = []
        with writer_of(db) as writer:
            prime_s = writer.prime(names)
            with holders_of(db.project, BALANCE_P) as holders:
                holders.ask("loop")
                # Every holder meets its counters: first loads, not lag.
                warm = writer.write(names)
                wait_drained(holders, max(at for at, _ in warm))
                per_batch = RATE // LAG_BATCHES_PER_S
                began, began_at = time.monotonic(), time.time()
                futures: list[tuple[Future[float], list[str]]] = []
                for second in range(int(LAG_S)):
                    chosen = rng.sample(names, per_batch * LAG_BATCHES_PER_S)
                    for j in range(LAG_BATCHES_PER_S):
                        time.sleep(max(0.0, began + second + j / LAG_BATCHES_PER_S
                                       - time.monotonic()))
                        batch = chosen[j * per_batch:(j + 1) * per_batch]
                        futures.append((writer.submit(batch), batch))
                writes = [(future.result(), batch) for future, batch in futures]
                written_s = time.monotonic() - began
                wait_drained(holders, max(at for at, _ in writes), timeout_s=60)
                stopped = holders.ask("stop")
            check = exactness(db, writer.sent, names)
        clear(db.project)
    ticks = [result["ticks"] for result in stopped]
    lags, unseen = [], 0
    for committed, batch in writes:
        for name in batch:
            mine = ticks[partitions.home_of(name) % BALANCE_P]
            end = next((t["end"] for t in mine if t["as_of"] >= committed), None)
            if end is None:
                unseen += 1
            else:
                lags.append(end - committed)
    sent = sum(len(batch) for _, batch in writes)
    first = min(at for at, _ in writes)
    last = max(at for at, _ in writes)
    tick_p99 = percentile([t["seconds"] for mine in ticks for t in mine if t["end"] >= began_at],
                          99)
    kept_up = tick_p99 < TICK_LIMIT_S
    return {
        # Holders whose ticks take their period or more fall behind the offered rate: the lag
        # then measures the machine's backlog, not the design.
        "measured": kept_up,
        "reason": None if kept_up else
        f"the {BALANCE_P} holders' ticks took {tick_p99:.2f} s (p99) beside the emulator: the "
        f"machine does not carry {RATE} changed counters a second, so the lag grows with the "
        "run",
        "partitions": BALANCE_P, "counters": LAG_COUNTERS, "create_s": create_s,
        "config_prime_s": prime_s, "warm_up_emulator_cpu_s": warm_up, "offered_rate": RATE,
        "seconds": LAG_S, "increments": sent,
        "achieved_rate": sent / max(written_s, last - first),
        "lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
        "lag_max_s": max(lags), "unseen": unseen,
        "tick_s_p99": tick_p99,
        "cpu_s_per_holder": [result["cpu"] for result in stopped],
        # The whole run's, the warm-up's first loads included.
        "changed_per_partition": [sum(t["changed"] for t in mine) for mine in ticks],
        "problems": problems_of(t for mine in ticks for t in mine)[:10],
        "exact": check,
        "lags_s": lags,
    }


def balance(changed: list[int]) -> float:
    return max(changed) / statistics.mean(changed)


# -- 50,000 distinct counters met for the first time --


def first_meeting_run() -> dict[str, Any]:
    """DISTINCT counters, each changed once as fast as the write path goes, then met for the
    first time by P = FIRST_MEETING_P holders that start looping once the burst is written (as
    partitions woken by its seconds, or successors after a handover): each holder's first tick
    reads the whole burst. drain_s is from the last commit to the end of the last tick that
    published a count; `reads` are the holders' billed reads (TickStats.usage) up to each one's
    first tick at or after the last commit that owes nothing, against the capacity model's."""
    db = own_db()
    names, create_s = create(db, DISTINCT)
    count = FIRST_MEETING_P
    repartition.change(db, NAMES, count, known=partitions.Known())
    with writer_of(db) as writer:
        prime_s = writer.prime(names)
        with holders_of(db.project, count) as holders:  # their processes start meanwhile
            began = time.time()
            writes = writer.write(random.Random(3).sample(names, len(names)))
            write_s = time.time() - began
            last_commit = max(at for at, _ in writes)
            holders.ask("loop")
            looping_at = time.time()
            drained = wait_drained(holders, last_commit, timeout_s=FIRST_MEETING_TIMEOUT_S)
            stopped = holders.ask("stop")
        check = exactness(db, writer.sent, names)
    clear(db.project)
    ticks = [result["ticks"] for result in stopped]
    published = sorted((t["end"], t["written"]) for mine in ticks for t in mine if t["written"])
    last_publish = published[-1][0] if published else None
    # Each holder's ticks up to the first that had taken in the whole burst.
    meeting = [mine[:next((i + 1 for i, t in enumerate(mine)
                           if t["as_of"] >= last_commit and t["owed"] == 0), len(mine))]
               for mine in ticks]
    reads = sum(t["reads"] for mine in meeting for t in mine)
    meeting_ticks = sum(len(mine) for mine in meeting)
    predicted = capacity_model.first_meeting_reads(DISTINCT, count, shards_per_counter=SHARDS)
    return {
        "counters": DISTINCT, "partitions": count, "shards_per_counter": SHARDS,
        "create_s": create_s, "config_prime_s": prime_s, "write_s": write_s,
        "writes_per_s": DISTINCT / write_s,
        "loop_after_last_commit_s": looping_at - last_commit,
        "drain_s": None if last_publish is None else last_publish - last_commit,
        "drained": all(ticks and ticks[-1]["as_of"] >= last_commit and ticks[-1]["owed"] == 0
                       for ticks in drained),
        "exact": check["exact"], "check": check,
        "reads": reads, "reads_predicted": predicted,
        "reads_ratio": reads / predicted if predicted else None,
        "meeting_ticks": meeting_ticks,  # the model's: one a holder
        "reads_per_meeting_tick": [[t["reads"] for t in mine] for mine in meeting],
        "ticks": sum(len(mine) for mine in ticks),
        "tick_s_max": max(t["seconds"] for mine in ticks for t in mine),
        "changed_per_partition": [sum(t["changed"] for t in mine) for mine in ticks],
        "problems": problems_of(t for mine in ticks for t in mine)[:10],
        "published": [(end - began, n) for end, n in published],
        "committed": sorted((at - began, len(batch)) for at, batch in writes),
    }


def waker_run() -> dict[str, Any]:
    """How long a write touching all 128 partitions waits for its tick tasks, each creation
    taking WAKER_CREATE_S (a Cloud Tasks call): with the waker's own pool, with 4 threads (its
    pool before), and a write touching one partition, side by side. The first write of a waker
    starts its threads."""
    count = partitions.CHOICES[-1]
    db: Any = type("Db", (), {"project": "bench-waker"})()

    def created(_: Any, part: partitions.Part, slot: int) -> bool:
        time.sleep(WAKER_CREATE_S)
        return True

    def waits(waker: waking.Waker, touched: int = count) -> list[float]:
        taken = []
        for n in range(WAKER_WRITES):  # each in a slot of its own: every partition is due
            began = time.perf_counter()
            waker.after_write(db, dt.datetime.fromtimestamp(1_800_000_000 + n, dt.UTC),
                              range(touched))
            taken.append(time.perf_counter() - began)
        return taken

    mine = waits(waking.Waker(created, count=lambda _: count))
    one = waits(waking.Waker(created, count=lambda _: count), touched=1)
    four = waits(waking.Waker(created, count=lambda _: count,
                              pools=lambda _, name: ThreadPoolExecutor(4, name)))
    return {"partitions": count, "create_s": WAKER_CREATE_S, "writes": WAKER_WRITES,
            "first_wait_s": round(mine[0], 4), "wait_s": round(statistics.median(mine[1:]), 4),
            # A write to one partition, beside: what waiting for one creation costs here.
            "wait_s_1_partition": round(statistics.median(one[1:]), 4),
            "wait_s_4_threads": round(statistics.median(four[1:]), 4)}


# The meeting's part: MEETING_COUNTERS counters of MEETING_SHARDS shards each written once, met
# by a holder that held its lease before they were made; then written once more (known); and as
# many made without their birth stamp (how counters were made before it), then met.
MEETING_COUNTERS = 3000
MEETING_SHARDS = 4


def meeting_run() -> dict[str, Any]:
    """The reads and the holder's CPU of meeting MEETING_COUNTERS new counters (born while it
    held its lease: no read of theirs), of the same counters changed again (known), and of as
    many new counters without a birth stamp (each read: its document and memory), on one
    project, one holder ticked by hand."""
    db = own_db()
    ctx = Context.offline()
    lease = Lease(db, state_ref(db, NAMES), "bench-meeting", config.ROLLUP.lease_s)
    assert lease.acquire()
    step = Rollup(db, lease, writing=ctx.writing)

    def made(prefix: str, *, stamped: bool) -> list[str]:
        names = [f"{prefix}-{n:05d}" for n in range(MEETING_COUNTERS)]
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(lambda name: counters.create_counter(ctx, db, name,
                                                               shards=MEETING_SHARDS), names))
            if not stamped:
                list(pool.map(lambda name: [
                    shard.reference.update({config.SHARD_BORN_FIELD: firestore.DELETE_FIELD})
                    for shard in counter_refs.counter_ref(db, NAMES, name)
                    .collection(NAMES.shards).stream()], names))
        return names

    def met(names: list[str]) -> dict[str, Any]:
        step.tick()
        for start in range(0, len(names), config.MAX_BATCH):
            counters.increment_many(ctx, db, [(name, 1) for name in names[start:start + 500]])
        time.sleep(1.0)  # past the overlap: the next tick's query returns them all
        began, ticks = time.process_time(), [step.tick()]
        while ticks[-1].owed:  # (a tick meets a few hundred at first: the others wait)
            ticks.append(step.tick())
        # (Their share of the sweep under way is not the meeting's.)
        return {"reads": sum(t.reads - t.sweep_reads for t in ticks),
                "cpu_s": round(time.process_time() - began, 4), "ticks": len(ticks),
                "tick_s": round(max(t.seconds for t in ticks), 4),
                "written": sum(t.written for t in ticks)}

    try:
        step.tick()  # holding the lease before they are born
        plain = made("plain", stamped=False)
        born = made("born", stamped=True)
        unstamped = met(plain)
        new = met(born)
        known = met(born)
    finally:
        step.close()
        clear(db.project)
    return {"counters": MEETING_COUNTERS, "shards": MEETING_SHARDS, "new": new, "known": known,
            "new_unstamped": unstamped,
            "reads_ratio": round(new["reads"] / known["reads"], 3),
            "cpu_ratio": round(new["cpu_s"] / known["cpu_s"], 3),
            "reads_ratio_unstamped": round(unstamped["reads"] / known["reads"], 3),
            "cpu_ratio_unstamped": round(unstamped["cpu_s"] / known["cpu_s"], 3),
            "targets": {"reads_ratio": 1.1, "cpu_ratio": 1.25}}


# The handover's part: HANDOVER_CHANGED of HANDOVER_COUNTERS counters (4 shards) written each
# second for HANDOVER_S, one holder ticking every second, killed (its lease not let go) at half
# time; a successor takes the lease once it expires and ticks on.
HANDOVER_COUNTERS = 1000
HANDOVER_CHANGED = 300
HANDOVER_S = 180.0


def handover_run() -> dict[str, Any]:
    """Each tick's seconds and reads over HANDOVER_S of steady writes that include sweeps and a
    forced handover (one process: the writes from a thread, the holders ticked in turn); the
    first holder's first tick, before the writes, is not measured."""
    db = own_db()
    ctx = Context.offline()
    names = [f"handover-{n:05d}" for n in range(HANDOVER_COUNTERS)]
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(lambda name: counters.create_counter(ctx, db, name, shards=4), names))
    stop = threading.Event()
    sent: dict[str, int] = defaultdict(int)

    def write() -> None:
        rng = random.Random(5)
        while not stop.is_set():
            began = time.monotonic()
            chosen = rng.sample(names, HANDOVER_CHANGED)
            counters.increment_many(ctx, db, [(name, 1) for name in chosen])
            for name in chosen:
                sent[name] += 1
            stop.wait(max(0.0, 1.0 - (time.monotonic() - began)))

    def holder(owner: str) -> Rollup:
        lease = Lease(db, state_ref(db, NAMES), owner, config.ROLLUP.lease_s)
        while not lease.acquire():
            time.sleep(0.5)
        return Rollup(db, lease, writing=ctx.writing)

    ticks: list[dict[str, Any]] = []
    writer = threading.Thread(target=write)
    current, killed_at = holder("first"), None
    current.tick()  # its first meeting of the counters, before the writes: not measured
    writer.start()
    began = time.monotonic()
    try:
        while time.monotonic() - began < HANDOVER_S:
            if killed_at is None and time.monotonic() - began >= HANDOVER_S / 2:
                current.close()  # killed: its lease is not let go
                killed_at = time.monotonic() - began
                current = holder("successor")
            tick_began = time.monotonic()
            stats = current.tick()
            ticks.append({"at_s": round(tick_began - began, 2), "seconds": stats.seconds,
                          "longest_call_s": round(stats.longest_call_s, 4),
                          "reads": stats.reads, "changed": stats.changed_counters,
                          "sweep_reads": stats.sweep_reads, "sweep": stats.swept is not None,
                          "holder": "successor" if killed_at is not None else "first"})
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick_began)))
        stop.set()
        writer.join()
        for _ in range(3):  # past the last write
            time.sleep(1.0)
            current.tick()
        current.close()
        check = exactness(db, sent, names)
    finally:
        stop.set()
        writer.join()
        clear(db.project)
    seconds = [t["seconds"] for t in ticks]
    reads = [t["reads"] for t in ticks]
    handover = next(t for t in ticks if t["holder"] == "successor")
    return {
        "counters": HANDOVER_COUNTERS, "changed_per_s": HANDOVER_CHANGED, "run_s": HANDOVER_S,
        "killed_at_s": killed_at, "ticks": len(ticks),
        "sweeps": sum(t["sweep"] for t in ticks),
        "tick_s_median": round(statistics.median(seconds), 4),
        "tick_s_max": round(max(seconds), 4),
        "worst_over_median": round(max(seconds) / statistics.median(seconds), 2),
        "reads_median": statistics.median(reads), "reads_max": max(reads),
        "sweep_reads": sum(t["sweep_reads"] for t in ticks),
        "handover_tick": handover, "target_worst_over_median": 3.0, "exact": check["exact"],
        "worst_ticks": sorted(ticks, key=lambda t: -t["seconds"])[:5],
        "longest_call_s": max(t["longest_call_s"] for t in ticks),
        "lease_s": config.ROLLUP.lease_s,
        "series": ticks,
    }


# The shape's part: SHAPE_COUNTERS counters of SHAPE_SHARDS shards (round-robin), all changed
# each round, each in SHAPE_TOUCHED[i] of its shards, then one tick of one holder timed (its
# process's CPU: the client's decoding and encoding, the ledger), beside an empty tick; rounds
# of alternating order, the median of each. A tick's CPU per changed counter is then a line in the
# shards it returns: what the capacity model charges a counter of the realistic shape.
SHAPE_COUNTERS = 500
SHAPE_SHARDS = 8
SHAPE_TOUCHED = (1, 8)
SHAPE_ROUNDS = 6
# Each changed tick starts this long after the tick before it, however long its writes took: the
# sweep's share due grows with the time since the last tick, which must not differ with the
# shards written.
SHAPE_GAP_S = 5.0
# What the shape part keeps of each round: a round of memories (writes) or a sweep's cells
# (sweep reads) in one round shows here.
ROUND_KEYS = ("touched", "cpu_s", "empty_cpu_s", "gap_s", "writes", "sweep_reads")


def shape_run() -> dict[str, Any]:
    """The holder's CPU and reads of a tick taking in SHAPE_COUNTERS changed counters, each with
    1 and with SHAPE_SHARDS shards written since the last tick, and of an empty tick, on one
    project, one holder ticked by hand (its lease held before the counters were made: meeting
    them costs no read). Each changed tick comes SHAPE_GAP_S after the tick before (past the
    overlap), so that it returns every written shard once, with the same share of the sweep due
    at any number of shards, and the next (empty, measured) tick none again. Each round's writes
    and sweep reads are kept: a round of memories or a sweep's cells in one round stand out."""
    db = own_db()
    ctx = Context.offline()
    names = [f"shape-{n:05d}" for n in range(SHAPE_COUNTERS)]
    lease = Lease(db, state_ref(db, NAMES), "bench-shape", config.ROLLUP.lease_s)
    assert lease.acquire()
    step = Rollup(db, lease, scaling=NO_GROWTH, writing=ctx.writing)
    sent: dict[str, int] = defaultdict(int)
    pause_s = config.CHANGE_OVERLAP_S + 0.5

    last = [time.monotonic()]

    def timed() -> tuple[float, TickStats]:
        began = time.process_time()
        stats = step.tick()
        last[0] = time.monotonic()
        return time.process_time() - began, stats

    def changed(touched: int) -> dict[str, Any]:
        for _ in range(touched):  # each pass moves every counter's cursor to its next shard
            counters.increment_many(ctx, db, [(name, 1) for name in names])
            for name in names:
                sent[name] += 1
        time.sleep(max(pause_s, last[0] + SHAPE_GAP_S - time.monotonic()))
        gap_s = time.monotonic() - last[0]
        cpu, stats = timed()
        time.sleep(pause_s)
        empty_cpu, empty = timed()
        return {"touched": touched, "cpu_s": cpu, "reads": stats.reads - stats.sweep_reads,
                "changed": stats.changed_counters, "tick_s": stats.seconds, "gap_s": gap_s,
                "sweep_reads": stats.sweep_reads, "writes": stats.usage.writes,
                "empty_cpu_s": empty_cpu, "empty_reads": empty.reads - empty.sweep_reads}

    rounds: list[dict[str, Any]] = []
    try:
        step.tick()  # holding the lease before they are born
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(lambda name: counters.create_counter(
                ctx, db, name, shards=SHAPE_SHARDS, strategy="round_robin"), names))
        changed(SHAPE_SHARDS)  # met, and every shard once (not measured)
        order = [*SHAPE_TOUCHED, *reversed(SHAPE_TOUCHED)] * (SHAPE_ROUNDS // 2)
        rounds = [changed(touched) for touched in order]
        for _ in range(3):
            time.sleep(pause_s)
            step.tick()
        check = exactness(db, sent, names)
    finally:
        step.close()
        clear(db.project)
    by_touched: dict[str, Any] = {}
    for touched in SHAPE_TOUCHED:
        mine = [r for r in rounds if r["touched"] == touched]
        cpu = statistics.median(r["cpu_s"] - r["empty_cpu_s"] for r in mine)
        by_touched[str(touched)] = {
            "cpu_s_per_changed_counter": round(cpu / SHAPE_COUNTERS, 7),
            "reads_per_changed_counter": round(statistics.median(r["reads"] for r in mine)
                                               / SHAPE_COUNTERS, 3),
            "tick_s": round(statistics.median(r["tick_s"] for r in mine), 4),
            "empty_cpu_s": round(statistics.median(r["empty_cpu_s"] for r in mine), 4),
            "changed": statistics.median(r["changed"] for r in mine)}
    low, high = (by_touched[str(t)]["cpu_s_per_changed_counter"] for t in SHAPE_TOUCHED)
    per_shard = (high - low) / (SHAPE_TOUCHED[1] - SHAPE_TOUCHED[0])
    return {"counters": SHAPE_COUNTERS, "shards": SHAPE_SHARDS,
            "by_touched": by_touched,
            # CPU of a changed counter = per_counter + per_shard x the shards its tick returns.
            "cpu_s_per_counter": round(low - per_shard * SHAPE_TOUCHED[0], 7),
            "cpu_s_per_shard": round(per_shard, 7),
            "exact": check["exact"],
            "rounds": [{key: round(value, 4) if isinstance(value, float) else value
                        for key, value in r.items() if key in ROUND_KEYS} for r in rounds]}


# The watch's part: WATCH_COUNTERS counters above their minimum (4 shards, minimum 1), watched by
# each partition of WATCH_P once; and by a query of every partition's (the shape before each
# partition queried its own homes, which P = 1 still asks).
WATCH_COUNTERS = 4000
WATCH_P = 4


def watch_run() -> dict[str, Any]:
    """The documents one round of the watch reads at P = WATCH_P (each partition its own homes'
    counters), beside WATCH_P reads of every counter above its minimum (a watch filtered by home
    after reading), on one project."""
    db = own_db()
    names = [f"watch-{n:05d}" for n in range(WATCH_COUNTERS)]
    ctx = Context.offline()
    try:
        with ThreadPoolExecutor(CREATE_THREADS) as pool:
            list(pool.map(lambda name: counters.create_counter(ctx, db, name, shards=4), names))
        as_of = to_micros(dt.datetime.now(dt.UTC))
        found: dict[str, int] = {}
        reads: dict[str, int] = {}
        for part in [*partitions.parts(WATCH_P), partitions.WHOLE]:
            lease = Lease(db, state_ref(db, NAMES, part), "bench-watch", config.ROLLUP.lease_s)
            assert lease.acquire()
            store = Store(db, lease, ctx.writing, renew_s=config.ROLLUP.renew_s)
            store.take_usage()
            watched = store.above_min(part.homes(), as_of)
            reads[str(part)] = store.take_usage().reads
            found[str(part)] = sum(part.owns(partitions.home_of(name)) for name in watched)
            store.close()
    finally:
        clear(db.project)
    per_round = sum(n for part, n in reads.items() if part != str(partitions.WHOLE))
    return {"counters": WATCH_COUNTERS, "partitions": WATCH_P, "reads_by_partition": reads,
            "owned_found": found, "reads_per_round": per_round,
            "reads_per_round_filtered_after": WATCH_P * reads[str(partitions.WHOLE)],
            "target": 4200}


# The pure ledger's part: ticks of LEDGER_CHANGED changed counters (8 shards, one written a
# tick) beside counters held idle, above their minimum and cooling down (nothing due for them in
# the run), at each of LEDGER_HELD; the CPU of each tick's ledger work (apply, plan, folds,
# end), LEDGER_TICKS ticks with a sweep every 50.
LEDGER_CHANGED = 800
LEDGER_HELD = (1_000, 100_000)
LEDGER_TICKS = 120
LEDGER_SHARDS = 8


def ledger_ticks(held: int) -> list[float]:
    """The CPU seconds of each tick of a ledger holding `held` counters, LEDGER_CHANGED of them
    changed every tick."""
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    book = Ledger()
    document = {"count": 0, "num_shards": LEDGER_SHARDS, "rate": 0.5, "rate_at": start,
                "low_since": start, "above_min": True, partitions.SHRINK_HOME: 0}
    zero = {str(n): ShardValue(count=0, writes=0) for n in range(LEDGER_SHARDS)}
    names = [f"c{n}" for n in range(held)]
    for name in names:
        book.hold(name, document, {config.SHARD_COUNTS_FIELD: {}}, since=start)
        book.hold_shards(name, dict(zero))
    hot = names[:LEDGER_CHANGED]
    values = {name: 0 for name in hot}
    taken = []
    checkpoint = start
    for tick in range(1, LEDGER_TICKS + 1):
        since, as_of = start + dt.timedelta(seconds=tick - 1), start + dt.timedelta(seconds=tick)
        changes = {}
        for n, name in enumerate(hot):
            values[name] += 1
            changes[name] = {str((tick + n) % LEDGER_SHARDS): ShardValue(count=values[name],
                                                                        writes=values[name])}
        began = time.process_time()
        sums, _ = book.apply(changes, since, as_of)
        plan = book.plan(sums, as_of, checkpoint=checkpoint)
        for counter, publish in plan.updates.items():
            book.published(counter, publish)
        book.folds_due(as_of)
        book.end_tick(changes)
        checkpoint = book.checkpointed or checkpoint
        taken.append(time.process_time() - began)
    return taken


def ledger_run() -> dict[str, Any]:
    """The pure ledger's tick CPU with LEDGER_CHANGED changed counters, at each of LEDGER_HELD
    held; alternated twice, so that the machine's drift falls on both."""
    runs: dict[int, list[float]] = defaultdict(list)
    for held in [*LEDGER_HELD, *reversed(LEDGER_HELD)]:
        runs[held] += ledger_ticks(held)[1:]  # the first tick meets every counter
    medians = {held: statistics.median(taken) for held, taken in runs.items()}
    low, high = LEDGER_HELD[0], LEDGER_HELD[-1]
    return {"changed": LEDGER_CHANGED, "shards": LEDGER_SHARDS, "ticks": LEDGER_TICKS,
            "tick_cpu_ms": {str(held): round(1000 * median, 3)
                            for held, median in medians.items()},
            "tick_cpu_p99_ms": {str(held): round(1000 * percentile(taken, 99), 3)
                                for held, taken in runs.items()},
            "growth": round(medians[high] / medians[low], 3), "target": 1.10}


def parts_to_run() -> tuple[str, ...]:
    """SCALE_PARTS: the parts to run (all of PARTS unless told)."""
    chosen = tuple(part.strip() for part in os.environ.get("SCALE_PARTS", "").split(",")
                   if part.strip()) or PARTS
    unknown = set(chosen) - set(PARTS)
    if unknown:
        raise SystemExit(f"SCALE_PARTS: unknown {sorted(unknown)}; parts are {', '.join(PARTS)}")
    return chosen


REFERENCE_RUNS = 5  # shape runs the reference keeps: the model takes their median


def keep_reference(shape: dict[str, Any], when: str) -> None:
    """Add a shape run to bench/results/reference.json (`capacity_model.REFERENCE`), keeping the
    last REFERENCE_RUNS: the production estimates take the median of recent runs, not one day's.
    An inexact run is not kept."""
    if not shape["exact"]:
        return
    path = capacity_model.REFERENCE
    figures = json.loads(path.read_text())
    figures["shape_runs"] = [*figures["shape_runs"], {**shape, "when": when}][-REFERENCE_RUNS:]
    path.write_text(json.dumps(figures, indent=2) + "\n")


def saved() -> dict[str, Any]:
    """The figures bench/results/scale.json holds (what a partial run keeps of the others)."""
    path = os.path.join(os.path.dirname(__file__), "results", "scale.json")
    if not os.path.exists(path):
        return {}
    with open(path) as file:
        figures: dict[str, Any] = json.load(file)
    for key in ("when", "machine"):
        figures.pop(key, None)
    figures.pop("distinct_counters", None)  # the first meeting's earlier name
    return figures


def run() -> dict[str, Any]:
    """The parts SCALE_PARTS names (all unless told); a partial run keeps the saved figures of
    the other parts (`saved`), and its series holds only its own parts'."""
    chosen = parts_to_run()
    figures: dict[str, Any] = {} if chosen == PARTS else saved()
    series: dict[str, Any] = {}
    run_s: dict[str, float] = dict(figures.get("run_s_by_part") or {})
    # The run each part's figures come from: the model compares only parts of one run.
    when = {**(figures.get("when_by_part") or {}),
            **dict.fromkeys(chosen, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))}
    balances: dict[str, Any] = {"target": 1.25, **(figures.get("balance") or {})}
    for stale in ("distinct_run", "distinct_run_max_over_mean"):  # the first meeting's old names
        balances.pop(stale, None)
    began = time.monotonic()
    if "capacity" in chosen:
        print(f"== scale: capacity, {COUNTERS:,} counters, P = {PARTITIONS}", flush=True)
        per_holder, by_partitions = capacity_runs()
        print(json.dumps(by_partitions, indent=1), flush=True)  # in the log, should a later
        # part fail
        figures.update(capacity_per_holder=per_holder, capacity_by_partitions=by_partitions)
        run_s["capacity"] = time.monotonic() - began
    if "lag" in chosen:
        part_began = time.monotonic()
        print(f"== scale: lag, {RATE}/s for {LAG_S:.0f} s, P = {BALANCE_P}", flush=True)
        lag = lag_run()
        series["lags_s"] = lag.pop("lags_s")
        print(json.dumps(lag, indent=1), flush=True)
        figures.update(lag=lag, lag_p99_s=lag["lag_p99_s"],
                       balance_max_over_mean=balance(lag["changed_per_partition"]))
        balances["lag_run"] = lag["changed_per_partition"]
        run_s["lag"] = time.monotonic() - part_began
    if "first_meeting" in chosen:
        part_began = time.monotonic()
        print(f"== scale: first meeting, {DISTINCT:,} counters, P = {FIRST_MEETING_P}",
              flush=True)
        meeting = first_meeting_run()
        series["published"], series["committed"] = meeting.pop("published"), \
            meeting.pop("committed")
        figures["first_meeting"] = {**meeting, **{
            key: value for key, value in (figures.get("first_meeting") or {}).items()
            if key == "vs_known"}}
        balances["first_meeting"] = meeting["changed_per_partition"]
        balances["first_meeting_max_over_mean"] = balance(meeting["changed_per_partition"])
        run_s["first_meeting"] = time.monotonic() - part_began
    def part(name: str, title: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run a part that `chosen` names, printing its figures (but its series) and timing it."""
        part_began = time.monotonic()
        print(f"== scale: {title}", flush=True)
        found = measure()
        print(json.dumps({k: v for k, v in found.items() if k != "series"}, indent=1),
              flush=True)
        run_s[name] = time.monotonic() - part_began
        return found

    if "waker" in chosen:
        figures["waker"] = part("waker", f"waker, a write to {partitions.CHOICES[-1]} partitions",
                                waker_run)
    if "meeting" in chosen:
        figures["first_meeting"] = {**(figures.get("first_meeting") or {}), "vs_known": part(
            "meeting", f"meeting {MEETING_COUNTERS:,} new counters against known ones",
            meeting_run)}
    if "handover" in chosen:
        handover = part("handover", f"a handover under {HANDOVER_CHANGED} changed counters a "
                        "second", handover_run)
        series["handover_ticks"] = handover.pop("series")
        figures["handover"] = handover
    if "shape" in chosen:
        shape = part("shape", f"the tick at the realistic shape, {SHAPE_COUNTERS} counters of "
                     f"{SHAPE_SHARDS} shards", shape_run)
        figures["shape"] = shape
        keep_reference(shape, when["shape"])
    if "watch" in chosen:
        figures["watch"] = part("watch", f"the watch, {WATCH_COUNTERS:,} counters above their "
                                f"minimum, P = {WATCH_P}", watch_run)
    if "ledger" in chosen:
        figures["ledger"] = part("ledger", f"the pure ledger, {LEDGER_CHANGED} changed among "
                                 f"{LEDGER_HELD} held", ledger_run)
    sizes = {**(figures.get("sizes") or {}), "counters": COUNTERS, "lag_s": LAG_S, "rate": RATE,
             "steps": list(STEPS), "repeats": REPEATS, "rounds": ROUNDS}
    if "first_meeting" in chosen:
        sizes.update(distinct=DISTINCT, first_meeting_partitions=FIRST_MEETING_P)
    sizes["scaled_down"] = (COUNTERS < DEFAULT_COUNTERS or sizes.get("distinct", DISTINCT) < 50_000
                            or LAG_S < 30)
    sizes["why"] = SCALED_DOWN
    figures.update(balance=balances, sizes=sizes, parts_run=list(chosen),
                   run_s=time.monotonic() - began, run_s_by_part=run_s, when_by_part=when,
                   series=series)
    # The capacity model's predictions beside the measured points (bench/capacity_model.py).
    figures["model"] = {"capacity": capacity_model.compare(figures),
                        "lag": capacity_model.compare_lag(figures),
                        # Deployed, at the realistic shape: what P = 128 carries, what binds.
                        "production": capacity_model.production(capacity_model.reference_shape())}
    return figures
