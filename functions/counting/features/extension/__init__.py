"""Extension counters: the Distributed Counter extension's layout, kept by this backend
(docs/architecture.md, "Extension counters").

The extension's clients write `{doc}/_counter_shards_/{their id}` and show the document's field
plus their own shard's, so the amounts in everyone's shards must reach the document. A move is
one commit, sent once, that takes shards' amounts out of them, each write guarded by the version
it read (a delete when the shard holds nothing else, else an `Increment` of minus the amount;
for a partial, an `_updates_` entry of minus its sum), adds their sum to the document's field,
and adds the same sum to a shard of the counter `visits:{page}`. So every move keeps
document + shards + partials equal, and keeps the counter equal to the document's field (once
`backfill` has added what the field held before the declaration): the counter is the total less
what the shards hold until their move, about a second.

However often a move applies it keeps both: every take applies at most once, and only to the
version it read (its precondition), so two movers never take one amount; the document's and
the counter's increments follow the takes. A move may land late, twice or never: no amount is
lost or doubled, and no device, reading the document and its own shard, sees more than was
written.

Amounts are whole numbers: integers, and doubles with no fraction (the Android and iOS clients
send `1.0`), counted as integers; the document's field stays an integer, as the extension's own
aggregator leaves it.

The package: `moving` (a move, and a trigger's loop of them), `movers` (a process's moves, shared
by the callers waiting on them), `sweeping` (the scheduled backstop) and `backfilling` (what the
layout held before the declaration). Their rules are `counters extension-rules`
(tools/counters_cli/rules.py).
"""

from counting.features.extension.backfilling import Backfilled, backfill
from counting.features.extension.movers import WAITED_IN_BACKGROUND, Movers
from counting.features.extension.moving import MOVED, Moved, Written, move, move_until_clear
from counting.features.extension.sweeping import sweep

__all__ = ["MOVED", "WAITED_IN_BACKGROUND", "Backfilled", "Moved", "Movers", "Written",
           "backfill", "move", "move_until_clear", "sweep"]
