"""The actors of a run, each a thread of `virtual.Sim` driving the real domain code on the model:

- `Writers`: client processes, each with its own caches (counter configurations, shard picks,
  sequences, P as it knows it), making requests in a random mix: increments with and without
  `request_id` (a client with an id retries with it when unsure; one without does not), batches,
  a unique counter's likes and unlikes, a paced counter's views, tracks with and without id,
  ticket numbers with and without id, the app's own orders (written and deleted), and the
  Distributed Counter extension's clients: a device's merge of `visits: Increment(+-1)` (a
  double from half the devices, as the Android and iOS clients send) into
  its own shard of a page (`pages/{page}/_counter_shards_/{device}`, the same id each time).
- `Operator`: sets P and creates the counters and tenants, then, while writers write, changes
  P, resets counters and sequences, changes write policies, runs a backfill of the orders'
  counters, now and then imports the sequences' documents (their create times rewritten), and
  in some runs takes the housekeeping's query of the sequences' records down for over an hour.
- `ExtensionOperator`: the pages' extension counters before and after their declaration: the
  extension's own writes first (pages' fields, partials), then the declaration deployed (the
  trigger and the sweep start), then `counters backfill visits:{page}` (again while it fails).
- `Trigger`: every committed change of an order becomes an event delivered after a delay
  (minutes now and then), sometimes twice; its handler applies it as `count_event` does,
  trying again after transient failures; an event given up on is left to a backfill. Every
  creation of a page's shard after the declaration is deployed is an event too, delivered with
  the same hazards to one of the trigger's instances, whose `extension.Movers` moves it.
- `Rollup`: the rollup's invocations as deployed: Cloud Tasks queues (one per partition index,
  one dispatch at a time, tasks named per slot and partition, retried after a failure,
  sometimes minutes late or also delivered to a second instance, their creation sometimes
  refused), the instances that keep a holder per partition between tasks, and Cloud Scheduler's
  housekeeping of every partition each minute (never two at once), followed by the sequence
  numbers no commit carried into their records (`housekeeping.record_issued`), a run of the
  exactness audit and, once deployed, the extension counters' sweep.
- `Chaos`: writers killed or frozen before their next request; rollup invocations killed or
  paused a moment after they start; an instance of the extension shards' trigger killed (its
  calls with it) or frozen.

Every client call goes through `history.History.call`, so that the model stamps it on what it
sends. The hazards' rates are `faults.Chaos`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import itertools
import random
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from counting.features import (
    collections,
    counter_refs,
    counters,
    declarations,
    extension,
    shard_choice,
    trends,
)
from counting.features.context import RETURNING_TTL_S, Context
from counting.features.sequences import caching, housekeeping, issuing, opening, resetting
from counting.foundation import config
from counting.foundation.clock import Clock
from counting.foundation.config import AutoscaleParams, Names
from counting.rollup import audit, cadence, repartition
from counting.writepath import partitions, waking
from counting.writepath.caching import TtlCache
from counting.writepath.context import Writing
from counting.writepath.partitions import Part
from counting.writepath.policy import Policy
from firebase_admin import exceptions as admin_exceptions
from google.api_core import exceptions as gexc
from google.cloud import firestore

from . import protections
from .faults import Chaos, Fate
from .history import Answer, Call, History, Request
from .model import Attempt, Model, Path, Snapshot, Version
from .virtual import ORIGIN, Actor, Condition, Sim, micros

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

NAMES = Names()  # the collection ids of the default placement, which these run on

# Autoscaling fast enough that a run of a few minutes grows, shrinks and folds shards.
SCALING = AutoscaleParams(shard_write_rate=1.0, rise_tau_s=2.0, fall_tau_s=5.0,
                          cool_down_s=20.0, fold_grace_s=2 * config.CONFIG_CACHE_TTL_S)
PLAIN = ("plain-a", "plain-b", "plain-c")  # plain-c is as the code before `shard_counts` left it
# A tally the operator resets in drills: counted once, published, reset, counted once again
# (the next event after a daily reset), so that a reset lands beside a warm holder at a count the
# holder's ledger can mistake for no change; nothing else writes it.
RARE = "rare"
# ... and a counter of the same home (so of RARE's partition, whatever P), which the drill then
# counts for a few seconds: the holder stays warm and ticks past the reset, as a busy one does.
MATE = next(f"mate-{n}" for n in itertools.count()
            if partitions.home_of(f"mate-{n}") == partitions.home_of(RARE))
# Many counters of a few shards, each written now and then: most writes are their shard's last
# (the last like of a post), which only the change query, a touch or a sweep brings in.
POSTS = tuple(f"post-{n}" for n in range(12))
LIKES, VIEWS = "likes", "views"
# The counter of the operator's late drills (`Operator.late_drill`): increments of 5 with a
# request_id, allowed by BOUNDED_BY, refused while the drill narrows it.
BOUNDED, BOUNDED_BY = "bounded", (1, 10)
# Attempts refused after the drill's first attempt is lost: past the 20 s of resends.
LATE_DRILL_REFUSALS = 12
REGIONS = ("eu", "us")
TAGS = ("coffee", "tea", "rain", "sun")
STATUSES = ("new", "paid", "shipped")
# Tenants: one whose business day starts during a run (its day is opened while numbers land).
TENANTS = {"t-utc": ("UTC", "12:01"), "t-ny": ("America/New_York", "00:00")}
CLIENT_CALLS = 3  # a client's calls of one request with a request_id, or an admin's
# Runs whose housekeeping cannot query the sequences' records for over an hour (the run goes on
# past it: `world.run`), so that records unread by then are past Firestore's read window.
OUTAGE_P = 0.1
ORDERS = next(w for w in OWN.watches if w.documents == "orders/{order}")
# The extension counters' shards (`visits:{page}`), and the pages their devices visit.
EXTENSION = next(w for w in OWN.watches if w.extension_shards)
VISITS = next(d for d in EXTENSION.declarations if d.extension is not None)
assert VISITS.extension is not None
VISITED = VISITS.extension
PAGES_COLLECTION = VISITS.documents.split("/")[0]
PAGES = ("home", "pricing", "blog")
OTHER_FIELD = "shares"  # another field the extension counted on pages (no declaration of ours)
DEVICES_KEPT = 3  # a writer process's devices (each visits with its own shard id, reused)
TRIGGER_INSTANCES = 2  # the extension trigger's instances events are delivered to
# How long the extension operator waits, at most, for the extension's own commits in flight to
# land before it backfills (a write of a page's field landing after the backfill read it is
# counted by the next backfill only: docs/architecture.md, "Extension counters").
LEGACY_SETTLE_S = config.MAX_REQUEST_S + 60.0
PARTITIONS_PATH = (config.INTERNAL, partitions.PARTITIONS_DOC)
# Every partition's lease document -> the partition.
LEASES: dict[Path, Part] = {
    (config.INTERNAL, part.lease_id): part
    for count in partitions.CHOICES for part in partitions.parts(count)}
SCHEDULED = "scheduled"  # the scheduled function's instance
# The P a seed starts with and changes to: every P up to the 128 homes, past the first design's 16
# (stripes at resolutions 32 to 128, 29 spreads, partitions without tags). A seed at P = 128 costs
# about twice the CPU of one at 16 (the mean over seeds: 2.9 s of a core against 2.1 s up to 32).
DRAWN_P = partitions.CHOICES


def applied(value: Any) -> Answer:
    """A write's answer: done, or (None, 0) nothing done now."""
    return Answer.OK if value else Answer.NO_OP


class ProcessesKnow(partitions.Known):
    """P as the processes know it: every actor is a process of its own, with its own cache of P
    on the virtual clock (a writer learns a new P within CONFIG_CACHE_TTL_S). `acted` is the P
    each process last used."""

    def __init__(self, sim: Sim) -> None:
        super().__init__(monotonic=sim.monotonic)
        self._sim = sim
        self._processes: dict[str, partitions.Known] = {}
        self.acted: dict[str, int] = {}

    def count(self, db: firestore.Client, names: Names) -> int:
        actor = self._sim.current()
        name = actor.name if actor is not None else ""
        known = self._processes.get(name)
        if known is None:
            known = self._processes[name] = partitions.Known(monotonic=self._sim.monotonic)
        self.acted[name] = found = known.count(db, names)
        return found

    def forget(self) -> None:
        """The operator's change reaches no other process."""


@dataclass(kw_only=True)
class Stage:
    """What the actors of a run share."""

    sim: Sim
    model: Model
    db: firestore.Client
    history: History
    rng: random.Random
    chaos: Chaos
    known: ProcessesKnow
    clock: Clock
    write_context: Writing  # the run's: its protections, P as processes know it, its waker
    writing: bool = True
    deployed_us: int | None = None  # when the extension counters' declaration was deployed
    extension_unfinished: bool = False  # the extension operator's last backfill failed a page
    ops: Counter[str] = field(default_factory=Counter)  # operations done, by kind
    tally: Counter[str] = field(default_factory=Counter)  # hazards and events, by kind
    partitions: list[int] = field(default_factory=list)  # P at the start, then each change's
    handovers: Counter[str] = field(default_factory=Counter)  # partition -> lease takeovers
    struck: Counter[str] = field(default_factory=Counter)  # instance -> kills and pauses

    def count(self) -> int:
        """P as configured now (the stage sees the database without a request)."""
        version = self.model.latest(PARTITIONS_PATH)
        return int(((version.data if version else None) or {}).get("count") or 1)

    def ask(self, request: Request, do: Callable[[], Any],
            answer: Callable[[Any], Answer] = lambda _: Answer.OK, *,
            calls: int = CLIENT_CALLS, admin: bool = False) -> Call:
        """A client's request: called again (up to `calls` times, after a pause) while its
        caller is unsure and it has a request_id (or is an admin's, who runs the command again),
        or when it was told nothing was written and to retry (ABORTED, UNAVAILABLE, INTERNAL:
        any client may, trusting that promise)."""
        for n in range(calls):
            if n:
                self.sim.wait(self.rng.uniform(0.2, 2.0))
            made = self.history.call(request, do, answer)
            unsure = made.answer is Answer.UNSURE and (request.request_id is not None or admin)
            again = unsure or made.answer is Answer.RETRY
            if not again:
                break
        return made

    def alive(self, actor: Actor) -> bool:
        return not actor.done and not actor.killed

    def context(self, picker: shard_choice.ShardPicker,
                skew: dt.timedelta = dt.timedelta(0)) -> Context:
        """A process's context: the run's writing, on an instance clock `skew` off Firestore's,
        and caches of its own on the virtual clock."""
        clock = self.sim.monotonic
        writing = self.write_context
        if skew:
            writing = dataclasses.replace(writing, clock=dataclasses.replace(
                writing.clock, now=lambda: self.sim.wall() + skew))
        return Context(writing=writing, configs=shard_choice.ConfigCache(clock=clock),
                       picker=picker, sequences=caching.SequenceCache(clock=clock),
                       returning=TtlCache(RETURNING_TTL_S, clock=clock))


@dataclass
class Process:
    """One client process's own state."""

    rng: random.Random
    ctx: Context
    devices: list[str] = field(default_factory=list)  # its devices' shard ids, latest last

    def now(self) -> dt.datetime:
        """Its instance's clock."""
        return self.ctx.writing.clock.now()


class Writers:
    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.actors: list[Actor] = []
        self._mix: list[tuple[float, Callable[[Process], None]]] = [
            (3.0, functools.partial(self._increment, with_id=False)),
            (3.0, functools.partial(self._increment, with_id=True)),
            (0.7, functools.partial(self._batch, with_id=False)),
            (0.7, functools.partial(self._batch, with_id=True)),
            (2.0, self._post),
            (1.5, self._like),
            (1.0, self._view),
            (0.8, functools.partial(self._track, with_id=False)),
            (0.8, functools.partial(self._track, with_id=True)),
            (0.8, functools.partial(self._number, with_id=False)),
            (0.8, functools.partial(self._number, with_id=True)),
            (2.0, self._order),
            (1.5, self._visit),
        ]

    def spawn(self, after_s: float) -> Actor:
        n = len(self.actors)
        actor = self.stage.sim.spawn(f"writer-{n}", self._run, after_s=after_s)
        self.actors.append(actor)
        return actor

    def live(self) -> list[Actor]:
        return [actor for actor in self.actors if self.stage.alive(actor)]

    def _run(self) -> None:
        stage = self.stage
        rng = random.Random(stage.rng.random())
        skew = dt.timedelta(0)
        if rng.random() < stage.chaos.skewed_p:
            skew = dt.timedelta(seconds=rng.uniform(-stage.chaos.skew_s, stage.chaos.skew_s))
            stage.tally["skewed_writers"] += 1
        process = Process(rng=rng, ctx=stage.context(
            shard_choice.ShardPicker(random.Random(rng.random())), skew))
        weights = [weight for weight, _ in self._mix]
        ops = [op for _, op in self._mix]
        while stage.writing:
            rng.choices(ops, weights)[0](process)
            stage.sim.wait(rng.expovariate(1 / 0.4))

    def _increment(self, process: Process, *, with_id: bool) -> None:
        rng, db = process.rng, self.stage.db
        counter, by = rng.choice(PLAIN), rng.randint(1, 5)
        request_id = f"r{rng.randrange(10**9)}" if with_id else None
        uid = f"u{rng.randrange(20)}"
        kind = "increment_id" if with_id else "increment"
        self.stage.ops[kind] += 1
        self.stage.ask(Request(kind=kind, request_id=request_id, amounts={counter: by}),
                       lambda: counters.increment(process.ctx, db, counter, by,
                                                  request_id=request_id, uid=uid, admin=False),
                       applied)

    def _post(self, process: Process) -> None:
        db, post = self.stage.db, process.rng.choice(POSTS)
        self.stage.ops["increment"] += 1
        self.stage.ask(Request(kind="increment", amounts={post: 1}),
                       lambda: counters.increment(process.ctx, db, post, 1, uid="u-post",
                                                  admin=False), applied)

    def _batch(self, process: Process, *, with_id: bool) -> None:
        rng, db = process.rng, self.stage.db
        items = [(rng.choice(PLAIN), rng.randint(1, 2)) for _ in range(rng.randint(1, 3))]
        totals: Counter[str] = Counter()
        for counter, by in items:
            totals[counter] += by
        request_id = f"b{rng.randrange(10**9)}" if with_id else None
        kind = "increment_many_id" if with_id else "increment_many"
        self.stage.ops[kind] += 1
        self.stage.ask(Request(kind=kind, request_id=request_id, amounts=dict(totals)),
                       lambda: counters.increment_many(process.ctx, db, items,
                                                       request_id=request_id, uid="batcher",
                                                       admin=False), applied)

    def _like(self, process: Process) -> None:
        rng, db = process.rng, self.stage.db
        by, uid = rng.choice((1, -1)), f"u{rng.randrange(8)}"
        kind = "like" if by > 0 else "unlike"
        self.stage.ops[kind] += 1
        self.stage.ask(Request(kind=kind, amounts={LIKES: by}),
                       lambda: counters.increment(process.ctx, db, LIKES, by, uid=uid,
                                                  admin=False), applied)

    def _view(self, process: Process) -> None:
        rng, db = process.rng, self.stage.db
        uid = f"u{rng.randrange(6)}"
        self.stage.ops["view"] += 1
        self.stage.ask(Request(kind="view", amounts={VIEWS: 1}),
                       lambda: counters.increment(process.ctx, db, VIEWS, 1, uid=uid,
                                                  admin=False), applied)

    def _track(self, process: Process, *, with_id: bool) -> None:
        rng, stage = process.rng, self.stage
        region, tags = rng.choice(REGIONS), rng.sample(TAGS, rng.randint(1, 3))
        request_id = f"t{rng.randrange(10**9)}" if with_id else None
        kind = "track_id" if with_id else "track"
        stage.ops[kind] += 1
        stage.ask(Request(kind=kind, request_id=request_id,
                          amounts={f"trend:{region}:{tag}": 1 for tag in tags}),
                  lambda: trends.track(process.ctx, stage.db, region, tags,
                                       request_id=request_id, uid="tracker",
                                       now=process.now()), applied)

    def _number(self, process: Process, *, with_id: bool) -> None:
        rng, stage = process.rng, self.stage
        tenant = rng.choice(sorted(TENANTS))
        request_id = f"n{rng.randrange(10**9)}" if with_id else None
        uid = f"u{rng.randrange(4)}"  # a retry is the same user's
        kind = "next_number_id" if with_id else "next_number"
        stage.ops[kind] += 1
        stage.ask(Request(kind=kind, request_id=request_id, tenant=tenant),
                  lambda: issuing.next_number(process.ctx, stage.db, tenant,
                                              request_id=request_id, uid=uid,
                                              now=process.now()))

    def _order(self, process: Process) -> None:
        """The app writes its own documents (the library's retry and all); the trigger counts
        them."""
        rng = process.rng
        ref = self.stage.db.collection("orders").document(f"o{rng.randrange(12)}")
        self.stage.ops["order"] += 1
        with contextlib.suppress(Exception):
            if rng.random() < 0.2:
                ref.delete()
            else:
                ref.set({"status": rng.choice(STATUSES), "amount": rng.randint(1, 100)})

    def _visit(self, process: Process) -> None:
        """A device of the extension's clients counts a visit (or takes one back) in its own
        shard of a page: a merge of `Increment`, its shard id the same for every page and
        visit; now and then a new device (a new id) takes the place of the oldest."""
        rng, stage = process.rng, self.stage
        if not process.devices or rng.random() < 0.15:
            process.devices.append(f"{rng.getrandbits(64):016x}-{len(process.devices)}")
            del process.devices[:-DEVICES_KEPT]
        device, page = rng.choice(process.devices), rng.choice(PAGES)
        by = rng.choice((1, 1, 1, -1))
        # Half the devices are phones of the extension's Android and iOS clients, which send
        # doubles (docs/api.md, "Extension counters").
        sent: int | float = float(by) if int(device[:16], 16) % 2 else by
        ref = stage.db.collection(PAGES_COLLECTION, page, collections.SHARDS).document(device)
        stage.ops["visit"] += 1
        stage.ask(Request(kind="visit", amounts={page: by}),
                  lambda: ref.set(VISITED.nested(firestore.Increment(sent)), merge=True))


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What the operator does while writers write, at drawn instants."""

    start: int  # P
    changes: list[tuple[float, int]]  # (at, new P)
    configures: list[float]
    resets: list[tuple[float, str]]  # (at, counter)
    drills: list[float]  # resets of RARE
    late_drills: list[float]  # an attempt of the operator's own landing late (`late_drill`)
    sequence_resets: list[tuple[float, str]]  # (at, tenant)
    backfills: list[float]
    deploy: float  # the extension counters' declaration deployed
    extension_backfills: list[float]
    sequence_imports: list[float] = field(default_factory=list)  # imports of the sequences
    # (from, until): the housekeeping's query of the sequences' records fails, over an hour
    records_outage: tuple[float, float] | None = None

    @classmethod
    def draw(cls, rng: random.Random, active_s: float, start: int | None,
             changes: int | None) -> Plan:
        def at() -> float:
            return rng.uniform(8.0, active_s - 8.0)

        first = start or rng.choice(DRAWN_P)
        counts, moves = [first], []
        for when in sorted(at() for _ in range(rng.choice((0, 1, 2, 2, 3))
                                               if changes is None else changes)):
            counts.append(rng.choice([c for c in DRAWN_P if c != counts[-1]]))
            moves.append((when, counts[-1]))
        deploy = rng.uniform(3.0, active_s / 2)
        return cls(start=first, changes=moves,
                   configures=sorted(at() for _ in range(rng.randint(1, 3))),
                   resets=sorted((at(), rng.choice([*PLAIN, VIEWS, LIKES]))
                                 for _ in range(rng.randint(1, 3))),
                   drills=sorted(at() for _ in range(rng.randint(1, 3))),
                   late_drills=sorted(at() for _ in range(rng.randint(1, 2))),
                   sequence_resets=sorted((at(), rng.choice(sorted(TENANTS)))
                                          for _ in range(rng.randint(0, 2))),
                   backfills=sorted(at() for _ in range(rng.randint(0, 2))),
                   deploy=deploy,
                   extension_backfills=sorted(rng.uniform(deploy + 1.0, active_s - 8.0)
                                              for _ in range(rng.randint(1, 2))),
                   sequence_imports=sorted(at() for _ in range(rng.choice((0, 0, 1)))),
                   records_outage=(lambda start: (start, start + rng.uniform(3700.0, 3900.0)))(
                       at()) if rng.random() < OUTAGE_P else None)


class Operator:
    def __init__(self, stage: Stage, plan: Plan) -> None:
        self.stage = stage
        self.plan = plan
        self.policies = {name: Policy(by=(1, 5)) for name in (*PLAIN, RARE)}
        self.policies[VIEWS] = Policy(min_interval_s=5)
        self._rng = random.Random(stage.rng.random())
        # The operator's CLI: a process of its own.
        self.ctx = stage.context(shard_choice.ShardPicker(random.Random(self._rng.random())))

    def run(self) -> None:
        self.setup()
        plan = self.plan
        steps: list[tuple[float, Callable[[], object]]] = [
            *((when, functools.partial(self.change, count)) for when, count in plan.changes),
            *((when, self.configure) for when in plan.configures),
            *((when, functools.partial(self.reset, name)) for when, name in plan.resets),
            *((when, self.drill) for when in plan.drills),
            *((when, self.late_drill) for when in plan.late_drills),
            *((when, functools.partial(self.reset_sequence, tenant))
              for when, tenant in plan.sequence_resets),
            *((when, self.backfill) for when in plan.backfills),
            *((when, self.import_sequences) for when in plan.sequence_imports)]
        if plan.records_outage is not None:
            start, end = plan.records_outage
            self.stage.model.outages.append((micros(start), micros(end), config.NUMBER_REQUESTS))
            self.stage.tally["records_outages"] += 1
        for when, step in sorted(steps, key=lambda s: s[0]):
            self.stage.sim.wait(max(0.0, when - self.stage.sim.monotonic()))
            step()

    def setup(self) -> None:
        """The admin sets P, creates the counters and configures the tenants (again after an
        error: each is idempotent). plain-c is made as the code before `shard_counts` left
        counters: holders read it whole until one gives it them."""
        stage, db = self.stage, self.stage.db
        if self.plan.start != 1:
            self.change(self.plan.start)
            assert stage.count() == self.plan.start, "could not set the partitions"
        made = [(name, self._rng.choice((1, 2, 4)), self.policies[name]) for name in PLAIN]
        made += [(RARE, 1, self.policies[RARE]), (MATE, 1, Policy()),
                 (LIKES, 2, Policy(unique=True)), (BOUNDED, 1, Policy(by=BOUNDED_BY)),
                 (VIEWS, 2, self.policies[VIEWS])]
        made += [(post, self._rng.randint(1, 4), Policy()) for post in POSTS]
        for name, shards, policy in made:
            stage.ops["create_counter"] += 1
            call = stage.ask(Request(kind="create_counter"), functools.partial(
                counters.create_counter, self.ctx, db, name, shards=shards, policy=policy),
                admin=True)
            assert call.answer is Answer.OK, f"could not create {name}: {call}"
        legacy = counter_refs.counter_ref(db, NAMES, PLAIN[-1])
        call = stage.ask(Request(kind="setup"), functools.partial(
            legacy.update, {config.SHARD_COUNTS_FIELD: firestore.DELETE_FIELD}), admin=True)
        assert call.answer is Answer.OK, f"could not make a legacy counter: {call}"
        for tenant, (zone, reset_time) in TENANTS.items():
            stage.ops["configure_sequence"] += 1
            fresh = stage.context(self.ctx.picker)  # a command of its own: a cold cache
            call = stage.ask(Request(kind="configure_sequence"), functools.partial(
                opening.configure_sequence, fresh, db, tenant, timezone=zone,
                reset_time=reset_time, now=stage.sim.wall()), admin=True)
            assert call.answer is Answer.OK, f"could not configure {tenant}: {call}"

    def change(self, count: int) -> None:
        """`counters rollup partitions N`, run again after an error (a change to the current P
        changes nothing)."""
        self.stage.ops["change_partitions"] += 1
        self.stage.ask(Request(kind="change_partitions"),
                       lambda: repartition.change(self.stage.db, NAMES, count,
                                                  known=self.stage.known),
                       admin=True)

    def configure(self) -> None:
        """A new write policy: plain counters' range of `by` narrowed or widened, the paced
        counter's interval changed."""
        name = self._rng.choice([*PLAIN, VIEWS])
        old = self.policies[name]
        new = Policy(min_interval_s=8 - old.min_interval_s) if name == VIEWS else \
            Policy(by=(1, 8 - old.by[1]))
        self.policies[name] = new
        self.set_policy(name, new)

    def reset(self, counter: str) -> None:
        self.stage.ops["reset_counter"] += 1
        request_id = self._admin_id()
        with self._later_step_fails():
            self.stage.ask(Request(kind="reset_counter", request_id=request_id,
                                   amounts={counter: 0}),
                           lambda: counters.reset_counter(self.ctx, self.stage.db, counter,
                                                          uid="operator", request_id=request_id),
                           admin=True)

    def _admin_id(self) -> str | None:
        """Half the admin operations carry a request_id, as `counters` commands do."""
        return f"op{self._rng.randrange(10**9)}" if self._rng.random() < 0.5 else None

    @contextlib.contextmanager
    def _later_step_fails(self) -> Iterator[None]:
        """A third of the time, the operation's first commit applies and its second (a reset's
        forgetting or record) is ABORTED: the answer must not say nothing was written."""
        actor = self.stage.sim.current()
        assert actor is not None
        script = self.stage.model.draws.scripts.setdefault(actor.name, deque())
        if self._rng.random() < 1 / 3:
            self.stage.tally["later_step_failures"] += 1
            script.extend([Fate(delay_us=20_000), Fate(delay_us=20_000, refused=gexc.Aborted)])
        try:
            yield
        finally:
            script.clear()

    def drill(self) -> None:
        """A client counts RARE once; once the rollup has it, the operator resets RARE and a
        client counts it once again at once, then MATE every second for a while."""
        stage = self.stage

        def count(counter: str) -> None:
            stage.ops["increment"] += 1
            stage.ask(Request(kind="increment", amounts={counter: 1}),
                      lambda: counters.increment(client, stage.db, counter, 1, uid="u-rare",
                                                 admin=False), applied)

        client = stage.context(shard_choice.ShardPicker(random.Random(self._rng.random())))
        count(RARE)
        stage.sim.wait(3.0)
        self.reset(RARE)
        count(RARE)
        for _ in range(6):
            stage.sim.wait(1.0)
            count(MATE)

    def late_drill(self) -> None:
        """One of two hazards of an attempt landing late, on the operator's own attempts
        (`Draws.scripts`), whatever else runs meanwhile:

        - a client's increment of BOUNDED with a request_id answered UNKNOWN while its first
          attempt flies on for 25 s; the operator narrows BOUNDED's `by`; the retry with the
          same id is refused; the first attempt lands after (`FinalAnswers`);
        - a user's like of LIKES; a reset whose forgetting's first attempt flies on for 17 s
          while the library's resend applies; the user likes again, the first attempt lands,
          the user likes once more (`UniqueCounters`)."""
        stage = self.stage
        actor = stage.sim.current()
        assert actor is not None
        script = stage.model.draws.scripts.setdefault(actor.name, deque())
        client = stage.context(shard_choice.ShardPicker(random.Random(self._rng.random())))
        if self._rng.random() < 0.5:
            request_id = f"late{self._rng.randrange(10**9)}"
            request = Request(kind="increment_id", request_id=request_id, amounts={BOUNDED: 5})

            def increment() -> object:
                return counters.increment(client, stage.db, BOUNDED, 5, request_id=request_id,
                                          uid="u-late", admin=False)

            script.extend([Fate(delay_us=micros(25.0), lost=gexc.ServiceUnavailable,
                                lost_before=True),
                           *(Fate(delay_us=1_000, refused=gexc.ServiceUnavailable)
                             for _ in range(LATE_DRILL_REFUSALS))])
            stage.ops["increment_id"] += 1
            stage.history.call(request, increment, applied)
            script.clear()
            self.set_policy(BOUNDED, Policy(by=(1, 1)))
            client.configs.forget(BOUNDED)
            stage.history.call(request, increment, applied)
            stage.sim.wait(30.0)
            self.set_policy(BOUNDED, Policy(by=BOUNDED_BY))
            return

        def like() -> None:
            stage.ops["like"] += 1
            stage.history.call(Request(kind="like", amounts={LIKES: 1}), lambda: counters.increment(
                client, stage.db, LIKES, 1, uid="u-late", admin=False), applied)

        like()
        # The reset's own commit; its forgetting's first attempt, lost in flight; the resend.
        script.extend([Fate(delay_us=20_000),
                       Fate(delay_us=micros(17.0), lost=gexc.ServiceUnavailable, lost_before=True),
                       Fate(delay_us=20_000)])
        self.reset(LIKES)
        script.clear()
        stage.sim.wait(1.0)
        like()
        stage.sim.wait(20.0)
        like()

    def set_policy(self, name: str, policy: Policy) -> None:
        self.stage.ops["configure_counter"] += 1
        self.stage.ask(Request(kind="configure_counter", configures=(
                           (config.COUNTERS, name), {"policy": policy.to_document()})),
                       lambda: counters.configure_counter(self.ctx, self.stage.db, name, policy),
                       admin=True)

    def import_sequences(self) -> None:
        """An import of the sequences' documents (a restore; the emulator's on a restart):
        every record and sequence created again at the import's time."""
        self.stage.model.reimport(config.SEQUENCES)
        self.stage.tally["sequence_imports"] += 1

    def reset_sequence(self, tenant: str) -> None:
        stage = self.stage
        stage.ops["reset_sequence"] += 1
        request_id = self._admin_id()
        with self._later_step_fails():
            stage.ask(Request(kind="reset_sequence", tenant=tenant, request_id=request_id),
                      lambda: resetting.reset_sequence(
                          stage.context(self.ctx.picker), stage.db, tenant, uid="operator",
                          request_id=request_id, now=stage.sim.wall()), admin=True)

    def backfill(self) -> None:
        backfill(self.stage)


def backfill(stage: Stage) -> None:
    """`counters backfill` of the orders' declarations, run by the calling actor."""
    counting = collections.Counting(
        stage.context(shard_choice.ShardPicker(random.Random(stage.rng.random()))), stage.db,
        ORDERS)
    stage.ops["backfill"] += 1
    stage.ask(Request(kind="backfill"), lambda: collections.backfill(counting), calls=1)


class ExtensionOperator:
    """The pages' extension counters from before their declaration: the extension's own writes
    (each page's field, partials as its workers leave them) until the declaration is deployed,
    from when on the created-shard trigger and the scheduled sweep move shards; then, once the
    extension's last commits have landed, `counters backfill visits:{page}` while clients write,
    run again while a page fails (as an operator reruns it), at most BACKFILL_RUNS times a go."""

    BACKFILL_RUNS = 3

    def __init__(self, stage: Stage, plan: Plan) -> None:
        self.stage = stage
        self.plan = plan
        self._rng = random.Random(stage.rng.random())
        self.ctx = stage.context(shard_choice.ShardPicker(random.Random(self._rng.random())))
        self.legacy: list[Request] = []  # the extension's own writes
        self._partials: dict[str, list[str]] = {}  # page -> its partials' ids

    def run(self) -> None:
        stage, sim, rng = self.stage, self.stage.sim, self._rng
        for page in PAGES:  # what the extension left, then its writes until the deploy
            if rng.random() < 0.8:
                self._legacy_field(page)
            for _ in range(rng.randint(0, 2)):
                self._legacy_partial(page)
        while True:
            sim.wait(rng.expovariate(1 / 3.0))
            if sim.monotonic() >= self.plan.deploy:
                break
            page = rng.choice(PAGES)
            (self._legacy_field if rng.random() < 0.5 else self._legacy_partial)(page)
        stage.deployed_us = sim.now_us
        for when in self.plan.extension_backfills:
            sim.wait(max(0.0, when - sim.monotonic()))
            self._settled()
            self.backfill()

    def _legacy_field(self, page: str) -> None:
        """The extension's worker adds what it took from shards to the page's field."""
        by = self._rng.randint(1, 20)
        ref = self.stage.db.collection(PAGES_COLLECTION).document(page)
        self._legacy(page, by, lambda: ref.set(VISITED.nested(firestore.Increment(by)),
                                               merge=True))

    def _legacy_partial(self, page: str) -> None:
        """The extension's worker appends updates to a partial of the page (a new one, or one
        of its own): sent once, as an `ArrayUnion` resent after it applied adds nothing. Some
        updates also carry another field the extension counts on the page (which moves must
        keep: such a partial is zeroed by a negative update, not deleted)."""
        rng = self._rng
        ids = self._partials.setdefault(page, [])
        if not ids or rng.random() < 0.5:
            ids.append(f"{collections.PARTIAL_PREFIX}{rng.getrandbits(64):016x}")
        updates = [{collections.UPDATE_ID: f"{rng.getrandbits(64):016x}",
                    collections.UPDATE_DATA: {**VISITED.nested(rng.randint(-1, 5)),
                                              **({OTHER_FIELD: 1} if rng.random() < 0.2
                                                 else {})}}
                   for _ in range(rng.randint(1, 3))]
        by = sum(VISITED.value(u[collections.UPDATE_DATA]) for u in updates)
        ref = self.stage.db.collection(PAGES_COLLECTION, page, collections.SHARDS).document(
            rng.choice(ids))
        self._legacy(page, by, lambda: ref.set(
            {collections.UPDATES: firestore.ArrayUnion(updates)}, merge=True, retry=None))

    def _legacy(self, page: str, by: int, do: Callable[[], object]) -> None:
        request = Request(kind="extension_legacy", amounts={page: by})
        self.legacy.append(request)
        self.stage.ops["extension_legacy"] += 1
        self.stage.ask(request, do)

    def _settled(self) -> None:
        """Wait (at most LEGACY_SETTLE_S) until none of the extension's commits is in flight:
        the extension is uninstalled, its last writes landed."""
        stage = self.stage
        calls = {id(call) for request in self.legacy for call in request.calls}
        mine = [a for a in stage.model.attempts if id(a.call) in calls]
        until = stage.sim.monotonic() + LEGACY_SETTLE_S
        while any(a.commit_us is None and a.error is None and a.fate.refused is None
                  for a in mine) and stage.sim.monotonic() < until:
            stage.sim.wait(1.0)

    def backfill(self) -> None:
        """`counters backfill visits:{page}`, run again after a failure."""
        stage = self.stage
        for run in range(self.BACKFILL_RUNS):
            if run:
                stage.tally["extension_backfill_reruns"] += 1
                stage.sim.wait(self._rng.uniform(1.0, 5.0))
            stage.ops["extension_backfill"] += 1
            made = stage.ask(Request(kind="extension_backfill"),
                             lambda: extension.backfill(self.ctx, stage.db, VISITS), calls=1)
            done = made.value if made.answer is Answer.OK else None
            stage.extension_unfinished = not isinstance(done, extension.Backfilled) \
                or bool(done.failed)
            if not stage.extension_unfinished:
                return


class SimMovers(extension.Movers):
    """One trigger instance's `extension.Movers`, on the run's clock, shared by the calls the
    instance serves (actors of the run: `virtual.Condition`)."""

    def __init__(self, sim: Sim, do: Callable[[str, list[extension.Written],
                                              Callable[[extension.Moved], None]], extension.Moved]
                 ) -> None:
        super().__init__(do, monotonic=sim.monotonic, sleep=sim.sleep)
        self._lock = cast(threading.Condition, Condition(sim))


@dataclass
class MoverInstance:
    """An instance of the extension shards' trigger: its moves, and the calls it served."""

    name: str
    movers: SimMovers
    actors: list[Actor] = field(default_factory=list)


class Trigger:
    """The orders' document trigger: an event per committed change of an order. And the
    extension shards' created-shard trigger, once deployed: an event per creation of a page's
    shard or partial, delivered with the same hazards to one of its TRIGGER_INSTANCES instances
    (a new one after chaos killed it), whose Movers takes the state the event tells of."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.given_up = 0  # events whose handler gave up: a backfill must count them
        self.instances: dict[str, MoverInstance] = {}  # slot -> its live instance
        self.started = 0  # instances started

    def on_commit(self, attempt: Attempt) -> None:
        assert attempt.commit_us is not None
        for path, before, after in attempt.changes:
            if len(path) == 2 and path[0] == "orders":
                states = (self._state(path, before), self._state(path, after))
                if states == (None, None):
                    continue  # a delete of a missing document changes nothing: no event
                event = f"e{attempt.commit_us}-{path[1]}"
                self._send(event, functools.partial(self._deliver, path, *states, event))
            elif self._created(attempt.commit_us, path, before, after):
                event = f"x{attempt.commit_us}-{path[1]}-{path[-1].strip()}"
                created = self._state(path, after)
                assert created is not None
                self._send(event, functools.partial(self._deliver_created, path, created))

    def _send(self, event: str, deliver: Callable[[], None]) -> None:
        """An event delivered after a delay (minutes now and then), sometimes twice."""
        stage, chaos = self.stage, self.stage.chaos
        delay = stage.rng.uniform(0.05, 5.0)
        if stage.rng.random() < chaos.late_event_p:
            delay += stage.rng.uniform(*chaos.late_event_s)
            stage.tally["late_events"] += 1
        stage.sim.spawn(event, deliver, after_s=delay)
        if stage.rng.random() < chaos.duplicate_event_p:
            stage.sim.spawn(event + "-again", deliver, after_s=delay + stage.rng.uniform(0, 20))

    def _created(self, commit_us: int, path: Path, before: Version | None,
                 after: Version) -> bool:
        """A shard or partial of a page created once the declaration was deployed."""
        deployed = self.stage.deployed_us
        return (deployed is not None and commit_us >= deployed and after.data is not None
                and (before is None or before.data is None)
                and collections.match(EXTENSION.documents, "/".join(path)) is not None)

    def _state(self, path: Path, version: Version | None) -> Snapshot | None:
        """The document as an event carries it: None when it did not exist."""
        if version is None or version.data is None:
            return None
        return self.stage.model._snapshot(path, version.commit_us)

    def _deliver(self, path: Path, before: Snapshot | None, after: Snapshot | None,
                 event: str) -> None:
        """`count_event`: the state applied, again after a transient failure
        (COLLECTION_RETRY_PAUSES_S); the platform never delivers it again."""
        stage = self.stage
        counting = collections.Counting(
            stage.context(shard_choice.ShardPicker(random.Random(event))), stage.db, ORDERS)
        observed = collections.Observed.of_change("/".join(path), cast(Any, before),
                                                  cast(Any, after))
        request = Request(kind="delivery")
        stage.ops["delivery"] += 1
        for pause in (*config.COLLECTION_RETRY_PAUSES_S, None):
            made = stage.history.call(request, lambda: counting.apply(observed, event=event))
            transient = made.answer in (Answer.UNSURE, Answer.RETRY)
            if not transient:
                return
            if pause is None:
                self.given_up += 1
                return
            stage.sim.wait(pause)

    def _deliver_created(self, path: Path, created: Snapshot) -> None:
        """`move_created` on the instance the event reaches: its Movers moves the state the
        event tells of (with its page's other shards), and the call returns once a move took
        it."""
        stage = self.stage
        actor = stage.sim.current()
        assert actor is not None
        instance = self._instance()
        instance.actors.append(actor)
        written = extension.Written(ref=cast(Any, created.reference),
                                    data=created.to_dict() or {},
                                    update_time=cast(dt.datetime, created.update_time))
        stage.ops["extension_delivery"] += 1
        stage.history.call(Request(kind="extension_move"), lambda: instance.movers.after_write(
            "/".join(path[:-2]), written))

    def _instance(self) -> MoverInstance:
        stage = self.stage
        slot = f"movers-{stage.rng.randrange(TRIGGER_INSTANCES)}"
        instance = self.instances.get(slot)
        if instance is None:
            self.started += 1
            db = stage.db
            ctx = stage.context(shard_choice.ShardPicker(random.Random(stage.rng.random())))

            def move(path: str, written: list[extension.Written],
                     on_move: Callable[[extension.Moved], None]) -> extension.Moved:
                return extension.move_until_clear(ctx, db, db.document(path),
                                                  EXTENSION.declarations, written=written,
                                                  on_move=on_move)

            instance = self.instances[slot] = MoverInstance(
                name=f"{slot}-{self.started}", movers=SimMovers(stage.sim, move))
        return instance

    def strike(self, kill: bool) -> None:
        """Chaos kills one instance of the extension shards' trigger (every call it serves
        dies with it; the next event starts another) or freezes its calls."""
        stage = self.stage
        if not self.instances:
            return
        slot = stage.rng.choice(sorted(self.instances))
        instance = self.instances[slot]
        live = [a for a in instance.actors if stage.alive(a)]
        instance.actors = live
        if kill:
            for actor in live:
                actor.killed = True
            del self.instances[slot]
            stage.tally["trigger_kills"] += 1
        else:
            for actor in live:
                actor.pause_s = stage.rng.uniform(*stage.chaos.holder_pause_s)
            stage.tally["trigger_pauses"] += 1
        stage.struck[instance.name] += 1


class Rollup:
    """Cloud Tasks, Cloud Scheduler and the rollup's instances."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        # What chaos does to the next invocation of an instance: "tick-<index>" (a partition
        # index's instances, the extra ones included) or SCHEDULED.
        self.dooms: dict[str, str] = {}
        self.instances: dict[str, dict[Part, cadence.Holder]] = {}  # live instances' holders
        self.started = 0  # holders started
        self.tasks: set[str] = set()  # task names taken
        self.pending: dict[int, deque[tuple[Part, int, int]]] = {}  # index -> tasks due
        self.dispatching: set[int] = set()  # the partition indexes whose queue dispatches one
        self.last_owner: dict[Path, str] = {}  # a lease's path -> its last holder
        self.wide: dict[Part, bool] = {}  # whether each partition's last tick read wide
        self.swept: dict[Part, list[int]] = {}  # up to when each sweep found every commit
        self.writers: Writers | None = None  # whose P counts for `narrowed`
        self._sweeper: Context | None = None  # the scheduled function's context

    # -- invocations --

    def invoke(self, instance: str, target: str, call: Callable[[], object]) -> bool:
        """One invocation on `instance`, whose holders live as long as it does; False when it
        failed (the platform retries it). Chaos strikes it when `target` is doomed. A killed
        instance's holders are gone with it."""
        stage = self.stage
        actor = stage.sim.current()
        assert actor is not None
        holders = self.instances.setdefault(instance, {})
        stage.tally["invocations"] += 1
        doom = self.dooms.pop(target, None) if stage.writing else None
        if doom is not None:
            stage.sim.spawn("chaos-strike", functools.partial(self._strike, actor, doom, target))
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

    def _strike(self, victim: Actor, doom: str, target: str) -> None:
        stage = self.stage
        stage.sim.wait(stage.rng.uniform(0.0, 0.1))
        if not stage.alive(victim):
            return
        if doom == "kill":
            victim.killed = True
            stage.tally["kills"] += 1
        else:
            victim.pause_s = stage.rng.uniform(*stage.chaos.holder_pause_s)
            stage.tally["pauses"] += 1
        stage.struck[target] += 1

    def _holder(self, instance: str, part: Part) -> cadence.Holder:
        """`instance`'s holder of `part`, made on first use, as `cadence.Holders` keeps
        them. The invocation's actor acts for it from here on (its commits carry its owner)."""
        actor = self.stage.sim.current()
        assert actor is not None
        holders = self.instances.setdefault(instance, {})
        holder = holders.get(part)
        if holder is None:
            self.started += 1
            made: list[cadence.Holder] = []
            holder = holders[part] = cadence.Holder(
                self.stage.db, writing=self.stage.write_context, part=part,
                enqueue=self.enqueue, owner=f"{instance}-{self.started}", scaling=SCALING,
                limits=protections.LIMITS, on_tick=lambda stats: self._ticked(made[0], stats))
            made.append(holder)
        actor.owner = holder.lease.owner
        return holder

    def _ran(self, instance: str, part: Part, run: cadence.Invocation) -> None:
        """After an invocation, the instance closes the holders it made useless, as
        `cadence.Holders.invoke` does (`cadence.closed_after`)."""
        if run.outcome == cadence.Outcome.RETIRED:
            self.stage.tally["retired"] += 1
        holders = self.instances.get(instance, {})
        for stale in cadence.closed_after(holders, part, run.outcome):
            holders.pop(stale).close()

    def _tick(self, instance: str, part: Part, slot: int) -> None:
        self._ran(instance, part, self._holder(instance, part).tick_slot(slot))

    def _housekeeping(self) -> None:
        """The scheduled invocation: every partition of the current P, one after the other,
        as `cadence.Holders.housekeeping` runs them (a failure stops none of the others), those
        past HOUSEKEPT_HERE by a task on their queue (here named for the current slot; deployed,
        unnamed and at once); then a run of the exactness audit, whatever the housekeeping did
        (the deployed `rollup` function)."""
        failure: Exception | None = None
        try:
            for part in partitions.parts(partitions.read_count(self.stage.db, NAMES)):
                try:  # one that fails keeps no other from its turn; the run fails after them
                    if part.index >= cadence.HOUSEKEPT_HERE:
                        self.enqueue(part, waking.slot_of(self.stage.sim.wall()))
                        continue
                    self._ran(SCHEDULED, part, self._holder(SCHEDULED, part).housekeeping())
                except Exception as error:
                    failure = failure or error
            if failure is not None:
                raise failure
        finally:
            actor = self.stage.sim.current()
            assert actor is not None
            actor.owner = None  # the audit writes as no holder
            try:  # then the numbers no commit carried into their records, as deployed
                self.stage.ops["record_issued"] += 1
                began = self.stage.sim.now_us
                kept = housekeeping.record_issued(self.stage.db, NAMES, self.stage.sim.wall())
                self.stage.model.records_runs.append((began, self.stage.sim.now_us, kept.failed))
            finally:
                self.stage.ops["audit"] += 1
                try:
                    audit.run(self.stage.write_context, self.stage.db)
                finally:
                    self._sweep()

    def _sweep(self) -> None:
        """The extension counters' sweep (`extension.sweep`), once their declaration is
        deployed."""
        stage = self.stage
        if stage.deployed_us is None:
            return
        if self._sweeper is None:
            self._sweeper = stage.context(
                shard_choice.ShardPicker(random.Random(stage.rng.random())))
        sweeper = self._sweeper
        stage.ops["extension_sweep"] += 1
        stage.history.call(Request(kind="extension_sweep"),
                           lambda: extension.sweep(sweeper, stage.db, OWN.declarations))

    def _ticked(self, holder: cadence.Holder, stats: Any) -> None:
        """Note each partition's sweeps, and count a narrowing: a partition's ticks went from
        the wide stripe set (the old P's too) to the narrow one while a writer that last used
        another P is alive (a sweep's cells are apart from the ticks' stripes)."""
        rollup = holder.rollup
        if stats.swept is not None:  # the instant up to which the sweep found every commit
            self.swept.setdefault(holder.part, []).append(
                (stats.swept - ORIGIN) // dt.timedelta(microseconds=1))
        if rollup is None:
            return
        partitioning, part = holder.lease.record.partitioning, holder.part
        wide = getattr(stats, "wide", None)
        if wide is None:
            wide = stats.as_of < partitioning.narrow_at and partitioning.spread != part.count
        if self.wide.get(part) and not wide and self.writers is not None:
            count = self.stage.count()
            if any(self.stage.known.acted.get(w.name, count) != count
                   for w in self.writers.live()):
                self.stage.tally["narrowed"] += 1
        self.wide[part] = wide

    # -- Cloud Tasks --

    def enqueue(self, part: Part, slot: int) -> bool:
        """A task on the queue of the partition's index, named for the slot and the partition,
        refused when it exists, dispatched a moment after the slot's end (now and then a little
        before it: clocks differ; or minutes late). Its creation sometimes fails."""
        stage, chaos = self.stage, self.stage.chaos
        if stage.rng.random() < chaos.enqueue_fail_p:
            stage.tally["enqueue_failures"] += 1
            raise admin_exceptions.UnavailableError("simulated: Cloud Tasks is unavailable")
        name = waking.task_id(slot, part)
        if name in self.tasks:
            return False
        self.tasks.add(name)
        due = (waking.slot_end(slot) - stage.sim.wall()).total_seconds()
        delay = max(0.0, due + stage.rng.uniform(-0.05, 0.4))
        if stage.rng.random() < chaos.late_task_p:
            delay += stage.rng.uniform(*chaos.late_task_s)
            stage.tally["late_tasks"] += 1
        stage.sim.at(stage.sim.now_us + micros(delay),
                     functools.partial(self._due, part, slot, 1))
        if stage.rng.random() < chaos.duplicate_task_p:  # Cloud Run past its maximum instances
            extra = f"extra-{name}"
            stage.sim.spawn(f"task-{name}-dup", functools.partial(
                self.invoke, extra, f"tick-{part.index}",
                functools.partial(self._tick, extra, part, slot)),
                after_s=delay + stage.rng.uniform(0.0, 0.5))
        return True

    def _due(self, part: Part, slot: int, attempt: int) -> None:
        """A task is due: its partition index's queue dispatches it once the one before it has
        ended."""
        self.pending.setdefault(part.index, deque()).append((part, slot, attempt))
        self._next(part.index)

    def _next(self, index: int) -> None:
        queue = self.pending.get(index)
        if index in self.dispatching or not queue:
            return
        part, slot, attempt = queue.popleft()
        self.dispatching.add(index)
        self.stage.sim.spawn(f"task-{waking.task_id(slot, part)}-{attempt}",
                             functools.partial(self._dispatch, part, slot, attempt))

    def _dispatch(self, part: Part, slot: int, attempt: int) -> None:
        """One delivery attempt, to the instance of the partition's index. A failed or killed
        attempt is delivered again after a backoff, up to 5 attempts."""
        sim = self.stage.sim
        instance = f"tick-{part.index}"
        done = False
        try:
            done = self.invoke(instance, instance,
                               functools.partial(self._tick, instance, part, slot))
        finally:
            self.dispatching.discard(part.index)
            if not done and attempt < 5:
                sim.at(sim.now_us + micros(min(10.0, 2.0 ** (attempt - 1))),
                       functools.partial(self._due, part, slot, attempt + 1))
            self._next(part.index)

    # -- Cloud Scheduler --

    def schedule(self, at_s: float) -> None:
        """Cloud Scheduler's execution at `at_s`, then at the first minute after each one ends:
        never two at once (one that died ends too)."""
        sim = self.stage.sim

        def due() -> None:
            sim.spawn(f"scheduled-{at_s:.0f}", self._execution)

        sim.at(micros(at_s), due)

    def _execution(self) -> None:
        sim = self.stage.sim
        try:
            self.invoke(SCHEDULED, SCHEDULED, self._housekeeping)
        finally:
            self.schedule((sim.monotonic() // 60.0 + 1) * 60.0)

    def on_commit(self, attempt: Attempt) -> None:
        """Note each change of P, and each lease taken by another holder than the one that held
        it last (a handover: released, expired or retaken)."""
        stage = self.stage
        for path, _, after in attempt.changes:
            if path == PARTITIONS_PATH:
                now = int((after.data or {}).get("count") or 1)
                if now != stage.partitions[-1]:  # the setup's change to the start is not one
                    stage.partitions.append(now)
            part = LEASES.get(path)
            owner = (after.data or {}).get("owner") if part is not None else None
            if part is None or owner is None:
                continue
            last = self.last_owner.get(path)
            if last is not None and last != owner:
                stage.handovers[str(part)] += 1
            self.last_owner[path] = owner


class Chaotic:
    """Now and then a writer dies (a new one takes its place) or freezes before its next
    request (between choosing its shard and sending, or between a commit and its touch), an
    instance of the extension shards' trigger dies (its calls with it) or freezes, or the next
    rollup invocation of a partition index of the current P (or of the scheduled instance) is
    killed or paused a moment after it starts (mid-tick)."""

    def __init__(self, stage: Stage, writers: Writers, rollup: Rollup,
                 trigger: Trigger) -> None:
        self.stage = stage
        self.writers = writers
        self.rollup = rollup
        self.trigger = trigger

    def run(self) -> None:
        stage, chaos = self.stage, self.stage.chaos
        rng = stage.rng
        while stage.writing:
            stage.sim.wait(rng.uniform(*chaos.step_s))
            draw = rng.random()
            live = self.writers.live()
            if draw < chaos.writer_kill_p and live:
                victim = rng.choice(live)
                victim.killed = True
                stage.tally["writer_kills"] += 1
                self.writers.spawn(after_s=rng.uniform(0.1, 2.0))
            elif draw < chaos.writer_kill_p + chaos.writer_pause_p and live:
                rng.choice(live).pause_s = rng.uniform(*chaos.writer_pause_s)
                stage.tally["writer_pauses"] += 1
            elif draw < chaos.writer_kill_p + chaos.writer_pause_p + chaos.trigger_p \
                    and self.trigger.instances:
                self.trigger.strike(kill=rng.random() < chaos.holder_kill_p)
            else:
                doom = "kill" if rng.random() < chaos.holder_kill_p else "pause"
                target = SCHEDULED if rng.random() < chaos.scheduled_p \
                    else f"tick-{rng.randrange(stage.count())}"
                self.rollup.dooms[target] = doom
