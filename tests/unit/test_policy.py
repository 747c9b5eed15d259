"""Write policies: parsing a client's policy object and judging an increment against it."""

from __future__ import annotations

from typing import Any

import pytest
from counting.foundation import config
from counting.foundation.errors import InvalidArgument, PermissionDenied
from counting.writepath.policy import Policy, parse


def test_absent_fields_take_their_defaults() -> None:
    """An empty policy is the safe default: users, by exactly 1, not unique, no pacing."""
    assert parse({}) == Policy() == Policy(writers="users", by=(1, 1))
    assert parse({"unique": True}).to_document() == {
        "writers": "users", "by": [1, 1], "unique": True, "min_interval_s": 0}


@pytest.mark.parametrize("bad, field", [
    ([], "policy"), ({"votes": 1}, "policy.votes"), ({"writers": "anyone"}, "policy.writers"),
    ({"by": [2, 1]}, "policy.by"), ({"by": [1]}, "policy.by"), ({"by": [0, 1.5]}, "policy.by"),
    ({"by": [True, 1]}, "policy.by"), ({"by": [-config.MAX_ABS_BY - 1, 0]}, "policy.by"),
    ({"unique": 1}, "policy.unique"), ({"min_interval_s": -1}, "policy.min_interval_s"),
    ({"min_interval_s": config.MAX_MIN_INTERVAL_S + 1}, "policy.min_interval_s"),
    ({"min_interval_s": 1.0}, "policy.min_interval_s"),
])
def test_bad_policies_name_the_field(bad: Any, field: str) -> None:
    """Every malformed part is INVALID_ARGUMENT naming it; the bounds themselves are accepted."""
    with pytest.raises(InvalidArgument, match=f"^{field}[:.]"):
        parse(bad)
    parse({"by": [-config.MAX_ABS_BY, config.MAX_ABS_BY],
           "min_interval_s": config.MAX_MIN_INTERVAL_S})


def test_users_stay_in_the_by_range_and_admins_do_not_have_to() -> None:
    """Outside [min, max] a user is refused; an admin is not; writers=admins keeps users out."""
    policy = Policy(by=(1, 5))
    policy.check(5, admin=False, counter="c")
    with pytest.raises(PermissionDenied):
        policy.check(6, admin=False, counter="c")
    policy.check(1_000_000, admin=True, counter="c")
    with pytest.raises(PermissionDenied):
        Policy(writers="admins").check(1, admin=False, counter="c")


def test_unique_counters_take_one_or_minus_one_from_everyone() -> None:
    """Count me / uncount me, for admins too; the by range does not narrow it."""
    policy = Policy(unique=True)
    for by in (1, -1):
        policy.check(by, admin=False, counter="c")
    for admin in (False, True):
        with pytest.raises(InvalidArgument):
            policy.check(2, admin=admin, counter="c")


def test_stored_policies_that_cannot_be_read_are_the_default() -> None:
    """Counters from before policies (no field) and damaged fields behave as the default."""
    assert Policy.from_document(None) == Policy()
    assert Policy.from_document({"by": "all"}) == Policy()
    assert Policy.from_document({"unique": True}).unique
