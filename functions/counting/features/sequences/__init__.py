"""Resetting sequences: per-tenant ticket numbers that restart at 1 every business day.

`sequences/{tenant}` is both the live counter and the document "now serving" screens listen to:
`business_day` (`YYYY-MM-DD`), `last_number`, `timezone`, `reset_time`, plus server fields
`day` (the business day as a proleptic ordinal), `epoch` (resets so far this day) and `issued`
(numbers issued this day, across resets). A number is one write with no transaction:

    update({"last_number": Increment(1), "issued": Increment(1),
            "epoch": Increment(0), "day": Increment(0)})

and its `transform_results` give the new `last_number` together with the `day` and `epoch` it
was counted in, read atomically by the same write (`Increment(0)` returns the current value).
So `(day, epoch, number)` is unique under any concurrency: within one `(day, epoch)` the
document's `last_number` only ever grows by one per write.

A reset is one write too (`last_number: 0`, `epoch: Increment(1)`); every number whose write
commits after it counts from 1 again under the new epoch. A new business day is opened lazily by
the first request that finds the document on an older day: a compare-and-set on the document's
update time (so exactly one writer opens the day) that also archives the closed day under
`business_days/{YYYY-MM-DD}` with a TTL field. Nothing expires at the boundary.

A `request_id` is claimed by creating its record in the same batch as the number's write. The
number, known once that commit answers, goes into the record with the process's next such
commit (`Unrecorded`: no round trip of its own); what no later commit carries (the process went
idle, or died) the scheduled housekeeping writes (`record_issued`). Until then a retry reads it
back from the sequence as the record's commit left it (a snapshot read at its create time).

One role per module: `days` (the business-day rule and arithmetic), `documents` (where the
data lives and the writes' shapes), `limits` (the bounds, carried by the context), `caching`
(what a process keeps between calls), `opening` (configure_sequence, the day opened),
`issuing` (next_number), `resetting` (reset_sequence) and `housekeeping` (record_issued,
lost_records). Callers import the module of the role they use; this package imports none of
them, so the context (`counting.features.context`) imports `caching` with no circle.
"""
