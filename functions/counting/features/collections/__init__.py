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

The package: `ids` (counter ids from values), `declared` (declarations and their watches),
`layout` (the extension's layout), `planning` (pure: a record's plan), `applying` (the trigger's
I/O) and `backfilling`.
"""

from counting.features.collections.applying import (
    Applied,
    Counting,
    ensure_counter,
    read_entries,
    record_ref,
)
from counting.features.collections.backfilling import (
    Backfilled,
    backfill,
    paged,
    records,
    watched_documents,
)
from counting.features.collections.declared import (
    Declaration,
    Watch,
    match,
    nanos,
    summable,
    watches,
    wildcards,
)
from counting.features.collections.ids import ESCAPE, HASH_HEX, HASH_MARK, escape, unescape
from counting.features.collections.layout import (
    MAX_EXTENSION_AMOUNT,
    MAX_FIELD_SEGMENTS,
    PARTIAL_PREFIX,
    SHARD_WILDCARD,
    SHARDS,
    UPDATE_DATA,
    UPDATE_ID,
    UPDATES,
    Extension,
    is_partial,
    whole,
)
from counting.features.collections.planning import Entries, Entry, Observed, Plan, plan

__all__ = [
    "ESCAPE", "HASH_HEX", "HASH_MARK", "MAX_EXTENSION_AMOUNT", "MAX_FIELD_SEGMENTS",
    "PARTIAL_PREFIX", "SHARDS", "SHARD_WILDCARD", "UPDATES", "UPDATE_DATA", "UPDATE_ID",
    "Applied", "Backfilled", "Counting", "Declaration", "Entries", "Entry", "Extension",
    "Observed", "Plan", "Watch", "backfill", "ensure_counter", "escape", "is_partial", "match",
    "nanos", "paged", "plan", "read_entries", "record_ref", "records", "summable", "unescape",
    "watched_documents", "watches", "whole", "wildcards"
]
