"""Directed scenarios of issue 41: an attempt that lands late, after newer writes, never undoes
them, and an answer given for a request_id is never contradicted by an attempt still in flight.

A commit lands late only when its caller is an actor (a commit from code that is no actor's
lands at once), so each late call runs in one (`Late.run`), on the virtual clock, with the
fates of its attempts scripted; what happens around it runs as no actor's, at the instant set.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import Callable
from typing import TypeVar, cast

import pytest
from counting.features import counter_refs, counters
from counting.features.context import Context
from counting.features.sequences import days, documents, opening
from counting.features.trends import tracking
from counting.foundation.clock import Clock
from counting.foundation.config import Names, Protections
from counting.foundation.errors import OutcomeUnknown, PermissionDenied, ResourceExhausted
from counting.writepath import partitions, shards, waking
from counting.writepath.context import Writing
from counting.writepath.policy import Policy
from google.api_core import exceptions as gexc
from google.cloud import firestore

from tests.sim import protections
from tests.sim.faults import CALM, Fate
from tests.sim.model import Client, Model
from tests.sim.virtual import Sim

NAMES = Names()
T = TypeVar("T")


class Late:
    """One process on the virtual clock (its resends pause in virtual time) over the model."""

    def __init__(self, protected: Protections = protections.ALL) -> None:
        self.sim = Sim(random.Random(1))
        self.model = Model(self.sim, random.Random(2), CALM)
        self.db = cast(firestore.Client, Client(self.model))
        self.clock = Clock(monotonic=self.sim.monotonic, now=self.sim.wall, sleep=self.sim.wait)
        self.ctx = Context.of(Writing(known=partitions.Known(monotonic=self.sim.monotonic),
                                      waker=waking.Never(), rng=random.Random(4),
                                      protections=protected, clock=self.clock))

    def at(self, seconds: float) -> None:
        """Step the clock to `seconds`, landing every attempt due by then."""
        self.sim.run_until(seconds)

    def run(self, call: Callable[[], T], *fates: Fate) -> T | BaseException:
        """`call` in an actor whose next commit attempts meet `fates` (then calm ones), run
        until it answers: its result, or what it raised. Attempts still in flight keep flying."""
        self.model.draws.script.extend(fates)
        done: list[T | BaseException] = []

        def body() -> None:
            try:
                done.append(call())
            except Exception as error:
                done.append(error)

        actor = self.sim.spawn("late", body)
        while not actor.done:
            self.sim.run_until(self.sim.monotonic() + 0.1)
        self.model.draws.script.clear()
        assert not self.sim.crashes, self.sim.crashes
        return done[0]

    def flying(self) -> list[list[str]]:
        """The paths each attempt still in flight writes."""
        return [["/".join(write.path) for write in attempt.writes]
                for attempt in self.model.attempts
                if attempt.fate.refused is None and attempt.due_us > self.sim.now_us]

    def counted(self, counter: str) -> int:
        return counters.get_count(self.db, NAMES, counter, "strong").count


def lost_in_flight(landing_s: float) -> Fate:
    """An attempt whose caller hears UNAVAILABLE while it flies on, to land `landing_s` later."""
    return Fate(delay_us=round(landing_s * 1_000_000), lost=gexc.ServiceUnavailable,
                lost_before=True)


CALM_FATE = Fate(delay_us=20_000)
# Enough refusals (nothing applied) to outlast a guarded commit's RESEND_FOR_S of resends.
REFUSED_ALL_WINDOW = tuple(Fate(delay_us=20_000, refused=gexc.ServiceUnavailable)
                           for _ in range(60))


def reset_with_a_late_forget(
    late: Late, counter: str, policy: Policy,
    marker: Callable[[firestore.Client, Names, str, str], firestore.DocumentReference],
) -> None:
    """User u writes `counter` at 1 s; an admin resets it at 2 s, the forgetting of u's marker
    lost in flight (the library's resend applies); u writes again (the reset let them), and the
    first attempt of the forget lands 17 s later, by 25 s."""
    counters.create_counter(late.ctx, late.db, counter, shards=2, policy=policy)
    late.at(1)
    assert counters.increment(late.ctx, late.db, counter, 1, uid="u", admin=False) is not None
    late.at(2)
    reset = late.run(lambda: counters.reset_counter(late.ctx, late.db, counter),
                     CALM_FATE, lost_in_flight(17.0))
    assert reset is None
    assert late.flying() == [[marker(late.db, NAMES, counter, "u").path]]  # the forget's attempt
    assert counters.increment(late.ctx, late.db, counter, 1, uid="u", admin=False) is not None
    late.at(25)
    assert late.flying() == []  # it has landed


def test_a_resets_late_forget_never_uncounts_a_newer_like() -> None:
    """A unique counter's user likes; an admin resets; the reset's commit forgetting its voters
    is lost in flight, the library's resend applies, and the first attempt lands 17 s later,
    after the user liked again. The user's next like changes nothing: one count, as promised."""
    late = Late()
    reset_with_a_late_forget(late, "likes", Policy(unique=True), counter_refs.voter_ref)
    assert counters.increment(late.ctx, late.db, "likes", 1, uid="u", admin=False) is None
    late.at(26)
    assert late.counted("likes") == 1
    voter = counter_refs.voter_ref(late.db, NAMES, "likes", "u")
    assert (voter.get().to_dict() or {}).get("counted") is True


@pytest.mark.parametrize("protected", [True, False])
def test_a_refusal_is_final_for_an_attempt_still_in_flight(protected: bool) -> None:
    """An increment with a request_id is answered UNKNOWN while its first attempt flies on; an
    admin narrows the counter's `by`; the retry with the same id is refused. When the first
    attempt lands, it counts nothing: the refusal fenced it (`final_answers`; off, it counts)."""
    late = Late(protections.ALL if protected else protections.alone_off("final_answers"))
    counters.create_counter(late.ctx, late.db, "bounded", shards=2, policy=Policy(by=(1, 10)))
    late.at(1)
    unknown = late.run(
        lambda: counters.increment(late.ctx, late.db, "bounded", 5, request_id="r1", uid="u",
                                   admin=False),
        lost_in_flight(25.0), *REFUSED_ALL_WINDOW)
    assert isinstance(unknown, OutcomeUnknown), unknown
    assert unknown.request_id == "r1"
    [first] = late.flying()  # the increment's first attempt: its marker and a shard
    assert any(path.startswith(counter_refs.counter_ref(late.db, NAMES, "bounded").path + "/")
               for path in first)
    counters.configure_counter(late.ctx, late.db, "bounded", Policy(by=(1, 1)))
    late.at(late.sim.monotonic() + 0.1)
    late.ctx.configs.forget("bounded")
    with pytest.raises(PermissionDenied):
        counters.increment(late.ctx, late.db, "bounded", 5, request_id="r1", uid="u",
                           admin=False)
    assert late.flying() == [first]  # refused before the first attempt landed
    late.at(40)
    assert late.flying() == []
    assert late.counted("bounded") == (0 if protected else 5)
    if not protected:
        return
    with pytest.raises(PermissionDenied):  # and it is given again
        counters.increment(late.ctx, late.db, "bounded", 5, request_id="r1", uid="u",
                           admin=False)
    # ... even once the policy would take it, and whatever else it would now be refused for:
    # with the first refusal's words.
    for t, widest in ((41, 10), (43, 2)):
        late.at(t)
        counters.configure_counter(late.ctx, late.db, "bounded", Policy(by=(1, widest)))
        late.at(t + 1)
        late.ctx.configs.forget("bounded")
        with pytest.raises(PermissionDenied, match="accepts 1..1"):
            counters.increment(late.ctx, late.db, "bounded", 5, request_id="r1", uid="u",
                               admin=False)
    assert late.counted("bounded") == 0


def test_a_late_configure_never_reverts_a_newer_policy() -> None:
    """Admin A's configure_counter is lost in flight (A is answered by a resend); admin B's
    configure commits; A's first attempt lands after it. The policy in force is B's."""
    late = Late()
    counters.create_counter(late.ctx, late.db, "c", shards=2)
    late.at(1)
    a, b = Policy(by=(1, 5)), Policy(by=(1, 9))
    configured = late.run(lambda: counters.configure_counter(late.ctx, late.db, "c", a),
                          lost_in_flight(40.0))
    assert configured == a
    counter = counter_refs.counter_ref(late.db, NAMES, "c")
    assert late.flying() == [[counter.path]]  # A's first attempt
    late.at(late.sim.monotonic() + 0.1)
    counters.configure_counter(late.ctx, late.db, "c", b)
    late.at(60)
    assert late.flying() == []
    document = counter.get().to_dict() or {}
    assert document["policy"] == b.to_document()


def test_a_late_configure_sequence_never_reverts_a_newer_rule() -> None:
    """Admin A's configure_sequence is lost in flight (A is answered by a resend); admin B's
    commits; A's first attempt lands after it. The tenant's timezone and reset time are B's."""
    late = Late()
    late.run(lambda: opening.configure_sequence(late.ctx, late.db, "t", timezone="UTC"))
    late.at(1)
    configured = late.run(lambda: opening.configure_sequence(
        late.ctx, late.db, "t", timezone="Europe/Paris", reset_time="06:00"),
        lost_in_flight(40.0))
    assert isinstance(configured, days.SequenceConfig), configured
    tenant = documents.sequence_ref(late.db, NAMES, "t")
    assert late.flying() == [[tenant.path]]  # A's first attempt
    late.at(late.sim.monotonic() + 0.1)
    late.run(lambda: opening.configure_sequence(late.ctx, late.db, "t",
                                                timezone="America/New_York", reset_time="04:00"))
    late.at(60)
    assert late.flying() == []
    document = tenant.get().to_dict() or {}
    assert (document["timezone"], document["reset_time"]) == ("America/New_York", "04:00")


def test_a_resets_late_forget_never_winds_back_a_newer_visit() -> None:
    """A counter pacing each user to one visit a minute counts a visit; an admin resets it; the
    reset's commit forgetting the pacing marker is lost in flight, the library's resend applies,
    and the user visits again (the reset let them in); the first attempt lands 17 s later. It
    winds nothing back: the user's next visit, within the minute, is too soon."""
    late = Late()
    reset_with_a_late_forget(late, "views", Policy(min_interval_s=60), counter_refs.paced_ref)
    with pytest.raises(ResourceExhausted):
        counters.increment(late.ctx, late.db, "views", 1, uid="u", admin=False)
    late.at(26)
    assert late.counted("views") == 1


@pytest.mark.parametrize(("landing_s", "counted"), [(25.0, 0), (40.0, 5)])
def test_a_refusal_whose_tombstone_is_lost_is_unknown_until_a_retry(landing_s: float,
                                                                    counted: int) -> None:
    """An increment with a request_id is refused (too large), but the commit of its tombstone
    (`shards.answer_final`) is lost in flight for the whole resend window: UNKNOWN, naming the
    request_id, never the refusal. An admin widens the counter's `by`; the retry at 30 s gets
    the answer of whichever lands first: refused when the tombstone landed before it (26 s),
    applied when it lands after (41 s, failing on the retry's marker). Asked again, the same."""
    late = Late()
    counters.create_counter(late.ctx, late.db, "bounded", shards=2, policy=Policy(by=(1, 1)))
    late.at(1)

    def bump() -> dt.datetime | None:
        return counters.increment(late.ctx, late.db, "bounded", 5, request_id="r1", uid="u",
                                  admin=False)

    unknown = late.run(bump, lost_in_flight(landing_s), *REFUSED_ALL_WINDOW)
    assert isinstance(unknown, OutcomeUnknown), unknown
    assert unknown.request_id == "r1"
    tombstone = shards.request_marker_ref(late.db, NAMES, "u", "r1")
    assert late.flying() == [[tombstone.path]]  # the tombstone's first attempt
    counters.configure_counter(late.ctx, late.db, "bounded", Policy(by=(1, 10)))
    late.at(30)
    late.ctx.configs.forget("bounded")
    retried = late.run(bump)
    late.at(45)
    assert late.flying() == []
    again = late.run(bump)
    if counted:
        assert isinstance(retried, dt.datetime) and again is None, (retried, again)
    else:
        for answer in (retried, again):  # with the first refusal's words
            assert isinstance(answer, PermissionDenied) and "accepts 1..1" in str(answer)
    assert late.counted("bounded") == counted


@pytest.mark.parametrize("skew_s", [2.0, -2.0])
def test_pacing_is_measured_on_firestores_clock_not_the_instances(skew_s: float) -> None:
    """A process whose clock is 2 s off Firestore's (ahead, behind) paces a user's visits to a
    counter of one a minute: a visit 59.5 s after the last is too soon, one 61 s after counts."""
    # The model's unary read answers without a read time, as GetDocument does: the old pacing
    # read (unary, the instance's clock less 0.1 s standing in for the read time) fails here.
    late = Late()
    skewed = Clock(monotonic=late.sim.monotonic, sleep=late.sim.wait,
                   now=lambda: late.sim.wall() + dt.timedelta(seconds=skew_s))
    ctx = Context.of(dataclasses.replace(late.ctx.writing, clock=skewed))
    counters.create_counter(ctx, late.db, "views", shards=2, policy=Policy(min_interval_s=60))
    late.at(1)
    assert counters.increment(ctx, late.db, "views", 1, uid="u", admin=False) is not None
    late.at(60.5)
    with pytest.raises(ResourceExhausted):
        counters.increment(ctx, late.db, "views", 1, uid="u", admin=False)
    assert ctx.returning.get("views") is True  # the next visit reads the marker first
    late.at(60.9)
    with pytest.raises(ResourceExhausted):
        counters.increment(ctx, late.db, "views", 1, uid="u", admin=False)
    late.at(62)
    assert counters.increment(ctx, late.db, "views", 1, uid="u", admin=False) is not None
    late.at(63)
    assert late.counted("views") == 2


def test_tracks_unknown_names_the_request_id_sent() -> None:
    """A track whose commit is never answered within the resend window is UNKNOWN, naming the
    request_id the client sent (which it may retry with), not the marker's key."""
    late = Late()
    late.at(1)
    unknown = late.run(
        lambda: tracking.track(late.ctx, late.db, "eu", ["a", "b"], request_id="r1", uid="u"),
        lost_in_flight(30.0), *REFUSED_ALL_WINDOW)
    assert isinstance(unknown, OutcomeUnknown), unknown
    assert unknown.request_id == "r1"
