"""Trending tags: through the callables on the stack, and the rollup step in-process with an
injected clock (on a project of its own) for window boundaries."""

from __future__ import annotations

import datetime as dt
import functools
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from callables import Callables, CallError
from counting.features import trends
from counting.features.context import Context
from counting.foundation import config, kinds
from counting.foundation.config import Names
from counting.rollup import trend_ledger, trend_step
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Rollup
from google.cloud import firestore

from ..waiting import eventually

NAMES = Names()  # the collection ids of the default placement, which these run on

Event = tuple[dt.datetime, str, list[str]]  # (when, region, normalised distinct tags)


def expected(events: Iterable[Event], now: dt.datetime, window: kinds.Window,
             region: str | None = None) -> list[dict[str, Any]]:
    """Brute force: the window counts of every tag, in Top-K order, cut at TOP_K."""
    now_minute = trends.minute_of(now)
    counts: Counter[str] = Counter()
    for when, where, tags in events:
        bucket = trends.bucket_of(window, trends.minute_of(when))
        if (region is None or where == region) and trends.in_window(window, bucket, now_minute):
            counts.update(tags)
    ranked = sorted(counts.items(), key=trend_ledger.rank)[:config.TOP_K]
    return [{"tag": tag, "count": count} for tag, count in ranked]


def top(client: Callables, region: str | None, window: str, k: int = 100) -> list[Any]:
    data: dict[str, Any] = {"k": k, "window": window}
    if region is not None:
        data["region"] = region
    items: list[Any] = client.call("top_tags", **data)["items"]
    return items


# --- through the callables ---------------------------------------------------------------------


def test_top_tags_equal_a_brute_force_count(user: Callables, suffix: str) -> None:
    """Per region and global, both windows list exactly the counts of the tracked events."""
    rng = random.Random(7)
    pool = [f"t{n}-{suffix}" for n in range(12)]
    regions = [f"a-{suffix}", f"b-{suffix}", f"c-{suffix}"]
    events: list[Event] = []
    now = dt.datetime.now(dt.UTC)
    for n in range(45):
        tags = sorted({pool[min(int(rng.paretovariate(1.2)) - 1, 11)] for _ in range(3)})
        region = regions[n % 3]
        assert user.call("track", region=region, tags=tags)["recorded"] == len(tags)
        events.append((now, region, tags))
    for window in kinds.WINDOWS:
        for region in regions:
            want = expected(events, now, window, region)
            eventually(lambda r=region, w=window, e=want: top(user, r,
                                                              w) == e)  # type: ignore[misc]
        mine = expected(events, now, window)

        def global_matches(w: str = window, e: list[Any] = mine) -> bool:
            listed = top(user, None, w)
            ours = [item for item in listed if item["tag"].endswith(suffix)]
            # Other tests' tags share the global list; ours must be there, in order, exactly.
            return ours == e if len(listed) < config.TOP_K else ours == e[:len(ours)]

        eventually(global_matches)


def test_variants_and_repeats_in_one_event_count_once(user: Callables, suffix: str) -> None:
    """`#Tag`, `tag` and ` TAG ` are one tag, and an event counts a tag once."""
    region = f"v-{suffix}"
    tag = f"Fête-{suffix}"
    assert user.call("track", region=region, tags=[f"#{tag}", tag.lower(), f" {tag.upper()} ",
                                                    "other"])["recorded"] == 2
    assert user.call("track", region=region, tags=[f"#{tag.upper()}"])["recorded"] == 1
    want = [{"tag": tag.casefold(), "count": 2}, {"tag": "other", "count": 1}]
    eventually(lambda: top(user, region, "1h") == want)
    result = user.call("top_tags", region=region, k=1)
    assert result["items"] == want[:1] and result["window"] == "24h"
    assert result["region"] == region and result["as_of"].endswith("Z")


def test_a_retried_request_id_counts_once(user: Callables, suffix: str) -> None:
    """The same request_id tracked twice records its tags once."""
    region = f"rq-{suffix}"
    first = user.call("track", region=region, tags=["x", "y"], request_id=f"post-{suffix}")
    again = user.call("track", region=region, tags=["x", "y"], request_id=f"post-{suffix}")
    assert (first["recorded"], again["recorded"]) == (2, 0)
    user.call("track", region=region, tags=["x"])
    eventually(lambda: top(user, region, "24h") == [{"tag": "x", "count": 2},
                                                     {"tag": "y", "count": 1}])


@pytest.mark.parametrize(("data", "field"), [
    ({"tags": ["a"]}, "region"),
    ({"region": "", "tags": ["a"]}, "region"),
    ({"region": "EU", "tags": ["a"]}, "region"),
    ({"region": "global", "tags": ["a"]}, "region"),
    ({"region": "r" * 65, "tags": ["a"]}, "region"),
    ({"region": 5, "tags": ["a"]}, "region"),
    ({"region": "eu"}, "tags"),
    ({"region": "eu", "tags": []}, "tags"),
    ({"region": "eu", "tags": "a"}, "tags"),
    ({"region": "eu", "tags": ["a"] * 21}, "tags"),
    ({"region": "eu", "tags": ["ok", "#"]}, "tags[1]"),
    ({"region": "eu", "tags": ["   "]}, "tags[0]"),
    ({"region": "eu", "tags": ["x" * 101]}, "tags[0]"),
    ({"region": "eu", "tags": [7]}, "tags[0]"),
    ({"region": "eu", "tags": ["a"], "request_id": "no spaces"}, "request_id"),
    ({"region": "eu", "tags": ["a"], "extra": 1}, "extra"),
])
def test_track_rejects_bad_input(user: Callables, data: dict[str, Any], field: str) -> None:
    """Malformed events are INVALID_ARGUMENT, naming the field."""
    with pytest.raises(CallError) as error:
        user.call("track", **data)
    assert error.value.status == "INVALID_ARGUMENT"
    assert error.value.message.startswith(field)


@pytest.mark.parametrize(("data", "field"), [
    ({"k": 0}, "k"), ({"k": 101}, "k"), ({"k": "5"}, "k"), ({"k": True}, "k"),
    ({"window": "2h"}, "window"), ({"window": 1}, "window"), ({"region": "Bad!"}, "region"),
    ({"region": "global"}, "region"),
])
def test_top_tags_rejects_bad_input(user: Callables, data: dict[str, Any], field: str) -> None:
    """Bad k, window or region are INVALID_ARGUMENT, naming the field."""
    with pytest.raises(CallError) as error:
        user.call("top_tags", **data)
    assert error.value.status == "INVALID_ARGUMENT"
    assert error.value.message.startswith(field)


def test_trends_need_a_signed_in_user(anonymous: Callables) -> None:
    """Without an ID token both callables are UNAUTHENTICATED."""
    for name, data in (("track", {"region": "eu", "tags": ["a"]}), ("top_tags", {})):
        with pytest.raises(CallError) as error:
            anonymous.call(name, **data)
        assert error.value.status == "UNAUTHENTICATED"


# --- the rollup step, with an injected clock ---------------------------------------------------


class Clock:
    def __init__(self, start: dt.datetime) -> None:
        self.now = start

    def __call__(self) -> dt.datetime:
        return self.now


def stepper(ctx: Context, db: firestore.Client, clock: Clock,
            thresholds: Mapping[kinds.Window, int] | None = None) -> tuple[Rollup, Lease]:
    """A rollup holder whose trends step reads the time from `clock`."""
    lease = Lease(db, state_ref(db, NAMES), "test", config.ROLLUP.lease_s)
    assert lease.acquire()
    return Rollup(db, lease, trends=functools.partial(
        trend_step.TrendRollup, clock=clock, thresholds=thresholds), writing=ctx.writing), lease


def listed(db: firestore.Client, scope: str, window: kinds.Window) -> list[Any]:
    items: list[Any] = trends.top_tags(db, NAMES, None if scope == "global" else scope, 100,
                                       window).items
    return [{"tag": item.tag, "count": item.count} for item in items]


def test_windows_drop_expired_buckets_and_reorder(isolated_db: firestore.Client,
                                                  ctx: Context) -> None:
    """As the clock passes bucket boundaries, old counts leave the 1h and then the 24h lists."""
    start = dt.datetime(2026, 3, 1, 10, 0, 30, tzinfo=dt.UTC)
    clock = Clock(start)
    step, _ = stepper(ctx, isolated_db, clock)
    events: list[Event] = []

    def track(region: str, tags: list[str]) -> None:
        trends.track(ctx, isolated_db, region, tags, now=clock.now)
        events.append((clock.now, region, tags))

    def check() -> None:
        for scope in ("eu", "us", "global"):
            for window in kinds.WINDOWS:
                region = None if scope == "global" else scope
                assert listed(isolated_db, scope, window) == expected(events, clock.now, window,
                                                                        region), (scope, window)

    for _ in range(3):
        track("eu", ["old", "both"])
    track("us", ["old"])
    step.tick()
    check()
    clock.now = start + dt.timedelta(minutes=30)
    for _ in range(2):
        track("eu", ["new", "both"])
    step.tick()
    check()
    assert listed(isolated_db, "global", "1h")[0] == {"tag": "both", "count": 5}
    clock.now = start + dt.timedelta(minutes=60)  # the first minute leaves the 1h window
    step.tick()
    check()
    assert listed(isolated_db, "global", "1h") == [{"tag": "both", "count": 2},
                                                    {"tag": "new", "count": 2}]
    assert listed(isolated_db, "us", "1h") == []
    assert listed(isolated_db, "global", "24h")[0] == {"tag": "both", "count": 5}
    clock.now = start + dt.timedelta(hours=24)  # the 10:00 hour leaves the 24h window
    step.tick()
    check()
    assert listed(isolated_db, "global", "24h") == []
    published = isolated_db.collection(config.TRENDS)
    assert [doc.id for doc in published.stream()] == ["global"]  # regions without events go
    for collection in (config.TREND_MINUTES, config.TREND_HOURS, config.TREND_TOTALS):
        assert list(isolated_db.collection(collection).stream()) == []


def test_a_full_list_refills_from_the_totals(isolated_db: firestore.Client, ctx: Context) -> None:
    """With more than TOP_K tags, tags outside the list move in when listed ones expire."""
    start = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
    clock = Clock(start)
    step, _ = stepper(ctx, isolated_db, clock)
    rng = random.Random(3)
    events: list[Event] = []
    early = [f"early-{n:03d}" for n in range(60)]
    late = [f"late-{n:03d}" for n in range(90)]
    for when, pool, rounds in ((start, early, 6), (start + dt.timedelta(minutes=10), late, 4)):
        clock.now = when
        for _ in range(rounds):
            for region in ("eu", "us"):
                tags = rng.sample(pool, 20)
                trends.track(ctx, isolated_db, region, tags, now=when)
                events.append((when, region, tags))
        step.tick()
    for minutes in (10, 59, 60, 70):
        clock.now = start + dt.timedelta(minutes=minutes)
        step.tick()
        for window in kinds.WINDOWS:
            assert listed(isolated_db, "global", window) == expected(events, clock.now, window)
            assert listed(isolated_db, "eu", window) == expected(events, clock.now, window, "eu")
    assert len(listed(isolated_db, "global", "24h")) == config.TOP_K


def test_trending_lists_tags_at_the_threshold(isolated_db: firestore.Client, ctx: Context) -> None:
    """A tag is trending once its window count reaches the window's threshold, and not after
    it falls below."""
    start = dt.datetime(2026, 3, 1, 8, 0, 0, tzinfo=dt.UTC)
    clock = Clock(start)
    step, _ = stepper(ctx, isolated_db, clock, thresholds={"1h": 3, "24h": 4})
    for _ in range(3):
        trends.track(ctx, isolated_db, "eu", ["hot", "warm"][: 2 if _ < 2 else 1], now=clock.now)
    step.tick()
    doc = isolated_db.collection(config.TRENDS).document("global").get().to_dict() or {}
    assert doc["windows"]["1h"]["trending"] == ["hot"]
    assert doc["trending"] == [] and doc["window"] == "24h"
    trends.track(ctx, isolated_db, "us", ["hot"], now=clock.now)
    step.tick()
    doc = isolated_db.collection(config.TRENDS).document("global").get().to_dict() or {}
    assert doc["trending"] == ["hot"] and doc["items"][0] == {"tag": "hot", "count": 4}
    clock.now = start + dt.timedelta(hours=2)
    step.tick()
    doc = isolated_db.collection(config.TRENDS).document("global").get().to_dict() or {}
    assert doc["windows"]["1h"] == {"items": [], "trending": []}
    assert doc["trending"] == ["hot"]


def test_an_interrupted_tick_is_redone_exactly(
    isolated_db: firestore.Client, monkeypatch: pytest.MonkeyPatch, ctx: Context
) -> None:
    """A tick that dies after committing part of its changes is redone exactly by the next
    holder: the bucket documents say what was already summed."""
    clock = Clock(dt.datetime(2026, 3, 1, 9, 0, 0, tzinfo=dt.UTC))
    first, lease = stepper(ctx, isolated_db, clock)
    first.tick()
    rng = random.Random(5)
    events: list[Event] = []
    for _ in range(12):
        region, tags = rng.choice(["eu", "us"]), rng.sample([f"t{n}" for n in range(30)], 8)
        trends.track(ctx, isolated_db, region, tags, now=clock.now)
        events.append((clock.now, region, tags))
    monkeypatch.setattr(config, "ROLLUP_COMMIT_WRITES", 41)
    real_commit = lease.commit
    commits = {"n": 0}

    def crash_after_two_commits(batch: Any) -> list[Any]:
        commits["n"] += 1
        if commits["n"] > 2:
            raise RuntimeError("instance died mid-tick")
        return real_commit(batch)

    monkeypatch.setattr(lease, "commit", crash_after_two_commits)
    with pytest.raises(RuntimeError):
        first.tick()
    assert commits["n"] == 3
    successor, _ = stepper(ctx, isolated_db, clock)  # same owner: takes the lease at once
    successor.tick()
    scopes: list[tuple[str, str | None]] = [("eu", "eu"), ("us", "us"), ("global", None)]
    for scope, only in scopes:
        for window in kinds.WINDOWS:
            assert listed(isolated_db, scope, window) == expected(events, clock.now, window,
                                                                    only)
