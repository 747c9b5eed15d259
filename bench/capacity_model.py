"""The rollup's capacity, predicted: for a load (distinct counters changed a second, increments a
second, counters in all), the partitions P it needs, its instances, its lag, Firestore's reads,
writes and deletes, Cloud Tasks' creations and dispatches, the month's bill, a new database's
ramp-up, and the platform limit that binds first. Pure; prices are `cost_model`'s.

A tick's cost comes from two kinds of measurement, for two questions.

This machine (`compare`, `compare_lag`): one holder's tick of n changed counters takes `a + b n`
of wall time alone (`tick_fixed_s`, `tick_per_counter_s`). Where the holders share `cores` with
Firestore (here: the emulator on this machine), P ticks side by side also need `P f + k v` CPU
seconds for k counters in all (`cpu_fixed_s`, `cpu_per_counter_s`: the holders' and the
emulator's), so a round of ticks takes

    round_s(k, P) = max(a + b k / P, (P f + k v) / cores)

and P holders absorb, with every tick under the budget B (1 s: the next second's tick),

    capacity(P) = min(P (B - a) / b, (cores B - P f) / v)          (the holder's, the machine's)

fitted from the P = 1 run of a scale benchmark's capacity part (counters of one shard) and
checked against its P = 2 and 4 (`bench/results/scale*.json`; docs/benchmarks.md, "Scale", has
the runs and their ratios).

Production (`at_shape`, `capacity_rows`, `production`): a holder's CPU at the realistic shape, from
REFERENCE (`bench/results/reference.json`): the median, term by term, of the last runs of the
scale benchmark's shape part, not one day's: an empty tick's CPU, and per changed counter a cost
of its own plus one per shard document its tick returns (`shards_read`: those written in its
second, and the overlap's share of them again). A partition's share of its sweep each tick costs
a shard document's each (`sweep_docs_per_tick`). Deployed, each holder has an instance of its own
and Firestore its own machines: the holder's CPU runs at the instance's share of a vCPU, plus
Firestore's round trips. P is the smallest power of two whose busiest partition's tick ends within
TICK_BUDGET_S and whose `(stripe, updated_at)` index ranges take the shard writes; the lag p99 is
the wait for the second's end, the task's dispatch and the busiest tick. The platform's limits
(`limits`) bound what P carries: the callables' instances, Cloud Tasks' API quota, the index
ranges, the tick functions; Firestore's guidance for a listened collection and its 500/50/5
ramp-up are said, not enforced.

Estimates, not measurements: no tick has been timed on Cloud Run, so the deployed round trip
(ROUND_TRIP_S) and the dispatch (DISPATCH_S) are assumptions, said where they are used, and the
CPU of Python's Firestore client on an instance is taken as this machine's at its share.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cost_model
from cost_examples import CALLABLE_S
from counting.foundation import config, kinds
from counting.rollup import ledger
from counting.rollup.ledger import IDLE_TICKS_KEPT
from counting.writepath import autoscale, partitions

RESULTS = Path(__file__).parent / "results"
# What the production estimates take a holder's costs from (the module's docstring): the shape
# part's runs, and the one-holder capacity run whose empty tick and commits they keep.
REFERENCE = RESULTS / "reference.json"

# Mirrors of limits defined beside Firestore clients (counting.writepath.partitions,
# counting.rollup.cadence), which this pure module does not import; tests check they agree.
HOMES = 128  # partitions.HOMES: the design has at most 128 partitions
BASE_HOMES = 16  # partitions.BASE_HOMES: stripes per partition; tags live in the first 16
WIDE_SPREAD = 29  # partitions.WIDE_SPREAD: index ranges per partition past P = 16
DEFAULT_MAX = 16  # partitions.DEFAULT_MAX: the tick functions a deploy makes as shipped
HOUSEKEPT_HERE = 16  # cadence.HOUSEKEPT_HERE: the scheduled run ticks these; tasks the rest
IN_VALUES = 30  # partitions.IN_VALUES: values an `in` filter takes
USAGE_WRITERS = 8  # cadence.USAGE_WRITERS: partitions that flush the usage every usage_flush_s
# A holder reads at most this many documents of counters it has not met in a tick.
DOCUMENT_LOADS_PER_TICK = ledger.DOCUMENT_LOADS_PER_TICK

# The platform's limits (docs/architecture.md, "Capacity").
INDEX_RANGE_WRITES = 500.0  # writes/s an index range of increasing values takes
QUEUE_DISPATCHES = 500.0  # tasks/s a Cloud Tasks queue dispatches
TASK_API_REQUESTS = 6_000_000 / 60  # Cloud Tasks API requests/s a project makes (a quota)
# The callables' instances (functions/main.py: max_instances) and requests each serves at once.
CALLABLE_INSTANCES = 100
# Increments a second they serve, each request CALLABLE_S (its latency only).
CALLABLE_INCREMENTS_PER_S = CALLABLE_INSTANCES * cost_model.CALLABLE_CONCURRENCY / CALLABLE_S
# Firestore's guidance for a collection clients listen to (best practices, "Realtime updates"):
# writes/s. `counters/{id}` takes a publish a second per changed counter.
LISTENED_COLLECTION_WRITES = 1000.0
# A new collection's (or key range's) ramp-up: 500 operations/s, then 50% more every 5 minutes
# ("500/50/5"): a new install's counters and shards.
RAMP_START_OPS, RAMP_GROWTH, RAMP_STEP_S = 500.0, 1.5, 300.0
SCHEDULE_S = cost_model.SCHEDULE_S  # the scheduled run housekeeps partitions within it
DOCUMENT_WRITES = 1.0  # sustained writes/s to one document

TICK_PERIOD_S = 1.0  # a partition ticks once a second: a longer tick delays the next second's
# P is chosen so that the busiest partition's tick ends within this: a fifth of the period is
# left for a slow Firestore moment, as autoscaling leaves room for bursts.
TICK_BUDGET_S = 0.8
SLOT_WAIT_P99_S = 0.99  # a write waits for the end of its second: its p99, uniform in the second
# Assumptions of the deployed tick (not measured): a Firestore round trip in the region; an empty
# tick's round trips (the lease's read, the change query, the commit with the fence); a task's
# dispatch after its second.
ROUND_TRIP_S = 0.05
TICK_ROUND_TRIPS = 3
SWEEP_ROUND_TRIPS = 2  # a tick's cell queries of the sweep, one after the other (two or three)
DISPATCH_S = 0.1
# A tick commits a counter's document and, on a sweep, its memory: half the commit's writes.
COUNTERS_PER_COMMIT = config.ROLLUP_COMMIT_WRITES // 2
# A grow's round trips, one after the other in its tick (`tick.Rollup._grow`: its bounds read, its
# shards created, its document), and those that follow it in later ticks once its rate has fallen
# for the cool-down: the shrink's (bounds, document) and, after the grace, the fold's (the surplus
# shards read, moved and deleted, the document). A load of bursts grows and shrinks alike.
GROW_ROUND_TRIPS = 3
LATER_ROUND_TRIPS = 2 + 3
CONFIG_READS_PER_COUNTER = 1  # a writer instance reads a counter's configuration per cache TTL


@dataclass(frozen=True, kw_only=True)
class OpCosts:
    """What a holder's tick costs. Wall time alone: `tick_fixed_s` + n x `tick_per_counter_s` for
    n changed counters. CPU where the holders share `cores` with Firestore: `cpu_fixed_s` + n x
    `cpu_per_counter_s` (None: each holder has its own instance and Firestore its own machines).
    `holder_cpu_*`: the holder's own share of that CPU, which moves to a deployed instance."""

    tick_fixed_s: float
    tick_per_counter_s: float
    cpu_fixed_s: float
    cpu_per_counter_s: float
    holder_cpu_fixed_s: float
    holder_cpu_per_counter_s: float
    cores: float | None
    # Each shard document a sweep's cell returns (decoded, then dropped when a tick took it in):
    # 0 where not measured (a run of this machine's, whose sweeps fall between its ticks).
    tick_per_sweep_doc_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A holder's CPU on this machine at the realistic shape (`bench/run.py scale`, part `shape`):
    an empty tick's, and per changed counter `cpu_per_counter_s` plus `cpu_per_shard_s` for
    each shard document its tick returns (the client's decoding of it, the ledger's sum)."""

    empty_cpu_s: float
    cpu_per_counter_s: float
    cpu_per_shard_s: float
    # Autoscaling's grows a changed counter, as the rollup's own ledger decides them at the
    # table's shape (`make sim-scale`, kept in REFERENCE), and the round trips each costs the
    # ticks, one after the other: its own and its shrink's and fold's (a run shorter than the
    # cool-down, as `make sim-scale`'s, sees GROW_ROUND_TRIPS alone).
    rescaled_per_changed: float = 0.0
    rescale_round_trips: int = GROW_ROUND_TRIPS + LATER_ROUND_TRIPS


@dataclass(frozen=True, kw_only=True)
class Load:
    changed_per_s: float  # distinct counters changed a second
    increments_per_s: float
    counters: int  # counters in all, the idle ones included
    # Each counter's shards (None: those autoscaling gives a changed counter's rate, as if it
    # took its share of the increments every second).
    shards: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.changed_per_s <= self.increments_per_s:
            raise ValueError("a changed counter had at least one increment: "
                             f"0 < {self.changed_per_s} <= {self.increments_per_s}")
        if self.counters < self.changed_per_s:
            raise ValueError(f"{self.changed_per_s} changed a second of {self.counters} counters")


@dataclass(frozen=True, kw_only=True)
class Design:
    """How the rollup is deployed: `max_partitions` tick functions (ROLLUP_PARTITIONS_MAX: 16 as
    shipped, up to HOMES), `tick_mb` sizes them (gen-1: 512 MB is a third of a vCPU). Each
    partition has its own queue."""

    max_partitions: int = DEFAULT_MAX
    tick_mb: int = cost_model.ROLLUP_MB

    def __post_init__(self) -> None:
        if self.max_partitions not in (2 ** i for i in range(HOMES.bit_length())) \
                or self.max_partitions > HOMES:
            raise ValueError(f"max_partitions: a power of two up to {HOMES}")

    @property
    def vcpu(self) -> float:
        return cost_model.GEN1_VCPU_BY_MB[self.tick_mb]

    @property
    def gib(self) -> float:
        return self.tick_mb / 1024

    @property
    def choices(self) -> tuple[int, ...]:
        """P: powers of two up to the tick functions, so that every partition gets as many
        homes."""
        return tuple(2 ** i for i in range(self.max_partitions.bit_length())
                     if 2 ** i <= self.max_partitions)

    @staticmethod
    def spread(partitions: int) -> int:
        return partitions if partitions <= BASE_HOMES else WIDE_SPREAD

    @classmethod
    def queries_per_tick(cls, partitions: int) -> int:
        """A partition's change query reads 16 stripes (30 past P = 16: 29 spreads and a
        writer's that took P = 1), one `in` filter."""
        values = BASE_HOMES if partitions <= BASE_HOMES else cls.spread(partitions) + 1
        return math.ceil(values / IN_VALUES)

    @staticmethod
    def queries_per_sweep(partitions: int) -> int:
        """A sweep reads the stripes of every P up to 16 and up to its own (`Part.reads`): 256 / P
        values up to 16; past 16, the last partition's residue at each resolution R from 32,
        those of its WIDE_SPREAD values above the range of the resolution before."""
        if partitions <= BASE_HOMES:
            return math.ceil(BASE_HOMES * BASE_HOMES // partitions / IN_VALUES)
        values, top, resolution = BASE_HOMES, BASE_HOMES * BASE_HOMES, 2 * BASE_HOMES
        while resolution <= partitions:
            values += WIDE_SPREAD - math.ceil((top - resolution + 1) / resolution)
            top, resolution = resolution * WIDE_SPREAD, 2 * resolution
        return math.ceil(values / IN_VALUES)

    @classmethod
    def index_ranges(cls, partitions: int) -> int:
        """Ranges of the (stripe, updated_at) index writers that know P write: resolution
        max(16, P) times the spread."""
        return max(BASE_HOMES, partitions) * cls.spread(partitions)


@dataclass(frozen=True, kw_only=True)
class Limit:
    """A platform limit in the rollup's path: its rule, and where it binds under a design (None:
    it does not bound that figure)."""

    name: str
    rule: str
    max_partitions: int | None = None
    max_changed_per_s: float | None = None
    max_increments_per_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Prediction:
    partitions: int
    keeps_up: bool  # the busiest tick ends within TICK_BUDGET_S, the index takes the writes
    limit: str | None  # the limit that stops the design from carrying the load (None: none)
    peak_per_partition: float  # changed counters in the busiest partition's tick
    tick_s: float
    lag_p99_s: float | None  # None: ticks fall behind, the lag grows without bound
    tick_instances: int
    writer_instances: int
    reads_per_s: float
    writes_per_s: float
    deletes_per_s: float
    task_creations_per_s: float
    task_dispatches_per_s: float
    ramp_minutes: float  # new collections' ramp-up to these operations (500/50/5)
    bill: dict[str, float]  # $ a month, term by term
    month_usd: float


# -- from the measurements --


def anchored_line(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope): the intercept is the first point's y (x = 0: measured, not
    extrapolated), the slope the least-squares one through it."""
    (x0, y0), rest = points[0], points[1:]
    if x0 != 0 or not rest:
        raise ValueError("an anchored line needs its x = 0 point first and another")
    return y0, sum(x * (y - y0) for x, y in rest) / sum(x * x for x, _ in rest)


def step_cpu(step: dict[str, Any]) -> tuple[float, float]:
    """A step's CPU seconds, (the holders' and the emulator's, the holders'), from the cores
    the two kept busy during its ticks (the holders' alone is not recorded for an empty tick)."""
    both = step["cores_ours"] * step["tick_s"]
    per_counter = step["cpu_s_per_changed_counter"]
    holders = both - step["emulator_cpu_s"] if per_counter is None \
        else per_counter * step["changed_counters"]
    return both, holders


def measured_costs(scale: dict[str, Any], partitions: int = 1) -> OpCosts | None:
    """What a tick cost in the scale benchmark's run of `partitions` holders: its steps' ticks
    (k changed counters in all, k / P each) and CPU, per holder. None when the run cannot be
    fitted (fewer than two steps, an empty tick missing, the emulator's CPU not read)."""
    figures = scale["capacity_by_partitions"]
    run = figures["runs"].get(str(partitions))
    steps = run["steps"] if run else []
    if len(steps) < 2 or steps[0]["k"] != 0 or any(
            step["cores_ours"] is None or step["emulator_cpu_s"] is None for step in steps):
        return None
    per_holder = [step["changed_counters"] / partitions for step in steps]
    cpu = [step_cpu(step) for step in steps]
    a, b = anchored_line([(n, step["tick_s"]) for n, step in zip(per_holder, steps, strict=True)])
    f, v = anchored_line([(n, both / partitions) for n, (both, _) in zip(per_holder, cpu,
                                                                          strict=True)])
    hf, hv = anchored_line([(n, holders / partitions) for n, (_, holders) in zip(per_holder, cpu,
                                                                                 strict=True)])
    return OpCosts(tick_fixed_s=a, tick_per_counter_s=b, cpu_fixed_s=f, cpu_per_counter_s=v,
                   holder_cpu_fixed_s=hf, holder_cpu_per_counter_s=hv,
                   cores=float(figures["cores"]))


def deployed(measured: OpCosts, design: Design) -> OpCosts:
    """The tick on Cloud Run: the holder's CPU at the instance's share of a vCPU, plus Firestore's
    round trips (TICK_ROUND_TRIPS a tick, one per commit of COUNTERS_PER_COMMIT counters); no
    machine shared with Firestore. The CPU of a Python tick is its client's encoding and decoding,
    which an instance runs as this machine did, slower by its share."""
    return replace(
        measured,
        tick_fixed_s=measured.holder_cpu_fixed_s / design.vcpu + TICK_ROUND_TRIPS * ROUND_TRIP_S,
        tick_per_counter_s=measured.holder_cpu_per_counter_s / design.vcpu
        + ROUND_TRIP_S / COUNTERS_PER_COMMIT,
        cpu_fixed_s=measured.holder_cpu_fixed_s,
        cpu_per_counter_s=measured.holder_cpu_per_counter_s, cores=None)


# -- capacity --


def tick_s(changed: float, costs: OpCosts, sweep_docs: float = 0.0) -> float:
    """One holder's tick of `changed` counters, alone, reading `sweep_docs` of its sweep."""
    return costs.tick_fixed_s + changed * costs.tick_per_counter_s \
        + sweep_docs * costs.tick_per_sweep_doc_s


def round_s(changed: float, partitions: int, costs: OpCosts) -> float:
    """P ticks side by side taking in `changed` counters in all, evenly: the slowest holder's
    own tick, or the cores' share of all their CPU, whichever is longer."""
    alone = tick_s(changed / partitions, costs)
    if costs.cores is None:
        return alone
    return max(alone, (partitions * costs.cpu_fixed_s + changed * costs.cpu_per_counter_s)
               / costs.cores)


def holder_capacity(costs: OpCosts, budget_s: float = TICK_BUDGET_S,
                    sweep_docs: float = 0.0) -> float:
    """Changed counters one holder takes in with its tick within `budget_s`, beside `sweep_docs`
    of its sweep."""
    return max(0.0, (budget_s - tick_s(0.0, costs, sweep_docs)) / costs.tick_per_counter_s)


def machine_capacity(partitions: int, costs: OpCosts, budget_s: float) -> float:
    """Changed counters P ticks side by side take in within `budget_s` on the cores they share
    (infinite: none shared)."""
    if costs.cores is None:
        return math.inf
    return max(0.0, (costs.cores * budget_s - partitions * costs.cpu_fixed_s)
               / costs.cpu_per_counter_s)


def capacity(partitions: int, costs: OpCosts, budget_s: float = TICK_PERIOD_S) -> tuple[float, str]:
    """Changed counters a second P holders absorb, and what bounds it: `holder` (P x one
    holder's) or `machine` (the cores they share)."""
    holders = partitions * holder_capacity(costs, budget_s)
    machine = machine_capacity(partitions, costs, budget_s)
    return (holders, "holder") if holders <= machine else (machine, "machine")


def balance(partitions: int, per_partition: float) -> float:
    """The busiest partition's changed counters over the mean: counters fall on partitions by
    their hash, so each partition's count in a second is about Poisson, and the largest of P is
    about sqrt(2 ln P) standard deviations above the mean."""
    if partitions == 1:
        return 1.0
    return 1.0 + math.sqrt(2 * math.log(partitions) / max(per_partition, 1.0))


def distinct_within(load: Load, seconds: float) -> float:
    """Distinct counters changed within `seconds`, each counter changed at random at its share
    of the load."""
    return load.counters * -math.expm1(-load.changed_per_s * seconds / load.counters)


def shards_touched(load: Load) -> float:
    """Distinct shards a changed counter's increments of a second land on, each increment on a
    shard picked at random, of its `counter_shards`."""
    rate = round(load.increments_per_s / load.changed_per_s, 9)
    shards = counter_shards(load)
    return shards * -math.expm1(-rate / shards)


def counter_shards(load: Load) -> int:
    """A changed counter's shards: the load's, or those autoscaling gives its rate, as if it
    took its share of the increments every second (a feed's active posts); a counter changed in
    bursts has fewer (the rate's 2 s rise), for `cool_down_s` after each."""
    if load.shards is not None:
        return load.shards
    # Rounded: two loads whose rates a float's rounding sets apart (4.5 and 4.500000000000001,
    # one load scaled) have one shard count, not two either side of a step.
    return autoscale.shards_for_rate(round(load.increments_per_s / load.changed_per_s, 9))


def shards_read(load: Load) -> float:
    """Shard documents a changed counter's tick returns: those written in its second, and of
    them, those the next tick's overlap reaches again."""
    return shards_touched(load) * (1 + config.CHANGE_OVERLAP_S / TICK_PERIOD_S)


def sweep_docs(load: Load) -> float:
    """Shard documents a sweep returns, every partition's: each shard written in the
    MAX_REQUEST_S before the last sweep and since, each counter's increments of that time
    falling on its `counter_shards` at random."""
    window = config.ROLLUP_SWEEP_EVERY_S + config.MAX_REQUEST_S
    shards = counter_shards(load)
    per_counter = load.increments_per_s / load.counters * window
    return load.counters * shards * -math.expm1(-per_counter / shards)


def sweep_docs_per_tick(load: Load, partitions: int) -> float:
    """A partition's share of the sweep each tick: its sweep's documents over the ticks of a
    sweep period, and those of other partitions its stripes return (`sweep_overread`)."""
    return sweep_docs(load) / partitions / (config.ROLLUP_SWEEP_EVERY_S / TICK_PERIOD_S) \
        * sweep_overread(partitions)


@functools.cache  # (a pure function of P, asked at every step of a bisection)
def sweep_overread(count: int) -> float:
    """The shard documents a partition's sweep returns over its own, writers knowing P =
    `count`: past 16 the stripes it reads for writers of every P up to 16 (`Part.reads`) are also
    stripes other homes' writers use at P (`partitions.stripe` numbers them home % R + R x r, R =
    max(16, P)), whose documents it decodes and drops. 1 up to P = 16."""
    part = partitions.Part(count, 0)
    read = set(part.reads(max(BASE_HOMES, count)))
    size, spread = partitions.resolution(count), partitions.spread_of(count)
    written = [(home, home % size + size * r) for home in range(HOMES) for r in range(spread)]
    return sum(stripe in read for _, stripe in written) \
        / sum(part.owns(home) for home, _ in written)


def at_shape(shape: Shape, design: Design, load: Load, *, sweep: bool = True) -> OpCosts:
    """The deployed tick (`deployed`) for `load`, its holder's CPU from `shape`: per changed
    counter, the shards its tick returns (`shards_read`) and its share of autoscaling's round
    trips; per sweep document, a shard's (`sweep_docs_per_tick`, other partitions' included), and
    the round trips of its cells' queries (none without the sweep: what it costs, by difference). A
    sweep document a tick took in is dropped after its decoding, before the ledger: charging it
    a whole shard document's cost bounds the sweep's share from above."""
    per_counter = shape.cpu_per_counter_s + shards_read(load) * shape.cpu_per_shard_s
    return OpCosts(
        tick_fixed_s=shape.empty_cpu_s / design.vcpu
        + (TICK_ROUND_TRIPS + (SWEEP_ROUND_TRIPS if sweep else 0)) * ROUND_TRIP_S,
        tick_per_counter_s=per_counter / design.vcpu + ROUND_TRIP_S / COUNTERS_PER_COMMIT
        + shape.rescaled_per_changed * shape.rescale_round_trips * ROUND_TRIP_S,
        cpu_fixed_s=shape.empty_cpu_s, cpu_per_counter_s=per_counter,
        holder_cpu_fixed_s=shape.empty_cpu_s, holder_cpu_per_counter_s=per_counter, cores=None,
        tick_per_sweep_doc_s=shape.cpu_per_shard_s / design.vcpu if sweep else 0.0)


def partitions_for(load: Load, costs: OpCosts, design: Design) -> int | None:
    """The smallest P whose busiest tick ends within TICK_BUDGET_S and whose index ranges take
    the shard writes (None: no P of the design does)."""
    for p in design.choices:
        per_partition = load.changed_per_s / p
        room = holder_capacity(costs, sweep_docs=sweep_docs_per_tick(load, p))
        if per_partition * balance(p, per_partition) <= room and \
                load.increments_per_s <= INDEX_RANGE_WRITES * design.index_ranges(p):
            return p
    return None


# -- limits --


def limits(costs: OpCosts, design: Design) -> list[Limit]:
    """Every platform limit in the rollup's path, with where it binds under `design` for a
    deployed tick of `costs` (docs/architecture.md, "Capacity")."""
    room = holder_capacity(costs)
    largest = max(design.choices)
    return [
        Limit(name="holder", rule=f"a partition's tick ends within {TICK_BUDGET_S} s (its queue "
              "dispatches the next second's task after it); one holder a partition",
              max_changed_per_s=room),
        Limit(name="tick_functions", rule=f"a deploy makes {design.max_partitions} tick "
              f"functions (ROLLUP_PARTITIONS_MAX, a power of two up to the {HOMES} homes): one "
              "partition each", max_partitions=design.max_partitions,
              max_changed_per_s=largest * room / balance(largest, room)),
        Limit(name="index_ranges", rule=f"an index range of increasing values takes about "
              f"{INDEX_RANGE_WRITES:.0f} writes/s; (stripe, updated_at) has 16 P ranges up to "
              f"P = 16, {WIDE_SPREAD} P past it",
              max_increments_per_s=INDEX_RANGE_WRITES * design.index_ranges(largest)),
        Limit(name="in_values", rule=f"`in` takes at most {IN_VALUES} values: a tick's change "
              f"query reads 16 stripes (30 past P = 16) in one query, a sweep "
              f"{design.queries_per_sweep(1)} queries at P = 1 and "
              f"{design.queries_per_sweep(HOMES)} at P = {HOMES}"),
        Limit(name="queue_dispatch", rule=f"a queue dispatches at most {QUEUE_DISPATCHES:.0f} "
              "tasks/s; each partition's queue carries one task a second"),
        Limit(name="schedule_60s", rule=f"the scheduled run housekeeps {HOUSEKEPT_HERE} "
              f"partitions one after the other within {SCHEDULE_S:.0f} s, an idle tick each, "
              "and enqueues a housekeeping task for each further one"),
        Limit(name="document_writes", rule=f"about {DOCUMENT_WRITES:.0f} write/s per document: a "
              f"counter is published once a second, a lease by its partition, the usage record "
              f"at most {USAGE_WRITERS / config.ROLLUP.usage_flush_s:.1f}/s at any P"),
        Limit(name="callables", rule=f"{CALLABLE_INSTANCES} instances of a callable (its "
              f"max_instances) serve {cost_model.CALLABLE_CONCURRENCY} requests at once each, "
              f"a request {CALLABLE_S * 1000:.0f} ms (its latency only: a request's CPU on "
              "the instance's vCPU, not measured, may bind first)",
              max_increments_per_s=CALLABLE_INCREMENTS_PER_S),
        Limit(name="task_api", rule=f"Cloud Tasks takes {TASK_API_REQUESTS:,.0f} API requests/s "
              "a project (a quota): each writer instance creates a tick task a second for each "
              "partition it wrote in"),
        Limit(name="listened_collection", rule=f"Firestore's guidance keeps a collection that "
              f"clients listen to under {LISTENED_COLLECTION_WRITES:,.0f} writes/s; `counters` "
              "takes a publish a second per changed counter (guidance: not a refusal, and not "
              "modelled: what it costs the listeners is not known)",
              max_changed_per_s=LISTENED_COLLECTION_WRITES),
    ]


def largest_partitions(costs: OpCosts, design: Design) -> tuple[int, Limit]:
    """The largest P the design allows, and the limit that caps it: its tick functions."""
    cap = min((limit for limit in limits(costs, design) if limit.max_partitions is not None),
              key=lambda limit: limit.max_partitions or 0)
    return max(p for p in design.choices if p <= (cap.max_partitions or 0)), cap


def binding_limits(load: Load, costs: OpCosts, design: Design) -> list[str]:
    """The limits that stop `design` from carrying `load`, in the order they are checked: at
    the largest P, the busiest tick is over its budget and what caps P binds, the index ranges
    take too many shard writes, the callables' instances too many requests, or Cloud Tasks too
    many creations."""
    largest, cap = largest_partitions(costs, design)
    found = []
    per_partition = load.changed_per_s / largest
    if per_partition * balance(largest, per_partition) > holder_capacity(
            costs, sweep_docs=sweep_docs_per_tick(load, largest)):
        found.append(cap.name)
    if load.increments_per_s > INDEX_RANGE_WRITES * design.index_ranges(largest):
        found.append("index_ranges")
    if load.increments_per_s > CALLABLE_INCREMENTS_PER_S:
        found.append("callables")
    if task_creations(load, largest) > TASK_API_REQUESTS:
        found.append("task_api")
    return found


def binding_limit(load: Load, costs: OpCosts, design: Design) -> str | None:
    """The first limit that stops `design` from carrying `load` (None: it carries it)."""
    return next(iter(binding_limits(load, costs, design)), None)


def writer_instances(load: Load) -> int:
    """The callables' instances the increments keep busy, each serving its concurrency."""
    return max(1, math.ceil(load.increments_per_s * CALLABLE_S / cost_model.CALLABLE_CONCURRENCY))


def task_creations(load: Load, partitions: int) -> float:
    """Tick tasks created a second (or refused as existing, billed alike): each writer instance,
    once a second, for each partition it wrote in."""
    writers = writer_instances(load)
    return writers * partitions * -math.expm1(-load.increments_per_s / (writers * partitions))


def ramp_minutes(operations_per_s: float) -> float:
    """Minutes new collections take to admit `operations_per_s` under the 500/50/5 ramp-up."""
    if operations_per_s <= RAMP_START_OPS:
        return 0.0
    steps = math.log(operations_per_s / RAMP_START_OPS) / math.log(RAMP_GROWTH)
    return math.ceil(steps) * RAMP_STEP_S / 60


# -- a load's figures --


def predict(load: Load, costs: OpCosts, design: Design | None = None) -> Prediction:
    """What the deployed rollup needs and costs for `load`, with a tick of `costs` (`deployed`).
    Where no P of the design carries the load, the figures are those of its largest P, and the
    lag is None."""
    design = design or Design()
    limit = binding_limit(load, costs, design)
    keeps_up = limit is None
    p = partitions_for(load, costs, design) if keeps_up else None
    if p is None:
        p = largest_partitions(costs, design)[0]
    per_partition = load.changed_per_s / p
    peak = per_partition * balance(p, per_partition)
    tick = tick_s(peak, costs, sweep_docs_per_tick(load, p))
    # Each partition ticks in the seconds in which one of its counters changed.
    slots = p * -math.expm1(-per_partition)
    writers = writer_instances(load)
    creations = task_creations(load, p)
    window = config.CONFIG_CACHE_TTL_S
    per_writer = min(distinct_within(load, window), load.increments_per_s * window / writers)
    config_reads = min(load.increments_per_s,
                       writers * (per_writer * CONFIG_READS_PER_COUNTER + 1) / window)
    shards = shards_touched(load)
    sweep_s = config.ROLLUP_SWEEP_EVERY_S
    reads = (config_reads
             + slots * (1 + design.queries_per_tick(p))  # the lease, the change query
             + load.changed_per_s * shards * (1 + config.CHANGE_OVERLAP_S)
             # A sweep reaches MAX_REQUEST_S before the last one: it reads again every shard
             # changed since.
             + (sweep_docs(load) + p * design.queries_per_sweep(p)) / sweep_s
             # A counter idle for IDLE_TICKS_KEPT ticks is dropped: met again, its document and
             # memory are read.
             + 2 * load.changed_per_s * math.exp(
                 -IDLE_TICKS_KEPT * load.changed_per_s / load.counters))
    usage_writes = min(p, USAGE_WRITERS) / config.ROLLUP.usage_flush_s + 1 / SCHEDULE_S
    writes = (2 * load.increments_per_s  # the shard, the request's marker
              + load.changed_per_s + slots  # the publishes, the lease with them
              # At each sweep, the memories of the counters changed since the last (a falling
              # rate is not written: readers decay it).
              + distinct_within(load, sweep_s) / sweep_s
              + usage_writes)
    deletes = load.increments_per_s  # the markers' TTL
    # Past HOUSEKEPT_HERE partitions, the scheduled run enqueues a task a minute to each further
    # one (created and dispatched; its tick is counted in `slots` while it is written).
    housekept_by_task = max(0, p - HOUSEKEPT_HERE) / SCHEDULE_S
    tick_usd_s = design.vcpu * cost_model.VCPU_S + design.gib * cost_model.GIB_S
    writer_usd_s = (cost_model.CALLABLE_VCPU * cost_model.VCPU_S
                    + cost_model.CALLABLE_GIB * cost_model.GIB_S)
    month = cost_model.MONTH_S
    bill = {
        "write_invocations": load.increments_per_s * cost_model.INVOCATION * month,
        # Each request bills its 100 ms alone until they overlap on the instances.
        "write_compute": min(writers, load.increments_per_s * cost_model.billed_s(CALLABLE_S))
        * writer_usd_s * month,
        "firestore_reads": reads * cost_model.READ * month,
        "firestore_writes": writes * cost_model.WRITE * month,
        "firestore_deletes": deletes * cost_model.DELETE * month,
        "task_operations": (creations + slots + 2 * housekept_by_task)
        * cost_model.TASK_OPERATION * month,
        "rollup_invocations": (slots + 1 / SCHEDULE_S + housekept_by_task)
        * cost_model.INVOCATION * month,
        "rollup_compute": (slots * cost_model.billed_s(tick)
                           + cost_model.billed_s(costs.tick_fixed_s) / SCHEDULE_S)
        * tick_usd_s * month,
        "scheduler": cost_model.SCHEDULER_JOB_MONTH,
    }
    return Prediction(
        partitions=p, keeps_up=keeps_up, limit=limit,
        peak_per_partition=peak, tick_s=tick,
        lag_p99_s=SLOT_WAIT_P99_S + DISPATCH_S + tick if keeps_up else None,
        tick_instances=p, writer_instances=writers, reads_per_s=reads, writes_per_s=writes,
        deletes_per_s=deletes, task_creations_per_s=creations, task_dispatches_per_s=slots,
        ramp_minutes=ramp_minutes(reads + writes + deletes),
        bill=bill, month_usd=sum(bill.values()))


def first_meeting_reads(counters: int, partitions: int = 1, *,
                        shards_per_counter: int = 1) -> int:
    """Reads of P fresh holders (a handover, a change of P, the partitions' first start) meeting
    `counters` for the first time, all of them in each holder's first tick: each changed shard,
    returned by the change query, the counter's document and its memory. At most
    ledger.DOCUMENT_LOADS_PER_TICK a partition: past it, the rest are read whole,
    FIRST_LOADS_PER_TICK a tick, over later ticks.

    Beside them, each first tick reads its lease. The T = min(P, BASE_HOMES) partitions with
    trending tags also run the trends' expiry query of each window (once a minute), and their
    trends step after a change of P reads the scopes (`republish` on partition 0, a first index
    elsewhere), partition 0 the T - 1 other indexes, every other one its own index: P + T (W + 3)
    - 2 reads for W windows (6 P - 2 up to P = 16). No trend is written here: no bucket is read.
    Not counted: a first tick is a sweep, and below P = 16 its query of the stripes of every P is
    several `in` queries, of which one that finds nothing bills a read."""
    if counters > partitions * DOCUMENT_LOADS_PER_TICK:
        raise ValueError(f"{counters} counters on {partitions} partitions: more than "
                         f"{DOCUMENT_LOADS_PER_TICK} a partition are deferred to whole reads")
    met = counters * (shards_per_counter + 2)
    trending = min(partitions, BASE_HOMES)
    expiry = trending * len(kinds.WINDOWS)
    trend_parts = 1 + (trending - 1) + 2 * (trending - 1)  # scopes, indexes; index, scopes
    return met + partitions + expiry + trend_parts


# -- checked against this machine --


def within(ratio: float | None, tolerance: float = 0.2, *, at_least: bool = False) -> bool | None:
    """Whether predicted / measured is within `tolerance` of 1; of a measured lower bound (the
    largest step's ticks were under the limit: `at_least`), whether it is not below 1 - it."""
    if ratio is None:
        return None
    return ratio >= 1 - tolerance if at_least else abs(ratio - 1) <= tolerance


def compare(scale: dict[str, Any]) -> list[dict[str, Any]]:
    """Per P of the scale benchmark: the aggregate it measured, the model's prediction from the
    P = 1 run alone (one holder's tick and CPU, the machine's cores), and the same equations with
    the run's own CPU (`explained`; the holder's tick stays P = 1's: under contention a holder's
    own ticks measure the machine, which the CPU term already counts). A point saved as 0 or
    None was not measured. A run whose largest step still ticked within the period measured a
    lower bound (`at_least`): a prediction above it agrees, one more than 20% below misses."""
    one = measured_costs(scale)
    rows = []
    reasons = scale["capacity_by_partitions"].get("not_measured", {})
    for key, measured in scale["capacity_by_partitions"]["aggregate_counters_per_s"].items():
        p = int(key)
        run = scale["capacity_by_partitions"]["runs"].get(key) or {}
        at_least = not run.get("capacity", {}).get("bounded", True)
        own = measured_costs(scale, p)
        seen = float(measured) if measured else None
        predicted = capacity(p, one) if one else None
        explained = capacity(p, replace(one, cpu_fixed_s=own.cpu_fixed_s,
                                        cpu_per_counter_s=own.cpu_per_counter_s)) \
            if one and own else None
        ratio = predicted[0] / seen if predicted and seen else None
        explained_ratio = explained[0] / seen if explained and seen else None
        rows.append({
            "partitions": p, "measured": seen, "at_least": at_least,
            "not_measured": None if seen else reasons.get(key, "saved as 0: not measured"),
            "predicted": predicted[0] if predicted else None,
            "bound": predicted[1] if predicted else None,
            "ratio": ratio, "within_20pct": within(ratio, at_least=at_least),
            "explained": explained[0] if explained else None,
            "explained_bound": explained[1] if explained else None,
            "explained_ratio": explained_ratio,
            "explained_within_20pct": within(explained_ratio, at_least=at_least),
        })
    return rows


def compare_lag(scale: dict[str, Any]) -> dict[str, Any]:
    """The lag run's p99 (P holders each looping a tick a second at a rate of distinct counters)
    against the model's: a write waits for the next tick (its p99 within a second), then the
    round of P ticks of a second's counters on this machine (ticking in step: an upper
    estimate). Not compared when the lag and capacity figures come from different runs
    (`SCALE_PARTS` ran one of them alone): the machine's speed differs from run to run. A file
    saved before runs were dated (no `when_by_part`) is compared: docs/benchmarks.md says which
    runs it holds."""
    lag = scale["lag"]
    one = measured_costs(scale)
    predicted = SLOT_WAIT_P99_S + round_s(lag["offered_rate"], lag["partitions"], one) \
        if one else None
    dated = "when_by_part" in scale
    when = scale.get("when_by_part") or {}
    apart = dated and when.get("lag") != when.get("capacity")
    reason = None if lag.get("measured", True) else lag["reason"]
    if reason is None and apart:
        reason = (f"the lag run ({when.get('lag') or 'undated'}) and the capacity run "
                  f"({when.get('capacity') or 'undated'}) that predicts it are different runs")
    ratio = predicted / lag["lag_p99_s"] if reason is None and predicted and lag["lag_p99_s"] \
        else None
    return {"partitions": lag["partitions"], "rate": lag["offered_rate"],
            "measured_p99_s": lag["lag_p99_s"], "predicted_p99_s": predicted, "ratio": ratio,
            "within_20pct": within(ratio), "not_measured": reason}


# -- the table of docs/architecture.md ("Capacity") --

TABLE_LOADS = (10, 100, 1_000, 10_000, 100_000)  # changed counters a second
INCREMENTS_PER_CHANGED = 10  # each changed counter written 10 times in its second
COUNTERS_PER_CHANGED = 100  # of 100 times as many counters in all
# Of 8 shards each: what a burst of 10 once in 100 s leaves autoscaling (its rate's 2 s rise
# reaches about 4 writes/s), where 10 a second, every second, would grow to 20.
TABLE_SHARDS = 8
TABLE_SIZINGS = (cost_model.ROLLUP_MB, 2048)  # the tick functions as shipped, and at one vCPU


def table_load(changed: float) -> Load:
    """The table's shape of a load of `changed` counters a second."""
    return Load(changed_per_s=changed, increments_per_s=changed * INCREMENTS_PER_CHANGED,
                counters=math.ceil(changed * COUNTERS_PER_CHANGED), shards=TABLE_SHARDS)


def capacity_rows(shape: Shape) -> list[str]:
    """The Capacity table's rows (markdown), predicted for the deployed rollup with a holder's
    CPU of `shape`, for loads of TABLE_LOADS changed counters a second, with up to 128 tick
    functions at each of TABLE_SIZINGS: P and lag p99 at each, then the writers' instances and
    the month's bill at the first sizing that carries the load."""
    rows = []
    for changed in TABLE_LOADS:
        load = table_load(changed)
        cells = [f"{changed:,}", f"{load.increments_per_s:,.0f}"]
        carried: Prediction | None = None
        for mb in TABLE_SIZINGS:
            design = Design(max_partitions=HOMES, tick_mb=mb)
            found = predict(load, at_shape(shape, design, load), design)
            if found.lag_p99_s is None:
                cells += [str(found.partitions), f"not carried ({found.limit})"]
                continue
            cells += [str(found.partitions), f"{found.lag_p99_s:.1f} s"]
            carried = carried or found
        if carried is None:
            cells += ["", "not carried"]
        else:
            cells += [f"{carried.writer_instances:,}", f"${carried.month_usd:,.0f}"]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def largest_carried(shape: Shape, design: Design, *, ignore: frozenset[str] = frozenset(),
                    sweep: bool = True) -> tuple[float, str]:
    """The most changed counters a second (the table's shape) `design` carries, to 1%, and the
    limit that stops it just above: the limits `binding_limit` checks, but those in `ignore`."""
    def stops(changed: float) -> str | None:
        load = table_load(changed)
        costs = at_shape(shape, design, load, sweep=sweep)
        return next((limit for limit in binding_limits(load, costs, design)
                     if limit not in ignore), None)

    low, high = 1.0, 1e7
    while high / low > 1.01:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if stops(middle) is None else (low, middle)
    return low, stops(high) or "none"


def production(shape: Shape) -> dict[str, Any]:
    """At HOMES partitions and each of TABLE_SIZINGS: the changed counters a second carried at
    the table's shape and the limit that binds first, and what the ticks would carry without
    their share of the sweep (every other limit lifted), for the docs and
    `bench/results/scale.json`."""
    lifted = frozenset({"callables", "task_api", "index_ranges"})
    sizings = {}
    for mb in TABLE_SIZINGS:
        design = Design(max_partitions=HOMES, tick_mb=mb)
        carried, limit = largest_carried(shape, design)
        unswept, _ = largest_carried(shape, design, ignore=lifted, sweep=False)
        sizings[str(mb)] = {"changed_per_s": round(carried), "binds_first": limit,
                            "ticks_without_sweep_changed_per_s": round(unswept)}
    load = table_load(TABLE_LOADS[-1])
    return {"partitions": HOMES, "shape": {"increments_per_changed": INCREMENTS_PER_CHANGED,
                                           "counters_per_changed": COUNTERS_PER_CHANGED,
                                           "shards": counter_shards(load),
                                           "shards_read": round(shards_read(load), 2)},
            "holder": {"empty_cpu_s": shape.empty_cpu_s,
                       "cpu_per_counter_s": shape.cpu_per_counter_s,
                       "cpu_per_shard_s": shape.cpu_per_shard_s},
            "by_tick_mb": sizings,
            "bounds_changed_per_s": {
                "callables": CALLABLE_INCREMENTS_PER_S / INCREMENTS_PER_CHANGED,
                "index_ranges": INDEX_RANGE_WRITES * Design.index_ranges(HOMES)
                / INCREMENTS_PER_CHANGED,
                "listened_collection": LISTENED_COLLECTION_WRITES},
            "ramp_minutes_at_largest_load": predict(
                load, at_shape(shape, Design(max_partitions=HOMES, tick_mb=2048), load),
                Design(max_partitions=HOMES, tick_mb=2048)).ramp_minutes}


def reference() -> dict[str, Any]:
    """What the production estimates come from (REFERENCE): `shape_runs`, the shape part's
    figures of the runs kept, and `capacity_by_partitions`, the one-holder capacity run."""
    figures: dict[str, Any] = json.loads(REFERENCE.read_text())
    return figures


def reference_shape(figures: dict[str, Any] | None = None) -> Shape:
    """The reference's shape runs, each point the median of the runs' (not the fastest day's):
    the empty tick, and the line through the CPU a changed counter with 1 and with 8 shards
    returned (its intercept and slope from the same medians, not one run's each)."""
    runs = (figures or reference())["shape_runs"]
    touched = sorted({int(t) for run in runs for t in run["by_touched"]})
    low, high = touched[0], touched[-1]

    def median_of(t: int, key: str) -> float:
        return float(statistics.median(run["by_touched"][str(t)][key] for run in runs))

    at_low, at_high = (median_of(t, "cpu_s_per_changed_counter") for t in (low, high))
    per_shard = (at_high - at_low) / (high - low)
    return Shape(empty_cpu_s=statistics.median(
                     row["empty_cpu_s"] for run in runs for row in run["by_touched"].values()),
                 cpu_per_counter_s=at_low - per_shard * low, cpu_per_shard_s=per_shard,
                 rescaled_per_changed=float(
                     (figures or reference())["autoscaling"]["rescaled_per_changed"]))


if __name__ == "__main__":
    print("\n".join(capacity_rows(reference_shape())))
    print(json.dumps(production(reference_shape()), indent=1))
