"""Virtual time for the simulation: actors run one at a time, and timers are callbacks the
scheduler runs at their instant (a commit landing, say).

An actor is a greenlet of the scheduler's thread (a switch costs a microsecond, where threads
handing over cost tens). It runs until it waits (`Sim.wait`: a sleep, or a Firestore request in
flight); the scheduler then runs whatever is due first, an actor's wake-up or a timer (ties
broken by the seeded generator), and sets the clock to that instant. So a run is a function of
its seed: the same seed replays the same interleaving. Code that is no actor's (a directed
scenario stepping the clock by hand) never waits.

A killed actor raises `Killed` (a BaseException, so no `except Exception` in the code under test
swallows it) at the end of its current wait, and at every one after: `finally` blocks run, but
none of their requests reaches the database, as for a process that died. A request already sent
still lands: the server has it.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import random
from collections.abc import Callable

import greenlet  # type: ignore[import-untyped]

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
        self.owner: str | None = None  # a rollup holder's lease owner name, while it acts for one
        self.call: object | None = None  # the client call under way (`history.Call`)
        self.done = False
        self._glet: _Greenlet | None = None  # made when it first runs

    def _main(self) -> None:
        try:
            if not self.killed:
                self.body()
        except Killed:
            pass
        except BaseException as error:  # reported by the run, never lost
            self.sim.crashes.append(f"{self.name}: {error!r}")
        finally:
            self.done = True


class Condition:
    """`threading.Condition` for the actors of one run, as the domain's objects shared by the
    calls of one instance use it (`extension.Movers`): actors switch only when they wait, so
    whoever runs holds the lock, and `wait` lets the others run until one notifies."""

    POLL_S = 0.05  # how often a waiter looks for a notification

    def __init__(self, sim: Sim) -> None:
        self._sim = sim
        self._notified = 0

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *_: object) -> None:
        return None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> bool:
        seen, until = self._notified, None if timeout is None else self._sim.now_us + micros(
            timeout)
        while self._notified == seen:
            if self._sim.current() is None:
                return False  # code that is no actor's cannot wait
            if until is not None and self._sim.now_us >= until:
                return False
            self._sim.wait(self.POLL_S)
        return True

    def notify(self, n: int = 1) -> None:
        self._notified += 1

    def notify_all(self) -> None:
        self._notified += 1


class _Greenlet(greenlet.greenlet):  # type: ignore[misc]
    actor: Actor


Timer = Callable[[], None]


class Sim:
    """The scheduler and the clock of one run."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now_us = 0
        self.crashes: list[str] = []  # actors and timers that failed with anything but Killed
        self._heap: list[tuple[int, float, int, Actor | Timer]] = []
        self._seq = itertools.count()
        self._actors: list[Actor] = []
        self._hub = greenlet.getcurrent()  # the scheduler's: actors switch back to it

    # -- the clock, as the code under test reads it --

    def monotonic(self) -> float:
        return self.now_us / 1_000_000

    def wall(self) -> dt.datetime:
        return ORIGIN + dt.timedelta(microseconds=self.now_us)

    def instant(self, us: int) -> dt.datetime:
        return ORIGIN + dt.timedelta(microseconds=us)

    def sleep(self, seconds: float) -> None:
        """`time.sleep` for the code under test."""
        if self.current() is not None:
            self.wait(seconds)

    # -- actors and timers --

    def current(self) -> Actor | None:
        actor: Actor | None = getattr(greenlet.getcurrent(), "actor", None)
        return actor

    def spawn(self, name: str, body: Callable[[], object], after_s: float = 0.0) -> Actor:
        actor = Actor(self, name, body)
        self._actors.append(actor)
        self._push(actor, self.now_us + micros(after_s))
        return actor

    def at(self, at_us: int, timer: Timer) -> None:
        """Run `timer` in the scheduler at `at_us` (never earlier than now): it must not wait."""
        self._push(timer, max(at_us, self.now_us))

    def wait(self, seconds: float) -> None:
        """The calling actor resumes `seconds` later (at least 1 us); others run meanwhile."""
        self.wait_until(self.now_us + max(1, micros(seconds)))

    def wait_until(self, at_us: int) -> None:
        actor = self.current()
        if actor is None:
            return
        if actor.killed:
            raise Killed
        self._push(actor, max(at_us, self.now_us + 1))
        self._hub.switch()
        if actor.killed:
            raise Killed

    def pause_if_due(self) -> None:
        """Before a request: serve the stall chaos gave the calling actor."""
        actor = self.current()
        if actor is not None and actor.pause_s:
            pause, actor.pause_s = actor.pause_s, 0.0
            self.wait(pause)

    def _push(self, item: Actor | Timer, at_us: int) -> None:
        heapq.heappush(self._heap, (at_us, self.rng.random(), next(self._seq), item))

    def run_until(self, end_s: float) -> None:
        end = micros(end_s)
        while self._heap and self._heap[0][0] <= end:
            at, _, _, item = heapq.heappop(self._heap)
            self.now_us = max(self.now_us, at)
            if isinstance(item, Actor):
                if not item.done:
                    self._step(item)
                continue
            try:
                item()
            except Exception as error:  # reported by the run, never lost
                self.crashes.append(f"timer at {at} us: {error!r}")
        self.now_us = max(self.now_us, end)

    def _step(self, actor: Actor) -> None:
        if actor._glet is None:
            actor._glet = _Greenlet(actor._main, parent=self._hub)
            actor._glet.actor = actor
        actor._glet.switch()

    def alive(self) -> list[Actor]:
        return [actor for actor in self._actors if not actor.done]

    def shutdown(self) -> None:
        """Kill every actor still alive and let each unwind."""
        for actor in self._actors:
            if not actor.done:
                actor.killed = True
                self._step(actor)
        self._heap.clear()
