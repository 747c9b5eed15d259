"""Extension counters' logic: the declaration and its bounds, what each document of the
extension's layout holds, the generated rules, one process's moves, and a move over the
simulation's model of Firestore (late, resent, beside a client's write)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest
from counting.features import declarations, extension
from counting.features.collections import (
    MAX_EXTENSION_AMOUNT,
    Declaration,
    Extension,
    ensure_counter,
    whole,
)
from counting.features.extension import backfilling, moving, sweeping
from counting.foundation import config
from counting.foundation.config import Names, Placement
from counting.foundation.errors import InvalidArgument
from google.api_core import exceptions as gexc
from google.cloud import firestore

from tests.sim.faults import Fate
from tests.sim.test_late_landings import Late, lost_in_flight
from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
NAMES = Names()
T = TypeVar("T")
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)
VISITS = next(d for d in OWN.declarations if d.extension is not None)
assert VISITS.extension is not None
FIELD = VISITS.extension
PAGE, SHARD, PARTIAL = "page", "shard", "partial"


def visits(kind: str, data: dict[str, Any] | None) -> int:
    """What one document of the layout holds: the page's or a shard's field, a partial's
    updates."""
    return FIELD.amount(data or {}, partial=kind == PARTIAL)


def test_the_demo_declares_visits_over_pages() -> None:
    assert VISITS.counter == "visits:{page}"
    assert VISITS.shards == "pages/{page}/_counter_shards_/{_shard_}"
    assert VISITS.extension == Extension(field="visits", by=(-1, 1), create_documents=True)
    assert [w.function_name for w in OWN.watches if w.extension_shards] == [
        "count_pages_counter_shards"]


def test_a_document_a_shard_and_a_partial_each_hold_their_part_of_the_total() -> None:
    assert visits(PAGE, {"visits": 10, "title": "home"}) == 10
    assert visits(SHARD, {"visits": 3}) == 3
    assert visits(PARTIAL, {"_updates_": [{"_id_": "a", "_data_": {"visits": 5}},
                                          {"_id_": "b", "_data_": {"visits": -3, "x": 1}}]}) == 2
    # What is not an integer the counters can hold counts nothing (the rules refuse it).
    for odd in (1.5, "3", True, None, [1], {"n": 1}, MAX_EXTENSION_AMOUNT + 1):
        assert visits(SHARD, {"visits": odd}) == 0, odd
    assert visits(SHARD, {"visits": MAX_EXTENSION_AMOUNT}) == MAX_EXTENSION_AMOUNT
    assert visits(SHARD, None) == 0
    assert visits(PARTIAL, {"_updates_": "x"}) == 0
    assert visits(PARTIAL, {"visits": 4}) == 0  # a partial's amounts are its updates'
    # Every entry, however many (a move that took fewer would take the rest again).
    many = [{"_id_": str(n), "_data_": {"visits": 1}} for n in range(40_000)]
    assert visits(PARTIAL, {"_updates_": many}) == 40_000


def test_a_dotted_field_is_read_inside_maps() -> None:
    nested = Extension(field="stats.likes", by=(0, 1))
    assert nested.amount({"stats": {"likes": 4, "other": 1}}, partial=False) == 4
    assert nested.amount({"stats": 4}, partial=False) == 0
    assert nested.amount({"_updates_": [{"_data_": {"stats": {"likes": 2}}}]}, partial=True) == 2
    assert nested.nested(7) == {"stats": {"likes": 7}}


@pytest.mark.parametrize(("field", "by"), [
    ("", (0, 1)), ("a..b", (0, 1)), ("1a", (0, 1)), ("_updates_", (0, 1)), ("a-b", (0, 1)),
    (".".join("a" * 9), (0, 1)), ("a" * 65, (0, 1)),
    ("v", (1, 0)), ("v", (0, 0)), ("v", (0, config.MAX_ABS_BY + 1)),
    ("v", (-config.MAX_ABS_BY - 1, 0)), ("v", (0.5, 1)), ("v", (True, 1)),
])
def test_an_extension_out_of_bounds_is_refused(field: str, by: tuple[Any, Any]) -> None:
    with pytest.raises(InvalidArgument):
        Extension(field=field, by=by)


def test_the_bounds_themselves_are_accepted() -> None:
    Extension(field=".".join("a" * 8), by=(-config.MAX_ABS_BY, config.MAX_ABS_BY))
    Extension(field="a" * 64, by=(0, 1))


@pytest.mark.parametrize("fields", [
    {"counter": "visits:{page}", "documents": "pages/{page}", "sum": "n"},
    {"counter": "visits:{status}", "documents": "pages/{page}", "group_by": "status"},
    {"counter": "visits:{site}", "documents": "sites/{site}/pages/{page}"},
    {"counter": "visits:{page}", "documents": "a/{x}/_counter_shards_/{page}"},
])
def test_an_extension_counter_is_one_per_document(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument, match="extension"):
        Declaration(**fields, extension=Extension(field="visits", by=(0, 1)))


@pytest.mark.parametrize("raw", [
    {"field": "visits"}, {"field": "visits", "by": [0]}, {"field": 3, "by": [0, 1]},
    {"field": "visits", "by": [0, 1], "more": 1}, [0, 1], "visits",
    {"field": "visits", "by": [0, 1], "create_documents": "yes"},
])
def test_the_file_refuses_a_malformed_extension(raw: Any) -> None:
    entry = {"counter": "visits:{page}", "documents": "pages/{page}", "extension": raw}
    with pytest.raises(InvalidArgument, match="entry 1"):
        declarations.parse(json.dumps([entry]), Placement())


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def told(path: str, at_s: float) -> extension.Written:
    """A shard state an event told of, written at `at_s` (seconds past EPOCH)."""
    ref = cast(firestore.DocumentReference, SimpleNamespace(path=path))
    return extension.Written(ref=ref, data={"visits": 1},
                             update_time=EPOCH + dt.timedelta(seconds=at_s))


def test_a_process_moves_a_document_at_most_once_a_second() -> None:
    time = FakeTime()
    moves: list[tuple[str, float, list[str]]] = []

    def do(path: str, written: list[extension.Written], _: Any) -> extension.Moved:
        moves.append((path, time.now, [w.ref.path for w in written]))
        return extension.Moved(read_at=EPOCH + dt.timedelta(seconds=time.now))

    movers = extension.Movers(do, monotonic=time.monotonic, sleep=time.sleep)
    movers.after_write("pages/a", told("s1", 99))
    movers.after_write("pages/a", told("s2", 100.2))  # waits for the next second
    movers.after_write("pages/b", told("s3", 101))  # another document does not wait
    assert moves == [("pages/a", 100.0, ["s1"]), ("pages/a", 101.0, ["s2"]),
                     ("pages/b", 101.0, ["s3"])]
    # A write that a move of this process read already: nothing to wait for.
    movers.after_write("pages/a", told("s4", 100.5))
    assert len(moves) == 3
    movers.after_write("pages/a", told("s5", 101.5))
    assert moves[3:] == [("pages/a", 102.0, ["s5"])]


def test_in_the_background_each_caller_returns_at_once_and_a_burst_shares_moves() -> None:
    """`background` (the emulator, which delivers a function's events one at a time): each
    caller returns at once, and threads wait in their place for moves that take the burst's
    states in at most two commits, as concurrent requests would."""
    release = threading.Event()
    moves: list[list[str]] = []

    def do(path: str, written: list[extension.Written], _: Any) -> extension.Moved:
        release.wait(5)
        moves.append(sorted(w.ref.path for w in written))
        return extension.Moved()

    movers = extension.Movers(do, every_s=0.05, background=True)
    for n in range(5):
        movers.after_write("pages/a", told(f"s{n}", n))
    assert moves == []  # no caller waited for a move
    release.set()
    eventually(lambda: sorted(s for m in moves for s in m) == [f"s{n}" for n in range(5)],
               timeout_s=5)
    assert len(moves) <= 2


def moves_begun(do: Callable[..., extension.Moved],
           started: threading.Event) -> tuple[extension.Movers, threading.Thread]:
    """Movers over `do`, and a first caller (state s0) whose move has begun (`do` sets
    `started`)."""
    time = FakeTime()
    movers = extension.Movers(do, monotonic=time.monotonic, sleep=time.sleep)
    first = threading.Thread(target=movers.after_write, args=("pages/a", told("s0", 1)))
    first.start()
    started.wait(5)
    return movers, first


def test_callers_during_a_move_wait_for_the_next_one_and_share_it() -> None:
    """A caller arriving while a move runs waits for a move that begins after it; callers
    arriving together share that one, which takes every state they handed in."""
    started, release = threading.Event(), threading.Event()
    moves: list[list[str]] = []

    def do(path: str, written: list[extension.Written], _: Any) -> extension.Moved:
        moves.append(sorted(w.ref.path for w in written))
        if len(moves) == 1:
            started.set()
            release.wait(5)
        return extension.Moved()

    movers, first = moves_begun(do, started)
    later = [threading.Thread(target=movers.after_write, args=("pages/a", told(f"s{n}", 2)))
             for n in range(1, 6)]
    for thread in later:
        thread.start()
    time_to_queue = threading.Event()
    time_to_queue.wait(0.2)
    release.set()
    for thread in [first, *later]:
        thread.join(5)
    assert moves == [["s0"], ["s1", "s2", "s3", "s4", "s5"]]


def test_a_caller_returns_once_a_move_of_a_running_loop_read_its_state() -> None:
    """A caller arriving while another's moves loop (up to MOVE_FOR_S) returns as soon as one
    of those moves read its state, not after the loop: a request never waits out two loops."""
    started, read, finish = threading.Event(), threading.Event(), threading.Event()

    def do(path: str, written: list[extension.Written],
           on_move: Callable[[extension.Moved], None]) -> extension.Moved:
        started.set()
        read.wait(5)
        on_move(extension.Moved(read_at=EPOCH + dt.timedelta(seconds=3)))
        finish.wait(5)
        return extension.Moved()

    movers, first = moves_begun(do, started)
    later = threading.Thread(target=movers.after_write, args=("pages/a", told("s1", 2)))
    later.start()
    read.set()
    later.join(5)
    assert not later.is_alive() and first.is_alive()  # the loop goes on; its caller waits
    finish.set()
    first.join(5)


def test_a_failed_move_is_logged_and_the_next_caller_moves_again() -> None:
    calls: list[str] = []

    def do(path: str, written: list[extension.Written], _: Any) -> extension.Moved:
        calls.append(path)
        if len(calls) == 1:
            raise RuntimeError("unavailable")
        return extension.Moved()

    movers = extension.Movers(do, sleep=lambda s: None)
    movers.after_write("pages/a", told("s1", 1))
    movers.after_write("pages/a", told("s1", 1))
    assert calls == ["pages/a", "pages/a"]


# --- Moves over the simulation's model ------------------------------------------------------------


def layout(late: Late) -> firestore.DocumentReference:
    """A page holding 10 (which its counter holds, as after a backfill), a quiet shard 3, a
    busy shard 4 and a partial 2 (19 in all), and a shard of another counter."""
    page = late.db.collection("pages").document("p1")
    page.set({"visits": 10, "title": "home"})
    late.at(1)
    assert act(late, lambda: extension.backfill(late.ctx, late.db, VISITS)).deltas == {
        "visits:p1": 10}
    shards = page.collection("_counter_shards_")
    shards.document("quiet").set({"visits": 3})
    shards.document("\tqui").set({"_updates_": [{"_id_": "u1", "_data_": {"visits": 2}}]})
    shards.document("other").set({"visits": 0, "likes": 5})  # another counter's: untouched
    late.at(9.5)
    shards.document("busy").set({"visits": 3})
    late.at(10)
    shards.document("busy").update({"visits": firestore.Increment(1)})  # written twice
    return page


def act(late: Late, call: Callable[[], T]) -> T:
    """`call` as a process does it (its commits land before its next read)."""
    done = late.run(call)
    assert not isinstance(done, BaseException), done
    return done


def total(page: firestore.DocumentReference) -> int:
    """The extension's sum: the page's field, every shard's, every partial's updates."""
    found = visits(PAGE, page.get().to_dict())
    for shard in page.collection("_counter_shards_").stream():
        found += visits(PARTIAL if shard.id.startswith("\t") else SHARD, shard.to_dict())
    return found


def counted(late: Late) -> int:
    return late.counted("visits:p1")


def fields(page: firestore.DocumentReference) -> dict[str, Any]:
    return {s.id: s.to_dict() for s in page.collection("_counter_shards_").stream()}


def test_a_move_takes_every_amount_into_the_document_and_the_counter() -> None:
    late = Late()
    page = layout(late)
    assert (counted(late), total(page)) == (10, 19)
    late.at(10.5)
    done = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    late.at(11)
    # The busy shard (written 0.5 s ago) is deleted too: its device's next write creates it
    # again, and fires a trigger. "other" holds only another counter's field: untouched.
    assert (done.shards, done.deleted, done.left, done.amounts) == (3, 3, 0, {"visits:p1": 9})
    assert page.get().to_dict() == {"visits": 19, "title": "home"}
    assert fields(page) == {"other": {"visits": 0, "likes": 5}}
    assert (counted(late), total(page)) == (19, 19)


def test_a_shard_holding_another_field_gives_its_amount_guarded() -> None:
    """A shard holding an undeclared field beside the declared one keeps it: its amount is taken
    by an increment of minus it, guarded by the version read, so a second mover that read the
    same version takes nothing (no device sees more than was written)."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    shard = page.collection("_counter_shards_").document("mixed")
    shard.set({"visits": 3, "likes": 5})
    late.at(1)
    first = late.run(lambda: extension.move(late.ctx, late.db, page, [VISITS]),
                     Fate(delay_us=300_000))
    second = late.run(lambda: extension.move(late.ctx, late.db, page, [VISITS]),
                      Fate(delay_us=300_000))
    late.at(5)
    assert isinstance(first, extension.Moved) and isinstance(second, extension.Moved)
    assert first.amounts.get("visits:p1", 0) + second.amounts.get("visits:p1", 0) == 3
    assert fields(page) == {"mixed": {"visits": 0, "likes": 5}}
    assert (page.get().to_dict() or {})["visits"] == 3
    assert (counted(late), total(page)) == (3, 3)


def test_a_shard_written_once_is_deleted_however_fresh() -> None:
    """A device's first write since its shard was deleted: the move deletes it (the device's next
    write creates it again, which fires a trigger); zeroing it would leave an update no trigger
    sees."""
    late = Late()
    page = layout(late)
    late.at(12.5)
    fresh = page.collection("_counter_shards_").document("fresh")
    fresh.set({"visits": firestore.Increment(1)}, merge=True)
    late.at(12.7)
    done = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    late.at(13)
    assert (done.deleted, done.left, done.amounts) == (4, 0, {"visits:p1": 10})
    assert "fresh" not in fields(page) and "busy" not in fields(page)
    assert (counted(late), total(page)) == (20, 20)


def test_the_sweep_past_its_bound_takes_the_rest_in_later_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """More shards than one run reads (SWEEP_MAX_SHARDS, 3 here): each run moves the pages of
    the shards it read (all of each page's), and the runs after it take the rest."""
    monkeypatch.setattr(sweeping, "SWEEP_MAX_SHARDS", 3)
    late = Late()
    pages = [late.db.collection("pages").document(f"p{n}") for n in range(4)]
    for page in pages:
        for shard in ("a", "b"):
            page.collection("_counter_shards_").document(shard).set({"visits": 1})
    late.at(5)
    runs = []
    while any(fields(page) for page in pages):
        runs.append(act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS])).shards)
        late.at(5 + len(runs))
        assert len(runs) <= 4
    assert sum(runs) == 8 and len(runs) > 1
    assert [(page.get().to_dict() or {}).get("visits") for page in pages] == [2, 2, 2, 2]
    assert [late.counted(f"visits:p{n}") for n in range(4)] == [2, 2, 2, 2]


def test_an_amount_it_cannot_count_is_left_in_its_shard() -> None:
    """An integer beyond MAX_EXTENSION_AMOUNT (an admin's write; the rules refuse it) counts
    nothing, so its shard is never deleted: the amount stays where it was written."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    shards = page.collection("_counter_shards_")
    shards.document("huge").set({"visits": MAX_EXTENSION_AMOUNT + 1})
    shards.document("a").set({"visits": 2})
    late.at(5)
    done = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    assert (done.deleted, done.amounts) == (1, {"visits:p1": 2})
    assert fields(page) == {"huge": {"visits": MAX_EXTENSION_AMOUNT + 1}}


def test_shards_that_stay_do_not_hide_the_ones_after_them_from_the_sweep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards the sweep never removes (another app's, first in path order) fill a run's query:
    the next run reads on from where it stopped, and reaches the page after them."""
    monkeypatch.setattr(sweeping, "SWEEP_MAX_SHARDS", 3)
    late = Late()
    for n in range(3):
        late.db.collection("apps").document("x").collection("_counter_shards_").document(
            f"s{n}").set({"visits": 1})
    page = late.db.collection("pages").document("p1")
    page.collection("_counter_shards_").document("a").set({"visits": 2})
    late.at(5)
    for run in range(3):
        act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
        late.at(6 + run)
    assert fields(page) == {} and late.counted("visits:p1") == 2
    assert len(fields(late.db.collection("apps").document("x"))) == 3  # not ours: left


def likes_and_views(likes: str, views_by: tuple[int, int]) -> list[Declaration]:
    """Two declarations over `posts/{post}`: likes (at the field `likes`) and views."""
    return [Declaration(counter="likes:{post}", documents="posts/{post}",
                        extension=Extension(field=likes, by=(0, 1))),
            Declaration(counter="views:{post}", documents="posts/{post}",
                        extension=Extension(field="views", by=views_by))]


def test_one_move_takes_two_counters_of_the_same_shards() -> None:
    """Two declarations over the same documents (a dotted field and a plain one): one move takes
    each field of each shard into its own field of the document and its own counter."""
    two = likes_and_views("stats.likes", (1, 5))
    late = Late()
    post = late.db.collection("posts").document("p1")
    post.set({"stats": {"likes": 1, "shares": 4}, "title": "hi"})
    shards = post.collection("_counter_shards_")
    shards.document("a").set({"stats": {"likes": 2}, "views": 3})
    shards.document("b").set({"views": 4})
    late.at(1)
    done = act(late, lambda: extension.move(late.ctx, late.db, post, two))
    late.at(2)
    assert (done.deleted, done.amounts) == (2, {"likes:p1": 2, "views:p1": 7})
    assert post.get().to_dict() == {"stats": {"likes": 3, "shares": 4}, "views": 7,
                                    "title": "hi"}
    assert fields(post) == {}
    assert (late.counted("likes:p1"), late.counted("views:p1")) == (2, 7)


def test_more_states_told_than_a_commit_holds_are_read_instead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst of more states than one move takes (MOVE_MAX_SHARDS, 3 here): the move reads
    the shards instead, MOVE_MAX_SHARDS at a time, each read after the last."""
    monkeypatch.setattr(moving, "MOVE_MAX_SHARDS", 3)
    late = Late()
    page = late.db.collection("pages").document("p1")
    states = []
    for n in range(4):
        shard = page.collection("_counter_shards_").document(f"s{n}")
        shard.set({"visits": 1})
        state = shard.get()
        states.append(extension.Written(ref=shard, data={"visits": 1},
                                        update_time=state.update_time))
    late.at(5)
    done = act(late, lambda: extension.move_until_clear(late.ctx, late.db, page, [VISITS],
                                                        written=states, for_s=10.0))
    assert (done.read, done.amounts) == (4, {"visits:p1": 4})  # two reads: 3, then 1 after
    assert fields(page) == {}


def test_a_move_of_states_told_by_events_reads_nothing_and_a_stale_one_reads() -> None:
    """States handed in by events are taken as told, without a read; one written since fails
    the commit's precondition, and the move is made from a read instead."""
    late = Late()
    page = layout(late)
    late.at(12.5)
    busy = page.collection("_counter_shards_").document("busy")
    state = busy.get()
    done = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS], written=[
        extension.Written(ref=busy, data=state.to_dict() or {}, update_time=state.update_time)]))
    late.at(13)
    # Taken as told: no query of the shards (it would have set read_at).
    assert (done.deleted, done.amounts, done.read_at) == (1, {"visits:p1": 4}, None)
    assert (counted(late), total(page)) == (14, 19)
    stale = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS], written=[
        extension.Written(ref=busy, data=state.to_dict() or {}, update_time=state.update_time)]))
    late.at(14)
    assert stale.read_at is not None and stale.amounts == {"visits:p1": 5}
    assert (counted(late), total(page)) == (19, 19)


def test_a_client_write_between_the_read_and_the_commit_is_kept() -> None:
    """The quiet shard is written after the move read it and before its commit lands: the
    delete's precondition fails the commit, the move reads again and deletes it with the new
    amount."""
    late = Late()
    page = layout(late)
    late.at(12.5)
    quiet = page.collection("_counter_shards_").document("quiet")
    late.sim.spawn("client", lambda: quiet.update({"visits": firestore.Increment(1)}),
                   after_s=0.1)
    done = late.run(lambda: extension.move(late.ctx, late.db, page, [VISITS]),
                    Fate(delay_us=500_000))
    late.at(14)
    assert isinstance(done, extension.Moved)
    assert (done.deleted, done.amounts) == (3, {"visits:p1": 10})
    assert "quiet" not in fields(page)
    assert (page.get().to_dict() or {})["visits"] == 20
    assert (counted(late), total(page)) == (20, 20)


@pytest.mark.parametrize("lands_s", [20.0, 200.0])
def test_a_move_lost_in_flight_lands_late_and_the_totals_still_hold(lands_s: float) -> None:
    """A move whose answer is lost lands late (after clients wrote again and another move ran):
    the page and the counter hold every amount written, once (its guarded deletes fail, and with
    them all of it)."""
    late = Late()
    page = layout(late)
    late.at(12.5)
    outcome = late.run(lambda: extension.move(late.ctx, late.db, page, [VISITS]),
                       lost_in_flight(lands_s))
    assert isinstance(outcome, BaseException)  # sent once: its caller cannot tell
    shards = page.collection("_counter_shards_")
    shards.document("busy").set({"visits": firestore.Increment(1)}, merge=True)
    shards.document("new").set({"visits": 1})
    late.at(16)
    act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    late.at(lands_s + 60)
    assert late.flying() == []
    assert (counted(late), total(page), (page.get().to_dict() or {})["visits"]) == (21, 21, 21)


def test_a_backfill_counts_the_layout_once_and_again_nothing() -> None:
    late = Late()
    page = late.db.collection("pages").document("p1")
    page.set({"visits": 10})
    page.collection("_counter_shards_").document("a").set({"visits": 3})
    page.collection("_counter_shards_").document("\tab").set(
        {"_updates_": [{"_id_": "u", "_data_": {"visits": 2}}]})
    late.db.collection("pages").document("only-shards").collection(
        "_counter_shards_").document("b").set({"visits": 1})
    late.at(5)
    first = act(late, lambda: extension.backfill(late.ctx, late.db, VISITS))
    late.at(6)
    assert first.deltas == {"visits:p1": 15, "visits:only-shards": 1}
    assert (first.documents, first.moved.shards) == (2, 3)
    assert (counted(late), total(page)) == (15, 15)
    again = act(late, lambda: extension.backfill(late.ctx, late.db, VISITS))
    late.at(7)
    assert (again.deltas, again.moved.shards, counted(late)) == ({}, 0, 15)


def a_baseline_lost_in_flight(late: Late) -> firestore.DocumentReference:
    """A page holding 10, its counter nothing: the backfill's commit of the baseline is sent at
    1 s, its answer lost, and it lands at 25 s."""
    page = late.db.collection("pages").document("p1")
    page.set({"visits": 10})
    act(late, lambda: ensure_counter(late.ctx, late.db, "visits:p1", VISITS))
    late.at(1)
    lost = late.run(lambda: backfilling._baseline(late.ctx, late.db, page, VISITS),
                    lost_in_flight(24.0))
    assert isinstance(lost, BaseException)  # sent once: its caller cannot tell
    return page


@pytest.mark.parametrize("rerun_s", [10.0, 40.0])
def test_a_baseline_lost_in_flight_lands_late_and_counts_nothing(rerun_s: float) -> None:
    """The backfill's commit of a page's baseline (10) is lost in flight and lands at 25 s,
    after a client's write was moved into the page, and before or after the backfill is run
    again: it lands on a newer page, its precondition fails, and with it its counter's write;
    the counter ends at the total, once."""
    late = Late()
    page = a_baseline_lost_in_flight(late)
    page.collection("_counter_shards_").document("a").set({"visits": 1})
    late.at(5)
    act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    late.at(rerun_s)
    assert act(late, lambda: extension.backfill(late.ctx, late.db, VISITS)).deltas == {
        "visits:p1": 10}
    late.at(60)
    assert late.flying() == []
    assert (counted(late), total(page)) == (11, 11)


def test_a_baseline_lost_in_flight_and_run_again_counts_once() -> None:
    """Nothing moves in between: the backfill run again reads the page at the same version (its
    rewrite of the page changes nothing, so Firestore keeps the version) and counts the baseline;
    the first commit, landing after it, must not count it again (each version's baseline is a
    marker, created once)."""
    late = Late()
    page = a_baseline_lost_in_flight(late)
    late.at(5)
    assert act(late, lambda: extension.backfill(late.ctx, late.db, VISITS)).deltas == {
        "visits:p1": 10}
    late.at(60)
    assert late.flying() == []
    assert (counted(late), total(page)) == (10, 10)


def test_a_state_told_twice_is_taken_once_and_a_foreign_shard_is_not_waited_for() -> None:
    """The same creation handed in twice (a redelivered event) moves its amount once; a shard
    holding only another counter's field is nothing to wait for."""
    late = Late()
    page = layout(late)
    late.at(12.5)
    busy = page.collection("_counter_shards_").document("busy")
    state = busy.get()
    told = extension.Written(ref=busy, data=state.to_dict() or {}, update_time=state.update_time)
    done = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS],
                                            written=[told, told]))
    late.at(13)
    assert (done.deleted, done.amounts) == (1, {"visits:p1": 4})
    assert (counted(late), total(page)) == (14, 19)
    late.at(20)
    rest = act(late, lambda: extension.move_until_clear(late.ctx, late.db, page, [VISITS]))
    late.at(21)
    assert (rest.left, rest.amounts) == (0, {"visits:p1": 5})  # "other" holds only likes
    assert (counted(late), total(page)) == (19, 19)


# --- What the extension's clients send (docs/api.md, "What each client sends") ------------------


def test_whole_doubles_count_as_integers_and_fractions_not_at_all() -> None:
    assert [whole(v) for v in (1, 1.0, -1.0, 2.0**53 - 1, 0.5, float("inf"),
                                           float("nan"), True, "1", 2**53, 2.0**53)] == [
        1, 1, -1, 2**53 - 1, None, None, None, None, None, None, None]
    assert all(type(whole(v)) is int for v in (1.0, -3.0))


def test_a_move_counts_the_doubles_phones_write_and_the_field_stays_an_integer() -> None:
    """Android and iOS devices increment by 1.0 (their shards hold doubles), a web device by 1:
    a move takes all of them, and the page's field stays an integer, as the extension's
    aggregator leaves it."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    page.set({"visits": 2})
    shards = page.collection("_counter_shards_")
    for device, by in (("android", 1.0), ("android", 1.0), ("ios", -1.0), ("web", 1)):
        shards.document(device).set({"visits": firestore.Increment(by)}, merge=True)
    late.at(1)
    assert fields(page)["android"] == {"visits": 2.0}
    done = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    late.at(2)
    assert (done.deleted, done.amounts) == (3, {"visits:p1": 2})
    assert fields(page) == {}
    field = (page.get().to_dict() or {})["visits"]
    assert (field, type(field)) == (4, int)


def test_the_backfill_counts_a_double_field_and_writes_it_back_an_integer() -> None:
    """A page holding 10.0 and a shard of 3 ends at 13 (an integer), counted once; a field
    holding a fraction is never overwritten: the backfill names it and counts nothing there."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    page.set({"visits": 10.0, "title": "home"})
    page.collection("_counter_shards_").document("a").set({"visits": 3.0})
    odd = late.db.collection("pages").document("p2")
    odd.set({"visits": 2.5})
    late.at(1)
    done = act(late, lambda: extension.backfill(late.ctx, late.db, VISITS))
    late.at(2)
    assert done.deltas == {"visits:p1": 13}
    assert list(done.failed) == ["pages/p2"] and "2.5" in done.failed["pages/p2"]
    field = (page.get().to_dict() or {})["visits"]
    assert (field, type(field)) == (13, int)
    assert (counted(late), total(page)) == (13, 13)
    assert odd.get().to_dict() == {"visits": 2.5}
    again = act(late, lambda: extension.backfill(late.ctx, late.db, VISITS))
    assert again.deltas == {}


def test_a_shard_written_at_every_attempt_is_taken_with_a_marker_and_moved_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A device writes between every read and commit of a move: its guarded attempts fail, then
    a marked one takes the amount it read by `Increment(-amount)` (the shard zeroed, left: its
    device's writes are updates), and the loop's next moves take the rest."""
    monkeypatch.setattr(moving, "MOVE_ATTEMPTS", 2)
    late = Late()
    page = late.db.collection("pages").document("p1")
    shard = page.collection("_counter_shards_").document("busy")
    shard.set({"visits": 1})
    late.at(1)
    wrote = [1]

    def device() -> None:  # writes back to back for 2 s: between every read and commit
        while late.sim.monotonic() < 3.0:
            shard.update({"visits": firestore.Increment(1)})
            wrote[0] += 1

    late.sim.spawn("device", device)
    done = late.run(lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    assert isinstance(done, extension.Moved)
    assert done.left == 1 and done.deleted == 0 and done.amounts["visits:p1"] > 0
    late.at(3.5)
    assert total(page) == wrote[0]
    again = act(late, lambda: extension.move_until_clear(late.ctx, late.db, page, [VISITS]))
    assert again.left == 0 and fields(page) == {}
    assert (counted(late), total(page)) == (wrote[0], wrote[0])


def test_a_marked_take_applies_once_to_the_version_it_read() -> None:
    """Two commits of marked takes of one version read (a second mover, or a late landing): the
    second fails on the first's marker, so the amount is taken once."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    shard = page.collection("_counter_shards_").document("a")
    shard.set({"visits": 3})
    late.at(1)
    state = shard.get()
    take = moving._Take(shard, {"visits": 3}, state.update_time, False, False)

    def commit() -> extension.Moved:
        return moving._commit(late.ctx, late.db, page, [VISITS], [take], extension.Moved(),
                              marked=True)

    assert act(late, commit).amounts == {"visits:p1": 3}
    late.at(2)
    assert isinstance(late.run(commit), gexc.AlreadyExists)
    late.at(3)
    assert fields(page) == {"a": {"visits": 0}}
    assert (counted(late), total(page), (page.get().to_dict() or {})["visits"]) == (3, 3, 3)


# --- The sweep --------------------------------------------------------------------------------


def test_the_sweep_moves_every_declaration_over_the_same_documents() -> None:
    """`likes` and `views` of `posts/{post}` (two declarations, one documents pattern): one
    sweep moves both fields."""
    two = likes_and_views("likes", (0, 1))
    late = Late()
    post = late.db.collection("posts").document("p1")
    post.collection("_counter_shards_").document("a").set({"likes": 1, "views": 2})
    late.at(1)
    done = act(late, lambda: extension.sweep(late.ctx, late.db, two))
    assert done.amounts == {"likes:p1": 1, "views:p1": 2}
    assert fields(post) == {}


def test_shards_that_stay_in_one_page_do_not_hide_its_later_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A page whose first shards hold what cannot be counted (more than a run reads): the next
    run reads on within the page, from where the last stopped, and moves the shard after them."""
    monkeypatch.setattr(sweeping, "SWEEP_MAX_SHARDS", 3)
    monkeypatch.setattr(moving, "MOVE_MAX_SHARDS", 3)
    late = Late()
    page = late.db.collection("pages").document("p1")
    for n in range(3):
        page.collection("_counter_shards_").document(f"a{n}").set({"visits": 0.5})
    page.collection("_counter_shards_").document("b").set({"visits": 2})
    late.at(5)
    first = act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
    late.at(6)
    second = act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
    assert (first.amounts, second.amounts) == ({}, {"visits:p1": 2})
    assert sorted(fields(page)) == ["a0", "a1", "a2"]


def test_the_sweep_stops_at_its_budget_and_the_next_run_starts_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run out of time before its first document (a budget of 0) moves nothing and leaves
    the cursor before it: the next run reads the same shards and moves their documents (a
    cursor moved past them would have skipped to p2)."""
    monkeypatch.setattr(sweeping, "SWEEP_MAX_SHARDS", 2)
    late = Late()
    pages = [late.db.collection("pages").document(f"p{n}") for n in range(3)]
    for page in pages:
        page.collection("_counter_shards_").document("a").set({"visits": 1})
    late.at(5)
    none = act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS], budget_s=0.0))
    late.at(6)
    rest = act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
    assert (none.amounts, rest.amounts) == ({}, {"visits:p0": 1, "visits:p1": 1})


def test_a_round_that_moves_nothing_waits_longer_before_the_next() -> None:
    """Shards that never move (a fraction), unchanged since the last round, are read by one
    round, then not again for 2 minutes, then 4; a shard written meanwhile is taken by the next
    round, which resets the wait."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    shards = page.collection("_counter_shards_")
    shards.document("odd").set({"visits": 0.5})
    late.at(5)
    reads = []

    def sweep_at(s: float) -> extension.Moved:
        late.at(s)
        done = act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
        reads.append(done.read)
        return done

    for s in (10, 70, 130, 140, 260, 500):
        sweep_at(s)
    # 10: a round reads it (the first: no wait); 70: a round, nothing written since the last
    # (wait 2 minutes); 130, 140: waiting; 260: a round (wait 4); 500: a round (wait 8).
    assert [r > 0 for r in reads] == [True, True, False, False, True, True]
    shards.document("b").set({"visits": 3})
    assert sweep_at(900).amounts == {}  # written while the sweep waits: the trigger's to move
    assert sweep_at(1000).amounts == {"visits:p1": 3}
    assert sweep_at(1060).read > 0  # moved something: the wait is reset


def test_the_backfill_names_the_numbers_no_declaration_counts_and_leaves_them() -> None:
    """A shard still holding a field the extension counted (`shares`, nested `stats.likes`)
    beside `visits`: its visits are moved, the other numbers stay, and the backfill names them."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    shard = page.collection("_counter_shards_").document("a")
    shard.set({"visits": 2, "shares": 3, "stats": {"likes": 1.0}, "note": "x"})
    late.at(1)
    done = act(late, lambda: extension.backfill(late.ctx, late.db, VISITS))
    assert done.deltas == {"visits:p1": 2}
    assert done.moved.undeclared == {"shares", "stats.likes"}
    assert fields(page) == {"a": {"visits": 0, "shares": 3, "stats": {"likes": 1.0},
                                  "note": "x"}}


def test_a_late_cursor_never_replaces_a_newer_one() -> None:
    """A sweep's cursor write lost in flight lands after the next run wrote its own: it is made
    at the version it read (here: none, a create), so it fails, and the newer cursor stays (a
    plain set would put the older run's round back)."""
    late = Late()
    page = late.db.collection("pages").document("p1")
    page.collection("_counter_shards_").document("odd").set({"visits": 0.5})
    cursor = late.db.collection(NAMES.internal).document(sweeping.SWEEP_CURSOR)
    late.at(10)
    # Its first attempt flies on; the library's resend writes the cursor now.
    late.run(lambda: extension.sweep(late.ctx, late.db, [VISITS]), lost_in_flight(30.0))
    late.at(12)
    act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
    newer = (cursor.get().to_dict() or {})["round_ended"]
    late.at(60)
    assert late.flying() == []
    assert (cursor.get().to_dict() or {})["round_ended"] == newer


def test_a_round_whose_shards_were_written_does_not_wait() -> None:
    """Shards that cannot be moved but were written since the last round (an admin's fraction
    changed): the next round is not put off."""
    late = Late()
    odd = late.db.collection("pages").document("p1").collection("_counter_shards_").document("o")
    odd.set({"visits": 0.5})
    late.at(10)
    reads = []
    for s in (10, 70):
        late.at(s)
        reads.append(act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS])).read)
    odd.set({"visits": 1.5})
    for s in (80, 140):
        late.at(s)
        reads.append(act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS])).read)
    # 10: first; 70: unchanged (wait 2 minutes, until 190); 80: waiting; 140: waiting.
    assert [r > 0 for r in reads] == [True, True, False, False]
    late.at(195)
    assert act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS])).read > 0
    late.at(255)  # written before the last round: that round reset the wait
    assert act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS])).read > 0


def test_a_marked_move_takes_at_most_what_one_commit_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Marked takes are two writes each: a marked move takes MARKED_MAX_SHARDS shards (1 here),
    says the others are left, and the loop's moves take them."""
    monkeypatch.setattr(moving, "MOVE_ATTEMPTS", 0)  # every attempt marked
    monkeypatch.setattr(moving, "MARKED_MAX_SHARDS", 1)
    late = Late()
    page = late.db.collection("pages").document("p1")
    for n in range(3):
        page.collection("_counter_shards_").document(f"s{n}").set({"visits": 1})
    late.at(1)
    first = act(late, lambda: extension.move(late.ctx, late.db, page, [VISITS]))
    assert (first.shards, first.left, first.amounts) == (1, 3, {"visits:p1": 1})
    late.at(2)
    rest = act(late, lambda: extension.move_until_clear(late.ctx, late.db, page, [VISITS],
                                                        for_s=10.0))
    assert rest.amounts == {"visits:p1": 2}
    assert (counted(late), total(page)) == (3, 3)


def test_an_idle_sweep_writes_nothing() -> None:
    """No shard anywhere: the sweep reads its cursor and one empty query, and writes nothing."""
    late = Late()
    cursor = late.db.collection(NAMES.internal).document(sweeping.SWEEP_CURSOR)
    for s in (10, 70, 130):
        late.at(s)
        act(late, lambda: extension.sweep(late.ctx, late.db, [VISITS]))
    assert not cursor.get().exists
