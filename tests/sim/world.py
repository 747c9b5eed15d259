"""One simulated run, assembled from a seed: the model of Firestore (`model`), virtual time
(`virtual`), the actors (`actors`) and the hazards they meet (`faults`), with the protections a
run has on (`protections`); then quiescence, and every checker (`checkers`).

One generator, seeded by the run's seed, seeds everything else in a fixed order, so a seed
replays exactly. A run has writers write and the operator act for `active_s`; then it waits
until nothing is in flight (writers frozen for minutes, commits landing late, events and tasks
delivered late), runs a backfill if an event's handler gave up, and lets every partition sweep
twice more; past a drawn outage of the sequences' housekeeping, if any; then every request id
given a number is asked once more (`retry_numbers`), and it checks. Before the partitions'
sweeps, the extension counters' shards are left to drain (`drain`: the trigger's moves end, the
scheduled sweep takes what they left), after a final backfill of them if the operator's failed.
"""

from __future__ import annotations

import functools
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from counting.features import collections, shard_choice
from counting.features.sequences import issuing
from counting.foundation import config
from counting.foundation.clock import Clock
from counting.foundation.config import Names, Protections
from counting.writepath import partitions, waking
from google.cloud import firestore

from . import checkers, protections
from .actors import (
    EXTENSION,
    ORDERS,
    VISITED,
    Chaotic,
    ExtensionOperator,
    Operator,
    Plan,
    ProcessesKnow,
    Rollup,
    Stage,
    Trigger,
    Writers,
    backfill,
)
from .checkers import Evidence, Finding
from .faults import Chaos, Requests
from .history import History
from .model import Client, Model, Path
from .virtual import Sim

# Breaks an invariant on purpose, changing the model and the history in place.
Tamper = Callable[[Model, History], None]


@dataclass(frozen=True, kw_only=True)
class Settings:
    active_s: float = 90.0  # writers, the operator and chaos act this long
    quiet_max_s: float = 900.0  # then at most this long for what is in flight to end
    settle_max_s: float = 600.0  # then at most this long for every partition to sweep twice
    writers: int = 4
    requests: Requests = field(default_factory=Requests)
    chaos: Chaos = field(default_factory=Chaos)
    partitions: int | None = None  # P at the start (None: one of actors.DRAWN_P, drawn)
    changes: int | None = None  # changes of P while writers write (None: 0 to 3, drawn)
    # Breaks an invariant on purpose before each judging (tests/sim/test_checkers.py): the
    # model and the history, to be changed in place.
    tamper: Tamper | None = None


@dataclass
class Outcome:
    seed: int
    off: list[str]  # the protections that were off
    findings: list[Finding] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    ops: Counter[str] = field(default_factory=Counter)
    tally: Counter[str] = field(default_factory=Counter)
    partitions: list[int] = field(default_factory=list)
    handovers: Counter[str] = field(default_factory=Counter)
    struck: Counter[str] = field(default_factory=Counter)
    library_retries: int = 0
    max_commit_delay_s: float = 0.0
    virtual_s: float = 0.0
    seconds: float = 0.0

    def of(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def ok(self) -> bool:
        return not (self.findings or self.crashes)

    @property
    def failed(self) -> list[str]:
        """The checkers that found something, and `crashes`."""
        return sorted({f.checker for f in self.findings} | ({"crashes"} if self.crashes else set()))


def run(seed: int, *, protected: Protections = protections.ALL,
        settings: Settings | None = None) -> Outcome:
    settings = settings or Settings()
    started = time.perf_counter()
    rng = random.Random(seed)
    sim = Sim(random.Random(rng.random()))
    model = Model(sim, random.Random(rng.random()), settings.requests)
    db = cast(firestore.Client, Client(model))
    known = ProcessesKnow(sim)
    clock = Clock(monotonic=sim.monotonic, now=sim.wall, sleep=sim.wait)
    stage_rng = random.Random(rng.random())
    entropy = random.Random(rng.random())
    outcome = Outcome(seed=seed, off=protections.off(protected))
    # The writes of every process of the run wake its rollup (made below) for their slot.
    waker = waking.Waker(lambda _, part, slot: rollup.enqueue(part, slot),
                         count=lambda target: known.count(target, Names()),
                         pools=protections.Inline)
    writing = protections.writing(protected, known=known, waker=waker, clock=clock,
                                  entropy=entropy)
    stage = Stage(sim=sim, model=model, db=db, history=History(sim), rng=stage_rng,
                  chaos=settings.chaos, known=known, clock=clock, write_context=writing)
    plan = Plan.draw(stage.rng, settings.active_s, settings.partitions, settings.changes)
    stage.partitions.append(plan.start)
    writers, rollup, trigger = Writers(stage), Rollup(stage), Trigger(stage)
    rollup.writers = writers
    operator = Operator(stage, plan)
    extension_operator = ExtensionOperator(stage, plan)
    model.on_commit += [rollup.on_commit, trigger.on_commit]
    try:
        sim.spawn("operator", operator.run)
        sim.spawn("operator-extension", extension_operator.run)
        rollup.schedule(1.0)
        for n in range(settings.writers):
            writers.spawn(after_s=0.5 + n * 0.1)
        sim.spawn("chaos", Chaotic(stage, writers, rollup, trigger).run, after_s=5.0)
        sim.run_until(settings.active_s)
        stage.writing = False
        quiesce(sim, model, settings)
        if trigger.given_up:
            stage.tally["final_backfills"] += 1
            last = sim.spawn("final-backfill", lambda: backfill(stage))
            while not last.done:
                sim.run_until(sim.monotonic() + 10.0)
            quiesce(sim, model, settings)
        if stage.extension_unfinished:
            stage.tally["final_extension_backfills"] += 1
            last = sim.spawn("final-extension-backfill", extension_operator.backfill)
            while not last.done:
                sim.run_until(sim.monotonic() + 10.0)
        drain(sim, model, settings)
        settle(sim, model, stage, rollup, settings)
        # The sequences' checkers judge the run after every request id given a number is asked
        # once more (and, past an outage of their housekeeping, after its next runs); the
        # others now: an hour later, trend windows have moved on from what they count.
        later = (checkers.Sequences, checkers.SequenceRecords)
        if settings.tamper is not None:
            settings.tamper(model, stage.history)
        evidence = Evidence(model, stage.history)
        for checker in checkers.every(ORDERS, EXTENSION):
            if not isinstance(checker, later):
                outcome.findings += checker.check(evidence)
        if plan.records_outage is not None:
            sim.run_until(max(sim.monotonic(), plan.records_outage[1] + 150.0))
        last = sim.spawn("final-retries", lambda: retry_numbers(stage))
        while not last.done:
            sim.run_until(sim.monotonic() + 10.0)
        sim.run_until(sim.monotonic() + config.MAX_REQUEST_S)  # their commits land
        if settings.tamper is not None:
            settings.tamper(model, stage.history)
        evidence = Evidence(model, stage.history)
        for checker in checkers.every(ORDERS, EXTENSION):
            if isinstance(checker, later):
                outcome.findings += checker.check(evidence)
    finally:
        sim.shutdown()
    outcome.crashes = sim.crashes + stage.history.crashes
    outcome.ops = stage.ops + folds_and_grows(model)
    outcome.tally, outcome.partitions = stage.tally, stage.partitions
    outcome.handovers, outcome.struck = stage.handovers, stage.struck
    outcome.library_retries = model.library_retries
    outcome.max_commit_delay_s = model.max_commit_delay_us / 1e6
    outcome.virtual_s = sim.monotonic()
    outcome.seconds = time.perf_counter() - started
    return outcome


def retry_numbers(stage: Stage) -> None:
    """Every request id given a number (its record is there) asked once more, after everything,
    by a process of its own: it must get its number (`checkers.SequenceRecords`)."""
    process = stage.context(shard_choice.ShardPicker(random.Random(stage.rng.random())))
    uids = {(path[1], str(data.get("request_id"))): str(data.get("uid"))
            for path, versions in stage.model.docs.items()
            if len(path) == 4 and path[2] == config.NUMBER_REQUESTS
            and (data := versions[-1].data) is not None}
    for request in stage.history.requests:
        key = (str(request.tenant), str(request.request_id))
        if request.kind != "next_number_id" or key not in uids:
            continue
        stage.ops["final_retry"] += 1
        stage.ask(request, functools.partial(
            issuing.next_number, process, stage.db, key[0], request_id=key[1], uid=uids[key],
            now=stage.sim.wall()))


def quiesce(sim: Sim, model: Model, settings: Settings) -> None:
    """Run until no actor but a scheduled housekeeping is alive and no commit is in flight
    (or the cap)."""
    cap = settings.active_s + settings.quiet_max_s
    while sim.monotonic() < cap:
        sim.run_until(sim.monotonic() + 10.0)
        busy = [a for a in sim.alive() if not a.name.startswith("scheduled-")]
        if not busy and not model.in_flight():
            return


def drain(sim: Sim, model: Model, settings: Settings) -> None:
    """Run until no extension counter's shard or partial holds an amount (the scheduled sweep
    moves what the trigger's moves left, every minute) and nothing is in flight, or the cap."""
    cap = sim.monotonic() + settings.settle_max_s
    while sim.monotonic() < cap:
        if not unmoved(model):
            quiesce(sim, model, settings)
            if not unmoved(model):
                return
        sim.run_until(sim.monotonic() + 10.0)


def unmoved(model: Model) -> list[Path]:
    """The extension counters' shards and partials that hold an amount."""
    found = []
    for path in model.groups.get(collections.SHARDS, set()):
        data = model.docs[path][-1].data
        if collections.match(EXTENSION.documents, "/".join(path)) is not None and data \
                and VISITED.amount(data, partial=collections.is_partial(path[-1])):
            found.append(path)
    return found


def settle(sim: Sim, model: Model, stage: Stage, rollup: Rollup, settings: Settings) -> None:
    """Run until every partition of the current P has swept twice since the last commit
    landed (or the cap): whatever a sweep deferred, the next one found done."""
    last = max((attempt.commit_us or 0 for attempt in model.landed), default=0)
    cap = sim.monotonic() + settings.settle_max_s
    while sim.monotonic() < cap:
        sim.run_until(sim.monotonic() + 10.0)
        if all(sum(1 for at in rollup.swept.get(part, []) if at > last) >= 2
               for part in partitions.parts(stage.count())):
            sim.run_until(sim.monotonic() + 10.0)  # their commits land
            return


def folds_and_grows(model: Model) -> Counter[str]:
    """The rollup's own operations, counted from its commits: folds (commits deleting surplus
    shards) and grows (commits raising `num_shards`)."""
    found: Counter[str] = Counter()
    for attempt in model.landed:
        if attempt.owner is None:
            continue
        folded = grown = False
        for path, before, after in attempt.changes:
            if len(path) == 4 and path[0] == config.COUNTERS and path[2] == config.SHARDS:
                folded |= after.data is None and before is not None and before.data is not None
            if len(path) == 2 and path[0] == config.COUNTERS and before is not None:
                old = (before.data or {}).get("num_shards") or 0
                grown |= int((after.data or {}).get("num_shards") or 0) > int(old)
        found["fold"] += folded
        found["grow"] += grown
    return found
