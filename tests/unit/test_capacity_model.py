"""The capacity model: P grows with the load in powers of two up to the deploy's tick functions,
every figure grows with the load, a limit is named when it binds, the bill's terms make its total,
and the committed scale benchmark's points are predicted from its one-holder run."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import capacity_model as model
import cost_model
import pytest
from capacity_model import Design, Load, OpCosts
from counting.foundation import config
from counting.rollup import cadence
from counting.writepath import partitions
from hypothesis import assume, example, given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
# The latest run of the benchmark (its capacity part at the Capacity table's shape: counters of 8
# shards, each written when its counter changes); the reference the production estimates take a
# holder's costs from (capacity_model.REFERENCE), and the run of 11-26, its one-holder run.
SCALE: dict[str, Any] = json.loads((ROOT / "bench/results/scale.json").read_text())
REFERENCE = model.reference()
FAST: dict[str, Any] = json.loads((ROOT / "bench/results/scale_2026-11-26.json").read_text())
SHAPE = model.reference_shape()


def one_holder() -> OpCosts:
    costs = model.measured_costs(REFERENCE)
    assert costs is not None, "the reference run's P = 1 run has its steps"
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
# Found by Hypothesis in a run: the scaled load's rate 4.5 against 4.500000000000001, either side
# of a step of the shards a counter gets (`shards_touched` rounds it now).
@example(changed=233017.317383128, ratio=4.5, spread=1.0, factor=1.0078125)
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
    assert "index_ranges" not in model.binding_limits(huge, model.deployed(MEASURED, WIDE), WIDE)
    assert "index_ranges" in model.binding_limits(huge, DEPLOYED, TODAY)


def test_each_limit_says_where_it_binds() -> None:
    """As shipped: 16 partitions, 128,000 shard writes a second (500 x 16 ranges x 16), one query a
    tick; at 128, 1,856,000 (500 x 29 ranges x 128), still one query a tick."""
    found = {limit.name: limit for limit in model.limits(DEPLOYED, TODAY)}
    assert set(found) == {"holder", "tick_functions", "index_ranges", "in_values",
                          "queue_dispatch", "schedule_60s", "document_writes", "callables",
                          "task_api", "listened_collection"}
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
# The same method at 1,500 counters, where four holders' empty round stays under half the period.
SMALLER: dict[str, Any] = json.loads(
    (ROOT / "bench/results/scale_2026-11-30_1500.json").read_text())
# The last run of counters of one shard, at 2,000 counters.
ONE_SHARD: dict[str, Any] = json.loads((ROOT / "bench/results/scale_2026-11-30.json").read_text())
RUNS = {"11-26": FAST, "11-29": FRESH, "11-30": ONE_SHARD, "11-30-1500": SMALLER,
        "latest": SCALE}
ROWS = {(run, row["partitions"]): row for run, scale in RUNS.items()
        for row in model.compare(scale)}
# Runs of the rollup from before a rate that moved alone waited for the sweep: a holder wrote
# every counter whose rate was decaying, every other tick, so one holder of all the counters
# spent more per changed counter than each of two holders of half of them, and the model, which
# takes P = 1's, missed P = 2. Kept as records of that, not fitted.
P2_MISS = pytest.mark.xfail(strict=True, raises=AssertionError,
                            reason="before the fix, a tick's cost grew with the counters changed "
                                   "in the last minute, more for one holder of them all")


@pytest.mark.parametrize(("run", "p"), [
    ("11-26", 1), pytest.param("11-26", 2, marks=P2_MISS), ("11-26", 4),
    ("11-29", 1), pytest.param("11-29", 2, marks=P2_MISS), ("11-29", 4),
    ("11-30", 1), ("11-30", 2), ("11-30", 4),
    ("11-30-1500", 1), ("11-30-1500", 2), ("11-30-1500", 4),
    ("latest", 1), ("latest", 2), ("latest", 4),
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


def test_at_1500_counters_every_point_is_measured() -> None:
    """At 1,500 counters P = 4 is measured too (as a lower bound: three of its four rounds ticked
    all the counters within the period), and so is every P; every count exact."""
    assert SMALLER["sizes"]["counters"] == 1500 and SMALLER["sizes"]["rounds"] == 4
    assert SMALLER["capacity_by_partitions"]["exact"] == {
        **SMALLER["capacity_by_partitions"]["exact"], "exact": True, "runs": 12}
    rows = [ROWS["11-30-1500", p] for p in (1, 2, 4)]
    assert all(row["measured"] for row in rows), rows
    assert not rows[0]["at_least"] and rows[2]["at_least"]


def cpu_per_changed_counter(scale: dict[str, Any], p: int) -> float:
    costs = model.measured_costs(scale, p)
    assert costs is not None
    return costs.cpu_per_counter_s


def test_two_holders_spend_about_what_one_does_per_changed_counter_since_the_fix() -> None:
    """The fix's signature, at the same method and size (2,000 counters, 4 rounds, a warmed
    emulator per run), in the CPU per changed counter the model's machine term takes (holders and
    emulator): before it, two holders spent 0.70 of one holder's (11-29); since, within 15% of
    it (11-30: 0.90)."""
    before = [cpu_per_changed_counter(FRESH, p) for p in (1, 2)]
    after = [cpu_per_changed_counter(ONE_SHARD, p) for p in (1, 2)]
    assert before[1] < 0.75 * before[0], before
    assert after[1] == pytest.approx(after[0], rel=0.15), after


@pytest.mark.parametrize("run", ["11-29", "11-30"])
def test_on_fresh_emulators_every_run_is_exact_and_warmed(run: str) -> None:
    """The benchmark's method: the default size (2,000 counters), 4 rounds of each P, each run on
    an emulator of its own warmed first (its warm-up's emulator CPU saved), every count exact;
    P = 4's empty round took half the period in at least one round (not measured), and the lag
    run's holders did not keep up (not compared)."""
    scale = RUNS[run]
    figures = scale["capacity_by_partitions"]
    assert scale["sizes"] == {**scale["sizes"], "counters": 2000, "rounds": 4,
                              "scaled_down": False}
    assert figures["exact"]["exact"] and figures["exact"]["runs"] == 12
    assert set(figures["warm_up"]["emulator_cpu_s"]) == {"1", "2", "4"}
    assert all(len(rounds) == 4 and all(len(cpu) == 8 for cpu in rounds)
               for rounds in figures["warm_up"]["emulator_cpu_s"].values())
    assert ROWS[run, 1]["measured"] and ROWS[run, 2]["measured"]
    assert "empty tick took" in ROWS[run, 4]["not_measured"]
    lag = model.compare_lag(scale)
    assert lag["ratio"] is None and "does not carry" in lag["not_measured"], lag


def test_the_latest_capacity_runs_are_at_the_tables_shape() -> None:
    """P = 1, 2 and 4 with counters of 8 shards, each written when its counter changes: each
    point measured (P = 2 as a lower bound: its largest step ticked within the period) or saved
    as not measured with the reason (P = 4: the emulator and four holders fill the cores with
    empty ticks), beside the prediction from P = 1; every count exact."""
    per_holder = SCALE["capacity_per_holder"]
    assert (per_holder["shards_per_counter"], per_holder["touched_per_change"]) == (8, 8)
    assert SCALE["capacity_by_partitions"]["exact"] == {
        **SCALE["capacity_by_partitions"]["exact"], "exact": True, "runs": 6}
    rows = [ROWS["latest", p] for p in (1, 2, 4)]
    assert all(row["predicted"] for row in rows)
    assert all(row["measured"] or "empty tick took" in row["not_measured"] for row in rows)


def test_one_holder_is_measured() -> None:
    """The costs every prediction takes come from a measured P = 1 run."""
    assert ROWS["11-30", 1]["measured"] and model.measured_costs(ONE_SHARD) is not None
    assert ROWS["latest", 1]["measured"] and not ROWS["latest", 1]["at_least"]
    assert ROWS["11-26", 1]["measured"] and model.measured_costs(REFERENCE) == \
        model.measured_costs(FAST)


@pytest.mark.parametrize("run", RUNS)
def test_the_lag_runs_p99_is_predicted(run: str) -> None:
    """1,000 distinct counters a second on 4 holders: the wait for the next tick and a round of
    ticks on the shared cores, within 20% of the p99 measured, or not measured (the holders fell
    behind the offered rate), with the reason."""
    lag = model.compare_lag(RUNS[run])
    assert lag["within_20pct"] or (lag["ratio"] is None and lag["not_measured"]), lag


def test_the_lag_is_not_compared_across_runs() -> None:
    """A lag run saved beside another run's capacity figures (SCALE_PARTS ran one part alone) is
    not predicted from them: the machine's speed differs from run to run."""
    mixed = copy.deepcopy(FAST)
    mixed["when_by_part"] = {"capacity": "2026-11-29T18:10:00+00:00",
                             "lag": "2026-11-26T10:00:00+00:00"}
    lag = model.compare_lag(mixed)
    assert lag["ratio"] is None and "different runs" in lag["not_measured"]
    mixed["when_by_part"]["lag"] = mixed["when_by_part"]["capacity"]
    assert model.compare_lag(mixed)["ratio"] == model.compare_lag(FAST)["ratio"] > 0
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
    """docs/architecture.md's table of loads is what the model predicts from the reference's
    shape runs (`python bench/capacity_model.py` prints it)."""
    doc = (ROOT / "docs/architecture.md").read_text()
    rows = model.capacity_rows(SHAPE)
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


def test_a_lower_bound_is_met_by_a_prediction_above_it() -> None:
    """A run whose largest step ticked within the period measured at least its k: a prediction
    above it agrees however far, one more than 20% below it misses."""
    assert model.within(3.0, at_least=True) and model.within(0.85, at_least=True)
    assert not model.within(0.75, at_least=True)
    assert not model.within(1.3) and model.within(0.85)


# -- the realistic shape --


def test_the_reference_takes_the_median_of_its_shape_runs_not_the_fastest() -> None:
    """Three runs, fast, middling and slow: each point is the middling one's, and the line goes
    through those points (0.3 ms a counter with one shard, 1.7 with eight: 0.1 + 0.2 a shard),
    not through one run's intercept and another's slope."""
    def run(empty: float, one: float, eight: float) -> dict[str, Any]:
        return {"by_touched": {"1": {"empty_cpu_s": empty, "cpu_s_per_changed_counter": one},
                               "8": {"empty_cpu_s": empty, "cpu_s_per_changed_counter": eight}}}
    figures = {"shape_runs": [run(0.01, 0.2e-3, 1.9e-3), run(0.03, 0.4e-3, 1.5e-3),
                              run(0.02, 0.3e-3, 1.7e-3)],
               "autoscaling": {"rescaled_per_changed": 0.03}}
    found = model.reference_shape(figures)
    assert found.rescaled_per_changed == 0.03
    assert found.empty_cpu_s == pytest.approx(0.02)
    assert found.cpu_per_counter_s == pytest.approx(0.1e-3)
    assert found.cpu_per_shard_s == pytest.approx(0.2e-3)


def test_the_reference_holds_measured_shape_runs() -> None:
    """The production estimates come from shape runs the benchmark saved, each exact, each
    with a positive cost per shard (a counter of more shards costs more)."""
    runs = REFERENCE["shape_runs"]
    assert 1 <= len(runs) <= 5
    assert all(run["exact"] and run["cpu_s_per_shard"] > 0 for run in runs)
    assert SHAPE.cpu_per_shard_s > 0 and SHAPE.empty_cpu_s > 0


def test_a_counter_of_more_shards_costs_its_tick_more() -> None:
    """At the table's shape (10 increments a changed counter a second, of 8 shards) a tick
    returns about 5.7 shards a counter and the overlap's share again; one increment a counter
    (2 shards, autoscaling's for 1 a second), under one. The holder's CPU per counter
    follows."""
    wide, narrow = model.table_load(1000), load(1000, ratio=1)
    assert model.counter_shards(wide) == 8 and model.counter_shards(narrow) == 2
    assert model.counter_shards(load(1000, ratio=10)) == 20
    assert model.shards_read(wide) == pytest.approx(
        model.shards_touched(wide) * (1 + config.CHANGE_OVERLAP_S))
    assert model.shards_read(wide) > 5 * model.shards_read(narrow)
    assert model.at_shape(SHAPE, WIDE, wide).holder_cpu_per_counter_s == pytest.approx(
        SHAPE.cpu_per_counter_s + model.shards_read(wide) * SHAPE.cpu_per_shard_s)
    assert model.at_shape(SHAPE, WIDE, wide).tick_per_counter_s > \
        model.at_shape(SHAPE, WIDE, narrow).tick_per_counter_s


def test_the_sweep_share_of_a_tick_grows_with_what_was_written_not_with_p() -> None:
    """A sweep reads each shard written in the 320 s before (`Rollup.cells` reaches
    MAX_REQUEST_S before the last sweep): at the table's shape, a counter's 32 increments of
    that time (0.1 a second) on its 8 shards, nearly all 8. Each partition reads its share, a
    50th of it each tick."""
    assert config.ROLLUP_SWEEP_EVERY_S + config.MAX_REQUEST_S == 320
    heavy = model.table_load(100_000)
    docs = model.sweep_docs(heavy)
    assert docs == pytest.approx(heavy.counters * 8 * -math.expm1(-32 / 8))
    assert model.sweep_docs_per_tick(heavy, 16) == pytest.approx(docs / 16 / 50)
    assert model.sweep_docs_per_tick(heavy, 128) == pytest.approx(
        docs / 128 / 50 * model.sweep_overread(128))
    costs = model.at_shape(SHAPE, WIDE, heavy)
    assert model.tick_s(10, costs, 1000) - model.tick_s(10, costs) == pytest.approx(
        1000 * SHAPE.cpu_per_shard_s / WIDE.vcpu)
    unswept = model.at_shape(SHAPE, WIDE, heavy, sweep=False)
    assert unswept.tick_per_sweep_doc_s == 0
    assert costs.tick_fixed_s - unswept.tick_fixed_s == pytest.approx(
        model.SWEEP_ROUND_TRIPS * model.ROUND_TRIP_S)


def test_past_16_a_sweep_returns_other_partitions_documents() -> None:
    """A partition's sweep reads its stripes for writers of every P up to 16; past 16 writers
    number their stripes home % P + P x r, so stripe 16 (home 0's at P = 16) is home 16's at
    P = 128: partition 1 of 128 decodes 2.24 times its own documents (`make sim-scale` found
    17,901 of 8,096 on the model's documents)."""
    assert [model.sweep_overread(p) for p in (1, 2, 4, 8, 16)] == [1.0] * 5
    assert model.sweep_overread(32) < model.sweep_overread(64) < model.sweep_overread(128)
    assert model.sweep_overread(128) == pytest.approx(2.24, abs=0.01)


def test_autoscalings_round_trips_are_charged_a_changed_counter() -> None:
    """Each grow costs its tick 3 round trips one after the other, and its shrink and fold 5
    more later: at the reference's rate of grows, each changed counter carries its share."""
    load = model.table_load(1000)
    still = replace(SHAPE, rescaled_per_changed=0.0)
    grown = replace(SHAPE, rescaled_per_changed=0.04)
    extra = model.at_shape(grown, WIDE, load).tick_per_counter_s \
        - model.at_shape(still, WIDE, load).tick_per_counter_s
    assert extra == pytest.approx(0.04 * 8 * model.ROUND_TRIP_S)
    assert model.GROW_ROUND_TRIPS + model.LATER_ROUND_TRIPS == 8
    assert SHAPE.rescaled_per_changed > 0  # kept by make sim-scale


def test_the_callables_and_cloud_tasks_bind_where_their_quotas_end() -> None:
    """100 instances of 80 requests of 50 ms: 160,000 increments a second; Cloud Tasks' 100,000
    API requests a second bind the waker's creations (each writer instance, each partition it
    wrote in, a second) past 781 writer instances at P = 128: with more callables allowed,
    about 1,250,000 increments a second."""
    found = {limit.name: limit for limit in model.limits(DEPLOYED, WIDE)}
    assert found["callables"].max_increments_per_s == pytest.approx(160_000)
    assert found["listened_collection"].max_changed_per_s == 1000
    costs = model.deployed(MEASURED, WIDE)
    assert "callables" in model.binding_limits(load(100, ratio=1700), costs, WIDE)
    assert "callables" not in model.binding_limits(load(100, ratio=1500), costs, WIDE)
    busy = load(130_000, ratio=10)  # 1,300,000 increments a second: 813 writers
    assert model.task_creations(busy, 128) > model.TASK_API_REQUESTS
    assert {"callables", "task_api"} <= set(model.binding_limits(busy, costs, WIDE))
    assert model.task_creations(load(120_000, ratio=10), 128) < model.TASK_API_REQUESTS


def test_a_new_database_ramps_up_by_half_every_five_minutes() -> None:
    """500 operations a second at once; 750 after 5 minutes; 500 x 1.5^20 after 100."""
    assert model.ramp_minutes(500) == 0
    assert model.ramp_minutes(750) == 5
    assert model.ramp_minutes(500 * 1.5 ** 20) == 100


def test_production_names_what_p_128_carries_and_what_binds_first() -> None:
    """At 128 partitions and each sizing: the changed counters a second carried at the table's
    shape, the limit just above it, and what the ticks would carry without the sweep; a vCPU
    carries more than a third of one. Just above what is carried, the load is not."""
    found = model.production(SHAPE)
    small, large = (found["by_tick_mb"][str(mb)] for mb in model.TABLE_SIZINGS)
    names = {limit.name for limit in model.limits(DEPLOYED, WIDE)}
    for mb, sizing in zip(model.TABLE_SIZINGS, (small, large), strict=True):
        assert sizing["binds_first"] in names
        assert sizing["changed_per_s"] < sizing["ticks_without_sweep_changed_per_s"]
        design = Design(max_partitions=128, tick_mb=mb)
        carried, above = (model.table_load(sizing["changed_per_s"] * k) for k in (0.99, 1.02))
        assert model.binding_limit(carried, model.at_shape(SHAPE, design, carried),
                                   design) is None
        assert model.binding_limit(above, model.at_shape(SHAPE, design, above), design) == \
            sizing["binds_first"]
    assert small["changed_per_s"] < large["changed_per_s"]


def test_the_saved_model_and_the_docs_say_what_the_reference_predicts() -> None:
    """`model.production` in bench/results/scale.json is `production` of the reference, and
    docs/architecture.md states what P = 128 carries at each sizing, to the hundred."""
    found = model.production(SHAPE)
    assert SCALE["model"]["production"] == json.loads(json.dumps(found))
    doc = (ROOT / "docs/architecture.md").read_text()
    small, large = (found["by_tick_mb"][str(mb)]["changed_per_s"] for mb in model.TABLE_SIZINGS)
    assert f"**What P = 128 carries: about {round(small, -2):,.0f} changed counters a second" \
        in doc
    assert f"{round(large, -2):,.0f} at one vCPU (2 GiB)" in doc
