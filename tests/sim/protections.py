"""Which of the domain's protections a run has on, and what a run's processes hold for
themselves.

Each protection of `config.Protections` guards one production hazard; `make sim` runs every seed
with all of them on, and some seeds with each alone off (`alone_off`), to show each one needed.
`UNPROTECTED` is the rollup as it was before any: no overlap, no touch, no sweep.

A run gives the domain what its processes would hold for themselves through the contexts it
builds (`writing`): its protections, P as each process knows it, the waker of its writes, the
virtual clock, generators and nonces seeded from the run's (unseeded, they would keep a seed from
replaying), and thread pools that run their calls in the calling actor, one after the other
(`Inline`: a thread of its own would run outside virtual time); and small first-load budgets
through its holders' `LIMITS`, so that a few counters exercise what thousands would. It patches
no module.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

from counting.foundation.clock import Clock
from counting.foundation.config import Protections
from counting.rollup.tick import Limits
from counting.writepath import partitions, waking
from counting.writepath.context import Writing

R = TypeVar("R")
P = ParamSpec("P")

NAMES = tuple(f.name for f in dataclasses.fields(Protections))
ALL = Protections()
UNPROTECTED = dataclasses.replace(ALL, overlap=False, touch=False, sweep=False)
# First-load budgets of 3 documents and 2 whole reads a tick (5000 and 200 in production).
LIMITS = Limits(document_loads_per_tick=3, first_loads_per_tick=2, change_page=4)


def alone_off(name: str) -> Protections:
    return dataclasses.replace(ALL, **{name: False})


def off(protections: Protections) -> list[str]:
    """The names of the protections that are off."""
    return [name for name in NAMES if not getattr(protections, name)]


def writing(protections: Protections, *, known: partitions.Known, waker: waking.AfterWrite,
            clock: Clock, entropy: random.Random) -> Writing:
    """The write context of a run's processes: its protections, P as they know it, the waker of
    their writes, the virtual clock, the generator of stripes and the nonces made from the run's
    generator, and inline pools."""
    return Writing(known=known, waker=waker, protections=protections,
                   rng=random.Random(entropy.random()), clock=clock, nonces=nonces(entropy),
                   pools=Inline)


def nonces(entropy: random.Random) -> Callable[[], str]:
    """Requests' nonces, as `writes.new_nonce` makes them, from the run's generator."""
    seeded = random.Random(entropy.random())
    return lambda: uuid.UUID(int=seeded.getrandbits(128), version=4).hex


class Inline(Executor):
    """A thread pool whose calls run at once in the caller (made as the domain makes its pools:
    `Inline(max_workers, thread_name_prefix)`)."""

    def __init__(self, *_: Any) -> None:
        pass

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        done: Future[R] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as error:
            done.set_exception(error)
        return done
