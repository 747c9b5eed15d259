"""The capacity model: P grows with the load in powers of two up to the deploy's tick functions,
every figure grows with the load, a limit is named when it binds, the bill's terms make its total,
and the committed scale benchmark's points are predicted from its one-holder run."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import capacity_model as model
import cost_model
import pytest
from capacity_model import Design, Load, OpCosts
from counting.rollup import cadence, ledger
from counting.writepath import partitions
from hypothesis import assume, given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
SCALE: dict[str, Any] = json.loads((ROOT / "bench/results/scale.json").read_text())


def one_holder() -> OpCosts:
    costs = model.measured_costs(SCALE)
    assert costs is not None, "scale.json's P = 1 run has its steps"
    return costs


MEASURED = one_holder()
TODAY = Design()
WIDE = Design(max_partitions=128, tick_mb=2048)
DEPLOYED = model.deployed(MEASURED, TODAY)

changed_st = st.floats(1, 300_000)
ratio_st = st.floats(1, 20)  # increments per changed counter
spread_st = st.floats(1, 1000)  # counters per changed counter a second


def load(changed: float, ratio: float = 10, spread: float = 100) -> Load:
    return Load(changed_per_s=changed, increments_per_s=changed * ratio,
                counters=math.ceil(changed * spread))


def test_the_mirrored_limits_are_the_codes() -> None:
    """HOMES, IN_VALUES and USAGE_WRITERS are those of partitions.py and cadence.py; the model's
    queries and index ranges are what the partitions read and write."""
    assert model.HOMES == partitions.HOMES
    assert (model.BASE_HOMES, model.DEFAULT_MAX, model.WIDE_SPREAD) == (
        partitions.BASE_HOMES, partitions.DEFAULT_MAX, partitions.WIDE_SPREAD)
    assert model.HOUSEKEPT_HERE == cadence.HOUSEKEPT_HERE
    assert WIDE.choices == partitions.CHOICES
    for p in partitions.CHOICES:
        part = partitions.Part(p, p - 1)
        assert Design.queries_per_tick(p) == len(partitions.chunks(part.ticks()))
        assert Design.queries_per_sweep(p) == len(partitions.chunks(
            part.reads(max(p, partitions.BASE_HOMES))))
        assert Design.index_ranges(p) == len({s for q in partitions.parts(p)
                                             for s in q.stripes_of(p)})
    assert model.IN_VALUES == partitions.IN_VALUES
    assert model.USAGE_WRITERS == cadence.USAGE_WRITERS
    assert TODAY.choices == tuple(p for p in partitions.CHOICES if p <= 16)


@given(changed_st, ratio_st, spread_st, st.sampled_from([TODAY, WIDE]))
def test_p_is_a_power_of_two_up_to_the_homes(changed: float, ratio: float, spread: float,
                                             design: Design) -> None:
    """Whatever the load, P divides the homes and the deploy has its tick function; a load the
    design carries gets a P whose busiest tick ends within the budget."""
    predicted = model.predict(load(changed, ratio, spread), model.deployed(MEASURED, design),
                              design)
    assert predicted.partitions in design.choices
    assert model.HOMES % predicted.partitions == 0
    assert predicted.partitions <= design.max_partitions
    assert predicted.partitions & (predicted.partitions - 1) == 0
    if predicted.keeps_up:
        assert predicted.tick_s <= model.TICK_BUDGET_S + 1e-9
        assert predicted.lag_p99_s is not None


@given(changed_st, ratio_st, spread_st, st.floats(1, 10))
def test_every_figure_grows_with_the_load(changed: float, ratio: float, spread: float,
                                          factor: float) -> None:
    """A load `factor` times larger (in changed counters, increments and counters alike) needs
    as many partitions and instances or more, and as many operations and dollars or more."""
    small = model.predict(load(changed, ratio, spread), DEPLOYED)
    large = model.predict(load(changed * factor, ratio, spread), DEPLOYED)
    assert large.partitions >= small.partitions
    assert large.writer_instances >= small.writer_instances
    for figure in ("reads_per_s", "writes_per_s", "deletes_per_s", "task_creations_per_s",
                   "task_dispatches_per_s", "month_usd"):
        assert getattr(large, figure) >= getattr(small, figure) * (1 - 1e-9), figure


def test_a_light_load_binds_no_limit() -> None:
    """10 changed counters a second: one partition, a lag under 1.5 s, no limit."""
    predicted = model.predict(load(10), DEPLOYED)
    assert (predicted.partitions, predicted.keeps_up, predicted.limit) == (1, True, None)
    assert predicted.lag_p99_s is not None and predicted.lag_p99_s < 1.5


def test_the_tick_functions_bind_past_16_partitions_of_holders() -> None:
    """100,000 changed counters a second, one increment each: the shipped 16 tick functions
    cannot carry it (each partition's tick over its second), 128 at 1 vCPU can."""
    heavy = load(100_000, ratio=1)
    today = model.predict(heavy, DEPLOYED)
    assert (today.partitions, today.keeps_up, today.limit, today.lag_p99_s) == \
        (16, False, "tick_functions", None)
    wide = model.predict(heavy, model.deployed(MEASURED, WIDE), WIDE)
    assert (wide.partitions, wide.keeps_up, wide.limit) == (128, True, None)


def test_the_index_ranges_bind_on_shard_writes() -> None:
    """Few changed counters but more shard writes than 16 x 16 ranges take: the index binds."""
    assert model.binding_limit(load(10, ratio=20_000), DEPLOYED, TODAY) == "index_ranges"
    assert model.binding_limit(load(10, ratio=10_000), DEPLOYED, TODAY) is None


def test_a_million_increments_a_second_fit_the_index_at_128() -> None:
    """1,000,000 increments a second over 100,000 changed counters: 16 x 128 ranges of 500
    writes/s take them; 16 x 16 do not."""
    huge = load(100_000, ratio=10)
    assert model.binding_limit(huge, model.deployed(MEASURED, WIDE), WIDE) is None
    assert model.binding_limit(huge, DEPLOYED, TODAY) == "index_ranges"


def test_each_limit_says_where_it_binds() -> None:
    """As shipped: 16 partitions, 128,000 shard writes a second (500 x 16 ranges x 16), one query a
    tick; at 128, 1,856,000 (500 x 29 ranges x 128), still one query a tick."""
    found = {limit.name: limit for limit in model.limits(DEPLOYED, TODAY)}
    assert set(found) == {"holder", "tick_functions", "index_ranges", "in_values",
                          "queue_dispatch", "schedule_60s", "document_writes"}
    assert found["tick_functions"].max_partitions == 16
    assert found["index_ranges"].max_increments_per_s == 128_000
    assert found["queue_dispatch"].max_partitions is None  # a queue per partition
    holder = found["holder"].max_changed_per_s
    assert holder is not None and found["tick_functions"].max_changed_per_s is not None
    assert holder < found["tick_functions"].max_changed_per_s < 16 * holder
    wide = {limit.name: limit for limit in model.limits(model.deployed(MEASURED, WIDE), WIDE)}
    assert wide["index_ranges"].max_increments_per_s == 1_856_000
    assert Design.queries_per_tick(128) == 1
    assert Design.queries_per_sweep(1) == 9  # 256 stripes of every P (docs: "9 queries")


@given(changed_st, ratio_st, spread_st, st.sampled_from([TODAY, WIDE]))
def test_the_bills_terms_sum_to_its_total(changed: float, ratio: float, spread: float,
                                         design: Design) -> None:
    """Each term is a cost (>= 0) and the month is their sum, the Scheduler job among them."""
    predicted = model.predict(load(changed, ratio, spread), model.deployed(MEASURED, design),
                              design)
    assert all(usd >= 0 for usd in predicted.bill.values())
    assert predicted.bill["scheduler"] == cost_model.SCHEDULER_JOB_MONTH
    assert predicted.month_usd == pytest.approx(sum(predicted.bill.values()))


@given(st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([MEASURED, DEPLOYED]))
def test_at_its_capacity_a_round_of_ticks_takes_the_budget(p: int, costs: OpCosts) -> None:
    """The capacity is where P ticks side by side take the whole second: on the shared cores or
    in the slowest holder's own tick, whichever bounds it. It is 0 where empty ticks alone take
    longer (8 holders beside the emulator on this machine's 2 cores)."""
    absorbed, bound = model.capacity(p, costs)
    if absorbed > 0:
        assert model.round_s(absorbed, p, costs) == pytest.approx(model.TICK_PERIOD_S)
    else:
        assert model.round_s(0, p, costs) > model.TICK_PERIOD_S
    if costs.cores is None:
        assert bound == "holder"



def test_a_deployed_tick_runs_the_holders_cpu_at_its_share_of_a_vcpu() -> None:
    """A third of a vCPU: three times the CPU per changed counter measured here, plus a share
    of a commit's round trip; no machine shared with Firestore."""
    assert DEPLOYED.cores is None
    assert DEPLOYED.tick_per_counter_s == pytest.approx(
        MEASURED.holder_cpu_per_counter_s / TODAY.vcpu
        + model.ROUND_TRIP_S / model.COUNTERS_PER_COMMIT)


@pytest.mark.parametrize("increments", [1, 10, 1000])
def test_a_rates_decay_is_the_ledgers(increments: int) -> None:
    """The model's time for a counter's rate to fall to 0 once it is no longer written (each
    sweep within it writes the rate) is what the rollup's ledger takes, to the second."""
    book = ledger.Ledger()
    book.hold("c", {"count": 0, "num_shards": 1})
    book.hold_shards("c", {"0": ledger.ShardValue(count=0, writes=0)})
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    at = [start + dt.timedelta(seconds=s) for s in range(400)]
    written = {"c": {"0": ledger.ShardValue(count=increments, writes=increments)}}
    book.apply(written, at[0], at[1])
    second = 1
    while ledger.publishable(book.held["c"].scaling.rate) > 0:  # type: ignore[union-attr]
        book.apply({}, at[second], at[second + 1])
        second += 1
    predicted = model.rate_decay_s(Load(changed_per_s=1, increments_per_s=increments,
                                        counters=1))
    assert abs((second - 1) - predicted) <= 1


def test_a_first_meeting_reads_each_changed_shard_the_document_and_the_memory() -> None:
    """50,000 counters of one shard met for the first time by 16 fresh holders: 150,000 reads,
    and each first tick's lease, expiry queries and trend indexes (the scale benchmark's run
    of 2,000 counters at P = 16 read 6,094)."""
    assert model.first_meeting_reads(50_000, 16) == 150_000 + 6 * 16 - 2
    assert model.first_meeting_reads(2_000, 16) == 6_094
    assert model.first_meeting_reads(10, shards_per_counter=4) == 60 + 4
    per_partition = model.DOCUMENT_LOADS_PER_TICK
    assert model.first_meeting_reads(per_partition * 4, 4) == per_partition * 4 * 3 + 22
    # Past 16 partitions, the others have no trending tags: a lease each.
    assert model.first_meeting_reads(0, 128) == model.first_meeting_reads(0, 16) + 112
    with pytest.raises(ValueError, match="deferred"):
        model.first_meeting_reads(per_partition * 4 + 1, 4)


@given(st.integers(0, 80_000), st.sampled_from(partitions.CHOICES), st.integers(1, 10))
def test_first_meeting_reads_grow_with_the_counters_and_the_shards(
        counters: int, count: int, shards: int) -> None:
    """Each counter met costs its shards, its document and its memory; the rest is per
    partition."""
    assume(counters <= count * model.DOCUMENT_LOADS_PER_TICK)
    reads = model.first_meeting_reads(counters, count, shards_per_counter=shards)
    assert reads - model.first_meeting_reads(0, count) == counters * (shards + 2)


def test_the_saved_first_meeting_read_what_the_model_predicts() -> None:
    """The scale benchmark's first meeting (bench/results/scale.json): every count exact, one
    tick a holder, and its reads the model's to the read."""
    meeting = SCALE["first_meeting"]
    assert meeting["exact"] and meeting["drained"]
    assert meeting["meeting_ticks"] == meeting["partitions"]
    assert meeting["reads"] == meeting["reads_predicted"] == model.first_meeting_reads(
        meeting["counters"], meeting["partitions"],
        shards_per_counter=meeting["shards_per_counter"])


def test_a_load_is_consistent() -> None:
    """A changed counter had an increment, and is one of the counters."""
    with pytest.raises(ValueError):
        Load(changed_per_s=10, increments_per_s=5, counters=100)
    with pytest.raises(ValueError):
        Load(changed_per_s=10, increments_per_s=10, counters=5)


def test_an_anchored_line_passes_through_the_empty_tick() -> None:
    """The intercept is the x = 0 point as measured; the slope fits the others through it."""
    assert model.anchored_line([(0, 1.0), (1, 3.0), (2, 5.0)]) == (1.0, 2.0)
    assert model.anchored_line([(0, 1.0), (2, 3.0), (2, 5.0)]) == (1.0, 1.5)


# -- the committed scale benchmark --


FRESH: dict[str, Any] = json.loads(
    (ROOT / "bench/results/scale_2026-11-29_fresh.json").read_text())
# The same method again, each round with a P = 1 run beside a process keeping a core busy too
# (the hypothesis that an idle core inflates P = 1's CPU per changed counter; it did not).
BUSY: dict[str, Any] = json.loads((ROOT / "bench/results/scale_2026-11-29_busy.json").read_text())
ROWS = {(run, row["partitions"]): row
        for run, scale in (("11-26", SCALE), ("fresh", FRESH), ("busy", BUSY))
        for row in model.compare(scale)}
# The model's miss at P = 2, kept rather than fitted (bench/capacity_model.py's docstring): the
# P = 1 run spends more CPU per changed counter (holders and emulator) than the P = 2 run does,
# so the machine term says two holders fill the 2 cores sooner than they do. 11-26's P = 1 run
# was its stack's first (a cold emulator); the fresh run, every run on a warmed emulator of its
# own, misses the same way (0.68), so the cold emulator was not the cause.
P2_MISS = pytest.mark.xfail(strict=True, raises=AssertionError,
                            reason="the P = 1 run's CPU per changed counter overstates what two "
                                   "holders need (cause unknown)")


@pytest.mark.parametrize(("run", "p"), [
    ("11-26", 1), pytest.param("11-26", 2, marks=P2_MISS), ("11-26", 4),
    ("fresh", 1), pytest.param("fresh", 2, marks=P2_MISS), ("fresh", 4),
    ("busy", 1), pytest.param("busy", 2, marks=P2_MISS), ("busy", 4),
])
def test_the_measured_points_are_predicted_from_one_holder(run: str, p: int) -> None:
    """The aggregate of P holders on this machine, predicted from the P = 1 run alone, is within
    20% of what the benchmark measured, or the point was saved as not measured, with the reason
    (an empty tick of half the period: the machine, not the holders, bounds it)."""
    row = ROWS[run, p]
    if row["measured"] is None:
        assert row["not_measured"] and row["ratio"] is None, row
    else:
        assert row["within_20pct"], row
        assert row["explained_within_20pct"], row  # and with the run's own CPU


def test_beside_a_busy_process_one_holder_spends_what_it_spends_alone() -> None:
    """The busy run's P = 1 beside a process keeping a core busy spent the CPU per changed
    counter (holders and emulator) of its P = 1 alone, within 5%, and 30% more than its P = 2:
    a core left idle is not why P = 1 overstates what two holders need."""
    alone, busy, two = (model.measured_costs(BUSY), model.measured_costs(BUSY | {
        "capacity_by_partitions": {**BUSY["capacity_by_partitions"],
                                   "runs": {"1": BUSY["capacity_by_partitions"]["busy"]}}}),
        model.measured_costs(BUSY, 2))
    assert alone and busy and two
    assert busy.cpu_per_counter_s == pytest.approx(alone.cpu_per_counter_s, rel=0.05)
    assert busy.cpu_per_counter_s > 1.3 * two.cpu_per_counter_s
    assert BUSY["capacity_by_partitions"]["exact"] == {**BUSY["capacity_by_partitions"]["exact"],
                                                       "exact": True, "runs": 16}


def test_on_fresh_emulators_every_run_is_exact_and_warmed() -> None:
    """bench/results/scale_2026-11-29_fresh.json: the default sizes (2,000 counters), 4 rounds of
    each P, each run on an emulator of its own warmed first (its warm-up's emulator CPU saved),
    every count exact; P = 4's empty round took half the period in two rounds of four (not
    measured), and the lag run's holders did not keep up (not compared)."""
    figures = FRESH["capacity_by_partitions"]
    assert FRESH["sizes"] == {**FRESH["sizes"], "counters": 2000, "rounds": 4,
                              "scaled_down": False}
    assert figures["exact"]["exact"] and figures["exact"]["runs"] == 12
    assert set(figures["warm_up"]["emulator_cpu_s"]) == {"1", "2", "4"}
    assert all(len(rounds) == 4 and all(len(cpu) == 8 for cpu in rounds)
               for rounds in figures["warm_up"]["emulator_cpu_s"].values())
    assert ROWS["fresh", 1]["measured"] and ROWS["fresh", 2]["measured"]
    assert "empty tick took" in ROWS["fresh", 4]["not_measured"]
    lag = model.compare_lag(FRESH)
    assert lag["ratio"] is None and "does not carry" in lag["not_measured"], lag


# Runs with the emulator warmed first (each P twice in alternating order, each run on a project of
# its own, every timed tick after the machine settled), on a day this machine ran about three
# times slower than on 11-26, with fewer counters than scale.json's 4,000 (the emulator's scans,
# 16 of every shard a query, would take half the period at P = 2), chosen after a run of 1,000
# (cold, not saved) missed: records of that day, not a run at the benchmark's size.
WARMED = ("scale_2026-11-29_2000.json", "scale_2026-11-29_1500.json")


@pytest.mark.parametrize("name", WARMED)
def test_with_the_emulator_warmed_the_measured_points_are_predicted(name: str) -> None:
    """Each run's P = 1, 2 and 4 from its P = 1 costs alone: within 20% of the aggregate measured,
    not more than 20% below a lower bound (the largest step ticked within the period), or not
    measured, with the reason; every count exact."""
    scale = json.loads((ROOT / "bench/results" / name).read_text())
    figures = scale["capacity_by_partitions"]
    assert figures["warm_up"] and scale["sizes"]["rounds"] == 2 and scale["sizes"]["why"]
    assert figures["exact"]["exact"] and figures["exact"]["runs"] == 6
    rows = model.compare(scale)
    assert [row["partitions"] for row in rows] == [1, 2, 4]
    assert rows[0]["measured"] and not rows[0]["at_least"]
    for row in rows:
        if row["measured"] is None:
            assert row["not_measured"] and row["ratio"] is None, row
        else:
            assert row["within_20pct"], row


def test_warmed_at_4000_counters_on_the_slow_day_no_point_was_measurable() -> None:
    """The size of that day (4,000), warmed, 4 rounds (scale_2026-11-29_4000.json): every
    round's empty tick took half the period or more at every P, so each point is saved as not
    measured, with the reason, and nothing is predicted from a P = 1 run that has no steps."""
    scale = json.loads((ROOT / "bench/results/scale_2026-11-29_4000.json").read_text())
    assert scale["sizes"]["counters"] == 4000 and scale["sizes"]["rounds"] == 4
    assert scale["capacity_by_partitions"]["exact"]["exact"]
    for row in model.compare(scale):
        assert row["measured"] is None and row["ratio"] is None, row
        assert "empty tick took" in row["not_measured"], row


def test_one_holder_is_measured() -> None:
    """The costs every prediction takes come from a measured P = 1 run."""
    assert ROWS["11-26", 1]["measured"] and model.measured_costs(SCALE) is not None


def test_the_lag_runs_p99_is_predicted() -> None:
    """1,000 distinct counters a second on 4 holders: the wait for the next tick and a round of
    ticks on the shared cores, within 20% of the p99 measured, or not measured (the holders fell
    behind the offered rate), with the reason."""
    lag = model.compare_lag(SCALE)
    assert lag["within_20pct"] or (lag["ratio"] is None and lag["not_measured"]), lag


def test_the_lag_is_not_compared_across_runs() -> None:
    """A lag run saved beside another run's capacity figures (SCALE_PARTS ran one part alone) is
    not predicted from them: the machine's speed differs from run to run."""
    mixed = copy.deepcopy(SCALE)
    mixed["when_by_part"] = {"capacity": "2026-11-29T18:10:00+00:00",
                             "lag": "2026-11-26T10:00:00+00:00"}
    lag = model.compare_lag(mixed)
    assert lag["ratio"] is None and "different runs" in lag["not_measured"]
    mixed["when_by_part"]["lag"] = mixed["when_by_part"]["capacity"]
    assert model.compare_lag(mixed)["ratio"] == model.compare_lag(SCALE)["ratio"]
    mixed["when_by_part"] = {"capacity": "2026-11-29T18:10:00+00:00"}  # the lag from before dates
    assert "lag run (undated)" in model.compare_lag(mixed)["not_measured"]


def test_a_point_not_measured_is_said_so() -> None:
    """A capacity saved as not measured (or as 0, before runs said why) has no ratio and says
    why; a run with no step to fit predicts nothing."""
    scale = copy.deepcopy(SCALE)
    scale["capacity_by_partitions"]["aggregate_counters_per_s"]["2"] = 0.0
    scale["capacity_by_partitions"]["not_measured"] = {"2": "an empty tick took 1.02 s"}
    row = {row["partitions"]: row for row in model.compare(scale)}[2]
    assert (row["measured"], row["ratio"], row["within_20pct"]) == (None, None, None)
    assert row["not_measured"] == "an empty tick took 1.02 s"
    scale["capacity_by_partitions"]["runs"]["1"]["steps"] = \
        scale["capacity_by_partitions"]["runs"]["1"]["steps"][:1]
    assert model.measured_costs(scale) is None
    assert all(row["predicted"] is None for row in model.compare(scale))


def test_the_capacity_table_of_the_docs_is_the_models() -> None:
    """docs/architecture.md's table of loads is what the model predicts from the committed
    scale.json (`python bench/capacity_model.py` prints it): run again after a new benchmark."""
    doc = (ROOT / "docs/architecture.md").read_text()
    rows = model.capacity_rows(SCALE)
    assert len(rows) == len(model.TABLE_LOADS)
    for row in rows:
        assert row in doc, f"docs/architecture.md lacks the model's row {row}"


def test_the_benchmark_saves_a_point_it_cannot_measure_as_not_measured() -> None:
    """scale_bench: an empty tick of half the period or more (here 1.02 s with two holders, on a
    machine half as fast as usual) is not measured, and says why; a quick one is measured."""
    import scale_bench

    slow = scale_bench.capacity_of([{"k": 0, "tick_s": 1.02, "cores_busy": 1.99}], 2)
    assert slow["counters_per_s"] is None and slow["measured"] is False
    assert "1.02 s with 2 holders" in slow["reason"]
    quick = scale_bench.capacity_of([{"k": 0, "tick_s": 0.25}, {"k": 1000, "tick_s": 0.75},
                                     {"k": 2000, "tick_s": 1.25}], 1)
    assert quick == {"counters_per_s": 1500.0, "bounded": True}


def test_the_rounds_alternate_and_their_steps_are_averaged() -> None:
    """scale_bench: the P runs go 1, 2, 4, 4, 2, 1, 1, 2, 4, ... (a drift linear in time weighs on
    every P alike); one P's rounds merge, step by step over the steps all of them ran, into their
    means, and its capacity is the mean of theirs."""
    import scale_bench

    forth, back = list(scale_bench.PARTITIONS), list(scale_bench.PARTITIONS[::-1])
    assert scale_bench.round_order() == [p for r in range(scale_bench.ROUNDS)
                                         for p in (back if r % 2 else forth)]
    assert scale_bench.round_order()[:6] == [1, 2, 4, 4, 2, 1]
    assert scale_bench.steps_for(4000)[-1] == 4000 and scale_bench.steps_for(1500)[-2:] == [
        1000, 1500]

    both = scale_bench.merged([run([0.2, 0.6, 1.2], {"counters_per_s": 1600.0, "bounded": True}),
                               run([0.3, 0.8, 1.4], {"counters_per_s": 1400.0, "bounded": True})])
    assert [step["tick_s"] for step in both["steps"]] == pytest.approx([0.25, 0.7, 1.3])
    assert both["steps"][1]["tick_s_per_holder"] == pytest.approx([0.7, 0.35])
    assert both["steps"][0]["cpu_s_per_changed_counter"] is None
    assert both["steps"][2]["tick_s_by_round"] == [1.2, 1.4]
    assert both["capacity"] == {"counters_per_s": pytest.approx(1500.0), "bounded": True}
    assert both["capacity_by_round"] == [1600.0, 1400.0]


def run(ticks: list[float], capacity: dict[str, Any]) -> dict[str, Any]:
    """A run of scale_bench.capacity_at of P = 2, its steps 0, 1000, 2000 as far as `ticks` go."""
    return {"partitions": 2, "warm_s": 1.0, "warm_ticks": 1, "failures": [], "problems": [],
            "capacity": capacity,
            "steps": [{"k": k, "tick_s": t, "tick_s_per_holder": [t, t / 2],
                       "cpu_s_per_changed_counter": None if k == 0 else 0.001}
                      for k, t in zip((0, 1000, 2000), ticks, strict=False)]}


def test_a_round_stopped_early_bounds_the_merged_run() -> None:
    """One round over the limit at k = 1000, the other only at 2000: the steps both ran are
    merged, and the capacity is the mean of the rounds' (a measured point: averaging the ticks
    at 1000, under the limit, would have made it a lower bound). A round whose largest step
    ticked within the period makes the mean a lower bound; one whose empty tick took half the
    period or more makes the P not measured, with that round's reason."""
    import scale_bench

    uneven = scale_bench.merged([run([0.3, 1.05], {"counters_per_s": 950.0, "bounded": True}),
                                 run([0.2, 0.9, 1.3], {"counters_per_s": 1250.0, "bounded": True})])
    assert [step["k"] for step in uneven["steps"]] == [0, 1000]
    assert uneven["steps"][1]["tick_s"] == pytest.approx(0.975)
    assert uneven["capacity"] == {"counters_per_s": pytest.approx(1100.0), "bounded": True}
    capped = scale_bench.merged([run([0.3, 1.05], {"counters_per_s": 950.0, "bounded": True}),
                                 run([0.2, 0.9], {"counters_per_s": 1000.0, "bounded": False})])
    assert capped["capacity"]["bounded"] is False
    stopped = {"counters_per_s": None, "measured": False, "reason": "an empty tick took 0.52 s"}
    early = scale_bench.merged([run([0.46, 0.9], {"counters_per_s": 1000.0, "bounded": False}),
                                run([0.52], stopped)])
    assert early["capacity"] == stopped and early["rounds"] == 2
    assert early["capacity_by_round"] == [1000.0, None]


def test_on_a_slow_machine_the_unmeasurable_points_say_so() -> None:
    """bench/results/scale_2026-11-29.json: the same benchmark on this machine running about five
    times slower (old and new code alike): one holder's 285 changed counters a second are
    predicted within 20%; P = 2 and 4 (empty ticks of 0.85 and 1.51 s) and the lag run (ticks
    of 2.75 s) are saved as not measured, with the reason."""
    slow = json.loads((ROOT / "bench/results/scale_2026-11-29.json").read_text())
    rows = {row["partitions"]: row for row in model.compare(slow)}
    assert rows[1]["within_20pct"]
    for p in (2, 4):
        assert rows[p]["measured"] is None and "empty tick took" in rows[p]["not_measured"]
    lag = model.compare_lag(slow)
    assert lag["ratio"] is None
    assert "does not carry 1000" in lag["not_measured"]


def test_a_lower_bound_is_met_by_a_prediction_above_it() -> None:
    """A run whose largest step ticked within the period measured at least its k: a prediction
    above it agrees however far, one more than 20% below it misses."""
    assert model.within(3.0, at_least=True) and model.within(0.85, at_least=True)
    assert not model.within(0.75, at_least=True)
    assert not model.within(1.3) and model.within(0.85)
