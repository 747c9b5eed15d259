"""The cadence on the model's latencies, in virtual time: when a task delivered early ticks."""

from __future__ import annotations

import functools

from counting.features import counters
from counting.rollup import cadence
from counting.rollup.tick import TickStats
from counting.writepath import waking

from tests.sim.test_trend_partitions import Scene


def test_an_early_task_ticks_again_as_its_slot_ends_not_a_tick_later() -> None:
    """A task delivered before its slot ends (the emulator dispatches every task at once;
    deployed, a clock apart) ticks, waits out the rest of the slot, and ticks again as it ends:
    its wait counts its own tick's time. (Waiting the whole difference after the tick started
    the next one a whole tick late, every second on the emulator: a second's writes were
    published a tick later than they could be.)"""
    scene = Scene()
    names = [f"c{n}" for n in range(400)]
    for name in names:
        scene.act(functools.partial(counters.create_counter, scene.ctx, scene.db, name, shards=1))
    scene.later()
    scene.act(lambda: counters.increment_many(scene.ctx, scene.db, [(n, 1) for n in names]))
    ticked: list[tuple[float, TickStats]] = []
    holder = cadence.Holder(scene.db, writing=scene.ctx.writing, owner="one",
                            on_tick=lambda stats: ticked.append((scene.sim.monotonic(), stats)))
    began = scene.sim.monotonic()
    slot = waking.slot_of(scene.sim.wall())
    run = scene.act(lambda: holder.tick_slot(slot))
    assert run.early and len(ticked) == 2
    first_tick_s = ticked[0][0] - began
    late = (ticked[1][1].as_of - waking.slot_end(slot)).total_seconds()
    assert first_tick_s > 0.05 and 0 <= late < first_tick_s / 2, (first_tick_s, late)
    assert ticked[1][1].as_of >= waking.slot_end(slot) > ticked[0][1].as_of
