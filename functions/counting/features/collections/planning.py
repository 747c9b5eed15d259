"""Pure: what applying an observed state of a document changes in its record and its counters
(`plan`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.cloud import firestore

from counting.features.collections.declared import Declaration, nanos

if TYPE_CHECKING:
    pass

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
