"""The numbers the documentation quotes are the code's: each row of QUOTED names a phrase of a
doc, as it appears there, and the constant whose value its last number states. The test fails
when the doc's phrase is gone or reworded, and when the constant no longer has that value."""

from __future__ import annotations

import datetime as dt
import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCH, OPS, API = "docs/architecture.md", "docs/operations.md", "docs/api.md"
# The modules whose constants the docs quote.
CONFIG, WRITES = "counting.foundation.config.", "counting.foundation.writes."
INPUTS, PARTITIONS = "counting.foundation.inputs.", "counting.writepath.partitions."
AUDIT, LEDGER, TICK = "counting.rollup.audit.", "counting.rollup.ledger.", "counting.rollup.tick."
COUNTERS, COLLECTIONS = "counting.features.counters.", "counting.features.collections."
DECLARATIONS = "counting.features.declarations."
SEQUENCES = "counting.features.sequences.limits.LIMITS."
RECORDS = "counting.features.sequences.documents."
_NUMBER = re.compile(r"\d(?:[\d,]*\d)?(?:\.\d+)?")  # 1,000,000 and 0.5; "1..128" is two numbers


def hours(value: dt.timedelta) -> float:
    return value / dt.timedelta(hours=1)


def days(value: dt.timedelta) -> float:
    return value / dt.timedelta(days=1)


# (doc, phrase whose last number is quoted, dotted path of the constant, what turns its value
# into the doc's unit or None). A phrase may span lines of the doc: whitespace runs compare equal.
QUOTED: list[tuple[str, str, str, Callable[[Any], float] | None]] = [
    (ARCH, "all of it `ROLLUP_SWEEP_EVERY_S` (50 s)", CONFIG + "ROLLUP_SWEEP_EVERY_S", None),
    (ARCH, "270 s is `MAX_REQUEST_S`", CONFIG + "MAX_REQUEST_S", None),
    (ARCH, "checkpoint is `FLUSH_S` (50 s)", LEDGER + "FLUSH_S", None),
    (ARCH, "at least `MEMORIES_PER_TICK` (250", LEDGER + "MEMORIES_PER_TICK", None),
    (ARCH, "`CHANGE_OVERLAP_S` (0.25 s)", CONFIG + "CHANGE_OVERLAP_S", None),
    (ARCH, "`C - S >= SHARD_TOUCH_AFTER_S` (0.25 s)", CONFIG + "SHARD_TOUCH_AFTER_S", None),
    (ARCH, "The touch is checked the same way, up to 3 times",
     CONFIG + "SHARD_TOUCH_ATTEMPTS", None),
    (ARCH, "`NARROW_AFTER_S` (10 s, twice the writers' cache)",
     PARTITIONS + "NARROW_AFTER_S", None),
    (ARCH, "`CONFIRM_AFTER_S` (430 s)", AUDIT + "CONFIRM_AFTER_S", None),
    (ARCH, "(at least 3", AUDIT + "AUDIT_PER_RUN_MIN", None),
    (ARCH, "at most 1,000 a run", AUDIT + "AUDIT_PER_RUN_MAX", None),
    (ARCH, "checked 16 at a time", AUDIT + "AUDIT_THREADS", None),
    (ARCH, "Each attempt waits 10 s at most for its answer (`COMMIT_TIMEOUT_S`)",
     WRITES + "COMMIT_TIMEOUT_S", None),
    (ARCH, "go on for up to 20 s (`RESEND_FOR_S`)", WRITES + "RESEND_FOR_S", None),
    (ARCH, "a `request_id` (up to 8 records a commit", SEQUENCES + "records_per_commit", None),
    (ARCH, "(`record_issued`: records still `issuing` after 10 s", SEQUENCES + "record_after_s",
     None),
    (ARCH, "at most 300 records a run", SEQUENCES + "records_per_run", None),
    (ARCH, "spread over 10 values of `spread`", RECORDS + "RECORD_SPREAD", None),
    (ARCH, "any error still there 2 h after its claim", SEQUENCES + "record_give_up_s",
     lambda seconds: seconds / 3600),
    (ARCH, "a hint kept 60 s", "counting.features.context.RETURNING_TTL_S", None),
    (ARCH, "is kept) in the last 120 s", "counting.writepath.shards.NONCE_KEEP_S", None),
    (ARCH, "(at most 64: a request", "counting.writepath.shards.MAX_NONCES", None),
    (ARCH, "`expires_at` = now + 24 h", CONFIG + "REQUEST_MARKER_TTL", hours),
    (ARCH, "no fewer than `MEETINGS_MIN` (250", LEDGER + "MEETINGS_MIN", None),
    (ARCH, "no fewer than `MEETINGS_MIN` (250) and no more than 5000",
     LEDGER + "DOCUMENT_LOADS_PER_TICK", None),
    (ARCH, "(a query of all their shards) at most 200",
     LEDGER + "FIRST_LOADS_PER_TICK", None),
    (ARCH, "one commit per 249 counters", TICK + "PUBLISHES_PER_COMMIT", None),
    (ARCH, "`renew_s` (5 s)", CONFIG + "ROLLUP.renew_s", None),
    (ARCH, "(the tick instance's lease lives 10 s after its last write)",
     CONFIG + "ROLLUP.lease_s", None),
    (ARCH, "`busy_wait_s` is 12 s", CONFIG + "ROLLUP.busy_wait_s", None),
    (ARCH, "`usage_flush_s`, 10 s", CONFIG + "ROLLUP.usage_flush_s", None),
    (ARCH, "(`ROLLUP_TIMEOUT_S`, 60 s)", CONFIG + "ROLLUP_TIMEOUT_S", None),
    (ARCH, "it waits at most 5 s for the creation", CONFIG + "TICK_ENQUEUE_TIMEOUT_S", None),
    (ARCH, "`CONFIG_CACHE_TTL_S` (5 s) per instance", CONFIG + "CONFIG_CACHE_TTL_S", None),
    (ARCH, "for a 10-minute cool-down", CONFIG + "AUTOSCALE.cool_down_s", lambda s: s / 60),
    (ARCH, "when a holder starts and every 60 ticks", CONFIG + "ROLLUP_WATCH_EVERY_TICKS", None),
    (ARCH, "`TREND_EXPIRE_CHUNK` (1,000) per window and tick", CONFIG + "TREND_EXPIRE_CHUNK", None),
    (ARCH, "on a random one of 64 shards", CONFIG + "TREND_SHARDS", None),
    (ARCH, "expire by TTL 30 days later", CONFIG + "SEQUENCE_RETENTION_DAYS", None),
    (ARCH, "A deleted document's record expires 8 days later",
     CONFIG + "COUNTED_TOMBSTONE_TTL", days),
    (ARCH, "through the same step as the triggers, on 8 threads",
     CONFIG + "BACKFILL_THREADS", None),
    (OPS, "a sweep every 50 s", CONFIG + "ROLLUP_SWEEP_EVERY_S", None),
    (OPS, "(the 0.25 s overlap: a shard written once", CONFIG + "CHANGE_OVERLAP_S", None),
    (OPS, "a write of the lease in the last 10 s", CONFIG + "ROLLUP.lease_s", None),
    (OPS, "no write of the lease for 150 s", CONFIG + "ROLLUP_STALE_S", None),
    (OPS, "the last 10 problems", CONFIG + "ROLLUP_RECENT_ERRORS", None),
    (OPS, "the last 20 `drift` entries", AUDIT + "DRIFT_KEPT", None),
    (OPS, "more than 430 s old", AUDIT + "CONFIRM_AFTER_S", None),
    (OPS, "commits of `FOLD_CHUNK`, 200 shards", CONFIG + "FOLD_CHUNK", None),
    (OPS, "(80 for callables", CONFIG + "CALLABLE_CONCURRENCY", None),
    (OPS, "list pages of 300", CONFIG + "BACKFILL_PAGE", None),
    (OPS, "Writers learn the new P within 5 s", CONFIG + "CONFIG_CACHE_TTL_S", None),
    (OPS, "a power of two up to 128", PARTITIONS + "HOMES", None),
    (ARCH, "reach starts within `WIDE_SWEEP_S` (1 h)", PARTITIONS + "WIDE_SWEEP_S",
     lambda s: s / 3600),
    (OPS, "honoured for at least 24 h", CONFIG + "REQUEST_MARKER_TTL", hours),
    (OPS, "A batch commits up to 501 writes", CONFIG + "MAX_BATCH", lambda n: n + 1),
    (OPS, "its own commits to 500 writes (`ROLLUP_COMMIT_WRITES`)",
     CONFIG + "ROLLUP_COMMIT_WRITES", None),
    (OPS, "at most 1,000 per window and tick", CONFIG + "TREND_EXPIRE_CHUNK", None),
    (API, "larger than 256 KiB", CONFIG + "MAX_BODY_BYTES", lambda n: n / 1024),
    (API, "nested deeper than 32 levels", CONFIG + "MAX_JSON_DEPTH", None),
    (API, "an integer of more than 20 digits", CONFIG + "MAX_JSON_DIGITS", None),
    (API, "| counter id | `A-Z a-z 0-9 _ - . :` | 1..128", CONFIG + "MAX_COUNTER_ID", None),
    (API, "| `request_id` | `A-Z a-z 0-9 _ -` | 1..128", CONFIG + "MAX_REQUEST_ID", None),
    (API, "| region | `a-z 0-9 -` | 1..64", CONFIG + "MAX_REGION_CHARS", None),
    (API, "| `shards` | integer 1..1000", CONFIG + "MAX_SHARDS", None),
    (API, "number 0..1,000,000", CONFIG + "MAX_EXPECTED_RATE", None),
    (API, "(writes/s) | 2 |", CONFIG + "DEFAULT_EXPECTED_RATE", None),
    (API, "`max_shards` (1000)", CONFIG + "DEFAULT_MAX_SHARDS", None),
    (API, "\\|by\\| <= 1,000,000,000", CONFIG + "MAX_ABS_BY", None),
    (API, "list of 1..500 objects", CONFIG + "MAX_BATCH", None),
    (API, "list of 1..20 strings", CONFIG + "MAX_TAGS", None),
    (API, "each 1..100 characters", CONFIG + "MAX_TAG_CHARS", None),
    (API, "may be up to 400 characters", INPUTS + "MAX_TAG_INPUT_CHARS", None),
    (API, "| `k` | integer 1..100", CONFIG + "TOP_K", None),
    (API, "| `k` | integer 1..100 | `10`", CONFIG + "DEFAULT_K", None),
    (API, "| `min_interval_s` | integer 0..86400", CONFIG + "MAX_MIN_INTERVAL_S", None),
    (API, "`1h` is the last 60 one-minute buckets",
     CONFIG + "WINDOW_BUCKETS", lambda w: w["1h"][1]),
    (API, "`24h` the last 24 one-hour buckets", CONFIG + "WINDOW_BUCKETS", lambda w: w["24h"][1]),
    (API, "reached the threshold (10,000)", CONFIG + "TRENDING_THRESHOLDS",
     lambda t: t["24h"]),
    (API, "the 1 h threshold is 1,000", CONFIG + "TRENDING_THRESHOLDS", lambda t: t["1h"]),
    (API, "out of reach for 20 s", WRITES + "RESEND_FOR_S", None),
    (API, "Every instance applies it within 5 s", CONFIG + "CONFIG_CACHE_TTL_S", None),
    (API, "takes effect within 5 s", CONFIG + "SEQUENCE_CONFIG_CACHE_TTL_S", None),
    (API, "the last 10 problems", CONFIG + "ROLLUP_RECENT_ERRORS", None),
    (API, "At most 50 declarations", DECLARATIONS + "MAX_DECLARATIONS", None),
    (API, "declarations and 64 KiB", DECLARATIONS + "MAX_FILE_BYTES",
     lambda n: n / 1024),
    (API, "the first 32 hex digits", COLLECTIONS + "HASH_HEX", None),
]


def flat(text: str) -> str:
    return " ".join(text.split())


def value_of(path: str) -> Any:
    """The value at a dotted path: the longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            value = getattr(value, name)
        return value
    raise ModuleNotFoundError(path)


@pytest.mark.parametrize(("doc", "phrase", "path", "convert"), QUOTED,
                         ids=[f"{Path(doc).stem}:{path.rsplit('.', 1)[-1]}"
                              f":{_NUMBER.findall(phrase)[-1]}" for doc, phrase, path, _ in QUOTED])
def test_doc_quotes_the_constant(doc: str, phrase: str, path: str,
                                 convert: Callable[[Any], float] | None) -> None:
    """The phrase is in the doc, and its last number is the constant's value."""
    said = flat(phrase) in flat((ROOT / doc).read_text(encoding="utf-8"))
    assert said, f"{doc} no longer says {phrase!r}"
    quoted = float(_NUMBER.findall(phrase)[-1].replace(",", ""))
    value = value_of(path)
    assert quoted == float(convert(value) if convert else value), \
        f"{doc} says {phrase!r}; {path} is {value!r}"


def test_the_table_covers_the_three_docs() -> None:
    """Each doc that quotes constants has rows, and no row is there twice."""
    assert {doc for doc, *_ in QUOTED} == {ARCH, OPS, API}
    assert len({(doc, phrase) for doc, phrase, *_ in QUOTED}) == len(QUOTED)
