"""Which shard a write goes to: the per-instance cache of counters' configurations, the shard
picker of each strategy, and one more try when a shrink folded the chosen shard away."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore

from counting.features.counter_refs import COLLECTION_FIELD, counter_ref, memory_ref
from counting.foundation import config, encoding, kinds
from counting.foundation.config import Names
from counting.foundation.errors import Aborted, FailedPrecondition, NotFound
from counting.foundation.kinds import Strategy
from counting.writepath.caching import TtlCache
from counting.writepath.policy import Policy

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class CounterConfig:
    """What the write path needs to know about a counter."""

    counter: str
    num_shards: int
    strategy: Strategy
    shard_load: tuple[float, ...] = ()  # writes/s per shard, published by the rollup
    policy: Policy = field(default_factory=Policy)
    # the declaration that maintains it (counting.features.collections)
    collection: str | None = None

    def check_writable(self) -> None:
        """Clients and operators write plain counters only: a collection counter changes with
        the documents it counts, and a write of its own would be undone by nothing."""
        if self.collection is not None:
            raise FailedPrecondition(
                f"counter: {self.counter!r} is a collection counter (declaration "
                f"{self.collection!r}): it changes only with the documents it counts")


class ConfigCache:
    """Per-instance cache of counter configurations, each entry kept for `ttl_s` seconds.

    Unknown counters are not cached: a counter created a moment ago must be usable at once.
    """

    def __init__(self, ttl_s: float = config.CONFIG_CACHE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: TtlCache[str, CounterConfig] = TtlCache(ttl_s, clock)

    def get(self, db: firestore.Client, names: Names, counter: str) -> CounterConfig:
        cached = self._entries.get(counter)
        if cached is not None:
            return cached
        read_at = self._clock()  # trusted from before the read: never longer than the TTL
        snapshot = encoding.get(counter_ref(db, names, counter))
        if not snapshot.exists:
            raise NotFound(f"counter: {counter!r} does not exist")
        data = snapshot.to_dict() or {}
        # A name this version does not know picks shards as the default does.
        strategy = kinds.member(data.get("strategy"), kinds.STRATEGIES) or kinds.DEFAULT_STRATEGY
        load = data.get(config.SHARD_LOAD_FIELD)  # where a version before the memory had it
        if strategy == "least_loaded":
            memory = memory_ref(db, names, counter).get().to_dict() or {}
            load = memory.get(config.SHARD_LOAD_FIELD, load)
        found = CounterConfig(
            counter=counter,
            num_shards=int(data["num_shards"]),
            strategy=strategy,
            shard_load=tuple(float(x) for x in load or ()),
            policy=Policy.from_document(data.get("policy")),
            collection=data.get(COLLECTION_FIELD),
        )
        self._entries.put(counter, found, at=read_at)
        return found

    def forget(self, counter: str) -> None:
        """Drop a counter's entry: the next `get` reads it afresh."""
        self._entries.forget(counter)


@dataclass(kw_only=True)
class _Picks:
    """This instance's picks of each shard since it cached `config` (least_loaded)."""

    config: CounterConfig
    picks: list[int]
    total: int = 0


class ShardPicker:
    """Chooses the shard an increment goes to, per the counter's strategy.

    `round_robin` keeps one cursor per counter and instance, starting at a random offset so that
    instances do not march in lockstep. `least_loaded` is the power of two choices: of two random
    shards, the one with the smaller score, where a shard's score is its share of the load the
    rollup published (load / mean load) plus its share of this instance's own picks since the
    configuration was cached (picks / (mean picks + 1)). Published loads are seconds old and the
    same for every instance: ranked alone, they make all instances pile onto the same "least
    loaded" shards until the next refresh. Relative to this instance's own picks, a shard that is
    x% under the mean load draws about x% more of this instance's writes, and no more.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self._cursors: dict[str, itertools.count[int]] = {}
        self._picks: dict[str, _Picks] = {}
        self._lock = threading.Lock()

    def pick(self, counter: CounterConfig) -> int:
        n = counter.num_shards
        if counter.strategy == "round_robin":
            with self._lock:
                cursor = self._cursors.get(counter.counter)
                if cursor is None:
                    cursor = itertools.count(self.rng.randrange(n))
                    self._cursors[counter.counter] = cursor
                return next(cursor) % n
        if counter.strategy == "least_loaded" and n > 1:
            a, b = self.rng.randrange(n), self.rng.randrange(n)
            load = counter.shard_load[:n]
            mean_load = sum(load) / n
            with self._lock:
                entry = self._picks.get(counter.counter)
                if entry is None or entry.config is not counter:
                    entry = _Picks(config=counter, picks=[0] * n)  # a fresh copy of the config
                    self._picks[counter.counter] = entry
                picks = entry.picks
                mean_picks = entry.total / n + 1

                def score(i: int) -> float:
                    share = load[i] / mean_load if i < len(load) and mean_load > 0 else 0.0
                    return share + picks[i] / mean_picks

                chosen = a if score(a) <= score(b) else b
                entry.total += 1
                picks[chosen] += 1
                return chosen
        return self.rng.randrange(n)


def with_fresh_config(
    attempt: Callable[[], T], configs: ConfigCache, counters: Iterable[str]
) -> T:
    """Run a shard write; if it hit a shard that a shrink has since folded away (NOT_FOUND: the
    cached num_shards was stale), refresh the configuration and write once more. A failed commit
    wrote nothing, so the retry cannot count twice. Folded away again: ABORTED (retry)."""
    try:
        return attempt()
    except gexc.NotFound:
        for counter in counters:
            configs.forget(counter)
    try:
        return attempt()
    except gexc.NotFound as error:
        raise Aborted("a shard this write chose was folded away twice in a row; retry") from error
