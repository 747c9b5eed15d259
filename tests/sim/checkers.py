"""The invariants a run must keep, one checker each, judged at quiescence from what the model
recorded (every commit attempt, who sent it and for which client call, every version, every
change query served) and what callers were told (`history`).

- `Counters`: every rollup equals its shards; every request counted at most once, once if its
  caller was told it was done; a counter's shards move only by the requests' own amounts, the
  collection triggers and resets (which take them back by what they held at an instant of the
  reset's call).
- `UniqueCounters`: a unique counter never holds more than the users its voters count, and
  exactly as many when it was never reset.
- `Answers`: no caller was told nothing was written (a refusal; ABORTED, UNAVAILABLE or INTERNAL,
  as the callables answer any error but `OutcomeUnknown`; or `None`/0 from a write) by a call
  whose write counted, whichever step of an operation of several commits failed.
- `FinalAnswers`: no request_id that was refused ever counts, whenever its attempts landed.
- `ConfigurationsInForce`: the last configuration an admin was told was done is in force.
- `Sequences`: no number issued twice; a request_id's retries get the number it was first given;
  a request uses one number; `issued` on the documents equals the numbers used.
- `SequenceRecords`: every number issued for a request_id has exactly one record, created by
  its commit, which ends up holding that number, or marked lost only when it could not be read
  back (an import after its commit, or the housekeeping's query down for the hour after it); and
  the request's last retry, after everything, gets that number (refused only when lost).
- `TrendTotals`: every window total equals its buckets; every track counted once at most, once
  if acknowledged.
- `CollectionCounters`: the collection counters equal what the final documents count.
- `ExtensionCounters`: at every committed state, each extension counter document's field plus
  its shards' and partials' amounts equals what clients (and the extension, before the
  declaration) wrote by then; every commit moves the document's field and its counter alike
  (but the extension's own writes of the field, and a backfill's commit that makes them equal);
  at the end the shards hold nothing and the counter equals the field and the clients' total.
- `Fencing`: no holder committed rollup documents without holding its partition's lease.
- `Promptness`: the first change query that can see a shard's state returns it when the design
  says it must: a state committed within CHANGE_OVERLAP_S of its timestamp (the overlap), and a
  straddling state whose writer saw it straddle (its answer reached a caller that was then
  answered, so lived to touch it: the touch); a state with an older P's stripe is left to the
  sweep. Without them counts are still exact at quiescence (the sweep finds the rest), a sweep
  later. A page that a limit cut short (a new holder catching up) can see only the stamps it
  served.
- `Audit`: the exactness audit the scheduled run makes (`counting.rollup.audit`) found no drift.

A finding's `kind` says what it costs: `lost`, `doubled`, `fenced`, `answer`, `late`.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from counting.features import collections
from counting.features.sequences import documents, limits
from counting.foundation import config
from counting.rollup import audit
from counting.writepath import partitions

from .history import Answer, Call, History, Request
from .model import Attempt, Model, Path
from .virtual import ORIGIN, micros

COUNTING_KINDS = ("increment", "increment_id", "increment_many", "increment_many_id", "like",
                  "unlike", "view")
TRACK_KINDS = ("track", "track_id")
NUMBER_KINDS = ("next_number", "next_number_id")
COLLECTION_KINDS = ("delivery", "backfill")
# What adds to an extension counter's layout: devices' writes of their shards, the extension's
# own writes (fields, partials) before the declaration.
EXTENSION_CLIENT_KINDS = ("visit", "extension_legacy")
EXTENSION_LEGACY_KINDS = ("extension_legacy",)
EXTENSION_BACKFILL_KINDS = ("extension_backfill",)
EXTENSION_MOVE_KINDS = ("extension_move", "extension_sweep", "extension_backfill")


@dataclass(frozen=True)
class Finding:
    checker: str
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.checker}/{self.kind}: {self.text}"


def count_of(data: dict[str, Any] | None) -> int:
    return int((data or {}).get("count") or 0)


def us_of(instant: dt.datetime) -> int:
    return round((instant - ORIGIN) / dt.timedelta(microseconds=1))


@dataclass
class Effect:
    """What one landed attempt moved: counters' shard sums, trend keys' bucket sums, sequence
    numbers used (tenant, day, epoch, number)."""

    counters: dict[str, int] = field(default_factory=dict)
    trends: dict[tuple[str, str], int] = field(default_factory=dict)
    numbers: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def counts(self) -> bool:
        return bool(self.numbers or any(self.counters.values()) or any(self.trends.values()))


def effect_of(attempt: Attempt) -> Effect:
    found = Effect()
    for path, before, after in attempt.changes:
        old, new = before.data if before is not None else None, after.data
        if len(path) == 4 and path[2] == config.SHARDS and path[0] == config.COUNTERS:
            delta = count_of(new) - count_of(old)
            found.counters[path[1]] = found.counters.get(path[1], 0) + delta
        elif len(path) == 4 and path[2] == config.SHARDS and path[0] == config.TREND_MINUTES:
            data = new or old or {}
            key = (str(data.get("region")), str(data.get("tag")))
            found.trends[key] = found.trends.get(key, 0) + count_of(new) - count_of(old)
        elif len(path) == 2 and path[0] == config.SEQUENCES and new is not None \
                and int(new.get("issued") or 0) == int((old or {}).get("issued") or 0) + 1:
            found.numbers.append((path[1], int(new["day"]), int(new["epoch"]),
                                  int(new["last_number"])))
    return found


class Evidence:
    """A run's record, indexed once for every checker."""

    def __init__(self, model: Model, history: History) -> None:
        self.model = model
        self.history = history
        self.effects = {id(attempt): effect_of(attempt) for attempt in model.landed}
        self.final = {path: versions[-1].data for path, versions in model.docs.items()
                      if versions[-1].data is not None}
        self.by_call: dict[int, list[Attempt]] = defaultdict(list)  # id(call) -> attempts sent
        for attempt in model.attempts:
            if attempt.call is not None:
                self.by_call[id(attempt.call)].append(attempt)
        self.shard_sums: dict[str, int] = defaultdict(int)
        self.shards_of: dict[str, list[Path]] = defaultdict(list)
        for path, versions in model.docs.items():
            if len(path) == 4 and path[0] == config.COUNTERS and path[2] == config.SHARDS:
                self.shards_of[path[1]].append(path)
                self.shard_sums[path[1]] += count_of(versions[-1].data)

    def effect(self, attempt: Attempt) -> Effect:
        return self.effects.get(id(attempt), Effect())

    def landed(self, call: Call) -> list[Attempt]:
        return [a for a in self.by_call.get(id(call), []) if a.commit_us is not None]

    def landed_for(self, request: Request) -> list[Attempt]:
        return [a for call in request.calls for a in self.landed(call)]

    def requests(self, kinds: Iterable[str]) -> list[Request]:
        wanted = set(kinds)
        return [r for r in self.history.requests if r.kind in wanted]

    def sum_at(self, counter: str, at_us: int) -> int:
        return sum(count_of(v.data) for path in self.shards_of[counter]
                   if (v := self.model.latest(path, at_us)) is not None)

    def sums_between(self, counter: str, since_us: int, until_us: int) -> set[int]:
        """The sums the counter's shards held at some instant from `since_us` to `until_us`."""
        instants = {since_us, *(v.commit_us for path in self.shards_of[counter]
                                for v in self.model.docs[path]
                                if since_us < v.commit_us <= until_us)}
        return {self.sum_at(counter, at) for at in instants}


class Checker(Protocol):
    name: str

    def check(self, run: Evidence) -> list[Finding]: ...


def by_sign(checker: str, delta: int, text: str) -> Finding:
    """A count too low is lost, too high doubled."""
    return Finding(checker, "lost" if delta < 0 else "doubled", text)


class Counters:
    name = "counters"

    def __init__(self, elsewhere: tuple[str, ...] = ()) -> None:
        self.elsewhere = elsewhere  # prefixes of counters whose moves another checker judges

    def check(self, run: Evidence) -> list[Finding]:
        found: list[Finding] = []
        for path, data in run.final.items():
            if len(path) == 2 and path[0] == config.COUNTERS:
                published, shards = count_of(data), run.shard_sums[path[1]]
                if published != shards:
                    found.append(by_sign(self.name, published - shards,
                                         f"{path[1]}: rollup {published}, shards {shards}"))
        for request in run.requests(COUNTING_KINDS):
            found += self._once(run, request)
        found += self._moves(run)
        return found

    def _once(self, run: Evidence, request: Request) -> list[Finding]:
        """Each counter a request names moved once by its amount, or not at all unless its
        caller was told it was done."""
        moves: dict[str, list[int]] = defaultdict(list)
        for attempt in run.landed_for(request):
            for counter, delta in run.effect(attempt).counters.items():
                if delta:
                    moves[counter].append(delta)
        found = []
        for counter, by in request.amounts.items():
            done = moves.get(counter, [])
            calls = "; ".join(map(repr, request.calls))
            if len(done) > 1 or any(delta != by for delta in done):
                found.append(by_sign(self.name, sum(done) - by,
                                     f"{counter}: {calls} asked {by:+d}, counted {done}"))
            elif not done and request.acknowledged:
                found.append(Finding(self.name, "lost",
                                     f"{counter}: {calls} asked {by:+d}, counted nothing"))
        return found

    def _moves(self, run: Evidence) -> list[Finding]:
        """Shards move by requests' own amounts (checked above), the triggers' and backfill's,
        or a reset, which takes them back by what they held at one instant of its call (an
        increment that lands after that instant counts after the reset); anything else (a
        fold, a grow, a touch) moves none."""
        found = []
        for attempt in run.model.landed:
            call = attempt.call
            kind = call.request.kind if isinstance(call, Call) else None
            if kind in COUNTING_KINDS or kind in COLLECTION_KINDS:
                continue
            assert attempt.commit_us is not None
            for counter, delta in run.effect(attempt).counters.items():
                if not delta or counter.startswith(self.elsewhere):
                    continue
                if isinstance(call, Call) and kind == "reset_counter":
                    held = run.sums_between(counter, call.sent_us, attempt.commit_us - 1)
                    if -delta in held:
                        continue
                    found.append(by_sign(self.name, -delta - min(held, key=abs),
                                         f"{counter}: {call!r} moved its shards by {delta:+d}, "
                                         f"while they held {sorted(held)} during the call"))
                    continue
                who = repr(call) if call is not None else attempt.owner or attempt.sender
                found.append(by_sign(self.name, delta, f"{counter}: a commit of {who} moved "
                                                       f"its shards by {delta:+d}"))
        return found


class UniqueCounters:
    """A unique counter counts each user at most once: its shards never hold more than the
    voters that count a user, and exactly as many when it was never reset. After a reset its
    shards may hold less: an un-like that lands between the reset's read of the shards and its
    forgetting of that user takes the count below (docs/api.md, `reset_counter`)."""

    name = "unique counters"

    def check(self, run: Evidence) -> list[Finding]:
        found = []
        reset = {counter for r in run.requests(["reset_counter"]) for counter in r.amounts}
        for path, data in run.final.items():
            if len(path) != 2 or path[0] != config.COUNTERS:
                continue
            if not ((data.get("policy") or {}).get("unique")):
                continue
            voters = sum(1 for p, d in run.final.items()
                         if p[:3] == (config.COUNTERS, path[1], config.VOTERS)
                         and d.get("counted", "uid" in d))  # a like's marker (`counts`)
            shards = run.shard_sums[path[1]]
            if shards > voters or (shards != voters and path[1] not in reset):
                found.append(by_sign(self.name, shards - voters,
                                     f"{path[1]}: shards {shards}, voters counted {voters}"
                                     f"{' (reset)' if path[1] in reset else ''}"))
        return found


class ConfigurationsInForce:
    """The last configuration an admin was told was done is the one in force: no attempt of an
    earlier one (a resend, a commit landing late) replaced it."""

    name = "configurations"

    def check(self, run: Evidence) -> list[Finding]:
        found = []
        last: dict[tuple[str, ...], tuple[int, dict[str, Any]]] = {}
        for request in run.history.requests:
            if request.configures is None:
                continue
            path, fields = request.configures
            for call in request.calls:
                if call.answer is Answer.OK and call.answered_us is not None \
                        and call.answered_us >= last.get(path, (-1, {}))[0]:
                    last[path] = (call.answered_us, fields)
        for path, (_, fields) in last.items():
            held = run.final.get(path) or {}
            wrong = {key: (held.get(key), value) for key, value in fields.items()
                     if held.get(key) != value}
            if wrong:
                found.append(Finding(self.name, "late",
                                     f"{'/'.join(path)}: in force, last told: {wrong}"))
        return found


def opens_a_day(attempt: Attempt) -> bool:
    """A commit that opens a tenant's business day (`opening.open_day`: the sequence's new day,
    with `opened_at`): shared work, done once by whichever call comes first, which no call's
    answer is about (docs/api.md, "What an answer promises"): a retry finds the day open."""
    return any(len(w.path) == 2 and w.path[0] == config.SEQUENCES and "opened_at" in w.fields
               for w in attempt.writes)


class Answers:
    name = "answers"

    def check(self, run: Evidence) -> list[Finding]:
        found = []
        for request in run.history.requests:
            # A request_id's no-op says it was done already: an acknowledgement.
            told = (Answer.REFUSED, Answer.RETRY) if request.request_id else (
                Answer.REFUSED, Answer.RETRY, Answer.NO_OP)
            for call in request.calls:
                if call.answer not in told or call.answered_us is None:
                    continue
                # What was sent before the answer: the caller is told none of it counted.
                counted = [run.effect(a) for a in run.landed_for(request)
                           if a.stamp_us < call.answered_us and run.effect(a).counts]
                if counted:
                    found.append(Finding(self.name, "answer",
                                         f"{call!r} ({call.value!r}), yet its write counted: "
                                         f"{counted[0]}"))
                elif call.answer is Answer.RETRY:
                    # Told nothing was written, retry: nothing this call sent may have applied
                    # (a reset's first commit, with its later step failing, say).
                    wrote = [a for a in run.landed(call) if a.changes and not opens_a_day(a)]
                    if wrote:
                        found.append(Finding(self.name, "answer", (
                            f"{call!r}, told nothing was written, yet "
                            f"{'/'.join(wrote[0].changes[0][0])} was written at "
                            f"{(wrote[0].commit_us or 0) / 1e6:.3f} s")))
        return found


class FinalAnswers:
    """An answer given for a request_id is never contradicted later: once any call of a request
    with an id was refused (not told to retry: ABORTED, UNAVAILABLE, INTERNAL), no attempt of
    that request counts, whenever it was sent or landed (`Answers` judges each call by what was
    sent before its answer)."""

    name = "final answers"

    def check(self, run: Evidence) -> list[Finding]:
        found = []
        for request in run.history.requests:
            refused = [call for call in request.calls if request.request_id
                       and call.answer is Answer.REFUSED]
            if not refused:
                continue
            counted = [run.effect(a) for a in run.landed_for(request) if run.effect(a).counts]
            if counted:
                found.append(Finding(self.name, "answer",
                                     f"{refused[0]!r} was final, yet the request counted: "
                                     f"{counted[0]}"))
        return found


class Sequences:
    name = "sequences"

    def check(self, run: Evidence) -> list[Finding]:
        found = []
        given: dict[tuple[str, int, int, int], set[int]] = defaultdict(set)
        used: dict[tuple[str, int], int] = defaultdict(int)  # (tenant, day) -> numbers used
        for attempt in run.model.landed:
            for tenant, day, _, _ in run.effect(attempt).numbers:
                used[(tenant, day)] += 1
        for request in run.requests(NUMBER_KINDS):
            tickets = {self._key(request, call.value) for call in request.calls
                       if call.answer is Answer.OK}
            for ticket in tickets:
                given[ticket].add(id(request))
            numbers = [n for a in run.landed_for(request) for n in run.effect(a).numbers]
            calls = "; ".join(map(repr, request.calls))
            if len(tickets) > 1:
                found.append(Finding(self.name, "doubled",
                                     f"{calls}: given {sorted(tickets)}"))
            if len(numbers) > 1:
                found.append(Finding(self.name, "doubled", f"{calls}: used {numbers}"))
            if tickets - set(numbers):
                found.append(Finding(self.name, "lost",
                                     f"{calls}: given {sorted(tickets)}, used {numbers}"))
        for ticket, requests in given.items():
            if len(requests) > 1:
                found.append(Finding(self.name, "doubled",
                                     f"{ticket} given to {len(requests)} requests"))
        found += self._issued(run, used)
        return found

    @staticmethod
    def _key(request: Request, ticket: documents.Ticket) -> tuple[str, int, int, int]:
        return (str(request.tenant), ticket.business_day.toordinal(), ticket.epoch,
                ticket.number)

    def _issued(self, run: Evidence, used: dict[tuple[str, int], int]) -> list[Finding]:
        """`issued` on each tenant's document (its open day) and on its closed days' records
        (not the open day's marker) equals the numbers used that day."""
        recorded: dict[tuple[str, int], int] = {}
        for path, data in run.final.items():
            if len(path) == 2 and path[0] == config.SEQUENCES and data.get("day"):
                recorded[(path[1], int(data["day"]))] = int(data.get("issued") or 0)
            if len(path) == 4 and path[2] == config.BUSINESS_DAYS and "closed_at" in data:
                day = dt.date.fromisoformat(str(data["business_day"])).toordinal()
                recorded[(path[1], day)] = int(data.get("issued") or 0)
        return [Finding(self.name, "lost" if recorded.get(key, 0) < n else "doubled",
                        f"{key[0]} day {dt.date.fromordinal(key[1])}: issued "
                        f"{recorded.get(key, 0)}, numbers used {n}")
                for key, n in sorted(used.items()) if recorded.get(key, 0) != n]


class SequenceRecords:
    name = "sequence records"
    # A run of the housekeeping reads a record back while Firestore's read window (an hour from
    # its commit) is open this long after the run ends.
    MARGIN_S = 5.0

    def check(self, run: Evidence) -> list[Finding]:
        found = []
        for request in run.requests(("next_number_id",)):
            for attempt in run.landed_for(request):
                numbers = run.effect(attempt).numbers
                if not numbers:
                    continue
                records = [path for path, before, after in attempt.changes
                           if len(path) == 4 and path[2] == config.NUMBER_REQUESTS
                           and (before is None or before.data is None)
                           and after.data is not None]
                calls = "; ".join(map(repr, request.calls))
                if len(records) != 1:
                    found.append(Finding(self.name, "lost", f"{calls}: number {numbers} came "
                                         f"with {len(records)} records"))
                    continue
                found += self._kept(run, request, attempt, records[0], numbers[0], calls)
        return found

    def _kept(self, run: Evidence, request: Request, attempt: Attempt, path: Path,
              number: tuple[str, int, int, int], calls: str) -> list[Finding]:
        """The record's final state and the last retry's answer agree with the number."""
        _, day, epoch, last = number
        data = run.final.get(path) or {}
        state = data.get("state")
        last_call = request.calls[-1]
        got = last_call.value if last_call.answer is Answer.OK else None
        if isinstance(got, documents.Ticket) and \
                (got.business_day.toordinal(), got.epoch, got.number) != (day, epoch, last):
            return [Finding(self.name, "doubled", f"{calls}: used {number}, retry got {got}")]
        if state == "issued":
            held = (dt.date.fromisoformat(str(data["business_day"])).toordinal(),
                    int(data["epoch"]), int(data["number"]))
            if held != (day, epoch, last):
                return [Finding(self.name, "doubled", f"{calls}: used {number}, its record "
                                f"holds {held}")]
        elif state == documents.LOST:
            if not self._unreadable(run, attempt, path[1]):
                return [Finding(self.name, "lost", f"{calls}: used {number}, its record was "
                                f"marked lost ({data.get('lost_reason')})")]
            return [] if got is None else [Finding(
                self.name, "doubled", f"{calls}: its record is lost, yet a retry got {got}")]
        elif got is None:
            return [Finding(self.name, "lost", f"{calls}: used {number}, its record is "
                            f"{state!r} and the last retry did not get it")]
        if got is None:
            return [Finding(self.name, "lost", f"{calls}: used {number}, the last retry did not "
                            "get it")]
        return []

    def _unreadable(self, run: Evidence, attempt: Attempt, tenant: str) -> bool:
        """Whether the record could not be read back: an import after its commit, or no run of
        the housekeeping went through the tenant's records while it could (its query down, the
        scheduled instance killed or paused, for all the hour from `record_after_s` after the
        commit)."""
        commit = attempt.commit_us or 0
        opens = commit + micros(limits.LIMITS.record_after_s)
        closes = commit + micros(3600.0 - self.MARGIN_S)
        return any(at >= commit for at in run.model.imports) or not any(
            began >= opens and ended <= closes and tenant not in failed
            for began, ended, failed in run.model.records_runs)


class TrendTotals:
    name = "trend totals"

    def check(self, run: Evidence) -> list[Finding]:
        found: list[Finding] = []
        buckets: dict[tuple[str, str], int] = defaultdict(int)
        for path, data in run.final.items():
            if len(path) == 4 and path[0] == config.TREND_MINUTES and path[2] == config.SHARDS:
                for scope in (str(data["region"]), config.GLOBAL_SCOPE):
                    buckets[(scope, str(data["tag"]))] += count_of(data)
        totals = {(str(d["scope"]), str(d["tag"])): count_of(d) for p, d in run.final.items()
                  if p[0] == config.TREND_TOTALS and d.get("window") == "1h"}
        for key in sorted(set(buckets) | set(totals)):
            total = totals.get(key, 0)
            if total != buckets[key]:
                found.append(by_sign(self.name, total - buckets[key],
                                     f"{key}: total {total}, buckets {buckets[key]}"))
        for request in run.requests(TRACK_KINDS):
            moves: dict[tuple[str, str], list[int]] = defaultdict(list)
            for attempt in run.landed_for(request):
                for key, delta in run.effect(attempt).trends.items():
                    if delta:
                        moves[key].append(delta)
            calls = "; ".join(map(repr, request.calls))
            for name in request.amounts:
                _, region, tag = name.split(":", 2)
                done = moves.get((region, tag), [])
                if len(done) > 1:
                    found.append(Finding(self.name, "doubled", f"{name}: {calls}: {done}"))
                elif not done and request.acknowledged:
                    found.append(Finding(self.name, "lost", f"{name}: {calls}: not counted"))
        return found


class CollectionCounters:
    name = "collection counters"

    def __init__(self, watch: collections.Watch) -> None:
        self.watch = watch

    def check(self, run: Evidence) -> list[Finding]:
        expected: dict[str, int] = defaultdict(int)
        for path, data in run.final.items():
            document = "/".join(path)
            params = collections.match(self.watch.documents, document)
            if params is None:
                continue
            for declaration in self.watch.declarations:
                for counter, amount in declaration.amounts(params, data).items():
                    expected[counter] += amount
        names = {c for c in run.shard_sums
                 if any(c.startswith(d.owns) for d in self.watch.declarations)}
        return [by_sign(self.name, run.shard_sums[c] - expected[c],
                        f"{c}: shards {run.shard_sums[c]}, documents {expected[c]}")
                for c in sorted(names | set(expected)) if run.shard_sums[c] != expected[c]]


class Takes:
    """The amounts each shard (or partial) held since its last take: a take must remove one of
    them (what the move read, with the clients' writes since left in place)."""

    def __init__(self) -> None:
        self.since: dict[Path, set[int]] = {}

    def seen(self, path: Path, before: int, now: int, *, took: bool) -> int | None:
        """A change of `path` from `before` to `now`, a move's (`took`) or a client's: the
        amount a take removed when it is none the shard held since its last take."""
        held = self.since.setdefault(path, {0})
        if not took:
            held.add(now)
            return None
        taken = before - now
        self.since[path] = {now}
        return taken if taken and taken not in held else None


class ExtensionCounters:
    """An extension counter's equalities (docs/architecture.md, "Extension counters"), judged
    at every commit, in commit order, from the documents' versions: its documents' field plus
    their shards' and partials' amounts equals the amounts of the client writes that landed by
    then (each attempt that landed adds its own); the counter's shards move as the field does
    (the extension's writes of the field before the declaration move the field alone, and a
    backfill's commit may move the counter so that it equals the field); and, at the end, the
    field and the counter equal the clients' total (nothing left in shards). And no amount is
    taken twice: a move takes from a shard (or partial) an amount it held at some version since
    the last take, so the document's field never shows a device more than was written (two
    moves taking one amount leave the shard negative and the field over)."""

    name = "extension counters"

    def __init__(self, watch: collections.Watch) -> None:
        self.declarations = [d for d in watch.declarations if d.extension is not None]

    def check(self, run: Evidence) -> list[Finding]:
        return [f for d in self.declarations for f in self._declared(run, d)]

    def _declared(self, run: Evidence, declaration: collections.Declaration) -> list[Finding]:
        extension = declaration.extension
        assert extension is not None
        depth = len(declaration.documents.split("/"))

        def page_of(path: Path) -> str | None:
            joined = "/".join(path)
            params = collections.match(declaration.documents, joined) \
                or collections.match(declaration.shards, joined)
            return params[declaration.placeholder] if params else None

        def amount(path: Path, data: dict[str, Any] | None) -> int:
            if data is None:
                return 0
            if len(path) == depth:
                return extension.value(data)
            return extension.amount(data, partial=collections.is_partial(path[-1]))

        pages = {page for path in run.model.docs if (page := page_of(path)) is not None}
        pages |= {page for r in run.requests(EXTENSION_CLIENT_KINDS) for page in r.amounts}
        of_counter = {declaration.counter_id(page): page for page in pages}
        held: dict[Path, int] = {}
        takes = Takes()
        layout: dict[str, int] = defaultdict(int)  # field + shards + partials
        added: dict[str, int] = defaultdict(int)  # what clients' landed writes added
        gaps: dict[str, int] = defaultdict(int)  # layout - added, as last reported
        fields: dict[str, int] = defaultdict(int)
        counters: dict[str, int] = defaultdict(int)
        found: list[Finding] = []
        for attempt in sorted(run.model.landed, key=lambda a: a.commit_us or 0):
            call = attempt.call
            kind = call.request.kind if isinstance(call, Call) else None
            who = repr(call) if call is not None else attempt.owner or attempt.sender
            at = (attempt.commit_us or 0) / 1e6
            touched: set[str] = set()
            moved: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # page -> field, counter
            for path, _, after in attempt.changes:
                page = page_of(path)
                if page is None:
                    continue
                now = amount(path, after.data)
                if len(path) != depth:
                    twice = takes.seen(path, held.get(path, 0), now,
                                       took=kind in EXTENSION_MOVE_KINDS)
                    if twice is not None:
                        found.append(by_sign(self.name, twice, (
                            f"{'/'.join(path)}: a commit of {who} at {at:.3f} s took {twice}, "
                            "an amount the shard did not hold since the last take: taken "
                            "twice")))
                delta, held[path] = now - held.get(path, 0), now
                layout[page] += delta
                touched.add(page)
                if len(path) == depth and delta:
                    moved[page][0] += delta
            for counter, delta in run.effect(attempt).counters.items():
                if delta and counter in of_counter:
                    moved[of_counter[counter]][1] += delta
            if isinstance(call, Call) and kind in EXTENSION_CLIENT_KINDS:
                for page, by in call.request.amounts.items():
                    added[page] += by
                    touched.add(page)
            for page in sorted(touched):
                gap = layout[page] - added[page]
                if gap and gap != gaps[page]:  # each new difference once
                    found.append(by_sign(self.name, gap, (
                        f"{page}: after a commit of {who} at {at:.3f} s, its field, shards "
                        f"and partials hold {layout[page]}, clients added {added[page]}")))
                gaps[page] = gap
            for page, (by_field, by_counter) in sorted(moved.items()):
                fields[page] += by_field
                counters[page] += by_counter
                if by_field == by_counter or (kind in EXTENSION_LEGACY_KINDS and not by_counter) \
                        or (kind in EXTENSION_BACKFILL_KINDS and fields[page] == counters[page]):
                    continue
                found.append(by_sign(self.name, by_counter - by_field, (
                    f"{declaration.counter_id(page)}: a commit of {who} at {at:.3f} s moved "
                    f"the counter by {by_counter:+d} and the field by {by_field:+d}")))
        for page in sorted(pages):
            counter = declaration.counter_id(page)
            field = extension.value(run.final.get(
                tuple(declaration.documents.replace(f"{{{declaration.placeholder}}}", page)
                      .split("/"))) or {})
            shards, total = run.shard_sums.get(counter, 0), added[page]
            left = layout[page] - field
            if field != total:
                found.append(by_sign(self.name, field - total, (
                    f"{page}: its field ends at {field}, clients added {total} ({left} left in "
                    "its shards and partials)")))
            if shards != total:
                found.append(by_sign(self.name, shards - total, (
                    f"{counter}: its shards end at {shards}, clients added {total}, the field "
                    f"holds {field}")))
        return found


class Fencing:
    name = "fencing"

    def check(self, run: Evidence) -> list[Finding]:
        """A holder's commit of anything but internal documents carries its fence: a write of
        its partition's lease document, which named it until this commit."""
        found = []
        for attempt in run.model.landed:
            if attempt.owner is None:
                continue
            others = [path for path, _, _ in attempt.changes if path[0] != config.INTERNAL]
            if not others:
                continue
            fence = next((before for path, before, _ in attempt.changes
                          if path[0] == config.INTERNAL
                          and path[1].startswith(config.ROLLUP_STATE_DOC)
                          and path[1] != config.ROLLUP_USAGE_DOC), None)
            if fence is None or (fence.data or {}).get("owner") != attempt.owner:
                found.append(Finding(self.name, "fenced",
                                     f"{attempt.owner} committed {'/'.join(others[0])} at "
                                     f"{(attempt.commit_us or 0) / 1e6:.3f} s without "
                                     "holding its lease"))
        return found


TOUCHED = {"updated_at", "stripe"}  # the fields a writer's touch of a shard writes
# Every partition's lease document -> the partition.
LEASES = {(config.INTERNAL, part.lease_id): part
          for count in partitions.CHOICES for part in partitions.parts(count)}


class Promptness:
    name = "promptness"

    def check(self, run: Evidence) -> list[Finding]:
        """For each shard state that is due (see the module's docstring), the first change
        query reading its stripe at or after it became due, while it was still the shard's
        latest state, returns it (a page that a limit cut short before its stamp does not
        count: a new holder reads its backlog over several ticks)."""
        # stripe -> (read, since, the partitions whose lease named the query's owner then,
        # the stamp up to which it served: None, every one)
        queries: dict[int, list[tuple[int, int, tuple[partitions.Part, ...], int | None]]] = \
            defaultdict(list)
        # owner -> the partitions whose lease ever named it, with their commits and owners
        leases: dict[str, list[tuple[partitions.Part, list[int], list[Any]]]] = defaultdict(list)
        for path, versions in run.model.docs.items():
            if path in LEASES:
                owners = [(v.data or {}).get("owner") for v in versions]
                for owner in {owner for owner in owners if isinstance(owner, str)}:
                    leases[owner].append((LEASES[path], [v.commit_us for v in versions], owners))
        for query in run.model.change_queries:
            since = us_of(query.since)
            mine = () if query.owner is None else leases.get(query.owner, ())
            held = tuple(part for part, commits, owners in mine
                         if (at := bisect.bisect_right(commits, query.read_us)) > 0
                         and owners[at - 1] == query.owner)
            through = None if query.through is None else us_of(query.through)
            for stripe in query.stripes:
                queries[stripe].append((query.read_us, since, held, through))
        for found in queries.values():
            found.sort(key=lambda read: read[:2])
        overlap = micros(config.CHANGE_OVERLAP_S)
        straddle = micros(config.SHARD_TOUCH_AFTER_S)
        late: list[Finding] = []
        for path, versions in run.model.docs.items():
            if len(path) != 4 or path[2] != config.SHARDS:
                continue
            for n, version in enumerate(versions):
                data = version.data
                if data is None or "stripe" not in data or "updated_at" not in data:
                    continue
                stamp = us_of(data["updated_at"])
                due = self._due(run, path, version.commit_us, stamp, version.origin, overlap,
                                straddle)
                home = partitions.tag_home_of_hex(path[1]) if path[0] == config.TREND_MINUTES \
                    else partitions.home_of(path[1])
                reads = queries.get(int(data["stripe"]), [])
                at = bisect.bisect_left(reads, (due, -1), key=lambda read: read[:2]) \
                    if due is not None else len(reads)
                # The first such query of a partition that owns the shard's key: another
                # partition's drops it.
                first = next((r for r in itertools.islice(reads, at, None)
                              if any(p.owns(home) for p in r[2])
                              and (r[3] is None or stamp < r[3])), None)
                if first is None:
                    continue
                read, since, _, _ = first
                superseded = n + 1 < len(versions) and versions[n + 1].commit_us <= read
                # A stripe that a P in between does not read in its ticks is another P's: once
                # narrowed, the sweep's (by design).
                older = any(int(data["stripe"]) not in partitions.Part(count, home % count).ticks()
                            for count in self._counts(run, version.commit_us, read))
                if not superseded and not older and stamp <= since:
                    late.append(Finding(self.name, "late", (
                        f"{'/'.join(path)}: committed at {version.commit_us / 1e6:.3f} s, "
                        f"stamped {stamp / 1e6:.3f} s, due at {(due or 0) / 1e6:.3f} s; the "
                        f"change query at {read / 1e6:.3f} s read from {since / 1e6:.3f} s")))
        return late

    @staticmethod
    def _counts(run: Evidence, since_us: int, until_us: int) -> list[int]:
        """The P configured at some instant from `since_us` to `until_us`."""
        path = (config.INTERNAL, partitions.PARTITIONS_DOC)
        first = run.model.latest(path, since_us)
        versions = [first, *(v for v in run.model.docs.get(path, [])
                             if since_us < v.commit_us <= until_us)]
        return [int(((v.data if v else None) or {}).get("count") or 1) for v in versions]

    @staticmethod
    def _due(run: Evidence, path: Path, commit: int, stamp: int, origin: Attempt | None,
             overlap: int, straddle: int) -> int | None:
        if commit - stamp < overlap:
            return commit
        call = origin.call if origin is not None else None
        if commit - stamp < straddle or origin is None or not origin.answered \
                or not isinstance(call, Call) or call.answer is not Answer.OK:
            return None  # its writer never saw it straddle (a lost answer, a resend's)
        sent = run.by_call[id(call)]
        at = sent.index(origin) if origin in sent else len(sent)
        if any(w.path == path for attempt in sent[at + 1:] for w in attempt.writes):
            return None  # touched (or tried to): the touch's own state is judged
        touches = {id(attempt) for attempt in sent[:at + 1] for w in attempt.writes
                   if w.path == path and w.op == "update" and set(w.fields) == TOUCHED}
        if len(touches) >= config.SHARD_TOUCH_ATTEMPTS:
            return None  # its writer's last touch straddled too: the sweep's (by design)
        return max(commit, call.answered_us or commit)


class Audit:
    name = "audit"

    def check(self, run: Evidence) -> list[Finding]:
        """The exactness audit the scheduled run makes (`counting.rollup.audit`) found no drift:
        what it found (and repaired) was a loss, whatever the counters look like at the end."""
        state = run.final.get((config.INTERNAL, audit.AUDIT_DOC)) or {}
        return [by_sign(self.name, int(d["published"]) - int(d["shards"]),
                        f"{d['counter']}: published {d['published']}, shards {d['shards']} "
                        f"(found at {us_of(d['found_at']) / 1e6:.3f} s)")
                for d in state.get("drift") or []]


def every(watch: collections.Watch, extension: collections.Watch) -> list[Checker]:
    """Every checker: `watch`'s collection counters and `extension`'s extension counters (whose
    counters' moves `Counters` leaves to `ExtensionCounters`)."""
    judged = tuple(d.owns for d in extension.declarations if d.extension is not None)
    return [Counters(elsewhere=judged), UniqueCounters(), Answers(), FinalAnswers(),
            ConfigurationsInForce(), Sequences(), TrendTotals(),
            CollectionCounters(watch), ExtensionCounters(extension),
            Fencing(), Promptness(), Audit(), SequenceRecords()]
