"""A model of production Firestore, for the simulation: the part of the google-cloud-firestore
client API the domain uses, with Firestore's semantics rather than the emulator's.

What it models:
- Multi-version documents: every commit appends a version at its commit time; a read at
  `read_time` T sees, per document, the last version committed at or before T (snapshot reads;
  a read without one reads at the server's "now").
- Server timestamps are taken when a write's request reaches the server, S; the write commits at
  C = S + a request-to-commit delay drawn by the run (usually milliseconds, sometimes seconds:
  contention, retries), and is visible only from C on. The write result carries C as
  `update_time` and S among its transform results, as Firestore's does.
- Commits are serialisable in commit-time order: a commit's time is later than the last version
  of every document it writes (it waited for their locks) and than every read already served
  (a read at T never misses a commit <= T). Preconditions (`exists`, `last_update_time`,
  create-only) are checked against the documents' last versions; a failed one writes nothing.
- Failures drawn by the run: a commit aborted before it applies (nothing written), or one whose
  answer is lost after it applied (the caller sees an error, the write is there).
- Requests take virtual time (`virtual.Sim.wait`); an actor whose process died sends nothing.

What it does not model: indexes (queries scan), billing beyond counting documents read and
written, document size limits, transactions (the domain uses none), listeners.
"""

from __future__ import annotations

import copy
import datetime as dt
import operator
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud.firestore_v1 import transforms
from google.cloud.firestore_v1.base_query import FieldFilter
from google.cloud.firestore_v1.field_path import parse_field_path
from google.cloud.firestore_v1.types import document as document_pb
from google.cloud.firestore_v1.types import write as write_pb
from google.protobuf import timestamp_pb2

from .virtual import Killed, Sim

Path = tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Latency:
    """How long requests take, in seconds (the run draws each one)."""

    read: tuple[float, float] = (0.002, 0.02)
    commit: tuple[float, float] = (0.005, 0.06)
    slow_commit: tuple[float, float] = (0.3, 4.0)  # contention, a retried request
    slow_p: float = 0.04
    stuck_commit: tuple[float, float] = (5.0, 40.0)  # rare: far beyond any overlap
    stuck_p: float = 0.004
    abort_p: float = 0.01  # a commit that fails before it applies
    lost_answer_p: float = 0.01  # a commit that applies, whose answer is lost


@dataclass
class Version:
    commit_us: int
    create_us: int
    data: dict[str, Any] | None  # None: deleted


@dataclass
class Committed:
    """One applied commit, for the checks and the event feed."""

    commit_us: int
    actor: str | None
    changes: list[tuple[Path, Version | None, Version]]  # path, before, after


class Model:
    """The database of one run."""

    def __init__(self, sim: Sim, rng: random.Random, latency: Latency | None = None) -> None:
        self.sim = sim
        self.rng = rng
        self.latency = latency or Latency()
        self.docs: dict[Path, list[Version]] = {}
        # Every path ever written, by collection and by collection id (what queries scan).
        self.children: dict[Path, set[Path]] = {}
        self.groups: dict[str, set[Path]] = {}
        self.max_read_us = 0
        self.reads = 0
        self.writes = 0
        self.on_commit: list[Callable[[Committed], None]] = []
        self._lock = threading.RLock()

    # -- time --

    def _arrive(self) -> int:
        """The request leaves its actor and reaches the server: the server's instant. A thread
        that is no actor (a read pool's) runs within its actor's turn: no time passes, and it
        draws nothing from the run's generator (the pool's threads run in any order)."""
        actor = self.sim.current()
        if actor is not None:
            if actor.killed:
                raise Killed
            if actor.pause_s:
                pause, actor.pause_s = actor.pause_s, 0.0
                self.sim.wait(pause)
            self.sim.wait(self.rng.uniform(*self.latency.read) / 2)
        return self.sim.now_us

    def _answer(self, at_us: int) -> None:
        """The answer reaches the actor after `at_us`."""
        if self.sim.current() is not None:
            self.sim.wait((at_us - self.sim.now_us) / 1_000_000
                          + self.rng.uniform(*self.latency.read) / 2)

    # -- reads --

    def latest(self, path: Path, at_us: int | None = None) -> Version | None:
        versions = self.docs.get(path)
        if not versions:
            return None
        if at_us is None:
            return versions[-1]
        for version in reversed(versions):
            if version.commit_us <= at_us:
                return version
        return None

    def read(self, paths: list[Path], read_time: dt.datetime | None) -> list[Snapshot]:
        at = self._arrive()
        with self._lock:
            at_us = at if read_time is None else self._us(read_time)
            self.max_read_us = max(self.max_read_us, at_us)
            found = [self._snapshot(path, at_us) for path in paths]
            self.reads += max(1, len(paths))
        self._answer(at)
        return found

    def scan(self, candidates: Callable[[], Iterable[Path]],
             accept: Callable[[Path, dict[str, Any]], bool],
             read_time: dt.datetime | None) -> list[Snapshot]:
        at = self._arrive()
        with self._lock:
            at_us = at if read_time is None else self._us(read_time)
            self.max_read_us = max(self.max_read_us, at_us)
            found = []
            for path in sorted(candidates()):
                version = self.latest(path, at_us)
                if version is not None and version.data is not None and accept(path,
                                                                                 version.data):
                    snapshot = self._snapshot(path, at_us)
                    # The client gives a query's results protobuf Timestamps, not datetimes.
                    update_time = timestamp_pb2.Timestamp()
                    update_time.FromDatetime(snapshot.update_time)
                    snapshot.update_time = update_time
                    found.append(snapshot)
            self.reads += max(1, len(found))
        self._answer(at)
        return found

    def _snapshot(self, path: Path, at_us: int) -> Snapshot:
        version = self.latest(path, at_us)
        live = version is not None and version.data is not None
        return Snapshot(
            reference=DocumentReference(self, path),
            data=copy.deepcopy(version.data) if live and version is not None else None,
            read_time=self.sim.instant(at_us),
            update_time=self.sim.instant(version.commit_us) if live and version else None,
            create_time=self.sim.instant(version.create_us) if live and version else None,
        )

    def _us(self, instant: dt.datetime) -> int:
        return round((instant - self.sim.instant(0)) / dt.timedelta(microseconds=1))

    # -- writes --

    def commit(self, writes: list[Write]) -> list[write_pb.WriteResult]:
        started = self._arrive()
        delay = self._commit_delay()
        draw = self.rng.random()
        if draw < self.latency.abort_p:
            self._answer(started + delay)
            raise failure(gexc.Aborted, "simulated: the commit was aborted, nothing was written")
        refused: Exception | None = None
        with self._lock:
            commit_us = max(started + delay, self.max_read_us + 1,
                            *(self._last_us(w.path) + 1 for w in writes))
            try:
                results, changes = self._apply(writes, started, commit_us)
            except gexc.GoogleAPICallError as error:  # a precondition: nothing was written
                refused = error
            else:
                done = Committed(commit_us=commit_us,
                                 actor=getattr(self.sim.current(), "name", None), changes=changes)
                self.writes += len(writes)
                for hook in self.on_commit:
                    hook(done)
        self._answer(commit_us)
        if refused is not None:
            raise refused
        if draw > 1 - self.latency.lost_answer_p:
            raise failure(gexc.ServiceUnavailable,
                          "simulated: the commit applied, its answer was lost")
        return results

    def _commit_delay(self) -> int:
        draw = self.rng.random()
        latency = self.latency
        if draw < latency.stuck_p:
            bounds = latency.stuck_commit
        elif draw < latency.stuck_p + latency.slow_p:
            bounds = latency.slow_commit
        else:
            bounds = latency.commit
        return max(1, round(self.rng.uniform(*bounds) * 1_000_000))

    def _last_us(self, path: Path) -> int:
        versions = self.docs.get(path)
        return versions[-1].commit_us if versions else 0

    def _apply(self, writes: list[Write], started: int, commit_us: int
               ) -> tuple[list[write_pb.WriteResult], list[tuple[Path, Version | None, Version]]]:
        """Check every precondition, then apply every write (all or nothing)."""
        stamp = self.sim.instant(started)
        states: dict[Path, dict[str, Any] | None] = {}
        created: dict[Path, int] = {}
        for w in writes:
            if w.path not in states:
                last = self.latest(w.path)
                states[w.path] = None if last is None or last.data is None else \
                    copy.deepcopy(last.data)
                created[w.path] = last.create_us if last and last.data is not None else commit_us
            exists = states[w.path] is not None
            last = self.latest(w.path)
            if w.op == "create" and exists:
                raise failure(gexc.AlreadyExists, f"{'/'.join(w.path)} exists")
            if w.op == "update" and not exists:
                raise failure(gexc.NotFound, f"{'/'.join(w.path)} does not exist")
            if w.exists is True and not exists:
                raise failure(gexc.NotFound, f"{'/'.join(w.path)} does not exist")
            if w.exists is False and exists:
                raise failure(gexc.AlreadyExists, f"{'/'.join(w.path)} exists")
            if w.last_update_time is not None and (
                    last is None or last.data is None
                    or self.sim.instant(last.commit_us) != as_datetime(w.last_update_time)):
                raise failure(gexc.FailedPrecondition,
                              f"{'/'.join(w.path)} changed since it was read")
        results = []
        for w in writes:
            transformed: list[document_pb.Value] = []
            if w.op == "delete":
                states[w.path] = None
            else:
                base: dict[str, Any] = {} if w.op in ("create", "set") and not w.merge \
                    else states[w.path] or {}
                states[w.path] = apply_fields(copy.deepcopy(base), w.fields,
                                              nested=w.op != "update", stamp=stamp,
                                              results=transformed)
            if states[w.path] is None:
                created.pop(w.path, None)
            results.append(write_pb.WriteResult(
                update_time=self.sim.instant(commit_us) if w.op != "delete" else None,
                transform_results=transformed))
        changes = []
        for path, data in states.items():
            before = self.latest(path)
            after = Version(commit_us=commit_us, create_us=created.get(path, commit_us),
                            data=data)
            if path not in self.docs:
                self.children.setdefault(path[:-1], set()).add(path)
                self.groups.setdefault(path[-2], set()).add(path)
            self.docs.setdefault(path, []).append(after)
            changes.append((path, before, after))
        return results, changes


def as_datetime(value: Any) -> dt.datetime:
    if isinstance(value, timestamp_pb2.Timestamp):
        converted: dt.datetime = value.ToDatetime(tzinfo=dt.UTC)
        return converted
    result: dt.datetime = value
    return result


def failure(kind: type[gexc.GoogleAPICallError], message: str) -> gexc.GoogleAPICallError:
    """The error the client library raises for a refused request."""
    return kind(message)


def apply_fields(base: dict[str, Any], fields: dict[str, Any], *, nested: bool,
                 stamp: dt.datetime, results: list[document_pb.Value]) -> dict[str, Any]:
    """Apply a set (nested maps merge) or an update (keys are field paths) to `base`."""
    for key, value in sorted(fields.items()):
        parts = [key] if nested else parse_field_path(key)
        target = base
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        name = parts[-1]
        if isinstance(value, dict) and nested and value:
            inner = target.get(name)
            target[name] = apply_fields(inner if isinstance(inner, dict) else {}, value,
                                        nested=True, stamp=stamp, results=results)
        elif isinstance(value, transforms.Increment):
            old = target.get(name)
            target[name] = (old if isinstance(old, int) else 0) + value.value
            results.append(document_pb.Value(integer_value=target[name]))
        elif value is transforms.SERVER_TIMESTAMP:
            target[name] = stamp
            seconds = timestamp_pb2.Timestamp()
            seconds.FromDatetime(stamp)
            results.append(document_pb.Value(timestamp_value=seconds))
        elif value is transforms.DELETE_FIELD:
            target.pop(name, None)
        else:
            target[name] = copy.deepcopy(value)
    return base


@dataclass
class Write:
    op: str  # create, set, update, delete
    path: Path
    fields: dict[str, Any] = field(default_factory=dict)
    merge: bool = False
    exists: bool | None = None
    last_update_time: dt.datetime | None = None


@dataclass(frozen=True)
class Option:
    exists: bool | None = None
    last_update_time: dt.datetime | None = None


# -- the client API ------------------------------------------------------------------------------


class Snapshot:
    def __init__(self, *, reference: DocumentReference, data: dict[str, Any] | None,
                 read_time: dt.datetime, update_time: dt.datetime | None,
                 create_time: dt.datetime | None) -> None:
        self.reference = reference
        self._data = data
        self.exists = data is not None
        self.read_time = read_time
        self.update_time = update_time
        self.create_time = create_time

    @property
    def id(self) -> str:
        return self.reference.id

    def to_dict(self) -> dict[str, Any] | None:
        return copy.deepcopy(self._data)

    def get(self, field_path: str) -> Any:
        value: Any = self._data or {}
        for part in field_path.split("."):
            if not isinstance(value, dict) or part not in value:
                raise KeyError(field_path)
            value = value[part]
        return copy.deepcopy(value)


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

    def create(self, fields: dict[str, Any], **_: Any) -> write_pb.WriteResult:
        return self._model.commit([Write("create", self._path, fields)])[0]

    def set(self, fields: dict[str, Any], merge: bool = False, **_: Any) -> write_pb.WriteResult:
        return self._model.commit([Write("set", self._path, fields, merge=merge)])[0]

    def update(self, fields: dict[str, Any], option: Option | None = None, **_: Any
               ) -> write_pb.WriteResult:
        return self._model.commit([_with(Write("update", self._path, fields), option)])[0]

    def delete(self, option: Option | None = None, **_: Any) -> Any:
        return self._model.commit([_with(Write("delete", self._path), option)])[0]

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
    def __init__(self, model: Model, candidates: Callable[[], Iterable[Path]]) -> None:
        self._model = model
        self._candidates = candidates
        self._filters: list[FieldFilter] = []
        self._order: list[tuple[str, str]] = []
        self._limit: int | None = None

    def _copy(self) -> Query:
        query = Query(self._model, self._candidates)
        query._filters, query._order, query._limit = list(self._filters), list(self._order), \
            self._limit
        return query

    def where(self, *, filter: FieldFilter) -> Query:  # the client's keyword
        query = self._copy()
        query._filters.append(filter)
        return query

    def select(self, field_paths: Iterable[str]) -> Query:
        return self._copy()

    def order_by(self, field_path: str, direction: str = "ASCENDING") -> Query:
        query = self._copy()
        query._order.append((field_path, direction))
        return query

    def limit(self, count: int) -> Query:
        query = self._copy()
        query._limit = count
        return query

    def stream(self, read_time: dt.datetime | None = None, **_: Any) -> Iterator[Snapshot]:
        def accept(path: Path, data: dict[str, Any]) -> bool:
            return all(_matches(data, f) for f in self._filters)

        found = self._model.scan(self._candidates, accept, read_time)
        for field_path, direction in reversed(self._order):  # stable sorts, last key first
            found.sort(key=operator.methodcaller("get", field_path),
                       reverse=direction == "DESCENDING")
        return iter(found[:self._limit] if self._limit is not None else found)


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
        ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}
    return comparisons[condition.op_string](value, wanted)


class CollectionReference(Query):
    def __init__(self, model: Model, path: Path) -> None:
        def candidates() -> set[Path]:
            return model.children.get(path, set())

        super().__init__(model, candidates)
        self._path = path

    @property
    def id(self) -> str:
        return self._path[-1]

    @property
    def parent(self) -> DocumentReference | None:
        return DocumentReference(self._model, self._path[:-1]) if len(self._path) > 1 else None

    def document(self, document_id: str) -> DocumentReference:
        return DocumentReference(self._model, (*self._path, document_id))

    def list_documents(self) -> list[DocumentReference]:
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

    def commit(self, **_: Any) -> list[write_pb.WriteResult]:
        return self._model.commit(self._writes)


class Client:
    """What the domain calls `db`."""

    project = "demo-sim"

    def __init__(self, model: Model) -> None:
        self._model = model

    def collection(self, *path: str) -> CollectionReference:
        return CollectionReference(self._model, path)

    def document(self, *path: str) -> DocumentReference:
        return DocumentReference(self._model, tuple(part for piece in path
                                                    for part in piece.split("/")))

    def collection_group(self, name: str) -> Query:
        return Query(self._model, lambda: self._model.groups.get(name, set()))

    def batch(self) -> WriteBatch:
        return WriteBatch(self._model)

    def write_option(self, *, exists: bool | None = None,
                     last_update_time: dt.datetime | None = None) -> Option:
        return Option(exists=exists, last_update_time=last_update_time)

    def get_all(self, refs: Iterable[DocumentReference], field_paths: Any = None,
                read_time: dt.datetime | None = None, **_: Any) -> Iterator[Snapshot]:
        return iter(self._model.read([ref._path for ref in refs], read_time))

    def recursive_delete(self, reference: CollectionReference) -> int:
        refs = reference.list_documents()
        if refs:
            self._model.commit([Write("delete", ref._path) for ref in refs])
        return len(refs)
