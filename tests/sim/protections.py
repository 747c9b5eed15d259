"""Which of the domain's protections a run has on, and what a run's processes hold for
themselves.

Each protection of `config.Protections` guards one production hazard; `make sim` runs every seed
with all of them on, and some seeds with each alone off (`alone_off`), to show each one needed.
`UNPROTECTED` is the rollup as it was before any: no overlap, no touch, no sweep.

A run gives the domain its protections, P as each of its processes knows it, the waker of its
writes, the virtual clock and generators seeded from the run's through the contexts it builds
(`writing`), and small first-load budgets through its holders' `LIMITS`, so that a few counters
exercise what thousands would. `inline_pools` is the one place a run swaps module globals, and it
puts back what it found: the thread pools of the rollup's reads, of the waker's enqueues and of
the backfill, which run their calls in the calling actor, one after the other (`Inline`: a thread
of its own would run outside virtual time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from counting.features import collections
from counting.foundation.clock import Clock
from counting.foundation.config import Protections
from counting.rollup import store
from counting.rollup.tick import Limits
from counting.writepath import partitions, waking
from counting.writepath.context import Writing

T = TypeVar("T")
R = TypeVar("R")

NAMES = tuple(f.name for f in dataclasses.fields(Protections))
ALL = Protections()
UNPROTECTED = dataclasses.replace(ALL, overlap=False, touch=False, sweep=False)
# First-load budgets of 3 documents and 2 whole reads a tick (5000 and 200 in production).
LIMITS = Limits(document_loads_per_tick=3, first_loads_per_tick=2)


def alone_off(name: str) -> Protections:
    return dataclasses.replace(ALL, **{name: False})


def off(protections: Protections) -> list[str]:
    """The names of the protections that are off."""
    return [name for name in NAMES if not getattr(protections, name)]


def writing(protections: Protections, *, known: partitions.Known, waker: waking.AfterWrite,
            clock: Clock, entropy: random.Random) -> Writing:
    """The write context of a run's processes: its protections, P as they know it, the waker of
    their writes, the virtual clock, and the generator of stripes and the nonces made from the
    run's generator (unseeded, they would keep a seed from replaying)."""
    return Writing(known=known, waker=waker, protections=protections,
                   rng=random.Random(entropy.random()), clock=clock, nonces=nonces(entropy))


def nonces(entropy: random.Random) -> Callable[[], str]:
    """Requests' nonces, as `writes.new_nonce` makes them, from the run's generator."""
    seeded = random.Random(entropy.random())
    return lambda: uuid.UUID(int=seeded.getrandbits(128), version=4).hex


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


@contextlib.contextmanager
def inline_pools() -> Iterator[None]:
    """The domain's thread pools, as `Inline` ones, while a run lasts."""
    swaps = [(store, "ThreadPoolExecutor"), (waking, "ThreadPoolExecutor"),
             (collections, "ThreadPoolExecutor")]
    saved = [(module, name, getattr(module, name)) for module, name in swaps]
    for module, name in swaps:
        setattr(module, name, Inline)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
