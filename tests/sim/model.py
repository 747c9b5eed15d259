"""A model of production Firestore and of its Python client library, for the simulation: the
part of the google-cloud-firestore API the domain uses, with Firestore's semantics rather than
the emulator's.

What it models:
- Multi-version documents: every commit appends a version at its commit time; a read at
  `read_time` T sees, per document, the last version committed at or before T (snapshot reads;
  a read without one reads when its request reaches the server).
- Requests take virtual time: a read is served when it reaches the server, and answered a
  moment later. A commit attempt's server timestamps are taken when it reaches the server (S);
  it lands at C = S + a delay drawn by the run (`faults.Draws.fate`): its preconditions and
  transforms are evaluated then, against the documents as they are at C, and its writes are
  visible from its commit time on. The write result carries the commit time as `update_time`
  and S among its transform results, as Firestore's does.
- Commits are serialisable in commit-time order: a commit's time is C, or later than the last
  version of every document it writes and than every read already served (a read at T never
  misses a commit <= T). A failed precondition writes nothing.
- An attempt's fate (`faults`): refused before it applies; its answer lost after it applied;
  its answer lost while it is still in flight (it lands later, or fails its preconditions when
  it lands); still in flight when the call's deadline passes (DEADLINE_EXCEEDED, 60 s after the
  first attempt unless the caller passes `timeout=`).
- The client library's Commit retry: every write method takes `retry=` and `timeout=`. Unless
  `retry=None`, an attempt that fails with UNAVAILABLE or RESOURCE_EXHAUSTED is sent again after
  the library's backoff (`faults.LibraryRetry`), as a new request: its own server timestamp,
  delay and fate, so attempts can land out of order. `library_retries` counts the resends.
- Who sent what: every attempt records its sender, the lease owner it acted for and the client
  call under way (`virtual.Actor.call`), so that checkers attribute each committed write.
- Queries: filters, order, limits, cursors (a snapshot's, in the query's order, ascending), `sum`
  and `count` aggregations.
- Reads that fail: a read at a read time more than an hour back (FAILED_PRECONDITION), a
  collection group's queries during an outage the run draws (`outages`: UNAVAILABLE), and reads
  of the documents a directed scenario makes `unreadable` (UNAVAILABLE).
- Imports (`reimport`): the documents of a collection created again at the import's time,
  their fields unchanged (a managed import; the emulator's export/import on a restart).
- Code that is no actor's (a directed scenario stepping the clock by hand) cannot wait: its
  requests are served, and its commits land, at once.

What it does not model: indexes (queries scan, narrowed by equality and `in` filters on a few
fields), other reads that fail, billing beyond counting documents read and written, document size
limits, transactions (the domain uses none), listeners.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import operator
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from counting.foundation import config
from google.api_core import exceptions as gexc
from google.api_core.gapic_v1 import method
from google.cloud.firestore_v1 import transforms
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import FieldPath, parse_field_path
from google.cloud.firestore_v1.types import document as document_pb
from google.cloud.firestore_v1.types import write as write_pb
from google.protobuf import timestamp_pb2

from .faults import COMMIT_TIMEOUT_S, Draws, Fate, LibraryRetry, Requests
from .virtual import ORIGIN, Killed, Sim, micros

Path = tuple[str, ...]
DEFAULT: Any = method.DEFAULT
DOCUMENT_ID = FieldPath.document_id()  # "__name__": the document order queries return
# Fields whose `==` and `in` filters pick their candidates from an index rather than a scan of
# the collection: the change queries' stripes and the rollup's watch of counters above their
# minimum.
INDEXED = ("stripe", "above_min", "shrink_home")
# Firestore serves reads at a read time this far back at most (without point-in-time recovery).
READ_WINDOW_US = 3600 * 1_000_000


def clone(value: Any) -> Any:
    """A copy of a document value: maps and arrays are copied, everything else is immutable."""
    if isinstance(value, dict):
        return {key: clone(inner) if isinstance(inner, (dict, list)) else inner
                for key, inner in value.items()}
    if isinstance(value, list):
        return [clone(inner) if isinstance(inner, (dict, list)) else inner for inner in value]
    return value


def same(a: Any, b: Any) -> bool:
    """Equal as stored values: of one type at every level (an integer 13 is not a double 13.0,
    though Python and queries compare them equal)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@dataclass(slots=True)
class Version:
    commit_us: int
    create_us: int
    data: dict[str, Any] | None  # None: deleted
    origin: Attempt | None = None  # the commit attempt that wrote it


@dataclass
class Write:
    op: str  # create, set, update, delete
    path: Path
    fields: dict[str, Any] = field(default_factory=dict)
    merge: bool = False
    exists: bool | None = None
    last_update_time: dt.datetime | None = None


@dataclass(eq=False, kw_only=True)
class Attempt:
    """One request of a commit, as the server saw it: what it wrote, who sent it, when it
    reached the server (`stamp_us`, its server timestamps), when it was due to land, and what
    became of it."""

    writes: list[Write]
    sender: str | None  # the actor that sent it
    owner: str | None  # the lease owner that actor acted for (a rollup holder's)
    call: object | None  # the client call under way (`history.Call`)
    number: int  # 1, then 2... for the library's resends of one call
    stamp_us: int
    due_us: int
    fate: Fate
    commit_us: int | None = None  # when it applied
    error: gexc.GoogleAPICallError | None = None  # the precondition that failed when it landed
    answered: bool = False  # its write results reached the caller
    results: list[write_pb.WriteResult] = field(default_factory=list)
    changes: list[tuple[Path, Version | None, Version]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ChangeQuery:
    """A rollup change query as served: `stripe in stripes and updated_at > since`, read at
    `read_us`, for the lease owner `owner` (its partition: the lease that names it); a page its
    limit cut short served stamps up to `through` (None: every one)."""

    read_us: int
    stripes: frozenset[int]
    since: dt.datetime
    owner: str | None = None
    through: dt.datetime | None = None


class Model:
    """The database of one run."""

    def __init__(self, sim: Sim, rng: random.Random, requests: Requests | None = None) -> None:
        self.sim = sim
        self.draws = Draws(rng, requests or Requests())
        self.docs: dict[Path, list[Version]] = {}
        # Every path ever written, by collection, by collection id (what queries scan) and by
        # (collection id, INDEXED field, value) held by any of its versions.
        self.children: dict[Path, set[Path]] = {}
        self.groups: dict[str, set[Path]] = {}
        self.indexed: dict[tuple[str, str, Any], set[Path]] = {}
        self.max_read_us = 0
        self.reads = 0
        self.writes = 0
        self.attempts: list[Attempt] = []  # every commit attempt sent
        self.landed: list[Attempt] = []  # those that applied, in commit order
        self.change_queries: list[ChangeQuery] = []
        self.library_retries = 0
        self.max_commit_delay_us = 0  # of the attempts that applied, C - S
        self._flying = 0  # attempts sent that have not landed yet
        self.on_commit: list[Callable[[Attempt], None]] = []
        self.imports: list[int] = []  # when `reimport` re-created documents
        # (from, until, collection id): its collection group queries fail UNAVAILABLE meanwhile
        self.outages: list[tuple[int, int, str]] = []
        # When the housekeeping's record_issued ran through (began, ended, the tenants it left
        # for the next run): the actors note it.
        self.records_runs: list[tuple[int, int, tuple[str, ...]]] = []
        self.unreadable: set[Path] = set()  # documents whose reads fail (a directed scenario's)
        self._lock = threading.RLock()

    # -- requests --

    def _request(self, serve: Callable[[int], Any]) -> Any:
        """Send a read: `serve(at_us)` runs when it reaches the server; the answer comes back a
        moment later."""
        actor = self.sim.current()
        if actor is None:
            return serve(self.sim.now_us)
        if actor.killed:
            raise Killed
        self.sim.pause_if_due()
        up, down = self.draws.legs()
        arrive = self.sim.now_us + up
        served: list[Any] = []
        self.sim.at(arrive, lambda: served.append(serve(arrive)))
        self.sim.wait_until(arrive + down)
        return served[0]

    # -- reads --

    def latest(self, path: Path, at_us: int | None = None) -> Version | None:
        versions = self.docs.get(path)
        if not versions:
            return None
        if at_us is None:
            return versions[-1]
        at = bisect.bisect_right(versions, at_us, key=lambda version: version.commit_us)
        return versions[at - 1] if at else None

    def read(self, paths: list[Path], read_time: dt.datetime | None) -> list[Snapshot]:
        def serve(arrived: int) -> list[Snapshot] | gexc.GoogleAPICallError:
            with self._lock:
                at_us = arrived if read_time is None else self._us(read_time)
                if arrived - at_us > READ_WINDOW_US:
                    return past_the_window()
                if self.unreadable.intersection(paths):
                    return unavailable()
                self.max_read_us = max(self.max_read_us, at_us)
                self.reads += max(1, len(paths))
                return [self._snapshot(path, at_us) for path in paths]

        found: list[Snapshot] | gexc.GoogleAPICallError = self._request(serve)
        if isinstance(found, gexc.GoogleAPICallError):
            raise found
        return found

    def scan(self, candidates: Callable[[], Iterable[Path]], filters: list[FieldFilter],
             read_time: dt.datetime | None, group: str | None,
             served: Callable[[list[Snapshot]], tuple[list[Snapshot], bool]]
             ) -> list[Snapshot]:
        """The documents of `candidates` that match `filters` at `read_time`, as `served`
        answers them (its order, cursor and limit): billed, and noted when it is a change
        query."""
        # The lease owner the asking actor acts for: `serve` runs in the scheduler, no actor's.
        owner = getattr(self.sim.current(), "owner", None)

        def serve(arrived: int) -> list[Snapshot] | gexc.GoogleAPICallError:
            with self._lock:
                at_us = arrived if read_time is None else self._us(read_time)
                if arrived - at_us > READ_WINDOW_US:
                    return past_the_window()
                if any(start <= arrived < end and group == down
                       for start, end, down in self.outages):
                    down_now: gexc.GoogleAPICallError = failure(
                        gexc.ServiceUnavailable, f"simulated: {group} is down")
                    return down_now
                self.max_read_us = max(self.max_read_us, at_us)
                found = []
                for path in sorted(candidates()):
                    version = self.latest(path, at_us)
                    if version is None or version.data is None or not all(
                            _matches(version.data, f) for f in filters):
                        continue
                    if path in self.unreadable:
                        return unavailable()
                    found.append(self._snapshot(path, at_us))
                found, cut = served(found)
                self.reads += max(1, len(found))
                # A limit that left documents out: the query read up to its last one's stamp.
                through = (found[-1].to_dict() or {}).get("updated_at") if cut else None
                self._note_change_query(group, filters, at_us, owner, through)
                return found

        found: list[Snapshot] | gexc.GoogleAPICallError = self._request(serve)
        if isinstance(found, gexc.GoogleAPICallError):
            raise found
        return found

    def reimport(self, collection: str) -> None:
        """An import (a managed import, the emulator's on a restart) of every document under
        the top-level `collection`: each is created again now, its fields unchanged, so its
        create and update times are the import's."""
        with self._lock:
            now_us = max(self.sim.now_us, self.max_read_us + 1)
            for path, versions in self.docs.items():
                if path[0] != collection or versions[-1].data is None:
                    continue
                at_us = max(now_us, versions[-1].commit_us + 1)
                versions.append(Version(commit_us=at_us, create_us=at_us,
                                        data=clone(versions[-1].data)))
            self.imports.append(now_us)

    def _note_change_query(self, group: str | None, filters: list[FieldFilter],
                           at_us: int, owner: str | None, through: dt.datetime | None) -> None:
        if group != config.SHARDS:
            return
        stripes = next((f.value for f in filters
                        if f.field_path == "stripe" and f.op_string == "in"), None)
        since = next((f.value for f in filters
                      if f.field_path == "updated_at" and f.op_string == ">"), None)
        bounded = any(f.field_path == "updated_at" and f.op_string == "<=" for f in filters)
        if stripes is not None and since is not None and not bounded:  # (a sweep's cell is not)
            self.change_queries.append(ChangeQuery(
                read_us=at_us, stripes=frozenset(stripes), since=since, owner=owner,
                through=through))

    def candidates(self, base: Callable[[], set[Path]], collection_id: str,
                   filters: list[FieldFilter]) -> Callable[[], Iterable[Path]]:
        """The paths a query scans: its collection's, narrowed by an index when it filters an
        INDEXED field by equality or `in`."""
        for condition in filters:
            if condition.field_path in INDEXED and condition.op_string in ("==", "in"):
                wanted: Any = condition.value
                values: list[Any] = list(wanted) if condition.op_string == "in" else [wanted]

                def indexed(values: list[Any] = values, name: str = condition.field_path
                            ) -> set[Path]:
                    found: set[Path] = set()
                    for value in values:
                        found |= self.indexed.get((collection_id, name, value), set())
                    return found & base()

                return indexed
        return base

    def _snapshot(self, path: Path, at_us: int) -> Snapshot:
        version = self.latest(path, at_us)
        live = version is not None and version.data is not None
        return Snapshot(
            reference=DocumentReference(self, path),
            data=version.data if live and version is not None else None,
            read_time=self.sim.instant(at_us),
            update_time=self.sim.instant(version.commit_us) if live and version else None,
            create_time=self.sim.instant(version.create_us) if live and version else None,
        )

    def _us(self, instant: dt.datetime) -> int:
        return round((instant - self.sim.instant(0)) / dt.timedelta(microseconds=1))

    # -- commits --

    def commit(self, writes: list[Write], retry: Any = DEFAULT,
               timeout: float | None = None) -> list[write_pb.WriteResult]:
        """One call of a write method: its attempts, as the client library sends them."""
        library = LibraryRetry.of(retry)
        actor = self.sim.current()
        if actor is not None and actor.killed:
            raise Killed
        self.sim.pause_if_due()  # frozen before the call: its deadline starts after
        first_us = self.sim.now_us
        deadline_us = first_us + micros(COMMIT_TIMEOUT_S if timeout is None else timeout)
        pauses = library.pauses(self.draws.rng) if library is not None else None
        waited_us = 0  # the backoff so far (code that is no actor's sleeps no virtual time)
        number = 0
        while True:
            number += 1
            try:
                return self._attempt(writes, number, deadline_us)
            except gexc.GoogleAPICallError as error:
                if library is None or pauses is None or not library.predicate(error):
                    raise
                pause_us = micros(next(pauses))
                spent_us = max(self.sim.now_us - first_us, waited_us)
                if library.timeout is not None and spent_us + pause_us > micros(library.timeout):
                    raise failure(gexc.RetryError, f"Timeout of {library.timeout:.1f}s exceeded",
                                  error) from error
                self.library_retries += 1
                waited_us += pause_us
                self.sim.sleep(pause_us / 1_000_000)

    def _attempt(self, writes: list[Write], number: int,
                 deadline_us: int) -> list[write_pb.WriteResult]:
        actor = self.sim.current()
        if actor is not None and actor.killed:
            raise Killed
        if actor is not None and self.sim.now_us >= deadline_us:
            # gRPC fails a call whose deadline has passed without sending it.
            raise failure(gexc.DeadlineExceeded, "simulated: the deadline passed before sending")
        fate = self.draws.fate(getattr(actor, "name", None))
        up, down = self.draws.legs() if actor is not None else (0, 0)
        stamp = self.sim.now_us + up
        attempt = Attempt(writes=writes, sender=getattr(actor, "name", None),
                          owner=getattr(actor, "owner", None), call=getattr(actor, "call", None),
                          number=number, stamp_us=stamp,
                          due_us=stamp + fate.delay_us if actor is not None else stamp,
                          fate=fate)
        self.attempts.append(attempt)
        if actor is None:
            if fate.refused is None:
                self._land(attempt)
            return self._answer(attempt, None)
        if fate.refused is None:
            self._flying += 1
            self.sim.at(attempt.due_us, functools.partial(self._land, attempt))
        heard = attempt.due_us + down
        lost: gexc.GoogleAPICallError | None = None
        if fate.lost_before:
            heard = stamp + round(self.draws.uniform(0.0, 1.0) * fate.delay_us)
        if heard > deadline_us:
            heard = deadline_us
            lost = failure(gexc.DeadlineExceeded,
                           "simulated: the deadline passed while the commit was in flight")
        self.sim.wait_until(heard)
        return self._answer(attempt, lost)

    def _answer(self, attempt: Attempt, lost: gexc.GoogleAPICallError | None
                ) -> list[write_pb.WriteResult]:
        fate = attempt.fate
        if lost is not None:
            raise lost
        if fate.refused is not None:
            raise failure(fate.refused, "simulated: refused before it applied, nothing was "
                          "written")
        if fate.lost is not None:
            raise failure(fate.lost, "simulated: the commit's answer was lost"
                          + (" while it was in flight" if fate.lost_before else ""))
        if attempt.error is not None:
            raise attempt.error
        attempt.answered = True
        return attempt.results

    def in_flight(self) -> int:
        """Attempts sent that have not landed yet."""
        return self._flying

    def _land(self, attempt: Attempt) -> None:
        """The attempt reaches its commit: preconditions, then every write (all or nothing)."""
        with self._lock:
            if attempt.sender is not None:
                self._flying -= 1
            commit_us = max(attempt.due_us, self.max_read_us + 1,
                            *(self._last_us(w.path) + 1 for w in attempt.writes))
            try:
                results, changes = self._apply(attempt.writes, attempt.stamp_us, commit_us)
            except gexc.GoogleAPICallError as error:
                attempt.error = error
                return
            attempt.commit_us, attempt.results, attempt.changes = commit_us, results, changes
            for _, _, after in changes:
                after.origin = attempt
            self.writes += len(attempt.writes)
            self.landed.append(attempt)
            self.max_commit_delay_us = max(self.max_commit_delay_us,
                                           commit_us - attempt.stamp_us)
        for hook in self.on_commit:
            hook(attempt)

    def _last_us(self, path: Path) -> int:
        versions = self.docs.get(path)
        return versions[-1].commit_us if versions else 0

    def _apply(self, writes: list[Write], stamp_us: int, commit_us: int
               ) -> tuple[list[write_pb.WriteResult], list[tuple[Path, Version | None, Version]]]:
        """Check every precondition, then apply every write."""
        stamp = self.sim.instant(stamp_us)
        states: dict[Path, dict[str, Any] | None] = {}
        created: dict[Path, int] = {}
        for w in writes:
            last = self.latest(w.path)
            if w.path not in states:
                states[w.path] = None if last is None or last.data is None else clone(last.data)
                created[w.path] = last.create_us if last and last.data is not None else commit_us
            exists = states[w.path] is not None
            where = "/".join(w.path)
            if (w.op == "create" or w.exists is False) and exists:
                raise failure(gexc.AlreadyExists, f"{where} exists")
            if (w.op == "update" or w.exists is True) and not exists:
                raise failure(gexc.NotFound, f"{where} does not exist")
            if w.last_update_time is not None and (
                    last is None or last.data is None
                    or self.sim.instant(last.commit_us) != as_datetime(w.last_update_time)):
                raise failure(gexc.FailedPrecondition, f"{where} changed since it was read")
        results = []
        for w in writes:
            transformed: list[Any] = []
            if w.op == "delete":
                states[w.path] = None
            else:
                base: dict[str, Any] = {} if w.op in ("create", "set") and not w.merge \
                    else states[w.path] or {}
                states[w.path] = apply_fields(base, w.fields, nested=w.op != "update",
                                              stamp=stamp, results=transformed)
            if states[w.path] is None:
                created.pop(w.path, None)
            results.append(write_result(commit_us if w.op != "delete" else None, transformed))
        # A write that leaves a document as it was keeps its version, as Firestore does ("if the
        # write did not actually change the document", WriteResult.update_time is the previous
        # one): no new version, no event, and a precondition on the old version still holds.
        unchanged = {path: last.commit_us for path, data in states.items()
                     if (last := self.latest(path)) is not None and last.data is not None
                     and same(data, last.data)}
        for i, w in enumerate(writes):
            if w.path in unchanged and w.op != "delete":
                results[i] = write_result(unchanged[w.path],
                                          list(write_pb.WriteResult.pb(results[i]).transform_results))
        changes = []
        for path, data in states.items():
            if path in unchanged:
                continue
            before = self.latest(path)
            after = Version(commit_us=commit_us, create_us=created.get(path, commit_us),
                            data=data)
            if path not in self.docs:
                self.children.setdefault(path[:-1], set()).add(path)
                self.groups.setdefault(path[-2], set()).add(path)
            for name in INDEXED:
                if data is not None and name in data:
                    self.indexed.setdefault((path[-2], name, data[name]), set()).add(path)
            self.docs.setdefault(path, []).append(after)
            changes.append((path, before, after))
        return results, changes


# The protobuf classes under proto-plus's: built directly, a WriteResult costs a tenth (the
# wrappers marshal every field, the simulation's hottest code).
VALUE: Any = document_pb.Value.pb()
WRITE_RESULT: Any = write_pb.WriteResult.pb()
ORIGIN_US = round(ORIGIN.timestamp() * 1_000_000)


def write_result(update_us: int | None, transformed: list[Any]) -> write_pb.WriteResult:
    """A commit's WriteResult: updated at `update_us` (None: a delete's), with the transforms'
    results (protobuf Values)."""
    result = WRITE_RESULT(transform_results=transformed)
    if update_us is not None:
        result.update_time.FromMicroseconds(ORIGIN_US + update_us)
    wrapped: write_pb.WriteResult = write_pb.WriteResult.wrap(result)
    return wrapped


def past_the_window() -> gexc.GoogleAPICallError:
    """Firestore's answer to a read at a read time older than it keeps."""
    error: gexc.GoogleAPICallError = failure(
        gexc.FailedPrecondition, "simulated: read_time is more than an hour in the past")
    return error


def unavailable() -> gexc.GoogleAPICallError:
    error: gexc.GoogleAPICallError = failure(gexc.ServiceUnavailable,
                                             "simulated: a document cannot be served")
    return error


def failure(kind: type[Exception], *args: Any) -> Any:
    """The error the client library raises (its classes are untyped)."""
    return kind(*args)


def as_datetime(value: Any) -> dt.datetime:
    if isinstance(value, timestamp_pb2.Timestamp):
        converted: dt.datetime = value.ToDatetime(tzinfo=dt.UTC)
        return converted
    result: dt.datetime = value
    return result


def incremented(old: Any, by: int | float) -> int | float:
    """Firestore's increment (the JS SDK's `increment` documents it): a field that is not a number
    (missing, a bool, a string) becomes the operand; an integer plus an integer is an integer,
    clamped to 64 bits; with a double on either side the sum is a double (IEEE 754)."""
    if type(old) not in (int, float):
        return by
    if type(old) is int and type(by) is int:
        return max(-2**63, min(2**63 - 1, old + by))
    return float(old) + float(by)


@functools.lru_cache(maxsize=1 << 16)
def field_parts(path: str) -> tuple[str, ...]:
    """The names of a field path (`a.b`, `` `x.y` ``), parsed once."""
    return tuple(parse_field_path(path))


def apply_fields(base: dict[str, Any], fields: dict[str, Any], *, nested: bool,
                 stamp: dt.datetime, results: list[Any]) -> dict[str, Any]:
    """Apply a set (nested maps merge) or an update (keys are field paths) to `base`, with
    transforms' results in field path order, as Firestore returns them."""
    for key, value in sorted(fields.items()):
        parts = (key,) if nested else field_parts(key)
        target = base
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        name = parts[-1]
        if isinstance(value, dict) and nested and value:
            inner = target.get(name)
            target[name] = apply_fields(inner if isinstance(inner, dict) else {}, value,
                                        nested=True, stamp=stamp, results=results)
        elif isinstance(value, transforms.Increment):
            target[name] = incremented(target.get(name), value.value)
            results.append(VALUE(integer_value=target[name]) if type(target[name]) is int
                           else VALUE(double_value=target[name]))
        elif isinstance(value, transforms.ArrayUnion):
            old = target.get(name)
            target[name] = list(old) if isinstance(old, list) else []
            target[name] += [clone(v) for v in value.values if v not in target[name]]
            results.append(VALUE(null_value=0))
        elif value is transforms.SERVER_TIMESTAMP:
            target[name] = stamp
            seconds = timestamp_pb2.Timestamp()
            seconds.FromDatetime(stamp)
            results.append(VALUE(timestamp_value=seconds))
        elif value is transforms.DELETE_FIELD:
            target.pop(name, None)
        else:
            target[name] = clone(value)
    return base


@dataclass(frozen=True)
class Option:
    exists: bool | None = None
    last_update_time: dt.datetime | None = None


# -- the client API ------------------------------------------------------------------------------


class Snapshot:
    def __init__(self, *, reference: DocumentReference, data: dict[str, Any] | None,
                 read_time: dt.datetime | None, update_time: dt.datetime | None,
                 create_time: dt.datetime | None) -> None:
        self.reference = reference
        self._data = data  # a stored version's: never changed, copied when handed out
        self.exists = data is not None
        self.read_time = read_time
        self.update_time = update_time
        self.create_time = create_time

    @property
    def id(self) -> str:
        return self.reference.id

    def to_dict(self) -> dict[str, Any] | None:
        copied: dict[str, Any] | None = clone(self._data)
        return copied

    def get(self, field_path: str) -> Any:
        value: Any = self._data or {}
        for part in field_path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise KeyError(field_path)
            value = value[part]
        return clone(value)


class DocumentReference:
    def __init__(self, model: Model, path: Path) -> None:
        self._model = model
        self._path = path

    @property
    def id(self) -> str:
        return self._path[-1]

    @property
    def path(self) -> str:
        return "/".join(self._path)

    @property
    def parent(self) -> CollectionReference:
        return CollectionReference(self._model, self._path[:-1])

    def collection(self, *names: str) -> CollectionReference:
        return CollectionReference(self._model, self._path + names)

    def get(self, field_paths: Iterable[str] | None = None,
            read_time: dt.datetime | None = None, **_: Any) -> Snapshot:
        return self._model.read([self._path], read_time)[0]

    def get_document(self) -> Snapshot:
        """The unary GetDocument RPC (`encoding.get`): its answer carries no read time."""
        snapshot = self.get()
        snapshot.read_time = None
        return snapshot

    def create(self, fields: dict[str, Any], retry: Any = DEFAULT,
               timeout: float | None = None) -> write_pb.WriteResult:
        return self._model.commit([Write("create", self._path, fields)], retry, timeout)[0]

    def set(self, fields: dict[str, Any], merge: bool = False, retry: Any = DEFAULT,
            timeout: float | None = None) -> write_pb.WriteResult:
        return self._model.commit([Write("set", self._path, fields, merge=merge)], retry,
                                  timeout)[0]

    def update(self, fields: dict[str, Any], option: Option | None = None,
               retry: Any = DEFAULT, timeout: float | None = None) -> write_pb.WriteResult:
        return self._model.commit([_with(Write("update", self._path, fields), option)], retry,
                                  timeout)[0]

    def delete(self, option: Option | None = None, retry: Any = DEFAULT,
               timeout: float | None = None) -> Any:
        return self._model.commit([_with(Write("delete", self._path), option)], retry,
                                  timeout)[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DocumentReference) and other._path == self._path

    def __hash__(self) -> int:
        return hash(self._path)


def _with(write: Write, option: Option | None) -> Write:
    if option is not None:
        write.exists = option.exists
        write.last_update_time = option.last_update_time
    return write


class Query:
    def __init__(self, model: Model, base: Callable[[], set[Path]], collection_id: str,
                 group: str | None = None) -> None:
        self._model = model
        self._base = base
        self._collection_id = collection_id
        self._group = group  # a collection group query's collection id
        self._filters: list[FieldFilter] = []
        self._order: list[tuple[str, str]] = []
        self._limit: int | None = None
        self._after: Path | None = None
        self._after_values: tuple[Any, ...] = ()  # the cursor's values of the order's fields
        self._inclusive = False  # start_at: from `_after` itself

    def _copy(self) -> Query:
        query = Query(self._model, self._base, self._collection_id, self._group)
        query._filters, query._order = list(self._filters), list(self._order)
        query._limit, query._after, query._inclusive = self._limit, self._after, self._inclusive
        query._after_values = self._after_values
        return query

    def where(self, *, filter: FieldFilter) -> Query:  # the client's keyword
        query = self._copy()
        query._filters.append(filter)
        return query

    def select(self, field_paths: Iterable[str]) -> Query:
        return self._copy()

    def order_by(self, field_path: Any, direction: str = "ASCENDING") -> Query:
        query = self._copy()
        query._order.append((field_path, direction))
        return query

    def limit(self, count: int) -> Query:
        query = self._copy()
        query._limit = count
        return query

    def start_after(self, cursor: Snapshot | dict[str, DocumentReference]) -> Query:
        """Documents after a snapshot's (in the query's order, then document order, as the
        client's cursor from a snapshot: ascending orders only), or after
        `{FieldPath.document_id(): ref}` in document order."""
        query = self._copy()
        if isinstance(cursor, Snapshot):
            assert all(direction == "ASCENDING" for _, direction in self._order)
            query._after = cursor.reference._path
            query._after_values = tuple(cursor.get(field_path) for field_path, _ in self._order
                                        if field_path != DOCUMENT_ID)
        else:
            query._after = cursor[DOCUMENT_ID]._path
        query._inclusive = False
        return query

    def start_at(self, cursor: Snapshot | dict[str, DocumentReference]) -> Query:
        """As `start_after`, from the cursor's document itself."""
        query = self.start_after(cursor)
        query._inclusive = True
        return query

    def stream(self, read_time: dt.datetime | None = None, **_: Any) -> Iterator[Snapshot]:
        return iter(self._model.scan(
            self._model.candidates(self._base, self._collection_id, self._filters),
            self._filters, read_time, self._group, self._served))

    def _served(self, found: list[Snapshot]) -> tuple[list[Snapshot], bool]:
        """What a query answers of the documents that match its filters: in its order, after its
        cursor, up to its limit; and whether the limit left some out."""
        after = self._after
        fields = [field_path for field_path, _ in self._order if field_path != DOCUMENT_ID]
        for field_path, direction in reversed(self._order):  # stable sorts, last key first
            if field_path != DOCUMENT_ID:  # found in document order already
                found.sort(key=operator.methodcaller("get", field_path),
                           reverse=direction == "DESCENDING")
        if after is not None:
            assert len(self._after_values) == len(fields)  # a snapshot's cursor, or no order
            cursor = (*self._after_values, after)

            def key(snapshot: Snapshot) -> tuple[Any, ...]:
                return (*(snapshot.get(field_path) for field_path in fields),
                        snapshot.reference._path)

            found = [snapshot for snapshot in found if key(snapshot) > cursor
                     or (self._inclusive and key(snapshot) == cursor)]
        if self._limit is None or len(found) <= self._limit:
            return found, False
        return found[:self._limit], True

    def sum(self, field_path: str, alias: str) -> Aggregation:
        return Aggregation(self, field_path, alias)

    def count(self, alias: str) -> Aggregation:
        return Aggregation(self, None, alias)


@dataclass(frozen=True)
class AggregationResult:
    alias: str
    value: int


class Aggregation:
    """`query.sum(field, alias=...)` or `query.count(alias=...)` (no field): one result, read
    at `read_time`."""

    def __init__(self, query: Query, field_path: str | None, alias: str) -> None:
        self._query, self._field, self._alias = query, field_path, alias

    def get(self, read_time: dt.datetime | None = None, **_: Any
            ) -> list[list[AggregationResult]]:
        total = sum(1 if self._field is None else int((s._data or {}).get(self._field) or 0)
                    for s in self._query.stream(read_time=read_time))
        return [[AggregationResult(self._alias, total)]]


def _matches(data: dict[str, Any], condition: FieldFilter) -> bool:
    if condition.field_path not in data:
        return False
    value, wanted = data[condition.field_path], condition.value
    if condition.op_string == "in":
        return bool(value in (wanted or ()))
    if condition.op_string == "==":
        return bool(value == wanted)
    if type(value) is not type(wanted) and not (isinstance(value, dt.datetime)
                                                 and isinstance(wanted, dt.datetime)):
        return False  # Firestore orders values of one type only
    comparisons: dict[str, Callable[[Any, Any], bool]] = {
        ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
    return comparisons[condition.op_string](value, wanted)


class CollectionReference(Query):
    def __init__(self, model: Model, path: Path) -> None:
        def base() -> set[Path]:
            return model.children.get(path, set())

        super().__init__(model, base, path[-1])
        self._path = path

    @property
    def id(self) -> str:
        return self._path[-1]

    @property
    def parent(self) -> DocumentReference | None:
        return DocumentReference(self._model, self._path[:-1]) if len(self._path) > 1 else None

    def document(self, document_id: str) -> DocumentReference:
        return DocumentReference(self._model, (*self._path, document_id))

    def list_documents(self, page_size: int | None = None) -> list[DocumentReference]:
        return [s.reference for s in self.stream()]


class WriteBatch:
    def __init__(self, model: Model) -> None:
        self._model = model
        self._writes: list[Write] = []

    def create(self, ref: DocumentReference, fields: dict[str, Any]) -> None:
        self._writes.append(Write("create", ref._path, fields))

    def set(self, ref: DocumentReference, fields: dict[str, Any], merge: bool = False) -> None:
        self._writes.append(Write("set", ref._path, fields, merge=merge))

    def update(self, ref: DocumentReference, fields: dict[str, Any],
               option: Option | None = None) -> None:
        self._writes.append(_with(Write("update", ref._path, fields), option))

    def delete(self, ref: DocumentReference, option: Option | None = None) -> None:
        self._writes.append(_with(Write("delete", ref._path), option))

    def commit(self, retry: Any = DEFAULT, timeout: float | None = None
               ) -> list[write_pb.WriteResult]:
        return self._model.commit(self._writes, retry, timeout)


def split(path: tuple[str, ...]) -> Path:
    """A path given as segments, slash-separated strings, or both."""
    return tuple(segment for part in path for segment in part.split("/"))


class Client:
    """What the domain calls `db`."""

    project = "demo-sim"

    def __init__(self, model: Model) -> None:
        self._model = model

    def collection(self, *path: str) -> CollectionReference:
        return CollectionReference(self._model, split(path))

    def document(self, *path: str) -> DocumentReference:
        return DocumentReference(self._model, split(path))

    def collection_group(self, name: str) -> Query:
        return Query(self._model, lambda: self._model.groups.get(name, set()), name, name)

    def batch(self) -> WriteBatch:
        return WriteBatch(self._model)

    def write_option(self, *, exists: bool | None = None,
                     last_update_time: dt.datetime | None = None) -> Option:
        return Option(exists=exists, last_update_time=last_update_time)

    def get_all(self, refs: Iterable[DocumentReference], field_paths: Any = None,
                read_time: dt.datetime | None = None, **_: Any) -> Iterator[Snapshot]:
        return iter(self._model.read([ref._path for ref in refs], read_time))

    def recursive_delete(self, reference: CollectionReference, **_: Any) -> int:
        refs = reference.list_documents()
        if refs:
            self._model.commit([Write("delete", ref._path) for ref in refs])
        return len(refs)
