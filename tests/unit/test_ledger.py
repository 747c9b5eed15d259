"""The rollup's pure core (`counting.rollup.ledger`), driven with values alone: sums, rates, plans,
grows, shrinks, folds, and what a handover may persist."""

from __future__ import annotations

import datetime as dt
import math
import re
from pathlib import Path

import pytest
from counting.foundation import config
from counting.foundation.config import AutoscaleParams
from counting.rollup import ledger
from counting.rollup.ledger import Ledger, Publish, ShardValue
from counting.writepath import partitions
from hypothesis import given
from hypothesis import strategies as st

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
FAST = AutoscaleParams(shard_write_rate=1.0, rise_tau_s=1.0, fall_tau_s=1.0, cool_down_s=5.0,
                       fold_grace_s=2.0)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def value(count: int, writes: int) -> ShardValue:
    return ShardValue(count=count, writes=writes)


def held(book: Ledger, counter: str, shards: dict[str, ShardValue], *, written: int = 0,
         num_shards: int | None = None) -> None:
    book.hold(counter, {"count": written, "num_shards": num_shards or len(shards),
                        "updated_at": T0})
    book.hold_shards(counter, dict(shards))


def test_a_sum_is_the_changed_shards_plus_the_remembered_others() -> None:
    """Shards the query returns replace what the ledger held; the others keep their values."""
    book = Ledger(FAST)
    held(book, "c", {"0": value(5, 5), "1": value(7, 7)})
    sums, grown = book.apply({"c": {"1": value(10, 9)}}, at(0), at(1))
    assert sums == {"c": 15} and grown == {"c": 1}


def test_a_shard_read_again_unchanged_is_no_change() -> None:
    """The overlap and the sweeps return shards already read: no growth, no write, no rate."""
    book = Ledger(FAST)
    held(book, "c", {"0": value(5, 5)}, written=5)
    sums, grown = book.apply({"c": {"0": value(5, 5)}}, at(0), at(1))
    plan = book.plan(sums, at(1))
    assert grown == {"c": 0} and "count" not in plan.updates.get("c", Publish()).public


def test_only_a_changed_sum_is_written() -> None:
    """The plan writes count and updated_at when the sum differs from the published count."""
    book = Ledger(AutoscaleParams(enabled=False))
    held(book, "up", {"0": value(1, 1)}, written=1)
    held(book, "flat", {"0": value(3, 3), "1": value(-3, 1)}, written=0)
    sums, _ = book.apply({"up": {"0": value(4, 2)}, "flat": {"0": value(4, 4),
                                                            "1": value(-4, 2)}}, at(0), at(1))
    plan = book.plan(sums, at(1))
    up = plan.updates["up"].public
    assert up["count"] == 4 and up["updated_at"] == at(1)
    assert "count" not in plan.updates.get("flat", Publish()).public
    book.published("up", plan.updates["up"])
    assert book.held["up"].written == 4


def test_a_sum_outside_int64_is_reported_and_retried() -> None:
    """A counter Firestore cannot store is a problem of its own and is owed a publish."""
    book = Ledger(AutoscaleParams(enabled=False))
    held(book, "big", {"0": value(2**62, 1), "1": value(2**62, 1)})
    sums, _ = book.apply({"big": {"1": value(2**62, 2)}}, at(0), at(1))
    plan = book.plan(sums, at(1))
    assert plan.problems and "big" in plan.problems[0] and "big" in book.retry


def test_a_busy_counter_grows_and_an_idle_one_shrinks_then_folds() -> None:
    """Under load the plan grows the counter; once idle past the cool-down it shrinks, and the
    fold that follows keeps the total while the surplus shards go."""
    book = Ledger(FAST)
    held(book, "hot", {"0": value(0, 0)})
    writes = 0
    plan = None
    for second in range(1, 6):
        writes += 20
        sums, _ = book.apply({"hot": {"0": value(writes, writes)}}, at(second - 1), at(second))
        plan = book.plan(sums, at(second))
        if plan.grows:
            break
    assert plan is not None and plan.grows and plan.grows[0].new > 1
    grow = book.bounded(plan.grows[0], {"max_shards": 4})
    assert grow is not None and grow.new == 4
    assert book.completing(grow) == {"num_shards": 4, "above_min": True,
                                     "shrink_home": partitions.home_of("hot")}
    book.grown(grow)
    book.hold_shards("hot", {"0": value(writes, writes), "1": value(0, 0), "2": value(6, 1),
                             "3": value(0, 0)})
    total = book.held["hot"].total()
    shrunk_at = None
    for second in range(6, 40):
        sums, _ = book.apply({}, at(second - 1), at(second))
        plan = book.plan(sums, at(second))
        if plan.shrinks:
            shrunk_at = second
            break
    assert shrunk_at is not None and book.held["hot"].scaling is not None
    shrink = plan.shrinks[0]
    assert book.shrinking(shrink, {"min_shards": 4}, at(shrunk_at)) is None  # pinned meanwhile
    assert book.held["hot"].scaling.low_since is None  # its cool-down starts again
    book.held["hot"].scaling.min_shards = 1  # unpinned
    fields = book.shrinking(shrink, {}, at(shrunk_at))
    assert fields is not None and fields["num_shards"] == 1 and fields["shrink_home"] is not None
    book.shrunk(shrink, fields)
    assert book.folds_due(at(shrunk_at)) == []
    due = book.folds_due(at(shrunk_at + FAST.fold_grace_s))
    assert due == [("hot", 1)]
    book.folded("hot", ["1", "2", "3"], {"0": 6}, complete=True)
    assert book.held["hot"].total() == total and set(book.held["hot"].shards or {}) == {"0"}
    assert not book.above_min("hot")


def test_an_idle_counters_rate_is_decayed_by_its_readers_not_written() -> None:
    """A counter written once, then no more: its rate goes with its count's publish, with its
    instant, and is not written again while it falls (sweeps included): what readers decay it to
    is what the holder measures, down to 0 (and then it can leave the ledger). A successor that
    meets it later starts from the rate decayed to then."""
    book = Ledger(AutoscaleParams(cool_down_s=0.0))
    held(book, "once", {"0": value(0, 0)}, num_shards=1)
    sums, _ = book.apply({"once": {"0": value(1, 1)}}, at(0), at(1))
    first = book.plan(sums, at(1)).updates["once"]
    book.published("once", first)
    rate, rate_at = first.public["rate"], first.public["rate_at"]
    assert first.public["count"] == 1 and rate > 0.3 and rate_at == at(1)
    for second in range(2, 80):
        sums, _ = book.apply({}, at(second - 1), at(second))
        assert book.plan(sums, at(second), checkpoint=at(0)).updates == {}
        shown = ledger.shown_rate(rate, rate_at.timestamp(), at(second).timestamp())
        assert shown == pytest.approx(book.rate("once", at(second)), rel=0.01)
    assert ledger.publishable(shown) == 0.0
    for _ in range(ledger.IDLE_TICKS_KEPT + 1):
        book.end_tick({})
    assert "once" not in book.held
    # A successor whose interval starts after the publish, or before it (its watermark lags the
    # predecessor's last tick): either way it measures what readers show.
    for since in (at(11), at(0)):
        successor = Ledger()
        successor.hold("once", {"count": 1, "rate": rate, "rate_at": rate_at}, since=since)
        successor.apply({}, since, at(12))
        state = successor.held["once"].scaling
        assert state is not None and state.rate == pytest.approx(rate * math.exp(-1.1), rel=0.01)


def test_after_a_long_pause_the_rate_has_fallen_as_readers_show_it() -> None:
    """A tick two minutes after the last: a counter the overlap returns unchanged, and one
    written again, fall over the whole pause first (a sample of writes spans at most a
    minute), so neither is published above what readers show."""
    book = Ledger(AutoscaleParams(enabled=False))
    for name in ("reread", "again"):
        book.hold(name, {"count": 0, "rate": 40.0, "rate_at": at(0), "updated_at": at(0)})
        book.hold_shards(name, {"0": value(0, 0)})
    sums, _ = book.apply({"reread": {"0": value(0, 0)}, "again": {"0": value(1, 1)}},
                         at(119), at(120))
    plan = book.plan(sums, at(120))
    shown = ledger.shown_rate(40.0, at(0).timestamp(), at(120).timestamp())
    reread, again = (book.held[name].scaling for name in ("reread", "again"))
    assert reread is not None and again is not None
    assert reread.rate == pytest.approx(shown, rel=0.01)
    assert plan.updates.get("reread", Publish()).public == {}  # its memory's counts at most
    assert again.rate < 1.0 and plan.updates["again"].public["count"] == 1


def test_a_document_from_before_rate_at_and_an_unseen_cool_down() -> None:
    """A document without `rate_at` (written before it) is decayed from `updated_at`, by the
    holder as by readers; a cool-down that began while nobody wrote starts when the falling rate
    crossed the shrink line, not at the last count change, as the holder that saw it measured;
    neither is written."""
    params = AutoscaleParams()
    book = Ledger(params)
    day_old = at(-86_400)
    book.hold("wide", {"count": 5, "num_shards": 8, "rate": 3.0, "rate_at": at(-60),
                       "updated_at": day_old}, since=at(0))
    book.hold("legacy", {"count": 5, "num_shards": 1, "rate": 50.0, "updated_at": at(-90)},
              since=at(0))
    wide, legacy = book.held["wide"].scaling, book.held["legacy"].scaling
    assert wide is not None and legacy is not None
    line = 8 * params.shard_write_rate * params.shrink_utilisation
    assert wide.low_since == pytest.approx(at(-60).timestamp()
                                           + params.fall_tau_s * math.log(3.0 / line))
    sums, _ = book.apply({}, at(0), at(1))
    plan = book.plan(sums, at(1))
    assert legacy.rate == pytest.approx(
        ledger.shown_rate(50.0, at(-90).timestamp(), at(1).timestamp(), params), rel=0.01)
    assert plan.updates == {} and not plan.grows  # the cool-down has 10 minutes to run
    # A holder that held it from its publish saw the cool-down begin at that instant.
    seen = Ledger(params)
    seen.hold("wide", {"count": 5, "num_shards": 8, "rate": 3.0, "rate_at": at(-60),
                       "updated_at": day_old}, since=at(-60))
    for second in range(-59, 1):
        sums, _ = seen.apply({}, at(second - 1), at(second))
        seen.plan(sums, at(second))
    held_state = seen.held["wide"].scaling
    assert held_state is not None and held_state.low_since is not None
    assert held_state.low_since == pytest.approx(wide.low_since, abs=1.0)


def test_a_rate_off_what_readers_show_is_written_alone() -> None:
    """Writes whose sum did not move (+1 on one shard, -1 on another) publish no count, but the
    rate they raised is off what readers show: it is written, with its instant."""
    book = Ledger(AutoscaleParams(enabled=False))
    held(book, "toggle", {"0": value(0, 0), "1": value(0, 0)}, written=0)
    published = []
    for second in range(1, 6):
        shards = {"0": value(second, second), "1": value(-second, second)}
        sums, _ = book.apply({"toggle": shards}, at(second - 1), at(second))
        plan = book.plan(sums, at(second))
        if "toggle" in plan.updates:
            public = plan.updates["toggle"].public
            assert "count" not in public and public["rate_at"] == at(second)
            published.append(public["rate"])
            book.published("toggle", plan.updates["toggle"])
    assert published and published[0] > 0.5


def test_a_pinned_counter_does_not_grow() -> None:
    """Bounds read afresh before a grow can leave nothing to do."""
    book = Ledger(FAST)
    held(book, "pinned", {"0": value(0, 0)})
    assert book.bounded(ledger.Grow(counter="pinned", old=1, new=8), {"max_shards": 1}) is None


def test_first_loads_are_bounded_and_hold_the_durable_watermark_back() -> None:
    """Past the per-tick budget of whole reads, changed counters wait; until they are read, the
    watermark a successor may start from stays at the tick that deferred them."""
    book = Ledger(FAST)
    limit = ledger.FIRST_LOADS_PER_TICK
    changes = {f"c{n}": {"0": value(1, 1)} for n in range(limit + 3)}
    book.spread_first_loads(changes, at(0))
    for counter in changes:
        book.hold(counter, {"count": 0})  # no shard_counts: read whole
    assert book.first_loads(changes, at(0)) == list(changes)
    assert len(changes) == limit and len(book.deferred) == 3
    assert book.durable(at(5)) == at(0)
    for counter in changes:
        book.hold_shards(counter, changes[counter])
    book.spread_first_loads({}, at(1))
    catch_up = book.first_loads({}, at(1))
    assert len(catch_up) == 3 and book.retry == set(catch_up)
    book.end_tick({})
    assert book.durable(at(5)) == at(5)


def test_documents_are_bounded_too() -> None:
    """Past the per-tick budget of documents, changed counters the ledger has not seen wait,
    with the values read; the next tick meets them first, with what it read since over them."""
    book = Ledger(FAST, document_loads_per_tick=2)
    held(book, "known", {"0": value(1, 1)})
    changes = {name: {"0": value(2, 2)} for name in ("known", "a", "b", "c")}
    book.spread_first_loads(changes, at(0))
    assert list(changes) == ["known", "a", "b"] and list(book.waiting) == ["c"]
    assert book.durable(at(5)) == at(0) and book.owed == 1
    for name in ("a", "b"):
        book.hold(name, {"count": 0}, {"shard_counts": {}})
    book.end_tick(changes)
    later = {"b": {"0": value(3, 3)}, "e": {"0": value(1, 1)}, "c": {"1": value(4, 4)},
             "d": {"0": value(1, 1)}}
    book.spread_first_loads(later, at(1))
    assert later["c"] == {"0": value(2, 2), "1": value(4, 4)} and list(book.waiting) == ["e"]


def test_a_counter_left_waiting_from_an_earlier_reach_moves_the_durable_watermark_back() -> None:
    """One tick leaves `x` waiting, owed from 10 s; a later one, which read a sweep's cells
    reaching back to 2 s, leaves `y` waiting too: a successor starts no later than 2 s. And a
    deferred counter that waits again is not caught up (read whole) while its values wait."""
    book = Ledger(FAST, document_loads_per_tick=1)
    first = {"a": {"0": value(1, 1)}, "x": {"0": value(1, 1)}}
    book.spread_first_loads(first, at(10))
    book.hold("a", {"count": 0}, {"shard_counts": {}})
    book.end_tick(first)
    book.deferred.add("y")
    second = {"y": {"0": value(1, 1)}}
    book.spread_first_loads(second, at(2))
    assert list(second) == ["x"] and list(book.waiting) == ["y"]
    assert book.durable(at(20)) == at(2)
    book.hold("x", {"count": 0}, {"shard_counts": {}})
    assert book.first_loads(second, at(2)) == []


def test_a_new_holder_meets_thousands_over_a_few_ticks() -> None:
    """A tick meets as many counters as the last one changed, or a quarter of those to meet,
    no fewer than MEETINGS_MIN: 1,200 unseen counters at once are met 300 (a quarter), then 300
    (as many as the last tick changed), then the 600 others (as many as the last tick changed:
    300 met and the 300 first met, written again)."""
    book = Ledger(FAST)
    changes = {f"c{n:04d}": {"0": value(1, 1)} for n in range(1200)}
    book.spread_first_loads(changes, at(0))
    assert len(changes) == 300 and len(book.waiting) == 900
    for counter in changes:
        book.hold(counter, {"count": 0}, {"shard_counts": {}})
    book.end_tick(changes)
    more: ledger.Changes = {}
    book.spread_first_loads(more, at(1))
    assert len(more) == 300 and len(book.waiting) == 600
    for counter in more:
        book.hold(counter, {"count": 0}, {"shard_counts": {}})
    more.update({counter: {"0": value(2, 2)} for counter in changes})
    book.end_tick(more)
    last: ledger.Changes = {}
    book.spread_first_loads(last, at(2))
    assert len(last) == 600 and not book.waiting


def test_a_holder_meeting_fewer_than_arrive_meets_more_each_tick() -> None:
    """400 counters the holder does not hold change each tick (more than MEETINGS_MIN), and
    none it holds: the counters waiting stay under 4 ticks' arrivals (MEETINGS_SPREAD), where a
    budget of as many as the last tick changed stays at 250 and they grow by 150 a tick (3,000
    after 20 ticks)."""
    book = Ledger(FAST)
    for tick in range(20):
        changes = {f"t{tick:02d}-{n:03d}": {"0": value(1, 1)} for n in range(400)}
        book.spread_first_loads(changes, at(tick))
        for counter in changes:
            book.hold(counter, {"count": 0}, {"shard_counts": {}})
        book.end_tick(changes)
        assert len(book.waiting) <= 4 * 400, (tick, len(book.waiting))
    assert ledger.MEETINGS_MIN < 400


def test_a_counter_with_shard_counts_is_not_read_whole() -> None:
    """A memory's shard_counts stand for the shards that did not change: the sum is exact
    with no shard read. A counter deferred before is read whole all the same (what was dropped
    from a past tick's changes is in no shard_counts)."""
    book = Ledger(AutoscaleParams(enabled=False))
    memory = {"shard_counts": {"0": 5, "1": 7, "2": 0}}
    book.deferred.add("owed")
    changes = {"c": {"1": value(8, 20)}, "owed": {"0": value(1, 1)}}
    book.hold("c", {"count": 12}, memory)
    book.hold("owed", {"count": 12}, memory)
    assert book.first_loads(changes, at(0)) == ["owed"]
    sums, _ = book.apply({"c": changes["c"]}, at(0), at(1))
    assert sums == {"c": 13}


def test_shard_counts_go_to_the_memory_with_the_next_round() -> None:
    """Shard counts that moved wait for the next round of memories, which writes them to the
    memory, all of them, even when the sum did not move (+1 on one shard, -1 on another):
    not with every publish. Once written, they are not written again until one moves, and a
    counter is not dropped from the ledger while they wait."""
    book = Ledger(AutoscaleParams(enabled=False))
    book.hold("c", {"count": 0}, {"shard_counts": {}})
    book.first_loads({"c": {}}, at(0))
    # (No write counted: no rate either, which would keep it held.)
    sums, _ = book.apply({"c": {"0": value(1, 0), "1": value(-1, 0)}}, at(0), at(1))
    publish = book.plan(sums, at(1)).updates.get("c", Publish())
    assert not publish.memory and "count" not in publish.public
    book.end_tick({"c": {}})
    for _ in range(ledger.IDLE_TICKS_KEPT + 1):
        book.end_tick({})
    assert "c" in book.held
    publish = book.plan({}, at(2), checkpoint=at(2 - ledger.FLUSH_S)).updates["c"]
    assert publish.memory == {"shard_counts": {"0": 1, "1": -1}}
    book.published("c", publish)
    sums, _ = book.apply({"c": {"0": value(1, 0)}}, at(2), at(3))
    assert not book.plan(sums, at(3), checkpoint=at(3 - ledger.FLUSH_S)).updates.get(
        "c", Publish()).memory
    book.end_tick({})
    assert "c" not in book.held


def test_a_counter_without_shard_counts_gets_them_with_its_next_publish() -> None:
    """A counter whose memory has no shard_counts (dropped after a failed publish) is read
    whole, then given them."""
    book = Ledger(AutoscaleParams(enabled=False))
    book.hold("old", {"count": 3}, {})
    assert book.first_loads({"old": {"0": value(3, 3)}}, at(0)) == ["old"]
    book.hold_shards("old", {"0": value(3, 3), "1": value(0, 0)})
    sums, _ = book.apply({"old": {"0": value(3, 3)}}, at(0), at(1))
    assert book.plan(sums, at(1), checkpoint=None).updates["old"].memory == \
        {"shard_counts": {"0": 3, "1": 0}}


def test_a_counter_from_before_the_memory_moves_its_counts_there() -> None:
    """A document that carries shard_counts itself and has no memory (a version before the
    memory wrote it) is exact from them; its next publish writes them to the memory and takes
    them off the document, which clients read."""
    book = Ledger(AutoscaleParams(enabled=False))
    book.hold("old", {"count": 3, "shard_counts": {"0": 3, "1": 0}, "shard_load": [0.1]}, None)
    assert book.first_loads({"old": {"1": value(2, 2)}}, at(0)) == []
    assert book.counts_kept("old") == "document"
    sums, _ = book.apply({"old": {"1": value(2, 2)}}, at(0), at(1))
    publish = book.plan(sums, at(1)).updates["old"]
    assert publish.memory == {"shard_counts": {"0": 3, "1": 2}} and publish.drop_legacy
    assert (publish.public["count"], publish.public["updated_at"]) == (5, at(1))
    assert "shard_counts" not in publish.public
    book.published("old", publish)
    assert book.counts_kept("old") == "memory"


def test_a_shard_known_from_shard_counts_is_a_baseline_not_a_burst() -> None:
    """A shard first seen through shard_counts has no write counter to measure from: its first
    value read (this tick or a later one) samples 0 writes, however many it has had, and the
    next ones measure from it."""
    book = Ledger(FAST)
    book.hold("c", {"count": 0, "num_shards": 2}, {"shard_counts": {"0": 0, "1": 0}})
    book.first_loads({"c": {}}, at(0))
    book.apply({"c": {"0": value(0, 1_000_000)}}, at(0), at(1))
    book.apply({"c": {"1": value(0, 2_000_000)}}, at(1), at(2))
    state = book.held["c"].scaling
    assert state is not None and state.rate == 0.0
    book.apply({"c": {"0": value(0, 1_000_010)}}, at(2), at(3))
    assert state.rate > 0.0


def test_a_fold_moves_the_shard_counts_it_mirrors() -> None:
    """A committed fold moves the persisted shard counts as it moves the shards: nothing is
    published for it."""
    book = Ledger(AutoscaleParams(enabled=False))
    book.hold("c", {"count": 9, "num_shards": 2}, {"shard_counts": {"0": 4, "1": 2, "2": 3}})
    book.first_loads({"c": {}}, at(0))
    assert book.counts_kept("c") == "memory"
    book.folded("c", ["2"], {"0": 3}, complete=True)
    assert book.held["c"].persisted == {"0": 7, "1": 2} == book.held["c"].counts()
    sums, _ = book.apply({"c": {}}, at(0), at(1))
    assert "shard_counts" not in book.plan(sums, at(1)).updates.get("c", Publish()).memory


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 5)), min_size=1, max_size=40))
def test_the_sum_equals_the_shards_however_they_are_read(writes: list[tuple[int, int]]) -> None:
    """Whatever order of writes, and whichever subset of shards each tick reads (those
    written since the last tick, and any read again), the ledger's sum is the shards' sum."""
    book = Ledger(AutoscaleParams(enabled=False))
    shards = {str(n): value(0, 0) for n in range(4)}
    held(book, "c", shards)
    for tick, (shard, by) in enumerate(writes, start=1):
        old = shards[str(shard)]
        shards[str(shard)] = value(old.count + by, (old.writes or 0) + 1)
        reread = {str((shard + 1) % 4): shards[str((shard + 1) % 4)]}
        sums, _ = book.apply({"c": {str(shard): shards[str(shard)], **reread}},
                             at(tick - 1), at(tick))
        assert sums["c"] == sum(s.count for s in shards.values())


def test_an_idle_counter_is_evicted_unless_it_has_shards_to_shed() -> None:
    """After IDLE_TICKS_KEPT ticks without a change a counter leaves the ledger; one above its
    minimum stays, so that it still shrinks."""
    book = Ledger(AutoscaleParams(enabled=False))
    held(book, "idle", {"0": value(1, 1)})
    held(book, "wide", {"0": value(1, 1), "1": value(0, 0)})
    for _ in range(ledger.IDLE_TICKS_KEPT + 1):
        book.end_tick({})
    assert "idle" not in book.held and "wide" in book.held


def test_the_dashboards_decay_is_the_rollups() -> None:
    """web/src/rate.js decays a rate with the rollup's fall and shows 0 where it publishes 0."""
    source = (Path(__file__).resolve().parents[2] / "web/src/rate.js").read_text()
    constants = dict(re.findall(r"export const (\w+) = ([\d.]+);", source))
    assert float(constants["FALL_TAU_S"]) == config.AUTOSCALE.fall_tau_s
    assert float(constants["SHOWN_MIN"]) == config.RATE_PUBLISH_ABS


def test_a_tick_visits_what_changed_and_what_is_due_not_what_is_held() -> None:
    """Counters held idle are visited when something is due for them (their falling rate
    crossing the shrink line, their cool-down's end, their fold), not every tick; what they
    decide then is what a visit every tick decided: a shrink when the cool-down ends."""
    params = AutoscaleParams(cool_down_s=30.0, fold_grace_s=5.0)
    book = Ledger(params)
    for n in range(1000):
        book.hold(f"idle{n}", {"count": 0, "num_shards": 1, "rate": 0.0, "rate_at": at(0)},
                  since=at(0))
    book.hold("wide", {"count": 0, "num_shards": 4, "rate": 4.0, "rate_at": at(0),
                       "above_min": True}, since=at(0))
    held(book, "hot", {"0": value(0, 0)}, num_shards=1)
    visited, shrunk = [], None
    for second in range(1, 60):
        changes = {"hot": {"0": value(second, second)}}
        sums, _ = book.apply(changes, at(second - 1), at(second))
        plan = book.plan(sums, at(second))
        for counter, publish in plan.updates.items():
            book.published(counter, publish)
        for shrink in plan.shrinks:
            shrunk = second
            fields = book.shrinking(shrink, {}, at(second))
            assert fields is not None
            book.shrunk(shrink, fields)
        for counter, num_shards in book.folds_due(at(second)):
            book.folded(counter, [str(n) for n in range(num_shards, 4)], {}, complete=True)
        visited.append(book.visited)
        book.end_tick(changes)
    assert visited[0] == 1002  # each met once
    # The shrink line (1 write/s at 4 shards) is crossed at 10 ln 4 = 13.9 s: a visit at 14, a
    # cool-down of 30 s, a shrink at 44, its fold due at 49; "hot" every tick.
    assert [second for second, n in enumerate(visited, 1) if n > 1] == [1, 14, 44, 49]
    assert shrunk == 44 and max(visited[1:]) == 2
    state = book.held["wide"].scaling
    assert state is not None and state.num_shards == 1


def test_a_failed_tick_forgets_its_counters_only() -> None:
    """The counters a failed tick had in hand are read whole by later ticks (deferred), and a
    successor starts no later than the failed tick's reach; the others keep their state."""
    book = Ledger(AutoscaleParams(enabled=False))
    held(book, "kept", {"0": value(5, 5)}, written=5)
    held(book, "hand", {"0": value(2, 2)}, written=2)
    sums, _ = book.apply({}, at(-1), at(0))  # both met
    book.plan(sums, at(0))
    book.end_tick({})
    book.apply({"hand": {"0": value(3, 3)}}, at(0), at(1))
    book.forget_counters({"hand"}, at(-0.5))
    assert set(book.held) == {"kept"} and book.deferred == {"hand"}
    assert book.durable(at(1)) == at(-0.5) and not book.fresh
    book.hold("hand", {"count": 2}, {"shard_counts": {"0": 2}})
    assert book.first_loads({}, at(1)) == ["hand"]  # read whole, then published


def test_memories_are_written_a_share_a_tick_and_then_the_checkpoint_moves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A round of memories starts once the checkpoint is FLUSH_S old, with the counters whose
    counts moved; each tick writes the share due by then (at least MEMORIES_PER_TICK), and the
    tick that writes the last reports the round's instant as the new checkpoint. A counter that
    moves after the round began waits for the next; a failed tick starts the round again."""
    monkeypatch.setattr(ledger, "MEMORIES_PER_TICK", 2)
    book = Ledger(AutoscaleParams(enabled=False))
    names = [f"c{n}" for n in range(10)]
    for name in names:
        book.hold(name, {"count": 0}, {"shard_counts": {}})
    book.first_loads({name: {} for name in names}, at(0))
    start = at(1 - ledger.FLUSH_S)

    def tick(seconds: float, changed: list[str], checkpoint: dt.datetime) -> list[str]:
        changes = {name: {"0": value(int(seconds * 10), 0)} for name in changed}
        sums, _ = book.apply(changes, at(seconds - 1), at(seconds))
        plan = book.plan(sums, at(seconds), checkpoint=checkpoint)
        for counter, publish in plan.updates.items():
            book.published(counter, publish)
        book.end_tick(changes)
        return sorted(c for c, publish in plan.updates.items() if publish.memory)

    assert tick(1, names, start) == ["c0", "c1"] and book.checkpointed is None
    assert tick(1 + ledger.FLUSH_S / 2, [], start) == ["c2", "c3", "c4"]
    # c9 moves again: written with its current counts when its turn comes; nothing else waits.
    assert tick(2 + ledger.FLUSH_S / 2, ["c9"], start) == ["c5", "c6"]
    assert book.checkpointed is None
    assert tick(1 + ledger.FLUSH_S, [], start) == ["c7", "c8", "c9"]
    assert book.checkpointed == at(1)
    # The checkpoint is FLUSH_S old already: the next round starts, with what moved since.
    assert tick(2 + ledger.FLUSH_S, names[:3], at(1)) == ["c0", "c1"]
    # A failed tick: which of its share were written is not known; the round starts again.
    book.forget_counters({"c0"}, at(1))
    assert book.checkpointed is None
    assert tick(3 + ledger.FLUSH_S, [], at(1)) == ["c2"]  # (c0 is read whole, then written)
    assert book.checkpointed == at(3 + ledger.FLUSH_S)


def test_a_counter_born_while_the_ledger_held_its_lease_is_met_with_no_read() -> None:
    """A changed counter whose shards carry a birth stamp from after the ledger's first tick (and
    after its last IDLE_TICKS_KEPT ticks began) is held from the stamp: its other shards hold 0,
    its count is published at its first visit. One born before, or deferred, is read."""
    book = Ledger(AutoscaleParams(enabled=False))
    born = {"at": at(5), "num_shards": 4, "strategy": "random", "min_shards": 1,
            "max_shards": 1000}
    changes = {"new": {"2": value(0, 2)}, "old": {"0": value(1, 1)}}
    assert book.meet_born(changes, {"new": born}) == []  # no tick yet: born before it?
    book.apply({}, at(0), at(1))
    book.end_tick({})
    births = {"new": born, "old": {**born, "at": at(0.5)}}
    assert book.meet_born(changes, births) == ["new"]
    assert book.unseen(list(changes)) == ["old"]
    sums, _ = book.apply({"new": changes["new"]}, at(5), at(6))
    plan = book.plan(sums, at(6))
    assert plan.updates["new"].public["count"] == 0  # written though the sum is what was
    book.published("new", plan.updates["new"])
    state = book.held["new"].scaling
    assert state is not None and state.num_shards == 4 and book.held["new"].total() == 0
    book.deferred.add("late")
    assert book.meet_born({"late": {"0": value(1, 1)}}, {"late": born}) == []
    for _ in range(ledger.IDLE_TICKS_KEPT + 1):  # the stamp is older than the ticks kept now
        book.apply({}, at(7), at(8))
        book.end_tick({})
    assert book.meet_born({"gone": {"0": value(1, 1)}}, {"gone": born}) == []


def test_a_born_counter_whose_publish_fails_is_read_whole_after_the_tick() -> None:
    """Its document may be gone: from the end of the tick it is read whole (deferred), the tick
    itself goes on with it held, and a successor starts no later than its birth."""
    book = Ledger(AutoscaleParams(enabled=False))
    book.apply({}, at(0), at(1))
    book.end_tick({})
    born = {"at": at(5), "num_shards": 1}
    changes = {"gone": {"0": value(1, 1)}}
    assert book.meet_born(changes, {"gone": born}) == ["gone"]
    sums, _ = book.apply(changes, at(5), at(6))
    book.plan(sums, at(6))
    book.failed("gone")
    assert "gone" in book.held and book.folds_due(at(6)) == []
    book.end_tick(changes)
    assert "gone" not in book.held and book.deferred == {"gone"}
    assert book.durable(at(6)) == at(5)


def test_a_counter_held_for_its_scaling_only_whose_shrink_fails_publishes_no_count() -> None:
    """A watched counter (its shards not read) whose shrink fails is visited again, not owed a
    publish of a sum it never read; bounds that are not positive integers are not taken in."""
    book = Ledger(AutoscaleParams(cool_down_s=0.0))
    book.hold("idle", {"count": 42, "num_shards": 4, "rate": 0.0, "rate_at": at(0),
                       "above_min": True}, since=at(0))
    sums, _ = book.apply({}, at(0), at(1))
    plan = book.plan(sums, at(1))
    assert [shrink.counter for shrink in plan.shrinks] == ["idle"]
    assert book.shrinking(plan.shrinks[0], {"min_shards": "x", "max_shards": True}, at(1))
    book.failed("idle")
    sums, _ = book.apply({}, at(1), at(2))
    again = book.plan(sums, at(2))
    assert "idle" not in again.updates and [s.counter for s in again.shrinks] == ["idle"]
