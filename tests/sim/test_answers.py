"""Directed scenarios of issue 53: an operation of several commits never answers a code that says
"nothing was written" after one of them applied, and a retry of an admin operation's request_id
never applies it twice (docs/api.md, "What an answer promises")."""

from __future__ import annotations

import datetime as dt
from collections import deque

from counting.features import counter_refs, counters
from counting.features.sequences import days, documents, issuing, opening, resetting
from counting.foundation.errors import FailedPrecondition, OutcomeUnknown
from counting.writepath.policy import Policy
from google.api_core import exceptions as gexc

from tests.sim.faults import Fate
from tests.sim.test_late_landings import CALM_FATE, NAMES, Late, lost_in_flight

# Enough ABORTED answers (nothing applied) to outlast every resend of the commits that follow.
ABORTED_ALL = tuple(Fate(delay_us=20_000, refused=gexc.Aborted) for _ in range(60))


def test_a_reset_whose_forgetting_fails_is_unknown_and_its_retry_resets_once() -> None:
    """A unique counter counts u; an admin's reset takes the shards back, then every commit of
    its forgetting meets ABORTED: the answer is UNKNOWN with the request_id, never ABORTED. v
    likes after it; the retry with the same id only forgets: v's like stays, u may like again."""
    late = Late()
    counters.create_counter(late.ctx, late.db, "likes", shards=2, policy=Policy(unique=True))
    late.at(1)
    assert counters.increment(late.ctx, late.db, "likes", 1, uid="u", admin=False) is not None
    late.at(2)
    answer = late.run(lambda: counters.reset_counter(late.ctx, late.db, "likes", uid="admin",
                                                     request_id="r1"), CALM_FATE, *ABORTED_ALL)
    assert isinstance(answer, OutcomeUnknown), answer
    assert answer.request_id == "r1"
    assert late.counted("likes") == 0
    late.at(3)
    assert counters.increment(late.ctx, late.db, "likes", 1, uid="v", admin=False) is not None
    late.at(4)
    assert late.run(lambda: counters.reset_counter(late.ctx, late.db, "likes", uid="admin",
                                                   request_id="r1")) is None
    assert late.counted("likes") == 1  # v's like, after the reset: kept
    assert counters.increment(late.ctx, late.db, "likes", 1, uid="u", admin=False) is not None
    voter = counter_refs.voter_ref(late.db, NAMES, "likes", "v")
    assert (voter.get().to_dict() or {}).get("counted") is True


def test_a_sequence_reset_whose_record_fails_is_unknown_and_its_retry_resets_once() -> None:
    """A reset of a sequence applies, then recording it in `resets` meets ABORTED: UNKNOWN. A
    number is issued; the retry with the same id answers the same reset without a second one:
    the next number goes on from there, and `resets` holds one entry."""
    late = Late()
    late.run(lambda: opening.configure_sequence(late.ctx, late.db, "t", timezone="UTC"))
    late.at(1)
    for _ in range(3):
        late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    answer = late.run(lambda: resetting.reset_sequence(late.ctx, late.db, "t", uid="m",
                                                       request_id="r1"),
                      CALM_FATE, *ABORTED_ALL)
    assert isinstance(answer, OutcomeUnknown), answer
    late.at(2)
    first = late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    assert isinstance(first, documents.Ticket) and (first.number, first.epoch) == (1, 1)
    again = late.run(lambda: resetting.reset_sequence(late.ctx, late.db, "t", uid="m",
                                                      request_id="r1"))
    assert isinstance(again, documents.Reset) and again.epoch == 1
    second = late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    assert isinstance(second, documents.Ticket) and (second.number, second.epoch) == (2, 1)
    document = documents.sequence_ref(late.db, NAMES, "t").get().to_dict() or {}
    assert [(r["epoch"], r["issued_before"], r["by"]) for r in document["resets"]] == [
        (1, 3, "m")]


def test_a_reset_never_lands_in_the_next_business_day() -> None:
    """A tenant whose business day starts at 12:01 UTC (60 s into the run). A reset at 30 s is
    lost in flight (its first attempt lands 45 s later, in the next day); its resend applies in
    the day it was asked in. The next day's numbers run 1, 2, never restarted by the late one."""
    late = Late()
    late.run(lambda: opening.configure_sequence(late.ctx, late.db, "t", timezone="UTC",
                                                reset_time="12:01"))
    late.at(30)
    reset = late.run(lambda: resetting.reset_sequence(late.ctx, late.db, "t"),
                     lost_in_flight(45.0))
    assert isinstance(reset, documents.Reset), reset
    assert reset.business_day.isoformat() == "2026-02-28"
    late.at(61)
    first = late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    late.at(80)
    assert late.flying() == []  # the first attempt has landed
    second = late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    assert isinstance(first, documents.Ticket) and isinstance(second, documents.Ticket)
    assert [(t.business_day.isoformat(), t.epoch, t.number) for t in (first, second)] == [
        ("2026-03-01", 0, 1), ("2026-03-01", 0, 2)]


def test_a_configuration_whose_day_cannot_open_is_answered_in_force() -> None:
    """configure_sequence's rule commits; opening the day after it meets ABORTED. The rule is in
    force, and the answer says so; the first number opens the day."""
    late = Late()
    configured = late.run(lambda: opening.configure_sequence(
        late.ctx, late.db, "t", timezone="Asia/Tokyo", request_id="c1"),
        CALM_FATE, *ABORTED_ALL)
    assert isinstance(configured, days.SequenceConfig), configured
    late.at(1)
    ticket = late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    assert isinstance(ticket, documents.Ticket) and ticket.number == 1


def test_a_configure_retried_after_a_newer_one_writes_nothing() -> None:
    """Admin A configures with request_id c1; admin B configures after; A's retry of c1 (its
    answer lost, say) finds its marker and leaves B's policy in force."""
    late = Late()
    counters.create_counter(late.ctx, late.db, "c", shards=2)
    late.at(1)
    a, b = Policy(by=(1, 5)), Policy(by=(1, 9))
    counters.configure_counter(late.ctx, late.db, "c", a, uid="A", request_id="c1")
    late.at(2)
    counters.configure_counter(late.ctx, late.db, "c", b, uid="B")
    late.at(3)
    counters.configure_counter(late.ctx, late.db, "c", a, uid="A", request_id="c1")
    document = counter_refs.counter_ref(late.db, NAMES, "c").get().to_dict() or {}
    assert document["policy"] == b.to_document()


def test_a_lost_like_outlasting_nine_toggles_is_answered_applied_once() -> None:
    """u likes from one device; the first attempt applies but its answer is lost, and the next
    ones are refused for 3 s. Meanwhile u toggles 9 times from a second device, ending on an
    un-like. The first device's like, sent again, finds its nonce in the voter (kept 60 s, not
    the last 8): answered applied, never counted again over u's newer un-like."""
    late = Late()
    counters.create_counter(late.ctx, late.db, "likes", shards=2, policy=Policy(unique=True))
    late.at(1)
    done: list[object] = []
    late.model.draws.scripts["phone"] = deque([
        Fate(delay_us=20_000, lost=gexc.ServiceUnavailable),
        *(Fate(delay_us=20_000, refused=gexc.ServiceUnavailable) for _ in range(3))])
    phone = late.sim.spawn("phone", lambda: done.append(counters.increment(
        late.ctx, late.db, "likes", 1, uid="u", admin=False)))
    late.at(1.05)  # the first attempt applied; its answer was lost
    assert late.counted("likes") == 1
    for n in range(9):  # the second device: un-like, like, ... un-like
        late.at(1.1 + n * 0.1)
        counters.increment(late.ctx, late.db, "likes", -1 if n % 2 == 0 else 1, uid="u",
                           admin=False)
    while not phone.done:
        late.at(late.sim.monotonic() + 0.1)
    assert not late.sim.crashes, late.sim.crashes
    assert isinstance(done[0], dt.datetime), done  # applied, when the first attempt committed
    assert late.counted("likes") == 0


def test_a_reset_whose_day_closes_under_it_resets_nothing() -> None:
    """A tenant's day starts at 12:01 UTC (60 s). A reset reads the open day at 59.9 s; its
    commit takes a second, and the next day opens meanwhile (a number issued at 60.5 s). The
    commit fails on the closed day's open marker: FAILED_PRECONDITION, nothing reset, and the
    new day is not reset in its place (its numbers go on 1, 2)."""
    late = Late()
    late.run(lambda: opening.configure_sequence(late.ctx, late.db, "t", timezone="UTC",
                                                reset_time="12:01"))
    late.at(59.9)
    opened: list[object] = []
    late.sim.at(60_500_000, lambda: opened.append(
        issuing.next_number(Late().ctx, late.db, "t", now=late.sim.wall())))
    answer = late.run(lambda: resetting.reset_sequence(late.ctx, late.db, "t"),
                      Fate(delay_us=1_000_000))
    assert isinstance(answer, FailedPrecondition), answer
    second = late.run(lambda: issuing.next_number(late.ctx, late.db, "t"))
    assert [(t.business_day.isoformat(), t.epoch, t.number) for t in (*opened, second)
            if isinstance(t, documents.Ticket)] == [("2026-03-01", 0, 1), ("2026-03-01", 0, 2)]
