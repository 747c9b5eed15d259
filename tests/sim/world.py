"""One simulated run: the real write paths, triggers and rollup on the Firestore model, under a
seeded schedule of load, slow and failing commits, and rollup holders killed, paused and
delivered twice; then a quiet spell, and the checks.

Actors (each a thread of `virtual.Sim`):
- writers: plain increments (with and without `request_id`, retried with the same id after an
  error, as clients do), batches, a `unique` counter's like/unlike toggles, a paced (views)
  counter, trend `track`s, and the app's own orders (created, moved between statuses, re-summed
  and deleted); the write paths enqueue their slots' ticks through one `waking.Waker`, as in one
  instance;
- the orders' trigger: every committed change of an order becomes an event, delivered after a
  delay, sometimes twice, in any order, and again after a failure (at-least-once);
- rollup invocations as deployed, P partitions (`counting.partitions`): `Holder.tick_slot` for
  each task of a slot and partition (named for both, so one each; dispatched after the slot's
  end, one at a time per partition index, to that index's instance, whose holder of the
  partition lives on between tasks, and is closed once it answers RETIRED (or once the current
  partition ticked there: `cadence.closed_after`); a failed or killed one is delivered again
  after a backoff, a few are delivered twice at once to a second instance), and
  `Holder.housekeeping` of every partition of the current P every minute on an instance of its
  own (never overlapping). A killed instance loses its holders: a new one starts
  empty;
- the operator: P is 1, 2 or 4 at the start, and changed (`partitions.change`, one conditional
  commit) up to three times while writers write; every actor is a process that learns P within
  CONFIG_CACHE_TTL_S. Tasks of a retired partition are answered RETIRED and wake the current
  partitions;
- chaos: kills and pauses of rollup invocations mid-tick, on every partition's instances and on
  the scheduled one, and of writers.

Checks at quiescence: every counter's rollup equals its shards (else `lost`), its shards lie
within what clients were acknowledged and what they could not tell (else `doubled` or `lost`);
the collection counters equal what the final orders count; each trend total equals its buckets
and the tracks acknowledged; no holder committed rollup documents without holding its
partition's lease (`fenced_violations`). The outcome also tells the partitionings the run went
through, the RETIRED answers, and the lease handovers of each partition.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from counting import (
    cadence,
    collections,
    config,
    counters,
    declarations,
    ledger,
    partitions,
    trends,
    waking,
)
from counting.config import AutoscaleParams
from counting.errors import CounterError
from counting.partitions import Part
from counting.policy import Policy
from google.api_core import exceptions as gexc
from google.cloud import firestore

from .firestore_model import Client, Committed, Latency, Model, Snapshot
from .virtual import Sim

# Autoscaling fast enough that a run of a few minutes grows, shrinks and folds shards.
SCALING = AutoscaleParams(shard_write_rate=1.0, rise_tau_s=2.0, fall_tau_s=5.0,
                          cool_down_s=20.0, fold_grace_s=2 * config.CONFIG_CACHE_TTL_S)
PLAIN = ("plain-a", "plain-b", "plain-c")
LIKES, VIEWS = "likes", "views"
REGIONS = ("eu", "us")
TAGS = ("coffee", "tea", "rain", "sun")
STATUSES = ("new", "paid", "shipped")
RETRIES = 3  # a client's attempts at one request with a request_id
ORDERS = next(w for w in declarations.WATCHES if w.documents == "orders/{order}")
COUNTS = (1, 2, 4)  # the numbers of partitions a run starts with and changes between
PARTITIONS_PATH = (config.INTERNAL, partitions.PARTITIONS_DOC)
# Every partition's lease document -> the partition.
LEASES: dict[tuple[str, ...], Part] = {
    (config.INTERNAL, part.lease_id): part
    for count in partitions.CHOICES for part in partitions.parts(count)}
SCHEDULED = "scheduled"  # the scheduled function's instance


@dataclass(frozen=True, kw_only=True)
class Settings:
    active_s: float = 75.0  # writers and chaos run this long
    quiet_s: float = 240.0  # then only the rollup's own triggers: sweeps, housekeeping
    writers: int = 4
    kill_p: float = 0.35  # of a chaos step on a holder: kill it (else pause it)
    writer_kill_p: float = 0.3  # of a chaos step: kill a writer instead
    scheduled_doom_p: float = 0.15  # of a step on a holder: strike the scheduled instance's
    latency: Latency = field(default_factory=Latency)
    partitions: int | None = None  # P at the start (None: one of COUNTS, drawn per seed)
    changes: int | None = None  # changes of P while writers write (None: 0 to 3, drawn)


@dataclass
class Outcome:
    seed: int
    protected: bool
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    fenced_violations: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    kills: int = 0
    pauses: int = 0
    writer_kills: int = 0
    invocations: int = 0
    writes: int = 0  # client writes attempted
    partitions: list[int] = field(default_factory=list)  # P at the start, then each change's
    retired: int = 0  # invocations answered RETIRED (a task or a run of a replaced partition)
    handovers: dict[str, int] = field(default_factory=dict)  # partition -> lease takeovers
    struck: dict[str, int] = field(default_factory=dict)  # "tick-<index>", SCHEDULED -> kills
    # and pauses of its invocations

    @property
    def partition_changes(self) -> int:
        return max(0, len(self.partitions) - 1)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.fenced_violations or self.crashes)


@dataclass
class Expected:
    """What clients were told about one counter (or trend total): applied for sure, and
    attempts whose outcome they could not tell (an error after the commit may have applied)."""

    sure: int = 0
    unsure: int = 0  # the largest amount the unsure attempts may have added


class ProcessesKnow(partitions.Known):
    """P as the processes know it: every actor is a process of its own, with its own cache of
    P on the virtual clock. The operator changes P from a process of its own too: its `forget`
    reaches no other (a writer learns the new P within CONFIG_CACHE_TTL_S)."""

    def __init__(self, sim: Sim) -> None:
        super().__init__(monotonic=sim.monotonic)
        self._sim = sim
        self._processes: dict[str, partitions.Known] = {}

    def count(self, db: firestore.Client) -> int:
        actor = self._sim.current()
        name = actor.name if actor is not None else ""
        known = self._processes.get(name)
        if known is None:
            known = self._processes[name] = partitions.Known(monotonic=self._sim.monotonic)
        return known.count(db)

    def forget(self) -> None:
        pass


class World:
    def __init__(self, seed: int, settings: Settings, protected: bool) -> None:
        self.seed = seed
        self.settings = settings
        self.rng = random.Random(seed)
        self.sim = Sim(random.Random(self.rng.random()))
        self.model = Model(self.sim, random.Random(self.rng.random()), settings.latency)
        self.db = cast(firestore.Client, Client(self.model))
        self.clock = cadence.Clock(monotonic=self.sim.monotonic, now=self.sim.wall,
                                   sleep=self.sim.wait)
        self.outcome = Outcome(seed=seed, protected=protected)
        self.expected: dict[str, Expected] = defaultdict(Expected)
        self.tracks: dict[tuple[str, str], Expected] = defaultdict(Expected)
        self.writing = True
        # What chaos does to the next invocation of an instance: "tick-<index>" (a partition
        # index's instances, the extra ones included) or SCHEDULED.
        self.dooms: dict[str, str] = {}
        # Live instances' holders, by partition.
        self.instances: dict[str, dict[Part, cadence.Holder]] = {}
        self.started = 0  # holders started
        self.leases: dict[str, tuple[str, ...]] = {}  # a holder's owner -> its lease's path
        self.tasks: set[str] = set()  # task names taken
        self.dispatching: set[int] = set()  # the partition indexes whose queue dispatches one
        self.writers: list[Any] = []
        self.last_owner: dict[tuple[str, ...], str] = {}  # a lease's path -> its last holder
        start = settings.partitions or self.rng.choice(COUNTS)
        self.outcome.partitions.append(start)
        changes = self.rng.choice((0, 1, 1, 2, 3)) if settings.changes is None \
            else settings.changes
        self.change_at = sorted(self.rng.uniform(8.0, settings.active_s - 8.0)
                                for _ in range(changes))
        self.model.on_commit.append(self._fenced)
        self.model.on_commit.append(self._order_events)
        self.model.on_commit.append(self._partitioning)

    # -- the run --

    def run(self) -> Outcome:
        end = self.settings.active_s
        self.sim.spawn("setup", self._setup)
        self.sim.spawn("scheduler", self._scheduler, after_s=1.0)
        for n in range(self.settings.writers):
            self.writers.append(self.sim.spawn(f"writer-{n}", functools.partial(self._writer, n),
                                               after_s=0.5 + n * 0.1))
        self.sim.spawn("chaos", self._chaos, after_s=5.0)
        self.sim.spawn("operator", self._operator, after_s=1.0)
        known = partitions.KNOWN
        partitions.KNOWN = ProcessesKnow(self.sim)
        waker = waking.Waker(lambda db, part, slot: self._enqueue(part, slot),
                             count=partitions.count)
        # One enqueue at a time, in the order the waker asks (its partitions'), while the
        # writer waits: its four threads would draw from the run's generator in any order.
        waker._calls.shutdown()
        waker._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tick-enqueue")
        previous = waking.install(waker)
        try:
            self.sim.run_until(end)
            self.writing = False
            self.sim.run_until(end + self.settings.quiet_s)
            self._check()
        finally:
            self.sim.shutdown()
            waking.install(previous)
            waker._calls.shutdown()
            partitions.KNOWN = known
        self.outcome.crashes += self.sim.crashes
        return self.outcome

    def _setup(self) -> None:
        """The admin sets P and creates the counters (again after an error: both are
        idempotent). One counter is as the code before `shard_counts` made it: holders read it
        whole until one gives it them."""
        if self.outcome.partitions[0] != 1:
            self._change(self.outcome.partitions[0])
            assert self._count() == self.outcome.partitions[0], "could not set the partitions"
        made = [(name, self.rng.choice((1, 2, 4)), Policy(by=(1, 5))) for name in PLAIN]
        made += [(LIKES, 2, Policy(unique=True)), (VIEWS, 2, Policy(min_interval_s=5))]
        for name, shards, policy in made:
            answered, _ = self._attempts(functools.partial(
                counters.create_counter, self.db, name, shards=shards, policy=policy), retry=True)
            assert answered, f"could not create {name}"
        legacy = counters.memory_ref(self.db, PLAIN[-1])
        answered, _ = self._attempts(functools.partial(
            legacy.update, {config.SHARD_COUNTS_FIELD: firestore.DELETE_FIELD}), retry=True)
        assert answered, "could not make a legacy counter"

    # -- rollup invocations --

    def _invoke(self, instance: str, target: str, call: Callable[[], object]) -> bool:
        """One invocation on `instance`, whose holders live as long as it does; False when it
        failed (the platform retries it). Chaos strikes it when `target` is doomed. A killed
        instance's holders are gone with it."""
        actor = self.sim.current()
        assert actor is not None
        holders = self.instances.setdefault(instance, {})
        self.outcome.invocations += 1
        doom = self.dooms.pop(target, None) if self.writing else None
        if doom is not None:
            self.sim.spawn("chaos-strike", functools.partial(self._strike, actor, doom, target))
        try:
            call()
        except Exception:  # Busy, a lost lease, Firestore: recorded and raised for a retry
            return False
        except BaseException:
            if self.instances.get(instance) is holders:
                del self.instances[instance]
            raise
        finally:
            actor.owner = None
        return True

    def _holder(self, instance: str, part: Part) -> cadence.Holder:
        """`instance`'s holder of `part`, made on first use, as `cadence.holder_for` keeps
        them. The invocation's actor acts for it from here on (`_fenced`)."""
        actor = self.sim.current()
        assert actor is not None
        holders = self.instances.setdefault(instance, {})
        holder = holders.get(part)
        if holder is None:
            self.started += 1
            holder = holders[part] = cadence.Holder(
                self.db, part=part, enqueue=self._enqueue, owner=f"{instance}-{self.started}",
                scaling=SCALING, clock=self.clock)
            self.leases[holder.lease.owner] = (config.INTERNAL, part.lease_id)
        actor.owner = holder.lease.owner
        return holder

    def _ran(self, instance: str, part: Part, run: cadence.Invocation) -> None:
        """After an invocation, the instance closes the holders it made useless, as
        `cadence.invoke` does (`cadence.closed_after`)."""
        if run.outcome == cadence.Outcome.RETIRED:
            self.outcome.retired += 1
        holders = self.instances.get(instance, {})
        for stale in cadence.closed_after(holders, part, run.outcome):
            holders.pop(stale).close()

    def _tick(self, instance: str, part: Part, slot: int) -> None:
        """A task's invocation on the instance of its partition index."""
        self._ran(instance, part, self._holder(instance, part).tick_slot(slot))

    def _housekeeping(self) -> None:
        """The scheduled invocation: every partition of the current P, one after the other,
        as `cadence.housekeeping` runs them."""
        for part in partitions.parts(partitions.read_count(self.db)):
            self._ran(SCHEDULED, part, self._holder(SCHEDULED, part).housekeeping())

    def _enqueue(self, part: Part, slot: int) -> bool:
        """Cloud Tasks: a task on the queue of the partition's index, named for the slot and the
        partition, refused when it exists, dispatched a moment after the slot's end (now and then
        a little before it: clocks differ)."""
        name = waking.task_id(slot, part)
        if name in self.tasks:
            return False
        self.tasks.add(name)
        due = (waking.slot_end(slot) - self.sim.wall()).total_seconds()
        delay = max(0.0, due + self.rng.uniform(-0.05, 0.4))
        self.sim.spawn(f"task-{name}", functools.partial(self._dispatch, part, slot, 1),
                       after_s=delay)
        if self.rng.random() < 0.05:  # Cloud Run past its max instances for a moment
            extra = f"extra-{name}"
            self.sim.spawn(f"task-{name}-dup", functools.partial(
                self._invoke, extra, f"tick-{part.index}",
                functools.partial(self._tick, extra, part, slot)),
                after_s=delay + self.rng.uniform(0.0, 0.5))
        return True

    def _dispatch(self, part: Part, slot: int, attempt: int) -> None:
        """One delivery attempt: the queue of the partition's index dispatches one task at a
        time, to that index's instance. A failed or killed attempt is retried after a backoff,
        up to 5 attempts."""
        while part.index in self.dispatching:
            self.sim.wait(0.05)
        self.dispatching.add(part.index)
        instance = f"tick-{part.index}"
        done = False
        try:
            done = self._invoke(instance, instance,
                                functools.partial(self._tick, instance, part, slot))
        finally:
            self.dispatching.discard(part.index)
            if not done and attempt < 5:
                self.sim.spawn(f"task-{waking.task_id(slot, part)}-{attempt + 1}",
                               functools.partial(self._dispatch, part, slot, attempt + 1),
                               after_s=min(10.0, 2.0 ** (attempt - 1)))

    def _scheduler(self) -> None:
        """Cloud Scheduler: an invocation at every minute, never two at once (the next waits for
        the last to end; one that died ends it)."""
        n = 0
        while True:
            n += 1
            execution = self.sim.spawn(f"scheduled-{n}", functools.partial(
                self._invoke, SCHEDULED, SCHEDULED, self._housekeeping))
            while not execution.done:
                self.sim.wait(1.0)
            self.sim.wait(60.0 - (self.sim.monotonic() % 60.0))

    def _operator(self) -> None:
        """Changes P to another of COUNTS at the drawn instants (`counters rollup partitions
        N`, run again after an error: a change to the current P changes nothing)."""
        for at in self.change_at:
            self.sim.wait(at - self.sim.monotonic())
            self._change(self.rng.choice([count for count in COUNTS if count != self._count()]))

    def _change(self, new: int) -> None:
        for _ in range(RETRIES):
            try:
                partitions.change(self.db, new)
                return
            except (gexc.GoogleAPICallError, ValueError):  # ValueError: aborted at every attempt
                continue

    def _count(self) -> int:
        """P as configured now (the world sees the database without a request)."""
        version = self.model.latest(PARTITIONS_PATH)
        return int(((version.data if version else None) or {}).get("count") or 1)

    def _kill_writer(self) -> None:
        """An instance of the write path dies wherever it is (between a commit and its touch,
        say); a new one takes its place."""
        live = [w for w in self.writers if not w.done and not w.killed]
        if not live:
            return
        victim = self.rng.choice(live)
        victim.killed = True
        self.outcome.writer_kills += 1
        n = len(self.writers)
        self.writers.append(self.sim.spawn(f"writer-{n}", functools.partial(self._writer, n),
                                           after_s=self.rng.uniform(0.1, 2.0)))

    def _chaos(self) -> None:
        """Now and then a writer dies, or the next rollup invocation of a partition index of the
        current P (or of the scheduled instance) is killed or paused a moment after it starts
        (mid-tick: between its Firestore calls)."""
        while self.writing:
            self.sim.wait(self.rng.uniform(3.0, 12.0))
            if self.rng.random() < self.settings.writer_kill_p:
                self._kill_writer()
                continue
            doom = "kill" if self.rng.random() < self.settings.kill_p else "pause"
            target = SCHEDULED if self.rng.random() < self.settings.scheduled_doom_p \
                else f"tick-{self.rng.randrange(self._count())}"
            self.dooms[target] = doom

    def _strike(self, victim: Any, doom: str, target: str) -> None:
        self.sim.wait(self.rng.uniform(0.0, 0.1))
        if victim.done or victim.killed:
            return
        if doom == "kill":
            victim.killed = True
            self.outcome.kills += 1
        else:
            victim.pause_s = self.rng.uniform(5.0, 25.0)  # past the lease's 10 s, or not
            self.outcome.pauses += 1
        self.outcome.struck[target] = self.outcome.struck.get(target, 0) + 1

    # -- writers --

    def _writer(self, n: int) -> None:
        rng = random.Random(self.rng.random())
        configs = counters.ConfigCache(clock=self.sim.monotonic)
        picker = counters.ShardPicker(random.Random(rng.random()))
        ops: list[Callable[[random.Random, counters.ConfigCache, counters.ShardPicker], None]] = [
            self._plain, self._plain, self._batch, self._like, self._view, self._track,
            self._order]
        while self.writing:
            self.outcome.writes += 1
            rng.choice(ops)(rng, configs, picker)
            self.sim.wait(rng.expovariate(1 / 0.4))

    def _attempts(self, call: Callable[[], Any], *, retry: bool) -> tuple[bool, Any]:
        """Call until it answers (up to RETRIES times when `retry`): (answered, answer)."""
        for _ in range(RETRIES if retry else 1):
            try:
                return True, call()
            except (gexc.GoogleAPICallError, CounterError):
                continue
        return False, None

    def _plain(self, rng: random.Random, configs: counters.ConfigCache,
               picker: counters.ShardPicker) -> None:
        counter, by = rng.choice(PLAIN), rng.randint(1, 5)
        request_id = f"r{rng.randrange(10**9)}" if rng.random() < 0.5 else None
        uid = f"u{rng.randrange(20)}"  # a retry is the same user's
        self._sent(counter, by)
        answered, _ = self._attempts(lambda: counters.increment(
            self.db, counter, by, request_id=request_id, uid=uid, admin=False,
            configs=configs, picker=picker), retry=request_id is not None)
        self._told(counter, by, answered)

    def _batch(self, rng: random.Random, configs: counters.ConfigCache,
               picker: counters.ShardPicker) -> None:
        items = [(rng.choice(PLAIN), rng.randint(1, 2)) for _ in range(rng.randint(1, 3))]
        totals: dict[str, int] = defaultdict(int)
        for counter, by in items:
            totals[counter] += by
        if any(total > 5 for total in totals.values()):
            return
        request_id = f"b{rng.randrange(10**9)}"  # the same in every attempt
        for counter, total in totals.items():
            self._sent(counter, total)
        answered, _ = self._attempts(lambda: counters.increment_many(
            self.db, items, request_id=request_id, uid="batcher", admin=False,
            configs=configs, picker=picker), retry=True)
        for counter, total in totals.items():
            self._told(counter, total, answered)

    def _like(self, rng: random.Random, configs: counters.ConfigCache,
              picker: counters.ShardPicker) -> None:
        # Checked against the voter markers at the end: a like and its marker commit together.
        by, uid = rng.choice((1, -1)), f"u{rng.randrange(8)}"
        self._attempts(lambda: counters.increment(
            self.db, LIKES, by, uid=uid, admin=False, configs=configs, picker=picker),
            retry=False)

    def _view(self, rng: random.Random, configs: counters.ConfigCache,
              picker: counters.ShardPicker) -> None:
        self._sent(VIEWS, 1)
        try:
            counters.increment(self.db, VIEWS, 1, uid=f"u{rng.randrange(6)}", admin=False,
                               configs=configs, picker=picker)
        except CounterError:  # too soon (RESOURCE_EXHAUSTED), or a race: nothing written
            self.expected[VIEWS].unsure -= 1
            return
        except gexc.GoogleAPICallError:
            return
        self._told(VIEWS, 1, True)

    def _track(self, rng: random.Random, configs: counters.ConfigCache,
               picker: counters.ShardPicker) -> None:
        region = rng.choice(REGIONS)
        tags = rng.sample(TAGS, rng.randint(1, 3))
        request_id = f"t{rng.randrange(10**9)}"  # the same in every attempt
        keys = [(scope, tag) for tag in tags for scope in (region, config.GLOBAL_SCOPE)]
        for key in keys:
            self.tracks[key].unsure += 1
        answered, _ = self._attempts(lambda: trends.track(
            self.db, region, tags, request_id=request_id, uid="tracker", now=self.sim.wall(),
            rng=rng), retry=True)
        for key in keys:
            if answered:
                self.tracks[key].unsure -= 1
                self.tracks[key].sure += 1

    def _order(self, rng: random.Random, configs: counters.ConfigCache,
               picker: counters.ShardPicker) -> None:
        """The app writes its own documents; the trigger counts them."""
        ref = self.db.collection("orders").document(f"o{rng.randrange(12)}")
        with contextlib.suppress(gexc.GoogleAPICallError):
            if rng.random() < 0.2:
                ref.delete()
            else:
                ref.set({"status": rng.choice(STATUSES), "amount": rng.randint(1, 100)})

    def _sent(self, counter: str, by: int) -> None:
        """Before a request leaves: whatever happens next (an error, or its writer dying), it
        may have applied."""
        self.expected[counter].unsure += by

    def _told(self, counter: str, by: int, answered: bool) -> None:
        """The client got an answer: it applied (once, whatever the retries)."""
        if answered:
            self.expected[counter].unsure -= by
            self.expected[counter].sure += by

    # -- the orders' trigger --

    def _order_events(self, done: Committed) -> None:
        for path, before, after in done.changes:
            if len(path) != 2 or path[0] != "orders":
                continue
            event = f"e{done.commit_us}-{path[1]}"
            states = (self._state(path, before), self._state(path, after))
            if states == (None, None):
                continue  # a delete of a missing document changes nothing: no event
            delay = self.rng.uniform(0.05, 5.0)
            deliver = functools.partial(self._deliver, path, *states, event)
            self.sim.spawn(event, deliver, after_s=delay)
            if self.rng.random() < 0.2:
                self.sim.spawn(event + "-again", deliver, after_s=delay + self.rng.uniform(0, 20))

    def _state(self, path: tuple[str, ...], version: Any) -> Snapshot | None:
        """The document as an event carries it: None when it did not exist."""
        if version is None or version.data is None:
            return None
        return self.model._snapshot(path, version.commit_us)

    def _deliver(self, path: tuple[str, ...], before: Snapshot | None,
                 after: Snapshot | None, event: str) -> None:
        counting = collections.Counting(self.db, ORDERS,
                                        configs=counters.ConfigCache(clock=self.sim.monotonic),
                                        picker=counters.ShardPicker(random.Random(event)))
        observed = collections.Observed.of_change("/".join(path), cast(Any, before),
                                                  cast(Any, after))
        for attempt in range(6):
            try:
                counting.apply(observed, event=event)
                return
            except (gexc.GoogleAPICallError, CounterError):
                self.sim.wait(2.0 ** attempt)  # delivered again after a failure

    # -- checks --

    def _fenced(self, done: Committed) -> None:
        """A holder's commit of anything but internal documents must carry its fence: a write
        of its partition's lease document, which it held until this commit."""
        actor = self.sim.current()
        if actor is None or actor.owner is None:
            return
        lease_path = self.leases[actor.owner]
        others = [path for path, _, _ in done.changes if path[0] != config.INTERNAL]
        if not others:
            return
        fence = next((before for path, before, _ in done.changes if path == lease_path), None)
        held = fence is not None and fence.data is not None \
            and fence.data.get("owner") == actor.owner
        if not held:
            self.outcome.fenced_violations.append(
                f"{actor.owner} committed {'/'.join(others[0])} without holding "
                f"{'/'.join(lease_path)}")

    def _partitioning(self, done: Committed) -> None:
        """Note each change of P the operator made, and each lease taken by another holder than
        the one that held it last (a handover: released, expired or retaken)."""
        for path, before, after in done.changes:
            if path == PARTITIONS_PATH and done.actor == "operator":
                was = ((before.data if before else None) or {}).get("count") or 1
                now = (after.data or {}).get("count") or 1
                if now != was:
                    self.outcome.partitions.append(int(now))
            part = LEASES.get(path)
            owner = (after.data or {}).get("owner") if part is not None else None
            if part is None or owner is None:
                continue
            last = self.last_owner.get(path)
            if last is not None and last != owner:
                self.outcome.handovers[str(part)] = self.outcome.handovers.get(str(part), 0) + 1
            self.last_owner[path] = owner

    def _check(self) -> None:
        docs = {path: versions[-1].data for path, versions in self.model.docs.items()
                if versions[-1].data is not None}
        shard_sums: dict[str, int] = defaultdict(int)
        for path, data in docs.items():
            if len(path) == 4 and path[0] == config.COUNTERS and path[2] == config.SHARDS:
                shard_sums[path[1]] += int(data.get("count") or 0)
        for path, data in docs.items():
            if len(path) != 2 or path[0] != config.COUNTERS:
                continue
            counter, published = path[1], int(data.get("count") or 0)
            if published != shard_sums[counter]:
                self.outcome.lost.append(f"{counter}: rollup {published}, shards "
                                         f"{shard_sums[counter]}")
        for counter, expected in self.expected.items():
            self._within(counter, shard_sums[counter], expected)
        voters = sum(1 for path, data in docs.items()
                     if path[:3] == (config.COUNTERS, LIKES, config.VOTERS)
                     and data.get("counted", "uid" in data))
        if shard_sums[LIKES] != voters:
            self.outcome.doubled.append(f"{LIKES}: shards {shard_sums[LIKES]}, voters {voters}")
        self._check_orders(docs, shard_sums)
        self._check_trends(docs)

    def _within(self, name: str, value: int, expected: Expected) -> None:
        if value < expected.sure:
            self.outcome.lost.append(f"{name}: {value} < {expected.sure} acknowledged")
        if value > expected.sure + expected.unsure:
            self.outcome.doubled.append(f"{name}: {value} > {expected.sure} acknowledged + "
                                        f"{expected.unsure} unanswered")

    def _check_orders(self, docs: dict[tuple[str, ...], Any], shard_sums: dict[str, int]
                      ) -> None:
        counted: dict[str, int] = defaultdict(int)
        for path, data in docs.items():
            if len(path) == 2 and path[0] == "orders":
                counted[f"orders:{data['status']}"] += 1
                counted[f"revenue:{data['status']}"] += int(data["amount"])
        for status in STATUSES:
            for counter in (f"orders:{status}", f"revenue:{status}"):
                if shard_sums[counter] != counted[counter]:
                    where = self.outcome.lost if shard_sums[counter] < counted[counter] \
                        else self.outcome.doubled
                    where.append(f"{counter}: shards {shard_sums[counter]}, documents "
                                 f"{counted[counter]}")

    def _check_trends(self, docs: dict[tuple[str, ...], Any]) -> None:
        buckets: dict[tuple[str, str], int] = defaultdict(int)
        for path, data in docs.items():
            if len(path) == 4 and path[0] == config.TREND_MINUTES and path[2] == config.SHARDS:
                for scope in (str(data["region"]), config.GLOBAL_SCOPE):
                    buckets[(scope, str(data["tag"]))] += int(data.get("count") or 0)
        totals = {(str(d["scope"]), str(d["tag"])): int(d["count"]) for p, d in docs.items()
                  if p[0] == config.TREND_TOTALS and d.get("window") == "1h"}
        for key in sorted(set(buckets) | set(totals)):
            total = totals.get(key, 0)
            if total != buckets[key]:
                self.outcome.lost.append(f"trend {key}: total {total}, buckets {buckets[key]}")
        for key, expected in self.tracks.items():
            self._within(f"trend {key}", buckets[key], expected)


@contextlib.contextmanager
def unprotected() -> Iterator[None]:
    """The rollup as it was before: no overlap, no touch, no sweep."""
    saved = (config.CHANGE_OVERLAP_S, config.SHARD_TOUCH_ATTEMPTS, config.ROLLUP_SWEEP_EVERY_S)
    config.CHANGE_OVERLAP_S, config.SHARD_TOUCH_ATTEMPTS = 0.0, 0
    config.ROLLUP_SWEEP_EVERY_S = math.inf
    try:
        yield
    finally:
        (config.CHANGE_OVERLAP_S, config.SHARD_TOUCH_ATTEMPTS,
         config.ROLLUP_SWEEP_EVERY_S) = saved


@contextlib.contextmanager
def small_budget() -> Iterator[None]:
    """First-load budgets of 3 documents and 2 whole reads a tick (5000 and 200 in production),
    so that a few counters exercise what thousands would: deferred counters, and the watermark
    they hold back."""
    saved = ledger.DOCUMENT_LOADS_PER_TICK, ledger.FIRST_LOADS_PER_TICK
    ledger.DOCUMENT_LOADS_PER_TICK, ledger.FIRST_LOADS_PER_TICK = 3, 2
    try:
        yield
    finally:
        ledger.DOCUMENT_LOADS_PER_TICK, ledger.FIRST_LOADS_PER_TICK = saved


def run(seed: int, *, protected: bool = True, settings: Settings | None = None) -> Outcome:
    settings = settings or Settings()
    with small_budget(), (contextlib.nullcontext() if protected else unprotected()):
        return World(seed, settings, protected).run()
