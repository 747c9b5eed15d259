"""Which of the domain's protections a run has on, and the one seam through which a run sets the
process globals the domain reads.

Each protection of `config.Protections` guards one production hazard; `make sim` runs every seed
with all of them on, and some seeds with each alone off (`alone_off`), to show each one needed.
`UNPROTECTED` is the rollup as it was before any: no overlap, no touch, no sweep.

`process` is the only place a run swaps module globals (`only` swaps the protections alone, for
a directed scenario), and it puts back what it found: the
protections (`config.PROTECTIONS`); what each process of the run would hold for itself (P as
it knows it, the waker of its writes, the clock a guarded write's resending waits on); the
generators and nonces the domain makes for itself (unseeded, they would keep a seed from
replaying), made from the run's; the thread pools of the rollup's reads, of the
waker's enqueues and of the backfill, which run their calls in the calling actor, one after
the other (`Inline`: a thread of its own would run outside virtual time); and the first-load
budgets, small so that a few counters exercise what thousands would. Issue 33 replaces these
globals with an explicit context, and this seam with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from counting.features import collections, counters
from counting.foundation import config, writes
from counting.foundation.config import Protections
from counting.rollup import audit, ledger, store
from counting.writepath import partitions, waking

T = TypeVar("T")
R = TypeVar("R")

NAMES = tuple(f.name for f in dataclasses.fields(Protections))
ALL = Protections()
UNPROTECTED = dataclasses.replace(ALL, overlap=False, touch=False, sweep=False)
# First-load budgets of 3 documents and 2 whole reads a tick (5000 and 200 in production).
DOCUMENT_LOADS, FIRST_LOADS = 3, 2


def alone_off(name: str) -> Protections:
    return dataclasses.replace(ALL, **{name: False})


def off(protections: Protections) -> list[str]:
    """The names of the protections that are off."""
    return [name for name in NAMES if not getattr(protections, name)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Process:
    """What the domain would read from its process: P as it knows it, the waker its writes
    call, the clock (`monotonic`, `sleep`) its resending of guarded writes waits on, the
    generator its own generators are seeded from."""

    known: partitions.Known
    waker: Callable[[], waking.AfterWrite]  # made once the pools are swapped
    clock: Any
    entropy: random.Random


class Inline:
    """A `ThreadPoolExecutor` whose calls run at once in the caller."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def submit(self, call: Callable[..., R], *args: Any, **kwargs: Any) -> Future[R]:
        done: Future[R] = Future()
        try:
            done.set_result(call(*args, **kwargs))
        except Exception as error:
            done.set_exception(error)
        return done

    def map(self, call: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        return iter([call(item) for item in items])

    def shutdown(self, wait: bool = True, **_: Any) -> None:
        pass

    def __enter__(self) -> Inline:
        return self

    def __exit__(self, *_: object) -> None:
        pass


class Seeded:
    """The `random` and `uuid` modules as the domain uses them for itself (a reset's and a
    fold's stripes, the audit's repair, requests' nonces): made from the run's generator."""

    def __init__(self, entropy: random.Random) -> None:
        self._entropy = entropy

    def Random(self, seed: Any = None) -> random.Random:
        return random.Random(self._entropy.random() if seed is None else seed)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._entropy.getrandbits(128), version=4)


@contextlib.contextmanager
def only(protections: Protections) -> Iterator[None]:
    """The protections alone, for a directed scenario (which holds no process of its own)."""
    saved, config.PROTECTIONS = config.PROTECTIONS, protections
    try:
        yield
    finally:
        config.PROTECTIONS = saved


@contextlib.contextmanager
def process(protections: Protections, held: Process) -> Iterator[None]:
    seeded = Seeded(held.entropy)
    swaps: list[tuple[object, str, object]] = [
        (config, "PROTECTIONS", protections),
        (ledger, "DOCUMENT_LOADS_PER_TICK", DOCUMENT_LOADS),
        (ledger, "FIRST_LOADS_PER_TICK", FIRST_LOADS),
        (store, "ThreadPoolExecutor", Inline),
        (waking, "ThreadPoolExecutor", Inline),
        (collections, "ThreadPoolExecutor", Inline),
        (partitions, "KNOWN", held.known),
        # Its clock is bound as default arguments when the module loads.
        (writes, "resending", functools.partial(writes.resending, sleep=held.clock.sleep,
                                                monotonic=held.clock.monotonic)),
        (counters, "random", seeded),
        (store, "random", seeded),
        (audit, "random", seeded),
        (writes, "uuid", seeded),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, value in swaps:
        setattr(module, name, value)
    previous = waking.install(held.waker())
    try:
        yield
    finally:
        waking.install(previous)
        for module, name, value in saved:
            setattr(module, name, value)
