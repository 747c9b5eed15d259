"""Collection counters: counters declared over the app's own documents, kept by Firestore
document triggers exactly once, on the sharded write path and rollup of every counter.

A `Declaration` (the app's are listed in `counting.features.declarations`) names a document
path pattern and a counter id template `name:{placeholder}`, filled from a wildcard of the path
or from a string field (`group_by`); it counts the documents, or sums an integer field (`sum`).

Exactness rests on one record per watched document, `counted_docs/{hash of its path}`: for each
declaration, what the counters count for the document (`{counter: amount}`) and the version of
the document that this reflects. A version is the document's update time, with deletions ordered
after the state they delete (`Observed.key`). Applying an observed state of a document (an
event's `after`, or what the backfill read) is one compare-and-set:

1. read the record;
2. for each declaration whose entry is older than the observed state: the new entry, and the
   delta per counter (new amounts minus old);
3. commit, in one batch, the record (created only if absent, or updated only if unchanged since
   step 1) and one shard `Increment` per counter whose delta is not 0; a lost race plans again.

So the counters always hold the sum of the records' amounts (every change to a record moves the
shards by the same amounts in the same commit), and each record only moves forward to newer
versions of its document: a redelivered event, or one delivered after a newer one, finds its
entry already as new and writes nothing. Once every event has been delivered, each record holds
the latest state of its document, whatever the order of delivery. The backfill applies the
states it reads through the same step; docs/architecture.md has the argument in full.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import itertools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud import firestore

from counting.features import counter_refs, counters
from counting.foundation import config, writes
from counting.foundation.config import Names
from counting.foundation.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from counting.writepath import shards

if TYPE_CHECKING:
    from counting.features.context import Context
    from counting.features.shard_choice import CounterConfig

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
_TEMPLATE = re.compile(r"(?P<name>[^:{}]+):\{(?P<placeholder>[A-Za-z_][A-Za-z0-9_]*)\}")
_WILDCARD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Characters a value keeps in a counter id; every other UTF-8 byte becomes `.HH`.
_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
ESCAPE = "."
# A value too long for its id keeps an escaped head and ends in `..` and 32 hex digits of its
# SHA-256: `..` never appears in an escaped value (an escape is `.` and two hex digits).
HASH_MARK = ".."
HASH_HEX = 32
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def escape(value: str, room: int) -> str:
    """The id form of `value` in at most `room` characters: A-Z a-z 0-9 _ - stay, every other
    UTF-8 byte is `.` and two upper-case hex digits; too long, the escaped head that fits and
    `..` + the first 32 hex digits of SHA-256(value). Stable, and one-to-one (up to SHA-256)."""
    escaped = "".join(
        char if char in _KEPT else "".join(f"{ESCAPE}{byte:02X}" for byte in char.encode())
        for char in value
    )
    if len(escaped) <= room:
        return escaped
    digest = hashlib.sha256(value.encode()).hexdigest()[:HASH_HEX]
    head = escaped[:room - len(HASH_MARK) - HASH_HEX]
    cut = head.rfind(ESCAPE)
    if cut >= len(head) - 2:  # do not leave half an escape
        head = head[:cut]
    return f"{head}{HASH_MARK}{digest}"


def unescape(escaped: str) -> str:
    """The value of an escaped id part (not of a hashed one: that lost its tail)."""
    if HASH_MARK in escaped:
        raise ValueError(f"{escaped!r} is hashed: its value is not recoverable")
    out = bytearray()
    i = 0
    while i < len(escaped):
        if escaped[i] == ESCAPE:
            out.append(int(escaped[i + 1:i + 3], 16))
            i += 3
        else:
            out.extend(escaped[i].encode())
            i += 1
    return out.decode()


def summable(value: Any) -> int | None:
    """An integer field's value as summed: a JSON integer within the bounds of `by`; anything
    else (bool, float, string, missing, too large) is not summed."""
    if type(value) is int and abs(value) <= config.MAX_ABS_BY:
        return value
    return None


# The Distributed Counter extension's layout (docs/architecture.md, "Extension counters"): its
# clients write `{doc}/SHARDS/{id}`; its workers left partials (ids starting with a tab) whose
# `_updates_` list `{_id_, _data_}` entries.
SHARDS = "_counter_shards_"
SHARD_WILDCARD = "_shard_"
PARTIAL_PREFIX = "\t"
UPDATES, UPDATE_ID, UPDATE_DATA = "_updates_", "_id_", "_data_"
# An extension field's value is counted while it is a whole number this large at most
# (JavaScript's exact integers: the extension's clients are JavaScript, Java, Swift and Dart).
MAX_EXTENSION_AMOUNT = 2**53 - 1


def whole(value: Any) -> int | None:
    """An amount as the extension's clients write it: an integer, or a double with no fraction
    (the Android and iOS clients increment by `1.0`), within MAX_EXTENSION_AMOUNT; None for
    anything else (a fraction, infinity, NaN, a bool, a string, a larger number)."""
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is int and abs(value) <= MAX_EXTENSION_AMOUNT:
        return value
    return None
_FIELD_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_FIELD_SEGMENTS = 8


@dataclass(frozen=True, kw_only=True)
class Extension:
    """How an extension counter is kept: `field` (a dotted path) of the documents, of their
    shards and of their partials' updates; `by`, the change a client's write may make to a
    shard's field (the generated rules refuse any other); `create_documents`, whether a shard
    may be written under a document that does not exist."""

    field: str
    by: tuple[int, int]
    # A client's shard may be the first write under a document that does not exist (the rules
    # refuse it otherwise: any signed-in user could make documents and counters at will).
    create_documents: bool = False

    def __post_init__(self) -> None:
        segments = self.field.split(".")
        if len(segments) > MAX_FIELD_SEGMENTS or not all(
                _FIELD_SEGMENT.fullmatch(s) for s in segments) or segments[0] == UPDATES:
            raise InvalidArgument(f"extension field {self.field!r}: at most {MAX_FIELD_SEGMENTS} "
                                  "dot-separated names of A-Z a-z 0-9 _, not starting with a digit")
        low, high = self.by
        bound = config.MAX_ABS_BY
        if not (type(low) is int and type(high) is int
                and -bound <= low <= high <= bound and (low, high) != (0, 0)):
            raise InvalidArgument(f"extension field {self.field!r}: by must be two integers "
                                  f"low <= high within +-{config.MAX_ABS_BY}, not both 0")

    @property
    def path(self) -> list[str]:
        return self.field.split(".")

    def raw(self, data: Any) -> Any:
        """What one map (a document's data, a partial update's `_data_`) holds at the field
        (None: nothing)."""
        for segment in self.path:
            if not isinstance(data, dict):
                return None
            data = data.get(segment)
        return data

    def value(self, data: Any) -> int:
        """The field's amount in one map: a whole number (see `whole`), else 0 (a fraction, a
        string, missing: not counted)."""
        return whole(self.raw(data)) or 0

    def amount(self, data: Mapping[str, Any], *, partial: bool) -> int:
        """What one document of the layout holds: a shard's (or the counter document's) field,
        or the sum of a partial's updates."""
        if not partial:
            return self.value(data)
        updates = data.get(UPDATES)
        if not isinstance(updates, list):
            return 0
        # Every entry: a move that took fewer would take the rest again. The document's 1 MiB
        # bounds the list (a few tens of thousands of entries).
        return sum(self.value(update.get(UPDATE_DATA)) for update in updates
                   if isinstance(update, dict))

    def nested(self, value: Any) -> dict[str, Any]:
        """`{a: {b: value}}` for the field `a.b`: a merge that writes only this field."""
        nested: dict[str, Any] = {self.path[-1]: value}
        for segment in reversed(self.path[:-1]):
            nested = {segment: nested}
        return nested


def is_partial(shard_id: str) -> bool:
    return shard_id.startswith(PARTIAL_PREFIX)


@dataclass(frozen=True, kw_only=True)
class Declaration:
    """One collection counter: `counter` is the template of its ids (`name:{placeholder}`),
    `documents` the path pattern of the documents it counts. The placeholder is filled from the
    string field `group_by` when given (documents without a string there are not counted), from
    the wildcard of that name in `documents` otherwise. With `sum`, the counter is the sum of
    that integer field (see `summable`) instead of the number of documents."""

    counter: str
    documents: str
    group_by: str | None = None
    sum: str | None = None
    # An extension counter's field and bound: the counter is the field of each document plus
    # that of its shards and partials (`counting.features.extension`).
    extension: Extension | None = None
    # The rate (writes/s) a new counter of this declaration is sized for. A group_by counter
    # takes the writes of every document in its group (all new orders go to orders:pending), so
    # it starts larger; the rollup then sizes every counter to its measured load.
    expected_rate: float | None = None

    @property
    def initial_rate(self) -> float:
        if self.expected_rate is not None:
            return self.expected_rate
        return (config.COLLECTION_GROUP_EXPECTED_RATE if self.group_by is not None
                else config.COLLECTION_EXPECTED_RATE)

    def __post_init__(self) -> None:
        match = _TEMPLATE.fullmatch(self.counter)
        if match is None or not _NAME.fullmatch(match["name"]):
            raise InvalidArgument(f"declaration {self.counter!r}: the counter must read "
                                  "name:{placeholder}, name of A-Z a-z 0-9 _ -")
        segments = self.documents.split("/")
        if len(segments) % 2 or any(not s for s in segments):
            raise InvalidArgument(f"declaration {self.counter!r}: {self.documents!r} is not a "
                                  "document path pattern")
        if not _WILDCARD.fullmatch(segments[-1]):
            raise InvalidArgument(f"declaration {self.counter!r}: the documents' own id must be "
                                  "a wildcard")
        if self.group_by is None and self.placeholder not in wildcards(self.documents):
            raise InvalidArgument(f"declaration {self.counter!r}: {{{self.placeholder}}} is "
                                  f"neither a wildcard of {self.documents!r} nor group_by")
        if self.group_by is not None and self.group_by != self.placeholder:
            raise InvalidArgument(f"declaration {self.counter!r}: group_by must be the "
                                  "placeholder's name")
        if self.extension is not None and (
                self.group_by is not None or self.sum is not None
                or segments[-1] != f"{{{self.placeholder}}}" or SHARDS in segments[::2]):
            raise InvalidArgument(f"declaration {self.counter!r}: an extension counter is one per "
                                  "document: its placeholder is the documents' own id, with no "
                                  f"group_by or sum, and no {SHARDS} in the path")

    @property
    def shards(self) -> str:
        """The path pattern of an extension counter's shards and partials."""
        return f"{self.documents}/{SHARDS}/{{{SHARD_WILDCARD}}}"

    @property
    def name(self) -> str:
        return self.counter.split(":", 1)[0]

    @property
    def placeholder(self) -> str:
        return self.counter[len(self.name) + 2:-1]

    def counter_id(self, value: str) -> str:
        """The counter this declaration keeps for one value of its placeholder."""
        return f"{self.name}:{escape(value, config.MAX_COUNTER_ID - len(self.name) - 1)}"

    def amounts(self, params: Mapping[str, str], data: Mapping[str, Any] | None) -> dict[str, int]:
        """What this declaration counts for one state of a document (`data` None: absent)."""
        if data is None:
            return {}
        value = data.get(self.group_by) if self.group_by is not None else params[self.placeholder]
        if not isinstance(value, str):
            return {}
        amount = 1 if self.sum is None else summable(data.get(self.sum)) or 0
        return {self.counter_id(value): amount}

    @property
    def owns(self) -> str:
        """The prefix of every id this declaration keeps."""
        return f"{self.name}:"


def wildcards(pattern: str) -> list[str]:
    return _WILDCARD.findall(pattern)


def match(pattern: str, path: str) -> dict[str, str] | None:
    """The wildcards' values when `path` is a document of `pattern`, else None."""
    want, got = pattern.split("/"), path.split("/")
    if len(want) != len(got):
        return None
    params: dict[str, str] = {}
    for w, g in zip(want, got, strict=True):
        wildcard = _WILDCARD.fullmatch(w)
        if wildcard is not None:
            params[wildcard[1]] = g
        elif w != g:
            return None
    return params


@dataclass(frozen=True, kw_only=True)
class Watch:
    """The declarations over one path pattern: one trigger, one record per document, and one
    commit per event for all of them (a status change moves two counts and two sums at once)."""

    documents: str
    declarations: tuple[Declaration, ...]

    @property
    def function_name(self) -> str:
        """The trigger's name: `count_` and the pattern's collection ids, each without the
        underscores it begins or ends with (`_counter_shards_`: a deployed service's name may not
        end in one)."""
        return "count_" + "_".join(part.strip("_") for part in self.documents.split("/")[::2])

    @property
    def extension_shards(self) -> bool:
        """It watches the shards (and partials) of extension counters."""
        return self.documents.endswith(f"/{SHARDS}/{{{SHARD_WILDCARD}}}")


def watches(declarations: Iterable[Declaration]) -> list[Watch]:
    """The collection counters grouped by the documents they watch, then the extension counters
    grouped by the shards they watch (`Watch.extension_shards`); names must be unique."""
    grouped: dict[str, list[Declaration]] = defaultdict(list)
    names: set[str] = set()
    declared = list(declarations)
    for declaration in declared:
        if declaration.name in names:
            raise InvalidArgument(f"declaration {declaration.counter!r}: name taken twice")
        names.add(declaration.name)
        if declaration.extension is None:
            grouped[declaration.documents].append(declaration)
    for declaration in declared:
        if declaration.extension is not None:
            grouped[declaration.shards].append(declaration)
    found = [Watch(documents=d, declarations=tuple(group)) for d, group in grouped.items()]
    functions = [w.function_name for w in found]
    if len(set(functions)) != len(functions):
        raise InvalidArgument(f"declarations: two patterns share a trigger name: {functions}")
    return found


def nanos(instant: dt.datetime) -> int:
    """A commit time in nanoseconds since the epoch (Firestore keeps nanoseconds; a stored
    timestamp keeps microseconds, so versions are stored as integers)."""
    seconds = (instant.replace(microsecond=0) - _EPOCH) // dt.timedelta(seconds=1)
    fraction = instant.microsecond * 1000
    if isinstance(instant, DatetimeWithNanoseconds) and instant.nanosecond:
        fraction = int(instant.nanosecond)
    return seconds * 1_000_000_000 + fraction


@dataclass(frozen=True, kw_only=True)
class Observed:
    """One state of a watched document: its data at `version` (an update time), or its deletion
    (`data` None; `version` is then the update time of the state it deleted)."""

    path: str
    data: dict[str, Any] | None
    version: int

    @property
    def key(self) -> tuple[int, bool]:
        """The order of a document's states: a deletion comes after the state it deleted and
        before any later write (whose update time is later)."""
        return (self.version, self.data is None)

    @classmethod
    def of_change(cls, path: str, before: firestore.DocumentSnapshot[Any] | None,
                  after: firestore.DocumentSnapshot[Any] | None) -> Observed:
        """The state an event's change leads to."""
        if after is not None and after.exists:
            return cls(path=path, data=after.to_dict() or {}, version=nanos(after.update_time))
        if before is None:
            raise ValueError(f"{path}: an event with neither a before nor an after state")
        return cls(path=path, data=None, version=nanos(before.update_time))


@dataclass(frozen=True, kw_only=True)
class Entry:
    """What one declaration counts for one document, as of one of its states."""

    version: int
    deleted: bool
    amounts: dict[str, int]

    @property
    def key(self) -> tuple[int, bool]:
        return (self.version, self.deleted)

    def to_document(self, declaration: str) -> dict[str, Any]:
        # Counter ids hold dots, which map keys in field paths cannot: a list of records.
        return {"declaration": declaration, "version": self.version, "deleted": self.deleted,
                "amounts": [{"counter": c, "amount": a} for c, a in sorted(self.amounts.items())]}

    @classmethod
    def from_document(cls, data: Mapping[str, Any]) -> Entry:
        return cls(version=int(data["version"]), deleted=bool(data["deleted"]),
                   amounts={str(a["counter"]): int(a["amount"]) for a in data["amounts"]})


Entries = dict[str, Entry]  # declaration name -> entry


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The commit that brings a document's record up to an observed state."""

    entries: Entries  # the whole record after the commit
    deltas: dict[str, int]  # counter -> amount to add (never 0)
    counters: dict[str, str]  # counter -> declaration: the counters the new entries name


def plan(declarations: Iterable[Declaration], entries: Entries, observed: Observed,
         params: Mapping[str, str]) -> Plan | None:
    """The change the observed state makes to a record; None when no entry is older."""
    new = dict(entries)
    deltas: dict[str, int] = defaultdict(int)
    named: dict[str, str] = {}
    for declaration in declarations:
        old = entries.get(declaration.name)
        if old is not None and old.key >= observed.key:
            continue
        amounts = declaration.amounts(params, observed.data)
        for counter, amount in (old.amounts if old else {}).items():
            deltas[counter] -= amount
        for counter, amount in amounts.items():
            deltas[counter] += amount
            named[counter] = declaration.name
        new[declaration.name] = Entry(version=observed.version, deleted=observed.data is None,
                                      amounts=amounts)
    if new == entries:
        return None
    return Plan(entries=new, deltas={c: d for c, d in deltas.items() if d}, counters=named)


def record_ref(db: firestore.Client, names: Names, path: str) -> firestore.DocumentReference:
    return db.collection(names.counted_docs).document(hashlib.sha256(path.encode()).hexdigest())


def read_entries(snapshot: firestore.DocumentSnapshot[Any]) -> Entries:
    if not snapshot.exists:
        return {}
    data = snapshot.to_dict() or {}
    return {str(e["declaration"]): Entry.from_document(e) for e in data.get("entries", [])}


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What applying one observed state did."""

    deltas: dict[str, int] = field(default_factory=dict)  # the counters it moved
    committed_at: dt.datetime | None = None  # None: nothing was written
    attempts: int = 1


class Counting:
    """Applies observed states of watched documents: the triggers' and the backfill's one step,
    with the process's context (its configuration cache and shard picker among it)."""

    def __init__(self, ctx: Context, db: firestore.Client, watch: Watch, *,
                 source: firestore.Client | None = None) -> None:
        self.ctx = ctx
        self.db = db
        # The watched documents' database (the backend's own unless it lives in another one).
        self.source = source or db
        self.watch = watch

    def apply(self, observed: Observed, *, event: str,
              only: Iterable[str] | None = None) -> Applied:
        """Bring the document's record (and so the counters) up to `observed`, at most once:
        `event` names the cause (an event id, or the backfill), kept on the record."""
        params = match(self.watch.documents, observed.path)
        if params is None:
            raise InvalidArgument(f"{observed.path!r} is not a document of "
                                  f"{self.watch.documents!r}")
        chosen = set(only) if only is not None else None
        declarations = [d for d in self.watch.declarations
                        if chosen is None or d.name in chosen]
        ref = record_ref(self.db, self.ctx.names, observed.path)
        # Each commit writes the nonce into the record: a commit sent again after a lost answer
        # fails its precondition when an earlier attempt applied, and the record says so.
        nonce = self.ctx.writing.nonce()
        planned: Plan | None = None
        for attempt in range(1, config.COLLECTION_APPLY_ATTEMPTS + 1):
            snapshot = ref.get()
            if planned is not None and shards.nonce_of(snapshot) == nonce:
                shards.settle(self.ctx.writing, self.db,
                              shards.marker_landed(self.db, self.ctx.names, snapshot))
                return Applied(deltas=planned.deltas, committed_at=snapshot.update_time,
                               attempts=attempt)
            change = planned = plan(declarations, read_entries(snapshot), observed, params)
            if change is None:
                return Applied(attempts=attempt)
            try:
                committed = self._commit(ref, snapshot, change, observed, event, nonce)
            except (gexc.AlreadyExists, gexc.FailedPrecondition):
                continue  # the record changed since it was read: plan again
            except gexc.NotFound:
                # A shard folded away since the configuration was cached (or the record
                # expired): nothing was written; read afresh.
                for counter in change.deltas:
                    self.ctx.configs.forget(counter)
                continue
            return Applied(deltas=change.deltas, committed_at=committed, attempts=attempt)
        raise Aborted(f"{observed.path}: its record kept changing; "
                      f"{config.COLLECTION_APPLY_ATTEMPTS} attempts lost the race")

    def _commit(self, ref: firestore.DocumentReference, snapshot: firestore.DocumentSnapshot[Any],
                change: Plan, observed: Observed, event: str, nonce: str) -> dt.datetime:
        """One commit of the record (with a precondition: created, or unchanged since read)
        and the shard writes of its deltas; sent again while its answers are lost."""
        self._ensure_counters(change.counters)
        gone = all(entry.deleted for entry in change.entries.values())
        written = []
        for counter, delta in sorted(change.deltas.items()):
            target = self.ctx.configs.get(self.db, self.ctx.names, counter)
            shard = counter_refs.shard_ref(self.db, self.ctx.names, counter,
                                           self.ctx.picker.pick(target))
            written.append(shards.shard_write(self.ctx.writing, self.db, shard, delta))
        record = {
            "path": observed.path,
            "entries": [e.to_document(name) for name, e in sorted(change.entries.items())],
            "event": event,
            config.EXPIRES_AT: (dt.datetime.now(dt.UTC) + config.COUNTED_TOMBSTONE_TTL
                                if gone else None),
            writes.NONCE: nonce, "at": firestore.SERVER_TIMESTAMP,
            "shards": [write.ref.path for write in written],
        }
        batch = self.db.batch()
        if snapshot.exists:
            batch.update(ref, record,
                         option=self.db.write_option(last_update_time=snapshot.update_time))
        else:
            batch.create(ref, record)
        for write in written:
            write.add_to(batch)
        writing = self.ctx.writing
        results = writing.resending(functools.partial(writing.send, batch), request_id=None)
        shards.settle(writing, self.db, shards.landed(written, results))
        committed: dt.datetime = results[0].update_time
        return committed

    def _ensure_counters(self, named: Mapping[str, str]) -> None:
        declared = {d.name: d for d in self.watch.declarations}
        for counter, declaration in named.items():
            ensure_counter(self.ctx, self.db, counter, declared[declaration])


def ensure_counter(ctx: Context, db: firestore.Client, counter: str,
                   declaration: Declaration) -> CounterConfig:
    """The counter's configuration, the counter created if it does not exist yet (two writers
    racing to create one: one creates it, the other finds it); refuse to count into a counter
    the declaration does not keep."""
    try:
        found = ctx.configs.get(db, ctx.names, counter)
    except NotFound:
        counters.create_counter(ctx, db, counter, expected_rate=declaration.initial_rate,
                                collection=declaration.name)
        found = ctx.configs.get(db, ctx.names, counter)
    if found.collection != declaration.name:
        raise FailedPrecondition(
            f"counter: {counter!r} exists and is not maintained by declaration "
            f"{declaration.name!r}: rename one of them")
    return found


@dataclass(kw_only=True)
class Backfilled:
    """What one backfill did."""

    documents: int = 0  # watched documents read
    counted: int = 0  # of them, those whose state it applied (the others were counted already)
    removed: int = 0  # documents gone whose deletion no event had applied
    deltas: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # path -> why it was not applied


def watched_documents(
    db: firestore.Client, pattern: str, page: int = config.BACKFILL_PAGE
) -> Iterator[firestore.DocumentSnapshot[Any]]:
    """Every document of `pattern`, a page at a time. Parents are listed with `list_documents`,
    which includes parents that have subcollections but no document of their own."""
    segments = pattern.split("/")

    def walk(parent: firestore.DocumentReference | None,
             depth: int) -> Iterator[firestore.DocumentSnapshot[Any]]:
        name = segments[depth]
        collection = db.collection(name) if parent is None else parent.collection(name)
        if depth + 2 == len(segments):
            yield from paged(collection, page)
            return
        wildcard = _WILDCARD.fullmatch(segments[depth + 1])
        refs = (collection.list_documents(page_size=page) if wildcard
                else [collection.document(segments[depth + 1])])
        for ref in refs:
            yield from walk(ref, depth + 2)

    yield from walk(None, 0)


def backfill(counting: Counting, declarations: Iterable[str] | None = None,
             progress: Callable[[Backfilled], None] | None = None,
             page: int = config.BACKFILL_PAGE) -> Backfilled:
    """Bring the named declarations' counters (default: all of the watch) up to the documents
    as they are, through the triggers' own step, so that nothing is counted twice:

    1. every document that exists is applied as the state just read: one the triggers counted
       already (at that state or a newer one) is skipped, and one written while this runs is
       counted once whichever of the two applies its state first;
    2. every record of the watch that still counts a document which no longer exists (its
       delete event was lost) is applied a deletion versioned at the read that found it gone:
       any later write of the document has a later update time, so it still wins.

    A document that fails (a counter under a declared id made by hand, say) is reported in
    `failed` and the others go on."""
    names = None if declarations is None else list(declarations)
    done = Backfilled()
    totals: dict[str, int] = defaultdict(int)
    db = counting.db

    def present(snapshot: firestore.DocumentSnapshot[Any]) -> Applied | None:
        observed = Observed(path=snapshot.reference.path, data=snapshot.to_dict() or {},
                            version=nanos(snapshot.update_time))
        return counting.apply(observed, event="backfill", only=names)

    def gone(record: firestore.DocumentSnapshot[Any]) -> Applied | None:
        path = str((record.to_dict() or {}).get("path", ""))
        if match(counting.watch.documents, path) is None:
            return None
        entries = read_entries(record)
        if all(entry.deleted for name, entry in entries.items() if names is None or name in names):
            return None
        document = counting.source.document(path).get()
        if document.exists:
            return None  # counted in step 1 (or by its trigger since)
        observed = Observed(path=path, data=None, version=nanos(document.read_time))
        return counting.apply(observed, event="backfill", only=names)

    def safely(step: Callable[[firestore.DocumentSnapshot[Any]], Applied | None],
               snapshot: firestore.DocumentSnapshot[Any]) -> tuple[str, Applied | str | None]:
        try:
            return snapshot.reference.path, step(snapshot)
        except Exception as error:  # one document never stops the others
            return snapshot.reference.path, f"{type(error).__name__}: {error}"

    def run(step: Callable[[firestore.DocumentSnapshot[Any]], Applied | None],
            snapshots: Iterator[firestore.DocumentSnapshot[Any]], *, removal: bool) -> None:
        with counting.ctx.writing.pools(config.BACKFILL_THREADS, "backfill") as pool:
            while found := list(itertools.islice(snapshots, page)):
                for path, outcome in pool.map(lambda s: safely(step, s), found):
                    if isinstance(outcome, str):
                        done.failed[path] = outcome
                        continue
                    if not removal:
                        done.documents += 1
                    if outcome is None or outcome.committed_at is None:
                        continue
                    if removal:
                        done.removed += 1
                    else:
                        done.counted += 1
                    for counter, delta in outcome.deltas.items():
                        totals[counter] += delta
                if progress is not None:
                    progress(done)

    run(present, watched_documents(counting.source, counting.watch.documents, page),
        removal=False)
    run(gone, records(db, counting.ctx.names, page), removal=True)
    done.deltas = {counter: delta for counter, delta in totals.items() if delta}
    return done


def records(db: firestore.Client, names: Names,
            page: int) -> Iterator[firestore.DocumentSnapshot[Any]]:
    """Every record of every watch (their `path` is not indexed)."""
    return paged(db.collection(names.counted_docs), page)


def paged(collection: firestore.CollectionReference | firestore.CollectionGroup,
          page: int) -> Iterator[firestore.DocumentSnapshot[Any]]:
    """Every document of `collection` (or of a collection group), in id order, `page` per
    query."""
    last: firestore.DocumentSnapshot[Any] | None = None
    while True:
        query = collection.limit(page)
        if last is not None:
            query = query.start_after(last)
        found = list(query.stream())
        yield from found
        if len(found) < page:
            return
        last = found[-1]
