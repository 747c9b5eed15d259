"""What goes wrong in a run, and how often: the only place the simulation draws a hazard.

- Requests: a read's round trip; a commit's delay from its request reaching the server (its
  server timestamps, `S`) to its commit (`C`): mostly milliseconds, sometimes seconds
  (contention), rarely tens of seconds, very rarely up to `config.MAX_REQUEST_S`.
- An attempt's fate: refused before it applies (ABORTED, UNAVAILABLE or RESOURCE_EXHAUSTED:
  nothing written), or its answer lost, after it applied or while it is still in flight (the
  caller hears UNAVAILABLE or DEADLINE_EXCEEDED, the attempt lands later, or fails its
  preconditions when it lands). An attempt still in flight when the call's deadline passes
  (the client's timeout, 60 s by default) is answered DEADLINE_EXCEEDED and lands later too.
- The client library's retry of a Commit (`LibraryRetry`): google-cloud-firestore resends a
  Commit on UNAVAILABLE and RESOURCE_EXHAUSTED unless the caller passes `retry=None`.
- The run's chaos (`Chaos`): writers killed or frozen (between choosing a shard and sending,
  between a commit and its touch: seconds to minutes), rollup invocations killed or paused
  mid-tick, an extension trigger's instance killed or frozen, Cloud Tasks refusing an
  enqueue, tasks and trigger events delivered minutes late.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from counting.foundation import config
from google.api_core import exceptions as gexc
from google.api_core import retry as retries
from google.api_core.gapic_v1 import method

# The gapic default timeout of a Commit when the caller passes none: every attempt shares one
# deadline this long after the first was sent (google.api_core's TimeToDeadlineTimeout).
COMMIT_TIMEOUT_S = 60.0


@dataclass(frozen=True, kw_only=True)
class Requests:
    """How long requests take and how often they fail, in seconds and probabilities."""

    read: tuple[float, float] = (0.002, 0.02)  # a round trip
    commit: tuple[float, float] = (0.005, 0.06)  # S -> C
    slow_commit: tuple[float, float] = (0.3, 4.0)  # contention, a slow disk
    slow_p: float = 0.04
    stuck_commit: tuple[float, float] = (5.0, 40.0)
    stuck_p: float = 0.006
    late_commit: tuple[float, float] = (40.0, config.MAX_REQUEST_S)  # the bound of the design
    late_p: float = 0.0015
    refused_p: float = 0.01  # fails before it applies: nothing written
    lost_after_p: float = 0.01  # applies; its answer is lost
    lost_before_p: float = 0.003  # its answer is lost while it is in flight
    # ... when it takes a second or more: where clients time out and connections drop
    slow_lost_before_p: float = 0.2


CALM = Requests(slow_p=0.0, stuck_p=0.0, late_p=0.0, refused_p=0.0, lost_after_p=0.0,
                lost_before_p=0.0, slow_lost_before_p=0.0)

REFUSALS: tuple[type[gexc.GoogleAPICallError], ...] = (
    gexc.Aborted, gexc.ServiceUnavailable, gexc.ResourceExhausted)
LOSSES: tuple[type[gexc.GoogleAPICallError], ...] = (gexc.ServiceUnavailable,
                                                     gexc.DeadlineExceeded)


@dataclass(frozen=True, kw_only=True)
class Fate:
    """One commit attempt's: its delay S -> C, and what its caller hears."""

    delay_us: int
    refused: type[gexc.GoogleAPICallError] | None = None  # nothing applies
    lost: type[gexc.GoogleAPICallError] | None = None  # the answer is this error instead
    lost_before: bool = False  # ... heard while the attempt is still in flight


class Draws:
    """The run's draws of request latencies and fates, from one generator; a directed scenario
    scripts the fates of the next attempts instead."""

    def __init__(self, rng: random.Random, requests: Requests) -> None:
        self.rng = rng
        self.requests = requests
        self.script: deque[Fate] = deque()
        # The fates of the next attempts of one actor (by name): a drill of the random run
        # scripts its own attempts, whatever the other actors send meanwhile.
        self.scripts: dict[str, deque[Fate]] = {}

    def legs(self) -> tuple[int, int]:
        """A round trip's two halves, in microseconds (each at least 1)."""
        half = self.rng.uniform(*self.requests.read) / 2
        return max(1, round(half * 1_000_000)), max(1, round(half * 1_000_000))

    def fate(self, actor: str | None = None) -> Fate:
        own = self.scripts.get(actor or "")
        if own:
            return own.popleft()
        if self.script:
            return self.script.popleft()
        r = self.requests
        draw = self.rng.random()
        lost_before_p = r.slow_lost_before_p
        if draw < r.late_p:
            bounds = r.late_commit
        elif draw < r.late_p + r.stuck_p:
            bounds = r.stuck_commit
        elif draw < r.late_p + r.stuck_p + r.slow_p:
            bounds = r.slow_commit
        else:
            bounds, lost_before_p = r.commit, r.lost_before_p
        delay = max(1, round(self.rng.uniform(*bounds) * 1_000_000))
        draw = self.rng.random()
        if draw < r.refused_p:
            return Fate(delay_us=delay, refused=self.rng.choice(REFUSALS))
        draw -= r.refused_p
        if draw < r.lost_after_p:
            return Fate(delay_us=delay, lost=self.rng.choice(LOSSES))
        if draw - r.lost_after_p < lost_before_p:
            return Fate(delay_us=delay, lost=self.rng.choice(LOSSES), lost_before=True)
        return Fate(delay_us=delay)

    def uniform(self, low: float, high: float) -> float:
        return self.rng.uniform(low, high)


@dataclass(frozen=True, kw_only=True)
class LibraryRetry:
    """How google-cloud-firestore resends one Commit (`WriteBatch.commit`,
    `DocumentReference.create/set/update/delete`): the transport's default Retry (initial 0.1 s,
    multiplier 1.3, at most 60 s apart, 60 s in all, on UNAVAILABLE and RESOURCE_EXHAUSTED;
    firestore_v1/services/firestore/transports/base.py), or the caller's own `Retry`."""

    predicate: Callable[[Exception], bool]
    initial: float
    multiplier: float
    maximum: float
    timeout: float | None

    @classmethod
    def of(cls, retry: Any) -> LibraryRetry | None:
        """The resending a call's `retry=` argument asks for: None for `retry=None` (one
        attempt)."""
        if retry is None:
            return None
        if retry is method.DEFAULT:
            return cls(predicate=retries.if_exception_type(gexc.ResourceExhausted,
                                                           gexc.ServiceUnavailable),
                       initial=0.1, multiplier=1.3, maximum=60.0, timeout=60.0)
        if isinstance(retry, retries.Retry):
            return cls(predicate=retry._predicate, initial=retry._initial,
                       multiplier=retry._multiplier, maximum=retry._maximum,
                       timeout=retry._timeout)
        raise TypeError(f"retry: {retry!r} is neither DEFAULT, None nor a Retry")

    def pauses(self, rng: random.Random) -> Iterator[float]:
        """The sleeps between attempts: google.api_core's truncated exponential backoff, each
        drawn uniformly below the current bound."""
        bound = min(self.initial, self.maximum)
        while True:
            yield rng.uniform(0.0, bound)
            bound = min(bound * self.multiplier, self.maximum)


@dataclass(frozen=True, kw_only=True)
class Chaos:
    """The run's hazards beyond single requests."""

    step_s: tuple[float, float] = (2.0, 8.0)  # between two chaos steps
    writer_kill_p: float = 0.15  # of a step: kill a writer (a new one takes its place)
    writer_pause_p: float = 0.35  # of a step: freeze a writer before its next request
    writer_pause_s: tuple[float, float] = (1.0, 150.0)
    # Of a writer: its instance's clock is off Firestore's, by up to `skew_s` either way (its
    # business days and trend minutes begin that much early or late; its pacing cannot move).
    skewed_p: float = 0.3
    skew_s: float = 5.0
    holder_kill_p: float = 0.35  # of a step on a rollup invocation: kill it (else pause it)
    holder_pause_s: tuple[float, float] = (5.0, 25.0)  # past the lease's 10 s, or not
    scheduled_p: float = 0.15  # of a step on the rollup: strike the scheduled instance
    # of a step: kill an instance of the extension shards' trigger (its calls with it; as often
    # as a rollup invocation, `holder_kill_p`), else freeze its calls (`holder_pause_s`)
    trigger_p: float = 0.1
    enqueue_fail_p: float = 0.03  # Cloud Tasks refuses a task's creation
    late_task_p: float = 0.02  # a task dispatched minutes after its slot
    late_task_s: tuple[float, float] = (60.0, 300.0)
    duplicate_task_p: float = 0.05  # a task also reaches a second instance
    late_event_p: float = 0.03  # a trigger event delivered minutes late
    late_event_s: tuple[float, float] = (60.0, 240.0)
    duplicate_event_p: float = 0.2
