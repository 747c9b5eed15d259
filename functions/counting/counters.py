"""Sharded counters: creation, the lock-free increment path, reads and resets.

A counter is `counters/{id}` (the rollup clients read, plus its configuration) and the shards
`counters/{id}/shards/{n}` whose sum is its value. An increment is one blind `Increment` on one
shard, chosen without reading anything but a per-instance cache of the configuration (which also
brings the per-shard load the rollup publishes, for `least_loaded`); with a `request_id` it is
committed together with the creation of a marker document, so a retry fails on the marker and
counts nothing. The rollup (`counting.rollup`) changes `num_shards` as the load changes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore

from . import autoscale, config, kinds, partitions, waking
from .caching import TtlCache
from .errors import Aborted, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from .kinds import Consistency, Strategy
from .policy import Policy

log = logging.getLogger(__name__)
T = TypeVar("T")
PACING_ATTEMPTS = 3  # a blind create of the pacing marker, then rewrites of the version read
# On a collection counter's document: the name of the declaration that maintains it.
COLLECTION_FIELD = "collection"


@dataclass(frozen=True, kw_only=True)
class CounterConfig:
    """What the write path needs to know about a counter."""

    counter: str
    num_shards: int
    strategy: Strategy
    shard_load: tuple[float, ...] = ()  # writes/s per shard, published by the rollup
    policy: Policy = field(default_factory=Policy)
    collection: str | None = None  # the declaration that maintains it (counting.collections)

    def check_writable(self) -> None:
        """Clients and operators write plain counters only: a collection counter changes with
        the documents it counts, and a write of its own would be undone by nothing."""
        if self.collection is not None:
            raise FailedPrecondition(
                f"counter: {self.counter!r} is a collection counter (declaration "
                f"{self.collection!r}): it changes only with the documents it counts")


@dataclass(frozen=True, kw_only=True)
class Created:
    counter: str
    shards: int
    created: bool
    policy: Policy


@dataclass(frozen=True, kw_only=True)
class Count:
    counter: str
    count: int
    as_of: dt.datetime
    consistency: Consistency
    documents_read: int
    mine: bool | None = None  # on a `unique` counter: whether it counts the caller


def shards_for(expected_rate: float | None) -> int:
    """Shards for a load: ceil(rate / (per-shard rate x target utilisation)), in 1..1000."""
    rate = config.DEFAULT_EXPECTED_RATE if expected_rate is None else expected_rate
    return autoscale.shards_for_rate(rate)


def counter_ref(db: firestore.Client, counter: str) -> firestore.DocumentReference:
    return db.collection(config.COUNTERS).document(counter)


def shard_ref(db: firestore.Client, counter: str, shard: int) -> firestore.DocumentReference:
    return db.collection(config.COUNTERS, counter, config.SHARDS).document(str(shard))


def user_key(uid: str) -> str:
    """A document id for a user (uids may hold characters an id cannot)."""
    return hashlib.sha256(uid.encode()).hexdigest()[:32]


def voter_ref(db: firestore.Client, counter: str, uid: str) -> firestore.DocumentReference:
    return db.collection(config.COUNTERS, counter, config.VOTERS).document(user_key(uid))


def paced_ref(db: firestore.Client, counter: str, uid: str) -> firestore.DocumentReference:
    return db.collection(config.COUNTERS, counter, config.PACED).document(user_key(uid))


def shard_write(db: firestore.Client, shard: firestore.DocumentReference, by: int,
                rng: random.Random) -> dict[str, Any]:
    """The fields every write to `shard` sets; `updated_at` and `stripe` feed the rollup query
    of the partition that owns it (`counting.partitions`), `writes` (one more per write,
    whatever `by`) is how the rollup measures the write rate."""
    return {
        "count": firestore.Increment(by),
        "writes": firestore.Increment(1),
        "updated_at": firestore.SERVER_TIMESTAMP,
        "stripe": partitions.shard_stripe(db, shard, rng),
    }


def stamped_at(result: Any) -> dt.datetime | None:
    """The server timestamp a write stored (Firestore returns it among the write's transform
    results: the instant its request started), or None when the write stored none."""
    for value in result.transform_results:
        pb = type(value).pb(value)
        if pb.WhichOneof("value_type") == "timestamp_value":
            stamped: dt.datetime = pb.timestamp_value.ToDatetime(tzinfo=dt.UTC)
            return stamped
    return None


def straddles(result: Any) -> bool:
    """Whether the rollup's change query could miss this shard write: its `updated_at` (taken at
    the request's start) lies further before its commit than the query's overlap allows for.
    A write that reports no server timestamp counts as one."""
    stamped = stamped_at(result)
    return stamped is None or (result.update_time - stamped).total_seconds() >= \
        config.SHARD_TOUCH_AFTER_S


def settle(db: firestore.Client, written: Iterable[tuple[firestore.DocumentReference, Any]],
           rng: random.Random) -> None:
    """After a commit of shard writes (each with its WriteResult): touch every shard whose write
    straddles (`straddles`), so that the rollup finds it within a tick. A touch is a write of a
    fresh `updated_at` alone, sent after the commit was acknowledged, so its server timestamp is
    later than that commit; it is itself checked, up to SHARD_TOUCH_ATTEMPTS times. A write left
    untouched (this instance died, Firestore stayed slow) is found by the rollup's sweep
    (docs/architecture.md, "Exact on real Firestore"). Then make sure a rollup tick follows the
    last of these commits (`waking.after_write`): every write path of the domain ends here, and a
    commit that wrote no shard (a document change that moves no count) asks for no tick."""
    written = list(written)
    last: dt.datetime | None = None
    for ref, result in written:
        touches = 0
        while config.PROTECTIONS.touch and straddles(result) \
                and touches < config.SHARD_TOUCH_ATTEMPTS:
            touches += 1
            try:
                result = ref.update({"updated_at": firestore.SERVER_TIMESTAMP,
                                     "stripe": partitions.shard_stripe(db, ref, rng)})
            except gexc.NotFound:
                break  # folded away: the fold moved its count, which the rollup mirrors
            except Exception as error:  # the write itself is done; the sweep will find it
                log.warning("could not touch %s after a slow write: %r", ref.path, error)
                break
        last = result.update_time if last is None else max(last, result.update_time)
    if last is not None:
        waking.after_write(db, last, {partitions.home_of_shard(ref) for ref, _ in written})


class ConfigCache:
    """Per-instance cache of counter configurations, each entry kept for `ttl_s` seconds.

    Unknown counters are not cached: a counter created a moment ago must be usable at once.
    """

    def __init__(self, ttl_s: float = config.CONFIG_CACHE_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._entries: TtlCache[str, CounterConfig] = TtlCache(ttl_s, clock)

    def get(self, db: firestore.Client, counter: str) -> CounterConfig:
        cached = self._entries.get(counter)
        if cached is not None:
            return cached
        read_at = self._clock()  # trusted from before the read: never longer than the TTL
        snapshot = counter_ref(db, counter).get()
        if not snapshot.exists:
            raise NotFound(f"counter: {counter!r} does not exist")
        data = snapshot.to_dict() or {}
        found = CounterConfig(
            counter=counter,
            num_shards=int(data["num_shards"]),
            # A name this version does not know picks shards as the default does.
            strategy=kinds.member(data.get("strategy"), kinds.STRATEGIES) or kinds.DEFAULT_STRATEGY,
            shard_load=tuple(float(x) for x in data.get("shard_load") or ()),
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


_CONFIGS = ConfigCache()
_PICKER = ShardPicker()


def default_configs() -> ConfigCache:
    """The instance's configuration cache, which every write path shares."""
    return _CONFIGS


def default_picker() -> ShardPicker:
    return _PICKER


def create_counter(
    db: firestore.Client,
    counter: str,
    *,
    shards: int | None = None,
    expected_rate: float | None = None,
    strategy: Strategy = kinds.DEFAULT_STRATEGY,
    policy: Policy | None = None,
    collection: str | None = None,
) -> Created:
    """Create the counter and all its shards in one commit; an existing counter is left as is
    (so of two racing creators, one creates and the other finds it).

    Autoscaling starts from this size and keeps it within `min_shards`..`max_shards` (defaults
    from config.py; the fields can be changed server-side, min == max pins the count).
    `collection` names the declaration that maintains a collection counter.
    """
    num_shards = shards if shards is not None else shards_for(expected_rate)
    min_shards, max_shards = config.DEFAULT_MIN_SHARDS, config.DEFAULT_MAX_SHARDS
    batch = db.batch()
    batch.create(
        counter_ref(db, counter),
        {
            "count": 0,
            "num_shards": num_shards,
            "strategy": strategy,
            "rate": 0.0,
            "min_shards": min_shards,
            "max_shards": max_shards,
            "above_min": num_shards > min_shards,
            "policy": (policy or Policy()).to_document(),
            "created_at": firestore.SERVER_TIMESTAMP,
            "updated_at": firestore.SERVER_TIMESTAMP,
            # Every shard holds 0: the rollup's first read of this counter is this document.
            config.SHARD_COUNTS_FIELD: {},
            **({} if collection is None else {COLLECTION_FIELD: collection}),
        },
    )
    for n in range(num_shards):
        batch.create(shard_ref(db, counter, n), {"count": 0})
    try:
        batch.commit()
    except gexc.AlreadyExists:
        existing = counter_ref(db, counter).get().to_dict() or {}
        return Created(counter=counter, shards=int(existing["num_shards"]), created=False,
                       policy=Policy.from_document(existing.get("policy")))
    return Created(counter=counter, shards=num_shards, created=True, policy=policy or Policy())


def configure_counter(db: firestore.Client, counter: str, policy: Policy) -> Policy:
    """Replace a counter's write policy; every instance applies it within CONFIG_CACHE_TTL_S."""
    try:
        counter_ref(db, counter).update({"policy": policy.to_document()})
    except gexc.NotFound:
        raise NotFound(f"counter: {counter!r} does not exist") from None
    return policy


def increment(
    db: firestore.Client,
    counter: str,
    by: int = 1,
    *,
    request_id: str | None = None,
    uid: str = "",
    admin: bool = True,
    configs: ConfigCache = _CONFIGS,
    picker: ShardPicker = _PICKER,
) -> dt.datetime | None:
    """Add `by` to one shard, as the counter's write policy allows this caller (`admin`: the
    operator CLI and tests act as admins). Returns the commit time, which a client compares with
    the rollup's `updated_at` to tell whether the rollup includes this increment; None when
    `request_id` was already applied for this user, or a `unique` counter already counts (or
    does not count) them."""

    def attempt() -> dt.datetime | None:
        target = configs.get(db, counter)
        target.check_writable()
        policy = target.policy
        policy.check(by, admin=admin, counter=counter)
        ref = shard_ref(db, counter, picker.pick(target))
        paced = bool(policy.min_interval_s) and not admin
        if request_id is None and not policy.unique and not paced:
            result = ref.update(shard_write(db, ref, by, picker.rng))
            settle(db, [(ref, result)], picker.rng)
            committed: dt.datetime = result.update_time
            return committed
        # The pacing marker is created blind (a user's first write in a while: one round trip),
        # and read only once that failed because it exists, for its rewrite's precondition.
        pacing: firestore.DocumentSnapshot[Any] | None = None
        for _ in range(PACING_ATTEMPTS):
            batch = db.batch()
            if request_id is not None:
                batch.create(*request_marker(db, uid, request_id, counters=[counter]))
            if policy.unique:
                voter = voter_ref(db, counter, uid)
                if by > 0:
                    batch.create(voter, {"uid": uid, "at": firestore.SERVER_TIMESTAMP})
                else:
                    batch.delete(voter, option=db.write_option(exists=True))
            if paced:
                try:
                    pace(db, batch, counter, uid, policy.min_interval_s, pacing)
                except ResourceExhausted:
                    # The marker may be this request's own, applied by an earlier delivery.
                    if is_no_op(db, counter, by, policy, uid=uid, request_id=request_id):
                        return None
                    raise
            batch.update(ref, shard_write(db, ref, by, picker.rng))
            try:
                results = batch.commit()
            except (gexc.AlreadyExists, gexc.FailedPrecondition, gexc.NotFound) as error:
                if is_no_op(db, counter, by, policy, uid=uid, request_id=request_id):
                    return None
                if isinstance(error, gexc.NotFound):
                    raise  # a shard folded away: with_fresh_config writes once more
                if not paced:
                    raise Aborted(f"counter: {counter!r}: a concurrent request of this user got "
                                  "in the way; retry") from error
                # The pacing marker exists, or changed since it was read: read it (again).
                found = paced_ref(db, counter, uid).get()
                pacing = found if found.exists else None
                continue
            settle(db, [(ref, results[-1])], picker.rng)  # the shard's write is the last
            committed = results[-1].update_time  # (a deleted marker's has none)
            return committed
        raise Aborted(f"counter: {counter!r}: concurrent requests of this user got in the way; "
                      "retry")

    return with_fresh_config(attempt, configs, [counter])


def pace(db: firestore.Client, batch: firestore.WriteBatch, counter: str, uid: str,
         interval_s: int, found: firestore.DocumentSnapshot[Any] | None) -> None:
    """Add the caller's pacing marker to `batch`: created when `found` is None (it fails if the
    marker exists), else rewritten with a precondition on the version `found` read; too soon
    since the last applied write: RESOURCE_EXHAUSTED."""
    ref = paced_ref(db, counter, uid)
    fields = {"uid": uid, "at": firestore.SERVER_TIMESTAMP,
              config.EXPIRES_AT: dt.datetime.now(dt.UTC) + dt.timedelta(seconds=interval_s)
              + config.REQUEST_MARKER_TTL}
    if found is None:
        batch.create(ref, fields)
        return
    wait = found.update_time + dt.timedelta(seconds=interval_s) - found.read_time
    if wait > dt.timedelta(0):
        raise ResourceExhausted(f"counter: {counter!r} takes one increment per user every "
                                f"{interval_s} s; retry in {wait.total_seconds():.0f} s")
    batch.update(ref, fields, option=db.write_option(last_update_time=found.update_time))


def is_no_op(db: firestore.Client, counter: str, by: int, policy: Policy, *, uid: str,
             request_id: str | None) -> bool:
    """Whether a commit with markers failed because it had nothing to do, told by the markers
    (read only on this rare path): a retried request, or a `unique` counter already counting
    (or not counting) the user."""
    if request_id is not None and request_marker(
            db, uid, request_id, counters=[])[0].get().exists:
        return True
    return policy.unique and voter_ref(db, counter, uid).get().exists == (by > 0)


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


def increment_many(
    db: firestore.Client,
    increments: Iterable[tuple[str, int]],
    *,
    request_id: str | None = None,
    uid: str = "",
    admin: bool = True,
    configs: ConfigCache = _CONFIGS,
    picker: ShardPicker = _PICKER,
) -> int:
    """Apply a batch atomically (one shard write per distinct counter); 0 when already applied.
    Each counter's summed `by` must pass its policy as one increment would; a counter whose
    policy keeps per-user markers (`unique`, `min_interval_s`) cannot be in a batch."""
    items = list(increments)
    totals: dict[str, int] = {}
    for counter, by in items:
        totals[counter] = totals.get(counter, 0) + by

    def attempt() -> int:
        targets = [configs.get(db, counter) for counter in totals]  # NotFound before any write
        for target in targets:
            target.check_writable()
            if target.policy.limits_batches:
                raise InvalidArgument(f"increments: {target.counter!r} counts each user once or "
                                      "paces them: increment it on its own")
            target.policy.check(totals[target.counter], admin=admin, counter=target.counter)
        batch = db.batch()
        if request_id is not None:
            batch.create(*request_marker(db, uid, request_id, counters=sorted(totals)))
        refs = [shard_ref(db, target.counter, picker.pick(target)) for target in targets]
        for ref, target in zip(refs, targets, strict=True):
            batch.update(ref, shard_write(db, ref, totals[target.counter], picker.rng))
        results = commit_once(batch)
        if results is None:
            return 0
        settle(db, zip(refs, results[len(results) - len(refs):], strict=True), picker.rng)
        return len(items)

    return with_fresh_config(attempt, configs, totals)


def request_marker(
    db: firestore.Client, uid: str, request_id: str, *, counters: list[str]
) -> tuple[firestore.DocumentReference, dict[str, Any]]:
    """The marker document that makes a request id count once per user.

    Its id hashes (uid, request_id): uids may hold characters a document id cannot. `at`, the
    commit's server timestamp, outlives a copy of the database (`commit_time_of`).
    """
    key = hashlib.sha256(f"{uid}\0{request_id}".encode()).hexdigest()
    expires_at = dt.datetime.now(dt.UTC) + config.REQUEST_MARKER_TTL
    fields = {"uid": uid, "request_id": request_id, "counters": counters,
              "at": firestore.SERVER_TIMESTAMP, config.EXPIRES_AT: expires_at}
    return db.collection(config.REQUESTS).document(key), fields


def applied_at(db: firestore.Client, uid: str, request_id: str) -> dt.datetime | None:
    """When this user's request was applied (its marker was created in the same commit as the
    shard write), or None if it was not (or has expired)."""
    snapshot = request_marker(db, uid, request_id, counters=[])[0].get()
    if not snapshot.exists:
        return None
    return commit_time_of(snapshot.create_time, (snapshot.to_dict() or {}).get("at"))


def commit_time_of(created: dt.datetime, stamped: dt.datetime | None) -> dt.datetime:
    """The commit time of a marker's creation: its create time, unless that is more than
    CHANGE_OVERLAP_S after the server timestamp the commit stored in it (taken as the commit's
    request started). Then the create time may not be the commit's: an import re-creates each
    document, fields unchanged, at the import time (the emulator's, on a `make dev` restart).
    The stored timestamp stands in, earlier than the commit by the commit's delay (docs/api.md,
    `increment`). A marker from before markers stored it has its create time only."""
    if stamped is None or created - stamped <= dt.timedelta(seconds=config.CHANGE_OVERLAP_S):
        return created
    return stamped


def commit_once(batch: firestore.WriteBatch) -> list[Any] | None:
    """Commit a batch that creates a marker: its write results, or None when the marker
    exists."""
    try:
        results: list[Any] = batch.commit()
    except gexc.AlreadyExists:
        return None
    return results


def get_count(db: firestore.Client, counter: str, consistency: Consistency = "rollup",
              uid: str | None = None) -> Count:
    """The rollup (one document read) or the strong value (all shards, one consistent read);
    with `uid`, on a `unique` counter, whether it counts that user (one more read; the strong
    value then reads the counter's document too)."""
    if consistency == "strong":
        snapshots = list(counter_ref(db, counter).collection(config.SHARDS).stream())
        if not snapshots:
            raise NotFound(f"counter: {counter!r} does not exist")
        total = sum(int((s.to_dict() or {}).get("count", 0)) for s in snapshots)
        mine = None if uid is None else counted(db, counter, uid)
        return Count(counter=counter, count=total, as_of=snapshots[0].read_time,
                     consistency=consistency, documents_read=len(snapshots), mine=mine)
    snapshot = counter_ref(db, counter).get()
    if not snapshot.exists:
        raise NotFound(f"counter: {counter!r} does not exist")
    data = snapshot.to_dict() or {}
    mine = None
    if uid is not None and Policy.from_document(data.get("policy")).unique:
        mine = voter_ref(db, counter, uid).get().exists
    return Count(counter=counter, count=int(data.get("count", 0)),
                 as_of=data.get("updated_at") or snapshot.update_time, consistency=consistency,
                 documents_read=1, mine=mine)


def counted(db: firestore.Client, counter: str, uid: str) -> bool | None:
    """On a `unique` counter, whether it counts the user; None on any other counter."""
    data = counter_ref(db, counter).get().to_dict() or {}
    if not Policy.from_document(data.get("policy")).unique:
        return None
    return voter_ref(db, counter, uid).get().exists


def reset_counter(db: firestore.Client, counter: str) -> None:
    """Zero every shard and the rollup in one commit, then forget who a `unique` counter counts
    and when a `min_interval_s` counter last counted each user. Not atomic with the zeroing: a
    like that lands in between counts after the reset, yet its marker goes, so the user may like
    once more; an un-like in between takes the count to -1 (docs/api.md, reset_counter)."""
    ref = counter_ref(db, counter)
    snapshot = ref.get()
    if not snapshot.exists:
        raise NotFound(f"counter: {counter!r} does not exist")
    collection = (snapshot.to_dict() or {}).get(COLLECTION_FIELD)
    if collection is not None:
        raise FailedPrecondition(f"counter: {counter!r} is a collection counter (declaration "
                                 f"{collection!r}): it counts documents, it cannot be reset")
    rng = random.Random()
    batch = db.batch()
    shards = list(ref.collection(config.SHARDS).list_documents())
    for shard in shards:
        batch.set(shard, {"count": 0, "updated_at": firestore.SERVER_TIMESTAMP,
                          "stripe": partitions.shard_stripe(db, shard, rng)}, merge=True)
    # The rollup's per-shard counts are zeroed with the shards. Each zeroed shard is listed: it
    # keeps its `writes`, which a holder reading these counts takes as a baseline, not a burst.
    batch.update(ref, {"count": 0, "updated_at": firestore.SERVER_TIMESTAMP,
                       config.SHARD_COUNTS_FIELD: {shard.id: 0 for shard in shards}})
    results = batch.commit()
    settle(db, zip(shards, results[:-1], strict=True), rng)
    for markers in (config.VOTERS, config.PACED):
        db.recursive_delete(ref.collection(markers))
