"""Write policies: who may increment a counter, by how much, how often, and whether each user
counts at most once. Stored on `counters/{id}.policy` (public, so clients can adapt), read by the
write path through its configuration cache, so enforcing a policy reads no shared document.

- `writers`: "users" (any signed-in user) or "admins".
- `by`: the [min, max] a non-admin may send (default [1, 1]); outside it PERMISSION_DENIED.
- `unique`: each user counts at most once (likes, votes). `by` is 1 (count me) or -1 (uncount me)
  for everyone, admins included, whatever the `by` range. A like creates the user's marker
  `counters/{id}/voters/{user}` blind, in the same commit as the shard write (or, when it
  exists, rewrites it `counted` at the version read); an un-like reads it first and applies only
  when it counts the user, rewriting it at the version read. So racing requests of one user
  apply once, and between resets a user adds 1 or nothing. This is no floor on the counter: an
  un-like that lands between a reset's commit and its forgetting the voters takes the count to
  -1 (docs/api.md, `reset_counter`).
- `min_interval_s`: a non-admin's applied increments are at least this many seconds apart
  (views), as Firestore stamps them. The user's marker `counters/{id}/paced/{user}` is not read
  first: every request's commit tries to create it blind, with the shard write (a first visit is
  one round trip). When it exists, that create fails and the marker is read (one per-user
  document, never a hot one): too soon after its `at` is RESOURCE_EXHAUSTED, otherwise a new
  commit rewrites it with a precondition on the version read, so of racing requests one
  applies.

Admins bypass `by` and `min_interval_s`, not `unique`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from counting.foundation import config
from counting.foundation.errors import InvalidArgument, PermissionDenied

Writers = Literal["users", "admins"]
WRITERS: tuple[Writers, ...] = ("users", "admins")
FIELDS = ("writers", "by", "unique", "min_interval_s")


@dataclass(frozen=True, kw_only=True)
class Policy:
    writers: Writers = "users"
    by: tuple[int, int] = (1, 1)
    unique: bool = False
    min_interval_s: int = 0

    @property
    def limits_batches(self) -> bool:
        """A batch may not touch the counter: its markers are per single increment."""
        return self.unique or self.min_interval_s > 0

    def to_document(self) -> dict[str, Any]:
        return {"writers": self.writers, "by": list(self.by), "unique": self.unique,
                "min_interval_s": self.min_interval_s}

    @classmethod
    def from_document(cls, data: object) -> Policy:
        """The stored policy; absent (counters made before policies) or unreadable parts take
        the defaults, so an old counter behaves as a new one with the default policy."""
        if not isinstance(data, dict):
            return cls()
        try:
            return parse(data)
        except InvalidArgument:
            return cls()

    def check(self, by: int, *, admin: bool, counter: str) -> None:
        """Whether this caller may send `by` (a single increment, or a batch's sum)."""
        if not admin and self.writers == "admins":
            raise PermissionDenied(f"counter: only admins may increment {counter!r}")
        if self.unique:
            if by not in (1, -1):
                raise InvalidArgument(f"by: {counter!r} counts each user once: send 1 (count me) "
                                      "or -1 (uncount me)")
            return
        low, high = self.by
        if not admin and not low <= by <= high:
            raise PermissionDenied(f"by: {counter!r} accepts {low}..{high} from users "
                                   f"(got {by})")


def parse(value: object, field: str = "policy") -> Policy:
    """A policy object from a client: absent fields take their defaults, unknown ones are
    refused."""
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field}: must be an object with {', '.join(FIELDS)}")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise InvalidArgument(f"{field}.{unknown[0]}: unknown field (known: {', '.join(FIELDS)})")
    writers = value.get("writers", "users")
    if writers not in WRITERS:
        raise InvalidArgument(f"{field}.writers: must be one of {', '.join(WRITERS)}")
    by = value.get("by", [1, 1])
    if (not isinstance(by, list | tuple) or len(by) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in by)
            or not -config.MAX_ABS_BY <= by[0] <= by[1] <= config.MAX_ABS_BY):
        raise InvalidArgument(f"{field}.by: must be [min, max], integers with "
                              f"-{config.MAX_ABS_BY:,} <= min <= max <= {config.MAX_ABS_BY:,}")
    unique = value.get("unique", False)
    if not isinstance(unique, bool):
        raise InvalidArgument(f"{field}.unique: must be true or false")
    interval = value.get("min_interval_s", 0)
    if (not isinstance(interval, int) or isinstance(interval, bool)
            or not 0 <= interval <= config.MAX_MIN_INTERVAL_S):
        raise InvalidArgument(f"{field}.min_interval_s: must be an integer of "
                              f"0..{config.MAX_MIN_INTERVAL_S}")
    return Policy(writers=writers, by=(by[0], by[1]), unique=unique, min_interval_s=interval)
