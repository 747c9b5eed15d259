"""Write policies through the real callables: safe defaults, unique counters, pacing, batches,
and who may read strongly, under racing requests of one user."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from callables import Callables, CallError, User, sign_up
from counting.features import counter_refs
from counting.foundation.config import Names
from google.cloud import firestore

from ..waiting import eventually

NAMES = Names()  # the collection ids of the default placement, which these run on


def status_of(client: Callables, name: str, **data: Any) -> str:
    with pytest.raises(CallError) as caught:
        client.call(name, **data)
    return caught.value.status


def strong(admin: Callables, counter: str) -> int:
    value: int = admin.call("get_count", counter=counter, consistency="strong")["count"]
    return value


def race(client: Callables, calls: int, name: str, **data: Any) -> list[str]:
    """`calls` identical requests at once; each one's outcome ("applied", "noop" or a code)."""
    def one(_: int) -> str:
        try:
            return "applied" if client.call(name, **data).get("applied") else "noop"
        except CallError as error:
            return error.status

    with ThreadPoolExecutor(calls) as pool:
        return list(pool.map(one, range(calls)))


def test_the_default_policy_lets_users_add_one(
    admin: Callables, user: Callables, suffix: str
) -> None:
    """Without a policy users may send only by = 1; admins may send any by."""
    counter = f"default-{suffix}"
    created = admin.call("create_counter", counter=counter, shards=2)
    assert created["policy"] == {"writers": "users", "by": [1, 1], "unique": False,
                                 "min_interval_s": 0}
    assert user.call("increment", counter=counter)["applied"]
    for by in (2, -1, 1_000_000_000):
        assert status_of(user, "increment", counter=counter, by=by) == "PERMISSION_DENIED"
    admin.call("increment", counter=counter, by=41)
    assert strong(admin, counter) == 42


def test_admins_configure_a_policy_that_replaces_the_old_one(
    admin: Callables, user: Callables, suffix: str
) -> None:
    """configure_counter is for admins, replaces the whole policy, and applies within seconds."""
    counter = f"configured-{suffix}"
    admin.call("create_counter", counter=counter, shards=2)
    policy = {"by": [1, 10]}
    assert status_of(user, "configure_counter", counter=counter,
                     policy=policy) == "PERMISSION_DENIED"
    assert status_of(admin, "configure_counter", counter=f"none-{suffix}",
                     policy=policy) == "NOT_FOUND"
    assert status_of(admin, "configure_counter", counter=counter,
                     policy={"by": [1, 10], "cap": 3}) == "INVALID_ARGUMENT"
    result = admin.call("configure_counter", counter=counter, policy=policy)
    assert result["policy"]["by"] == [1, 10] and result["policy"]["writers"] == "users"
    eventually(lambda: race(user, 1, "increment", counter=counter, by=7)[0] == "applied",
               timeout_s=15)
    admin.call("configure_counter", counter=counter, policy={"writers": "admins"})
    eventually(lambda: race(user, 1, "increment", counter=counter)[0] == "PERMISSION_DENIED",
               timeout_s=15)


def test_twelve_racing_likes_of_one_user_count_once(admin: Callables, suffix: str) -> None:
    """A unique counter counts a user once however many likes race; un-likes race back to 0,
    never below; `mine` follows."""
    counter = f"likes-{suffix}"
    admin.call("create_counter", counter=counter, shards=4, policy={"unique": True})
    fan = Callables(sign_up().id_token)
    outcomes = race(fan, 12, "increment", counter=counter)
    assert outcomes.count("applied") == 1 and outcomes.count("noop") == 11
    assert strong(admin, counter) == 1
    assert fan.call("get_count", counter=counter)["mine"] is True
    other = Callables(sign_up().id_token)
    assert other.call("get_count", counter=counter)["mine"] is False
    assert status_of(fan, "increment", counter=counter, by=2) == "INVALID_ARGUMENT"
    outcomes = race(fan, 12, "increment", counter=counter, by=-1)
    assert outcomes.count("applied") == 1
    assert strong(admin, counter) == 0
    assert fan.call("get_count", counter=counter)["mine"] is False
    assert not fan.call("increment", counter=counter, by=-1)["applied"]  # never below zero
    assert strong(admin, counter) == 0


def test_ten_racing_views_of_one_user_in_one_interval_apply_once(
    admin: Callables, suffix: str
) -> None:
    """A paced counter applies one of a user's racing views; the rest are RESOURCE_EXHAUSTED;
    another user and an admin are not held back by that user's pace."""
    counter = f"views-{suffix}"
    admin.call("create_counter", counter=counter, shards=4, policy={"min_interval_s": 60})
    viewer = Callables(sign_up().id_token)
    outcomes = race(viewer, 10, "increment", counter=counter)
    assert outcomes.count("applied") == 1
    assert outcomes.count("RESOURCE_EXHAUSTED") == 9
    assert status_of(viewer, "increment", counter=counter) == "RESOURCE_EXHAUSTED"
    Callables(sign_up().id_token).call("increment", counter=counter)
    admin.call("increment", counter=counter)
    admin.call("increment", counter=counter)
    assert strong(admin, counter) == 4


def test_retries_of_an_applied_paced_request_are_no_ops_not_too_soon(
    admin: Callables, db: firestore.Client, suffix: str
) -> None:
    """Racing deliveries of one request_id to a paced counter apply once and answer
    `applied: false`, both for a first visit (the marker created) and for a returning user (the
    marker rewritten)."""
    counter = f"paced-retries-{suffix}"
    admin.call("create_counter", counter=counter, shards=2, policy={"min_interval_s": 1})
    person = sign_up()
    viewer = Callables(person.id_token)
    first = race(viewer, 6, "increment", counter=counter, request_id=f"first-{suffix}")
    assert sorted(first) == ["applied"] + ["noop"] * 5
    # Once the server's clock is past the interval, the next visit rewrites the marker.
    marker = counter_refs.paced_ref(db, NAMES, counter, person.uid)
    eventually(lambda: (lambda seen: seen.read_time >= seen.update_time + dt.timedelta(seconds=1))(
        marker.get()))
    again = race(viewer, 6, "increment", counter=counter, request_id=f"again-{suffix}")
    assert sorted(again) == ["applied"] + ["noop"] * 5
    assert strong(admin, counter) == 2


def test_a_reset_forgets_who_was_counted_and_when(admin: Callables, suffix: str) -> None:
    """After reset_counter a unique counter counts nobody (an un-like cannot take it below zero,
    a like counts again) and a paced counter lets every user in at once."""
    likes, views = f"reset-likes-{suffix}", f"reset-views-{suffix}"
    admin.call("create_counter", counter=likes, shards=2, policy={"unique": True})
    admin.call("create_counter", counter=views, shards=2, policy={"min_interval_s": 600})
    fan = Callables(sign_up().id_token)
    assert fan.call("increment", counter=likes)["applied"]
    assert fan.call("increment", counter=views)["applied"]
    for counter in (likes, views):
        admin.call("reset_counter", counter=counter)
    assert fan.call("get_count", counter=likes)["mine"] is False
    assert not fan.call("increment", counter=likes, by=-1)["applied"]
    assert strong(admin, likes) == 0
    assert fan.call("increment", counter=likes)["applied"]
    assert strong(admin, likes) == 1
    assert fan.call("increment", counter=views)["applied"]
    assert strong(admin, views) == 1


def test_batches_follow_each_counters_policy(
    admin: Callables, user: Callables, suffix: str
) -> None:
    """A batch's per-counter sum must pass the policy; unique or paced counters stay out."""
    plain, ranged, liked = (f"{name}-{suffix}" for name in ("plain", "ranged", "liked"))
    admin.call("create_counter", counter=plain, shards=2)
    admin.call("create_counter", counter=ranged, shards=2, policy={"by": [1, 3]})
    admin.call("create_counter", counter=liked, shards=2, policy={"unique": True})
    assert user.call("increment", increments=[{"counter": ranged, "by": 1},
                                              {"counter": ranged, "by": 2},
                                              {"counter": plain}])["count"] == 3
    assert status_of(user, "increment", increments=[{"counter": ranged, "by": 2},
                                                    {"counter": ranged, "by": 2}]
                     ) == "PERMISSION_DENIED"
    assert status_of(admin, "increment", increments=[{"counter": liked}, {"counter": plain}]
                     ) == "INVALID_ARGUMENT"
    assert strong(admin, ranged) == 3 and strong(admin, plain) == 1 and strong(admin, liked) == 0


def test_strong_reads_are_for_admins(admin: Callables, plain_user: User, suffix: str) -> None:
    """A user reads the rollup; reading every shard is an admin's."""
    counter = f"strong-{suffix}"
    admin.call("create_counter", counter=counter, shards=3)
    user = Callables(plain_user.id_token)
    assert user.call("get_count", counter=counter)["consistency"] == "rollup"
    assert status_of(user, "get_count", counter=counter,
                     consistency="strong") == "PERMISSION_DENIED"
    assert admin.call("get_count", counter=counter, consistency="strong")["count"] == 0
