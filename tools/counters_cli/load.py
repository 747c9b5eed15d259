"""`counters load`: a load generator over the domain's write path, and the percentile its
summary (and the benchmarks, bench/) report latencies with."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter as Tally
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
from counting.features import counters
from counting.foundation import inputs
from counting.foundation.errors import NotFound, OutcomeUnknown
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .session import CLI_UID, Session, json_option, pass_session

# Attempts at one increment whose outcome stays unknown (Firestore unreachable for a while).
UNKNOWN_RETRIES = 3


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) of `values`, interpolated linearly between the two nearest
    ranks: numpy's default method ("linear", Hyndman and Fan's type 7), so p=0 is the minimum and
    p=100 the maximum. ValueError without values."""
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    position = (len(ordered) - 1) * p / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(kw_only=True)
class LoadResult:
    attempted: int = 0
    applied: int = 0
    errors: Tally[str] = field(default_factory=Tally)
    first_error: str | None = None
    latencies_ms: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0  # from the start to the last call that completed

    def summary(self) -> dict[str, Any]:
        return {
            "attempted": self.attempted,
            "applied": self.applied,
            "errors": sum(self.errors.values()),
            "errors_by_type": dict(self.errors),
            "first_error": self.first_error,
            "elapsed_s": round(self.elapsed_s, 3),
            "rate_per_s": round(self.applied / self.elapsed_s, 1) if self.elapsed_s else 0.0,
            **{f"latency_p{q}_ms": round(percentile(self.latencies_ms, q), 2)
               if self.latencies_ms else None for q in (50, 95, 99)},
        }


def run_load(call: Callable[[], bool], *, rate: float | None, seconds: float, concurrency: int,
             tick: Callable[[LoadResult, float], None] = lambda result, elapsed: None,
             clock: Callable[[], float] = time.monotonic) -> LoadResult:
    """Call `call` from `concurrency` threads for `seconds`: the i-th call starts at i / rate
    seconds (open loop, so a slow call delays only its thread), or back to back without a rate.
    `call` returns whether it applied; its exceptions are counted by type. `tick` sees the
    running result about 10 times a second (the progress bar)."""
    result = LoadResult()
    lock = threading.Lock()
    issued = 0
    start = clock()
    stop_at = start + seconds

    def next_slot() -> float | None:
        nonlocal issued
        with lock:
            due = start + issued / rate if rate else clock()
            if due >= stop_at:
                return None
            issued += 1
            return due

    def worker() -> None:
        while (due := next_slot()) is not None:
            time.sleep(max(0.0, due - clock()))
            began = clock()
            try:
                applied = call()
            except Exception as exc:  # every failure is an outcome to count, not to raise
                with lock:
                    result.attempted += 1
                    result.elapsed_s = clock() - start
                    result.errors[type(exc).__name__] += 1
                    result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"
                continue
            took_ms = (clock() - began) * 1000
            with lock:
                result.attempted += 1
                result.applied += applied
                result.latencies_ms.append(took_ms)
                result.elapsed_s = clock() - start

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    while threads:
        threads[0].join(0.1)
        threads = [thread for thread in threads if thread.is_alive()]
        tick(result, clock() - start)
    return result


@click.command()
@click.argument("counter")
@click.option("--rate", type=float, default=100.0, show_default=True,
              help="Increments per second to attempt (0: as fast as the threads go).")
@click.option("--seconds", type=float, default=10.0, show_default=True)
@click.option("--concurrency", type=int, default=8, show_default=True, help="Threads.")
@click.option("--by", type=int, default=1, show_default=True)
@click.option("--check/--no-check", default=True, show_default=True,
              help="Compare the strong count after the load with the count before + applied.")
@json_option
@pass_session
def load(session: Session, counter: str, rate: float, seconds: float, concurrency: int, by: int,
         check: bool, as_json: bool) -> None:
    """Drive increments of COUNTER through the domain's write path and summarise them.

    The check assumes nothing else writes to COUNTER meanwhile; exit status 1 when it fails."""
    counter = inputs.counter_id(counter)
    by = inputs.increment_by(by)
    if rate < 0 or seconds <= 0 or not 1 <= concurrency <= 256:
        raise click.UsageError("--rate must be >= 0, --seconds > 0, --concurrency 1..256")
    db, ctx = session.db(), session.context()
    try:
        session.domain.get_count(db, ctx.names, counter)
    except NotFound:
        # One error before starting, rather than a summary of nothing but failed increments.
        raise click.ClickException(f"counter: {counter!r} does not exist (`counters create "
                                   f"{counter}` creates it)") from None
    before = session.domain.get_count(db, ctx.names, counter, "strong").count if check else None

    def call() -> bool:
        """One increment with a request_id of its own, sent again (same id) while its outcome
        is unknown: it counts once, and a retry that finds it applied says so."""
        request_id = uuid.uuid4().hex
        for attempt in range(UNKNOWN_RETRIES):
            try:
                committed = counters.increment(ctx, db, counter, by, request_id=request_id,
                                               uid=CLI_UID)
            except OutcomeUnknown:
                if attempt == UNKNOWN_RETRIES - 1:
                    raise
                continue
            return committed is not None or attempt > 0
        raise AssertionError("unreachable")

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[status]}"), console=session.err,
                  transient=True) as progress:
        task = progress.add_task(f"load {counter}", total=seconds, status="")

        def tick(running: LoadResult, elapsed: float) -> None:
            progress.update(task, completed=min(elapsed, seconds),
                            status=f"applied {running.applied}  errors "
                                   f"{sum(running.errors.values())}")

        result = run_load(call, rate=rate or None, seconds=seconds, concurrency=concurrency,
                          tick=tick)
    summary: dict[str, Any] = {"counter": counter, "by": by,
                               "target_rate_per_s": rate or None, **result.summary()}
    if before is not None:
        after = session.domain.get_count(db, ctx.names, counter, "strong").count
        expected = before + result.applied * by
        summary.update(strong_before=before, strong_after=after, expected=expected,
                       check="ok" if after == expected else "MISMATCH")
    table = Table("", "", title=f"load on {counter}", show_header=False)
    for key, value in summary.items():
        if key != "errors_by_type" and value is not None:
            table.add_row(key, str(value))
    for kind, n in result.errors.items():
        table.add_row(f"  {kind}", str(n))
    session.report(as_json, summary, table)
    if summary.get("check") == "MISMATCH":
        raise click.ClickException(
            f"strong count {summary['strong_after']} != expected {summary['expected']}"
        )


