"""`make bench`: run every benchmark against the stack, print the figures, save JSON and PNG.

Results go to bench/results/<name>.json and bench/results/<name>.png. Arguments pick groups
(`bench/run.py trends`); none runs them all.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent / "functions"),
                str(Path(__file__).parent.parent / "tools")]

import chaos_bench  # noqa: E402
import collection_bench  # noqa: E402
import cost_bench  # noqa: E402
import counter_bench  # noqa: E402
import extension_bench  # noqa: E402
import matplotlib  # noqa: E402
import policy_bench  # noqa: E402
import scale_bench  # noqa: E402
import sequence_bench  # noqa: E402
import trend_bench  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def save(name: str, figures: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    meta = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {platform.python_version()}"}
    (RESULTS / f"{name}.json").write_text(json.dumps({**meta, **figures}, indent=2) + "\n")


def brief(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures without their sample lists (lists of numbers or pairs), for printing and
    saving; tables (lists of records, such as a profile's top entries) stay."""
    return {k: brief(v) if isinstance(v, dict) else v for k, v in figures.items()
            if not isinstance(v, list) or (v and all(isinstance(row, dict) for row in v))}


def plot_counters(results: dict[str, Any]) -> None:
    fig, (lag, cost, writes) = plt.subplots(1, 3, figsize=(15, 4.5))
    if results["rollup_lag"]["measured"]:
        lag.hist(results["rollup_lag"]["lags_s"], bins=40)
        lag.axvline(results["rollup_lag"]["lag_p99_s"], color="red", linestyle="--", label="p99")
    lag.set(title="Rollup lag (ack -> listener)", xlabel="seconds", ylabel="increments")
    lag.legend()
    rc = results["rollup_cost"]
    runs = [rc["alone"], rc["beside_idle"]]
    cost.bar([-0.2, 0.8], [r["reads_per_tick"] for r in runs], width=0.4, label="reads/tick")
    cost.bar([0.2, 1.2], [1000 * r["seconds_per_tick"] for r in runs], width=0.4,
             label="ms/tick (emulator)")
    cost.set_xticks([0, 1], ["10 active", "10 active\n+ 5,000 idle"])
    cost.set(title="Rollup tick cost")
    cost.legend()
    wp = results["write_path"]
    writes.bar(["domain increment", "bare Increment", "callable"],
               [wp["domain_increments_per_s"], wp["bare_increments_per_s"],
                wp["callable_increments_per_s"]])
    writes.set(title=f"Increments/s, {wp['clients']} clients", ylabel="increments/s")
    fig.tight_layout()
    fig.savefig(RESULTS / "counters.png", dpi=100)


def plot_step_load(results: dict[str, Any]) -> None:
    samples = results["samples"]
    times = [t for t, _, _ in samples]
    fig, shards = plt.subplots(figsize=(8, 4.5))
    shards.step(times, [n for _, n, _ in samples], where="post", color="tab:blue",
                label="num_shards")
    shards.axhline(results["target_shards"], color="tab:blue", linestyle=":",
                   label=f"target ({results['target_shards']})")
    shards.set(xlabel="seconds since the step", ylabel="num_shards")
    rate = shards.twinx()
    rate.plot(times, [r for _, _, r in samples], color="tab:red", label="rate (published)")
    rate.set_ylabel("writes/s")
    fig.legend(loc="lower right")
    shards.set_title(f"Step to {results['offered_rate']:.0f} increments/s on a 1-shard counter")
    fig.tight_layout()
    fig.savefig(RESULTS / "step_load.png", dpi=100)


def plot_trends(results: dict[str, Any]) -> None:
    fig, (lag, cost) = plt.subplots(1, 2, figsize=(12, 4.5))
    fresh = results["freshness"]
    lag.hist(fresh["lags_s"], bins=30)
    lag.axvline(fresh["lag_p99_s"], color="red", linestyle="--", label="p99")
    lag.set(title="track -> trends/global (freshness)", xlabel="seconds", ylabel="probes")
    lag.legend()
    sizes = list(results["tick_cost"])
    rows = [results["tick_cost"][size] for size in sizes]
    x = range(len(sizes))
    cost.bar([i - 0.2 for i in x], [r["steady_reads"] for r in rows], width=0.4,
             label="reads per steady tick")
    cost.bar([i + 0.2 for i in x], [r["steady_tick_ms"] for r in rows], width=0.4,
             label="ms per steady tick (emulator)")
    cost.set_xticks(list(x), [f"{int(size):,} active tags" for size in sizes])
    cost.set(title="Rollup tick with 100 tags changing")
    cost.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "trends.png", dpi=100)


def plot_cost(results: dict[str, Any]) -> None:
    fig, (lag, cost) = plt.subplots(1, 2, figsize=(14, 4.5), width_ratios=[3, 2])
    for name, lags in results["lags"].items():
        lag.scatter([t for t, _ in lags], [v for _, v in lags], s=4,
                    label=f"{name}: p99 {results[f'lag_p99_s_{name}']:.2f} s")
    lag.axhline(1.2, color="red", linestyle="--", label="target p99 (1.2 s)")
    lag.set(title="Lag per increment (ack -> listener)", xlabel="seconds into the level",
            ylabel="lag (s)")
    lag.legend(loc="upper right")
    names = ["idle", *results["lags"]]
    rollup = [results[f"{name}_usd_month"] for name in names]
    targets = {"idle": 1.0, "trickle": 3.0, "steady": 15.0}
    bars = cost.bar(names, rollup, label="rollup, $ a month")
    cost.bar_label(bars, fmt="$%.2f")
    cost.scatter([n for n in names if n in targets], [targets[n] for n in names if n in targets],
                 color="red", marker="_", s=400, label="target")
    cost.set_yscale("log")
    cost.set(title=f"The rollup's month at list price (busy, all in: "
                   f"${results['usd_per_million_increments']:.2f} per million increments, "
                   f"floor ${results['floor_usd_per_million']:.2f})",
             ylabel="$ a month (log)")
    cost.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "cost.png", dpi=100)


def plot_chaos(results: dict[str, Any]) -> None:
    fig, ax = plt.subplots(figsize=(12, 4.5))
    ax.plot([t for t, _ in results["backlog"]], [n for _, n in results["backlog"]], linewidth=1)
    for fault in results["fault_log"]:
        ax.axvspan(fault["at_s"], max(fault["ended_s"], fault["at_s"] + 1), alpha=0.2,
                   color="red")
        ax.annotate(f"{fault['kind']}\nrecovered {fault['recovery_s']:.1f} s",
                    (fault["at_s"], 0), xytext=(2, 40), textcoords="offset points", fontsize=8)
    ax.set(title=f"Chaos: acknowledged increments not yet in the rollup "
                 f"(lost {results['lost']}, doubled {results['doubled']})",
           xlabel="seconds into the run", ylabel="increments")
    fig.tight_layout()
    fig.savefig(RESULTS / "chaos.png", dpi=100)


def plot_collections(results: dict[str, Any]) -> None:
    fig, axes = plt.subplots(len(results), 2, figsize=(14, 4.5 * len(results)), squeeze=False)
    for (lag, over), run in zip(axes, results.values(), strict=True):
        series = run["series"]
        lag.hist([total for _, total, _ in series], bins=40)
        lag.axvline(run["lag_p99_s"], color="red", linestyle="--", label="p99")
        lag.set(title=f"Comment commit -> counters/{{id}} published ({run['documents']:,} "
                      f"documents at {run['achieved_rate']:.0f}/s)",
                xlabel="seconds", ylabel="documents")
        lag.legend()
        over.scatter([t for t, _, _ in series], [total for _, total, _ in series], s=2,
                     label="commit -> published")
        over.scatter([t for t, _, _ in series], [trig for _, _, trig in series], s=2,
                     label="commit -> trigger applied")
        over.set(title="Lag over the run", xlabel="seconds into the run", ylabel="seconds")
        over.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "collections.png", dpi=100)


Bench = Callable[[], dict[str, Any]]


def run_group(group: str, benches: list[tuple[str, Bench]],
              plot: Callable[[dict[str, Any]], None]) -> None:
    """Run the benches, print each one's figures, save them as <group>.json and plot them."""
    results: dict[str, Any] = {}
    for name, bench in benches:
        print(f"== {name}", flush=True)
        results[name] = bench()
        print(json.dumps(brief(results[name]), indent=2), flush=True)
    save(group, brief(results))
    plot(results)
    print(f"saved {group}.json and its plot under {RESULTS}")


def counters() -> None:
    run_group("counters", [("rollup_lag", counter_bench.rollup_lag),
                           ("rollup_cost", counter_bench.rollup_cost),
                           ("write_path", counter_bench.write_path),
                           ("write_profile", counter_bench.write_profile),
                           ("read_cost", counter_bench.read_cost),
                           ("listener", counter_bench.listener_bytes)], plot_counters)


def autoscale() -> None:
    run_group("autoscale", [("balance", counter_bench.balance),
                            ("step_load", counter_bench.step_load)],
              lambda results: plot_step_load(results["step_load"]))


def plot_sequences(figures: dict[str, Any]) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    bars = {"number": figures["domain_numbers_per_s"],
            "bare Increment": figures["bare_increments_per_s"],
            "number with\nrequest_id": figures["domain_with_request_id_per_s"],
            f"{figures['many_tenants']['tenants']} tenants\n(aggregate)":
                figures["many_tenants"]["aggregate_numbers_per_s"]}
    if figures["redis_incr_per_s"] is not None:
        bars["Redis INCR"] = figures["redis_incr_per_s"]
    drawn = ax.bar(list(bars), list(bars.values()))
    ax.bar_label(drawn, fmt="%.0f")
    ax.set(title=f"Sequence numbers/s, {figures['clients']} clients on one tenant",
           ylabel="per second")
    fig.tight_layout()
    fig.savefig(RESULTS / "sequences.png", dpi=100)


def sequences() -> None:
    print("== sequences", flush=True)
    figures = sequence_bench.run()
    print(json.dumps(figures, indent=2), flush=True)
    save("sequences", figures)
    plot_sequences(figures)
    print(f"saved sequences.json and its plot under {RESULTS}")


def trends() -> None:
    run_group("trends", [("track_rate", trend_bench.track_rate),
                         ("freshness", trend_bench.freshness),
                         ("tick_cost", trend_bench.tick_cost)], plot_trends)


def run_flat(group: str, bench: Bench, plot: Callable[[dict[str, Any]], None],
             series: str) -> None:
    """One bench whose figures are the group's JSON (flat, with the keys the docs name); the
    long `series` is plotted, not saved."""
    print(f"== {group}", flush=True)
    figures = bench()
    kept = {key: value for key, value in figures.items() if key != series}
    print(json.dumps(kept, indent=2), flush=True)
    save(group, kept)
    plot(figures)
    print(f"saved {group}.json and {group}.png under {RESULTS}")


def cost() -> None:
    run_flat("cost", cost_bench.run, plot_cost, "lags")


def chaos() -> None:
    run_flat("chaos", chaos_bench.run, plot_chaos, "backlog")


def plot_policies(results: dict[str, Any]) -> None:
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(10, 4))
    kinds = list(policy_bench.POLICIES)
    rate.bar(kinds, [results[kind]["increments_per_s"] for kind in kinds])
    rate.set(title=f"increment through the callable, {results['clients']} clients",
             ylabel="applied increments/s")
    for offset, key in ((-0.2, "p50_ms"), (0.2, "p99_ms")):
        latency.bar([i + offset for i in range(len(kinds))],
                    [results[kind][key] for kind in kinds], width=0.4, label=key[:3])
    latency.set_xticks(range(len(kinds)), kinds)
    latency.set(title="latency", ylabel="ms")
    latency.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "policies.png", dpi=100)


def policies() -> None:
    print("== policies", flush=True)
    figures = policy_bench.run()
    print(json.dumps(figures, indent=2), flush=True)
    save("policies", figures)
    plot_policies(figures)
    print(f"saved policies.json and policies.png under {RESULTS}")


def collections() -> None:
    run_group("collections", [
        ("offered_300_per_s", lambda: collection_bench.run(collection_bench.RATE)),
        ("offered_60_per_s", lambda: collection_bench.run(collection_bench.SUSTAINED_RATE)),
    ], plot_collections)


def plot_scale(results: dict[str, Any]) -> None:
    """The panels of the parts whose series this run has (a partial run: SCALE_PARTS)."""
    fig, ((capacity, lag), (drain, shares)) = plt.subplots(2, 2, figsize=(14, 9))
    for count, run in results["capacity_by_partitions"]["runs"].items():
        steps = run["steps"]
        capacity.plot([row["k"] for row in steps], [row["tick_s"] for row in steps], marker="o",
                      label=f"P = {count}: " + (
                          "not measured" if run["capacity"]["counters_per_s"] is None
                          else f"{run['capacity']['counters_per_s']:,.0f} counters/s"))
    capacity.axhline(scale_bench.TICK_LIMIT_S, color="red", linestyle="--", label="1 s")
    capacity.set(title="Warm tick, k changed counters (slowest of P holders, median of 3)",
                 xlabel="changed counters per tick", ylabel="seconds")
    capacity.legend()
    series, figures = results["series"], results["lag"]
    if "lags_s" in series:
        lag.hist(series["lags_s"], bins=40)
    else:
        lag.text(0.5, 0.5, "the lag part did not run (SCALE_PARTS)", ha="center",
                 transform=lag.transAxes)
    lag.axvline(figures["lag_p99_s"], color="red", linestyle="--",
                label=f"p99 {figures['lag_p99_s']:.2f} s")
    lag.set(title=f"Commit -> published, {figures['achieved_rate']:,.0f} distinct counters/s, "
                  f"P = {figures['partitions']}", xlabel="seconds", ylabel="increments")
    lag.legend()
    meeting = results["first_meeting"]
    for name in ("committed", "published"):
        points = series.get(name, [])
        drain.plot([t for t, _ in points], list(itertools.accumulate(n for _, n in points)),
                   label=name)
    drain.set(title=f"{meeting['counters']:,} counters met once, P = "
                    f"{meeting['partitions']} (drain {meeting['drain_s'] or math.nan:.1f} s, "
                    f"exact {meeting['exact']})", xlabel="seconds since the first write",
              ylabel="counters")
    drain.legend()
    balance = results["balance"]
    width = 0.4
    for offset, name in ((-width / 2, "lag_run"), (width / 2, "first_meeting")):
        changed = balance.get(name) or []
        mean = sum(changed) / len(changed) if changed else 1
        shares.bar([i + offset for i in range(len(changed))], [n / mean for n in changed],
                   width=width, label=name.replace("_", " "))
    shares.axhline(balance["target"], color="red", linestyle="--", label="target")
    shares.set(title="Changed counters per partition / mean", xlabel="partition index",
               ylabel="share of the mean")
    shares.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "scale.png", dpi=100)


def scale() -> None:
    run_flat("scale", scale_bench.run, plot_scale, "series")


def plot_extension(results: dict[str, Any]) -> None:
    names = list(results["series"])
    fig, axes = plt.subplots(1, len(names) + 2, figsize=(6 * len(names) + 9, 4.5),
                             width_ratios=[3] * len(names) + [2, 1])
    *lags, cost, idle = axes
    for lag, name in zip(lags, names, strict=True):
        level = results["levels"][name]
        for series, key, marker in (("counter", "lag_p99_s", "o"), ("page", "page_lag_p99_s", "x")):
            points = results["series"][name][series]
            target = "counters/visits:{page}" if series == "counter" else "the page's visits"
            lag.scatter([t for t, _ in points], [v for _, v in points], s=4, marker=marker,
                        label=f"-> {target}: p99 {level[key] or math.nan:.2f} s")
        target_s = extension_bench.BUSY_DEVICE_LAG_TARGET_S if name == "busy_device" \
            else extension_bench.LAG_TARGET_S
        lag.axhline(target_s, color="red", linestyle="--", label=f"target p99 ({target_s} s)")
        lag.set(title=f"{name}: {level['achieved_rate']:.1f} shard writes/s, lag (ack -> listener)",
                xlabel="seconds into the level (after its warm-up)", ylabel="lag (s)")
        lag.legend(loc="upper right", fontsize=8)
    names = [name for name in names if name in results["extension"]]  # priced alike
    x = range(len(names))
    ours = [results[name]["usd_per_million_increments"] for name in names]
    theirs = [results["extension"][name]["usd_per_million_increments"] for name in names]
    for offset, values, label in ((-0.2, ours, "this backend (measured)"),
                                  (0.2, theirs, "the extension (its design, list prices)")):
        bars = cost.bar([i + offset for i in x], values, width=0.4, label=label)
        cost.bar_label(bars, fmt="$%.2f")
    cost.set_xticks(list(x), [f"{name}\n{results['levels'][name]['achieved_rate']:.1f} writes/s"
                              for name in names])
    cost.set_yscale("log")
    cost.set(title="$ per million shard writes", ylabel="$ (log)")
    cost.legend(fontsize=8)
    bars = idle.bar(["this backend", "extension"], [results["usd_per_month_idle"],
                                                    results["extension"]["usd_per_month_idle"]],
                    color=["tab:blue", "tab:orange"])
    idle.bar_label(bars, fmt="$%.2f")
    idle.set(title="Idle, $ a month")
    fig.tight_layout()
    fig.savefig(RESULTS / "extension.png", dpi=100)


def extension() -> None:
    run_flat("extension", extension_bench.run, plot_extension, "series")


# `make bench` runs them in this order, in one stack: the cost group first, since its idle
# minutes would otherwise bill the housekeeping of the other groups' counters. The extension
# group's idle minutes come after all the others' there: its quoted idle figure is from a stack
# of its own (`bench/run.py extension`).
GROUPS: dict[str, Callable[[], None]] = {
    "cost": cost, "chaos": chaos, "collections": collections, "counters": counters,
    "autoscale": autoscale, "sequences": sequences, "trends": trends, "policies": policies,
    "scale": scale, "extension": extension}


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in GROUPS]
    if unknown:
        print(f"unknown group {unknown[0]!r}; groups: {' '.join(GROUPS)}", file=sys.stderr)
        return 2
    # The benchmarks that write in-process build contexts whose writes wake nothing
    # (`Context.offline`) and run their own rollup holders, on projects of their own; the
    # functions under test wake the stack's rollup themselves.
    for name in argv or list(GROUPS):
        GROUPS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
