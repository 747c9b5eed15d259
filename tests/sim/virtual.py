"""Virtual time for the simulation: actors are threads, of which exactly one runs at a time.

An actor runs until it waits (`Sim.wait`: a sleep, or a Firestore request in flight); the
scheduler then wakes the actor whose wait ends first (ties broken by the seeded generator), and
sets the clock to that instant. So a run is a function of its seed: the same seed replays the
same interleaving, however the machine schedules the threads. Threads that are not actors (the
rollup's read pool) run inside their actor's turn, without waiting.

A killed actor raises `Killed` (a BaseException, so no `except Exception` in the code under test
swallows it) at its next wait, and at every one after: `finally` blocks run, but none of their
requests reaches the database, as for a process that died.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import random
import threading
from collections.abc import Callable

# Virtual instant 0; the clock counts whole microseconds from here.
ORIGIN = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


class Killed(BaseException):
    """The actor's process died."""


def micros(seconds: float) -> int:
    return max(0, round(seconds * 1_000_000))


class Actor:
    def __init__(self, sim: Sim, name: str, body: Callable[[], object]) -> None:
        self.sim = sim
        self.name = name
        self.body = body
        self.killed = False
        self.pause_s = 0.0  # a stall before its next request (a GC pause, a frozen instance)
        self.owner: str | None = None  # a rollup holder's lease owner name
        self.done = False
        self._go = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self) -> None:
        self.sim._local.actor = self
        self._go.wait()
        self._go.clear()
        try:
            if not self.killed:
                self.body()
        except Killed:
            pass
        except BaseException as error:  # reported by the run, never lost
            self.sim.crashes.append(f"{self.name}: {error!r}")
        finally:
            self.done = True
            self.sim._back.set()


class Sim:
    """The scheduler and the clock of one run."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now_us = 0
        self.crashes: list[str] = []  # actors that failed with anything but Killed
        self._heap: list[tuple[int, float, int, Actor]] = []
        self._seq = itertools.count()
        self._back = threading.Event()
        self._local = threading.local()
        self._actors: list[Actor] = []

    # -- the clock, as the code under test reads it --

    def monotonic(self) -> float:
        return self.now_us / 1_000_000

    def wall(self) -> dt.datetime:
        return ORIGIN + dt.timedelta(microseconds=self.now_us)

    def instant(self, us: int) -> dt.datetime:
        return ORIGIN + dt.timedelta(microseconds=us)

    # -- actors --

    def current(self) -> Actor | None:
        actor: Actor | None = getattr(self._local, "actor", None)
        return actor

    def spawn(self, name: str, body: Callable[[], object], after_s: float = 0.0) -> Actor:
        actor = Actor(self, name, body)
        self._actors.append(actor)
        actor._thread.start()
        self._push(actor, self.now_us + micros(after_s))
        return actor

    def wait(self, seconds: float) -> None:
        """The calling actor resumes `seconds` later (at least 1 us); others run meanwhile."""
        actor = self.current()
        if actor is None:
            return
        if actor.killed:
            raise Killed
        self._push(actor, self.now_us + max(1, micros(seconds)))
        self._back.set()
        actor._go.wait()
        actor._go.clear()
        if actor.killed:
            raise Killed

    def _push(self, actor: Actor, at_us: int) -> None:
        heapq.heappush(self._heap, (at_us, self.rng.random(), next(self._seq), actor))

    def run_until(self, end_s: float) -> None:
        end = micros(end_s)
        while self._heap and self._heap[0][0] <= end:
            at, _, _, actor = heapq.heappop(self._heap)
            if actor.done:
                continue
            self.now_us = max(self.now_us, at)
            self._step(actor)
        self.now_us = max(self.now_us, end)

    def _step(self, actor: Actor) -> None:
        self._back.clear()
        actor._go.set()
        if not self._back.wait(timeout=60):
            raise RuntimeError(f"{actor.name} neither waited nor ended within 60 s of real "
                               "time: it blocks on something the simulation does not drive")

    def shutdown(self) -> None:
        """Kill every actor still alive and let each unwind, so that no thread outlives the
        run."""
        for actor in self._actors:
            if not actor.done:
                actor.killed = True
                self._step(actor)
        self._heap.clear()
