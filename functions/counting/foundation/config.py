"""Collection names; the API's limits and the limits, defaults and timings that modules share,
each with its reason; and where the backend lives (`Placement`). A limit that concerns one module
alone is at the top of that module, with its reason (docs/architecture.md, the layout)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from counting.foundation.kinds import Window

# Collections and documents.
COUNTERS = "counters"
SHARDS = "shards"
REQUESTS = "requests"  # exactly-once markers, expired by the TTL policy on EXPIRES_AT
INTERNAL = "internal"  # server-only state: the rollup lease and watermark
ROLLUP_STATE_DOC = "rollup"
EXPIRES_AT = "expires_at"
# counters/{id}/memory/rollup: what the rollup's holder remembers of a counter, where no
# listener of counters/{id} pays for it: `shard_counts`, the per-shard counts it summed (shard
# id -> count; an absent shard holds 0), so that a new holder reads one document instead of every
# shard, and `shard_load` (least_loaded counters), the per-shard rates writers pick by.
MEMORY = "memory"
MEMORY_DOC = "rollup"
RESET_DOC = "reset"  # counters/{id}/memory/reset: the last reset of the counter (its one writer)
SHARD_COUNTS_FIELD = "shard_counts"
SHARD_LOAD_FIELD = "shard_load"
# A shard made with its counter carries the counter's scaling state as created and its server
# timestamp (`at`): a holder that was holding its lease before then meets the counter from it,
# with no read (`rollup.ledger.Ledger.meet_born`).
SHARD_BORN_FIELD = "born"

# Requests one callable (or trigger) instance serves at once; functions/.env gives its Python
# worker as many threads (THREADS).
CALLABLE_CONCURRENCY = 80

# Callable request bodies (handlers.body_problem): the largest valid one, a 500-increment
# batch, is under 100 KB and 4 levels deep; the longest valid integer has 10 digits.
MAX_BODY_BYTES = 256 * 1024
MAX_JSON_DEPTH = 32
MAX_JSON_DIGITS = 20

# Counter limits (docs/api.md).
MAX_COUNTER_ID = 128  # characters
MAX_REQUEST_ID = 128  # characters
MIN_SHARDS = 1
MAX_SHARDS = 1000
MAX_ABS_BY = 1_000_000_000
MAX_BATCH = 500
MAX_EXPECTED_RATE = 1_000_000.0
MAX_MIN_INTERVAL_S = 86_400  # a write policy's min_interval_s (counting.writepath.policy)
VOTERS = "voters"  # counters/{id}/voters/{user}: who a `unique` counter counts
PACED = "paced"  # counters/{id}/paced/{user}: a `min_interval_s` counter's last applied write


# Sizing: shards = ceil(expected_rate / (shard_write_rate * target_utilisation)), clamped.
# Without a hint a counter is sized for DEFAULT_EXPECTED_RATE.
DEFAULT_EXPECTED_RATE = 2.0  # -> 4 shards; the autoscaler follows the measured load
# Every counter document carries `min_shards`/`max_shards`, written at creation with these
# defaults; an operator may change them server-side (min == max pins the shard count).
DEFAULT_MIN_SHARDS = 1
DEFAULT_MAX_SHARDS = MAX_SHARDS
# The rollup publishes `rate` alone (with no count to publish) when it is off the published value,
# decayed as readers decay it, by more than this fraction (or absolute amount); below the absolute
# amount a rate is published, and shown, as 0.
RATE_PUBLISH_REL = 0.1
RATE_PUBLISH_ABS = 0.05
# The write path caches a counter's configuration per instance for this long: a changed
# num_shards reaches every instance within this time.
CONFIG_CACHE_TTL_S = 5.0


@dataclass(frozen=True, kw_only=True)
class AutoscaleParams:
    """How the rollup scales shards (counting.writepath.autoscale): production's values; tests
    shorten them."""

    enabled: bool = True
    # 1 sustained write/s per document is the production guidance; running shards at half of it
    # leaves room for bursts.
    shard_write_rate: float = 1.0
    target_utilisation: float = 0.5
    # Shrink only once the rate has stayed below num_shards x shard_write_rate x
    # shrink_utilisation for the cool-down; the band between the two utilisations is the
    # hysteresis that keeps a steady load from flapping.
    shrink_utilisation: float = 0.25
    cool_down_s: float = 600.0
    # The measured rate (writes/s) is an EWMA that rises with a short time constant, so that a
    # step in load is followed within a few seconds, and falls with a ~10 s one.
    rise_tau_s: float = 2.0
    fall_tau_s: float = 10.0
    # Surplus shards are folded into the remaining ones this long after num_shards was lowered:
    # longer than the configuration cache's TTL, so writers have stopped picking them by then.
    fold_grace_s: float = 2 * CONFIG_CACHE_TTL_S


AUTOSCALE = AutoscaleParams()
# Surplus shards folded per commit.
FOLD_CHUNK = 200

# Exactly-once markers live at least this long (TTL deletion follows within about a day).
REQUEST_MARKER_TTL = dt.timedelta(hours=24)

# Exact on real Firestore (docs/architecture.md, "Exact on real Firestore"). A shard's `updated_at`
# is a server timestamp, which Firestore takes when the write's request starts; the write becomes
# visible at its commit, later. The change query therefore reaches CHANGE_OVERLAP_S back before
# the watermark: a write whose commit came less than that after its timestamp is found by the
# first tick that can see it. A writer whose write took that long or longer (it sees both instants
# in the write's result) touches the shard again (`shards.settle`), up to SHARD_TOUCH_ATTEMPTS
# times. The two bars are one: the writer measures the very difference the query allows for, on
# Firestore's own instants, so a wider overlap only reads again what a touch already covers.
# What no writer touched is found by a sweep: every ROLLUP_SWEEP_EVERY_S the query reaches back
# to MAX_REQUEST_S before the previous sweep. MAX_REQUEST_S is Firestore's time limit for a
# transaction (270 s), the longest any commit can follow the start of its request; a blind
# write is a single commit and far shorter. Reading a shard twice is harmless (its values are
# absolute).
CHANGE_OVERLAP_S = 0.25
SHARD_TOUCH_AFTER_S = CHANGE_OVERLAP_S
SHARD_TOUCH_ATTEMPTS = 3
ROLLUP_SWEEP_EVERY_S = 50.0  # below a minute: every scheduled housekeeping tick sweeps
MAX_REQUEST_S = 270.0


@dataclass(frozen=True, kw_only=True)
class Protections:
    """Each mechanism that keeps counts exact against one production hazard, switchable alone
    so that the simulation (tests/sim) shows each one needed: with one off, some seeds lose or
    double a count. A process's context carries the ones it runs with
    (`counting.writepath.context.Writing`): production's have every one on; nothing but the
    simulation turns one off (docs/architecture.md, "Exact on real Firestore")."""

    overlap: bool = True  # the change query reaches CHANGE_OVERLAP_S before the watermark
    touch: bool = True  # a writer touches a shard whose write straddled (`shards.settle`)
    sweep: bool = True  # every ROLLUP_SWEEP_EVERY_S the query reaches MAX_REQUEST_S back
    every_stripe_sweep: bool = True  # a sweep reads the stripes of every P, not the current's
    lease_fence: bool = True  # a holder's commits carry its lease's version as a precondition
    single_attempt: bool = True  # a commit that is not idempotent is sent once, never resent
    request_markers: bool = True  # a request_id's marker makes its retries count once
    reset_through_rollup: bool = True  # a reset moves shards only: the holder publishes it
    final_answers: bool = True  # a refusal of a request_id fences its attempts (a tombstone)
    versioned_overwrites: bool = True  # configurations and a reset's forgetting at a version
    guarded_takes: bool = True  # an extension move's takes apply to the shard versions it read
    unknown_after_applied: bool = True  # a step failing after a first commit applied: UNKNOWN


# The rollup's cadence (counting.rollup.cadence; docs/architecture.md, "Rollup cadence").
REGION = "us-central1"
ROLLUP_USAGE_DOC = "rollup_usage"  # internal/rollup_usage: what rollup invocations cost, summed
# Writes are ticked in one-second slots: a write that commits in second s is taken in by a tick
# task scheduled for s + 1 (named for s, so that the writes of one second share it).
TICK_SLOT_S = 1
# A write waits at most this long for its slot's task to be created.
TICK_ENQUEUE_TIMEOUT_S = 5.0


@dataclass(frozen=True, kw_only=True)
class Cadence:
    """The timing of rollup invocations (counting.rollup.cadence): production's values; tests
    shorten them."""

    # A holder that stops writing the lease loses it this long after its last write; until
    # then a task delivered elsewhere waits (`busy_wait_s`) and is retried by Cloud Tasks.
    lease_s: float = 10.0
    # A tick that did not write the lease (nothing to commit) renews it when its last write is
    # this old: the progress is persisted and the lease stays live while the holder ticks.
    renew_s: float = 5.0
    # A task that finds another holder's lease live polls this long for it to be let go or to
    # expire, then fails and is delivered again. Longer than the lease: the queue dispatches one
    # task at a time to one instance, so a task that finds another holder either waits for the
    # scheduled housekeeping (which lets go within a second) or came to a new instance because
    # the old one is gone (restarted, moved): its lease expires within `lease_s`.
    busy_wait_s: float = 12.0
    poll_s: float = 0.2
    # A holder adds what its invocations cost to internal/rollup_usage at most this often (one
    # write: about 25 cents a month while something is written every second), and at the end of
    # a housekeeping run.
    usage_flush_s: float = 10.0
    # A scheduled housekeeping whose holder owes counters (more changed than one tick reads)
    # goes on ticking this long, shared by the partitions it serves, rather than leaving them
    # to tasks Cloud Tasks may fail to create: it drains what it owes by itself.
    drain_s: float = 30.0


ROLLUP = Cadence()
# The deployed timeout of a rollup invocation, and its task's dispatch deadline: waiting for the
# lease, one tick (a first tick reads up to FIRST_LOADS_PER_TICK counters whole), a margin. The
# queue dispatches one task at a time: a hung tick holds the later ones back this long.
ROLLUP_TIMEOUT_S = 60
# Problems kept on the lease document for operators (counting.rollup.status).
ROLLUP_RECENT_ERRORS = 10
# The scheduler's housekeeping ticks at least every minute; a lease not written for this long
# says the scheduler has stopped (`counters status`).
ROLLUP_STALE_S = 150.0
# The rollup's commits carry at most this many writes, the lease's fencing write included.
# Firestore no longer limits the writes of a commit (its 10 MiB request limit remains); this keeps
# each commit's size and time bounded. A client's batch (MAX_BATCH increments and its marker) may
# be larger.
ROLLUP_COMMIT_WRITES = 500
ROLLUP_TASK_FUNCTION = "rolluptick"  # Cloud Tasks queue ids allow no underscore
# Counters above their min_shards carry `above_min: true`; the rollup queries them when it starts
# and every this many ticks, so that they shrink even when nobody writes to them any more.
ROLLUP_WATCH_EVERY_TICKS = 60

# ---------------------------------------------------------------------------------------------
# Sequences: per-tenant ticket numbers that restart every business day (issue 3).
# ---------------------------------------------------------------------------------------------
SEQUENCES = "sequences"  # sequences/{tenant}: the live counter and what "now serving" screens read
BUSINESS_DAYS = "business_days"  # sequences/{tenant}/business_days/{YYYY-MM-DD}: closed days
NUMBER_REQUESTS = "number_requests"  # sequences/{tenant}/number_requests/{key}: request_id replay
DEFAULT_RESET_TIME = "00:00"

# Closed business days and request_id records are kept this long for audit, then the TTL
# policy on EXPIRES_AT deletes them (within about a day after that).
SEQUENCE_RETENTION_DAYS = 30

# How long the write path trusts its cached copy of a tenant's timezone and reset_time.
SEQUENCE_CONFIG_CACHE_TTL_S = 5.0

# Opening a new business day is a compare-and-set on sequences/{tenant}; give up after this many
# lost races (each loss means another writer changed the document in between).
SEQUENCE_OPEN_DAY_ATTEMPTS = 50

# ---------------------------------------------------------------------------------------------
# Trending tags: exact windowed counts per region and worldwide, and their Top-K (issue 5).
# ---------------------------------------------------------------------------------------------
TRENDS = "trends"  # trends/{region} and trends/global: the Top-K and trending lists clients read
# One sharded counter per (region, minute, tag); track() writes its shards, the rollup keeps the
# bucket document's count (and the per-shard values it has summed) and deletes it on expiry.
TREND_MINUTES = "trend_minutes"
TREND_HOURS = "trend_hours"  # rollup-only: per (region, hour, tag), the sum of its minutes
TREND_TOTALS = "trend_totals"  # rollup-only: window count per (scope, window, tag) while > 0
# With P > 1 rollup partitions: trends/{scope}/parts/{P}-{index}, a partition's own top lists of
# the scope, which partition 0 merges into trends/{scope}; and internal/trend_parts-{P}-{index},
# the scopes it published parts for and when (docs/architecture.md, "Trends").
TREND_PARTS = "parts"
TREND_PARTS_DOC = "trend_parts"
GLOBAL_SCOPE = "global"  # the scope that sums every region; not a valid region name

MAX_TAGS = 20
MAX_TAG_CHARS = 100
MAX_REGION_CHARS = 64
TOP_K = 100  # the list the rollup maintains; top_tags serves k = 1..TOP_K of it
DEFAULT_K = 10

# The buckets of each window (kinds.WINDOWS names the windows): (bucket_s, buckets). A window
# counts the last `buckets` buckets of `bucket_s` seconds, the current partial one included: it
# covers between (buckets - 1) and buckets bucket lengths of history.
WINDOW_BUCKETS: dict[Window, tuple[int, int]] = {"1h": (60, 60), "24h": (3600, 24)}
# A tag is trending in a scope once its window count reaches this.
TRENDING_THRESHOLDS: dict[Window, int] = {"1h": 1_000, "24h": 10_000}

# Per tick and window, the rollup expires at most this many buckets (a larger backlog is spread
# over the next ticks), and reads minute buckets this many to a call.
TREND_EXPIRE_CHUNK = 1000
TREND_READ_CHUNK = 300
# Shards per minute bucket. They are created by the first write that picks them, so a cold tag
# costs one document per minute whatever this is; a hot tag spreads over all of them.
TREND_SHARDS = 64
# Buckets are deleted by the rollup when they leave their window; the TTL policy on EXPIRES_AT
# is the backstop, this long after that (the rollup must have subtracted them by then).
TREND_TTL_GRACE = dt.timedelta(days=1)

# ---------------------------------------------------------------------------------------------
# Collection counters: counters kept by Firestore document triggers (issue 15).
# ---------------------------------------------------------------------------------------------
# counted_docs/{hash of the document path}: what the collection counters count for one watched
# document, and the version of it they reflect (counting.features.collections).
COUNTED_DOCS = "counted_docs"
# A deleted document's record is kept this long and then expired by the TTL policy on
# EXPIRES_AT: longer than Cloud Functions retries an event (7 days), so a late redelivery of an
# event older than the deletion still finds it and counts nothing.
COUNTED_TOMBSTONE_TTL = dt.timedelta(days=8)
# A collection counter is created by the first event that needs it, sized for this rate
# (writes/s: 2 shards); the rollup grows it with its load like any counter.
COLLECTION_EXPECTED_RATE = 1.0
# A group_by counter (orders:{status}) takes every document of its group: 50 shards to start.
COLLECTION_GROUP_EXPECTED_RATE = 25.0
# A trigger retries what fails transiently (Firestore contention or outage, lost races) with
# these pauses, within its 60 s timeout: the Python SDK deploys Firestore triggers without
# retries, so an event whose handler fails is lost until the next backfill.
COLLECTION_RETRY_PAUSES_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
# Applying one document state is a compare-and-set on its record; two writers of one document
# race rarely (a document takes about one write a second), so this many lost races means trouble.
COLLECTION_APPLY_ATTEMPTS = 20
# Backfill reads watched documents this many at a time and applies them on this many threads.
BACKFILL_PAGE = 300
BACKFILL_THREADS = 8

# ---------------------------------------------------------------------------------------------
# Where the backend lives (docs/adopt.md).
# ---------------------------------------------------------------------------------------------
# Every collection id the backend creates, top level or below its own documents: a prefix goes
# before each, so that an install in a project's default database claims no name of the app's
# own (collection group indexes and TTL policies are per collection id). The constants above are
# the base ids, never rewritten: the domain reads the ids of its placement (`Names`) from the
# context it is given.
COLLECTION_IDS = {name: globals()[name] for name in (
    "COUNTERS", "SHARDS", "MEMORY", "REQUESTS", "INTERNAL", "VOTERS", "PACED", "SEQUENCES",
    "BUSINESS_DAYS", "NUMBER_REQUESTS", "TRENDS", "TREND_MINUTES", "TREND_HOURS", "TREND_TOTALS",
    "TREND_PARTS", "COUNTED_DOCS")}


@dataclass(frozen=True, kw_only=True)
class Names:
    """The collection ids of one placement, one field per entry of COLLECTION_IDS; `Names()` are
    the base ids (this repository's own stack), `Placement.names` the prefixed ones."""

    counters: str = COUNTERS
    shards: str = SHARDS
    memory: str = MEMORY
    requests: str = REQUESTS
    internal: str = INTERNAL
    voters: str = VOTERS
    paced: str = PACED
    sequences: str = SEQUENCES
    business_days: str = BUSINESS_DAYS
    number_requests: str = NUMBER_REQUESTS
    trends: str = TRENDS
    trend_minutes: str = TREND_MINUTES
    trend_hours: str = TREND_HOURS
    trend_totals: str = TREND_TOTALS
    trend_parts: str = TREND_PARTS
    counted_docs: str = COUNTED_DOCS

    @classmethod
    def prefixed(cls, prefix: str) -> Names:
        return cls(**{name.lower(): prefix + base for name, base in COLLECTION_IDS.items()})

DEFAULT_DATABASE = "(default)"
# Firestore's rules for a database id, firebase-tools' for a codebase's function prefix.
_DATABASE_ID = re.compile(r"[a-z][a-z0-9-]{2,61}[a-z0-9]")
COLLECTION_PREFIX_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,29}")
FUNCTION_PREFIX_PATTERN = re.compile(r"[a-z](?:[a-z0-9-]{0,28}[a-z0-9])?")
# Every backend codebase (this repository's functions/, an install's folder) says where it lives
# in this file beside its main.py, committed with it (`counters init` writes an install's). The
# functions do not start without it: a clone or a deploy that lost it fails, rather than writing
# to the default database's unprefixed collections.
PLACEMENT_FILE = "placement.json"
MAX_PLACEMENT_BYTES = 4096
# What `counters init` records of an install beside its placement (the same database, collection
# prefix and function prefix, as `name`); the host's firebase.json gives the codebase its prefix.
# Where they are present (the host's folder, a deploy's discovery, the emulators), a placement
# that disagrees with either is refused: one of them was edited, and none says which is right.
INSTALL_RECORD = "install.json"


def _json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in `path`, None when there is none (no file, or not a JSON object)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _placement_fix(codebase: Path) -> str:
    """What to do about a placement file that cannot be used."""
    return (f"Restore the files from git (git checkout -- {codebase.name}/{PLACEMENT_FILE} "
            f"{codebase.name}/{INSTALL_RECORD} firebase.json), or delete {PLACEMENT_FILE} and "
            f"run `counters init` again, which writes it anew from {INSTALL_RECORD} "
            f"(docs/adopt.md)")


class PlacementError(ValueError):
    """A placement that cannot be used: `field` names the value at fault (None: the file)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where the backend's data and functions are: its Firestore `database`, a
    `collection_prefix` on every collection id of COLLECTION_IDS, the `function_prefix` that
    firebase.json gives its codebase (deployed function ids are `prefix-name`), and the
    `watched_database` holding the documents that collection counters count. This repository's
    own stack uses the defaults."""

    database: str = DEFAULT_DATABASE
    collection_prefix: str = ""
    function_prefix: str = ""
    watched_database: str = DEFAULT_DATABASE

    def __post_init__(self) -> None:
        for name in ("database", "watched_database"):
            value = getattr(self, name)
            if not isinstance(value, str) or (value != DEFAULT_DATABASE
                                              and not _DATABASE_ID.fullmatch(value)):
                raise PlacementError(f"{name}: {value!r} is not a Firestore database id (4-63 "
                                     "of a-z 0-9 -, a letter first) or (default)", name)
        for name, pattern, what in (
                ("collection_prefix", COLLECTION_PREFIX_PATTERN, "1-30 of a-z 0-9 _"),
                ("function_prefix", FUNCTION_PREFIX_PATTERN, "1-30 of a-z 0-9 -")):
            value = getattr(self, name)
            if not isinstance(value, str) or (value and not pattern.fullmatch(value)):
                raise PlacementError(f"{name}: {value!r} must be empty or {what}, a letter "
                                     "first", name)
        # An install (a function prefix) keeps its data in a database of its own or under a
        # collection prefix in the default database, as `counters init` refuses anything else:
        # never in the host's own unprefixed collections.
        if self.function_prefix and ((self.database == DEFAULT_DATABASE)
                                     == (not self.collection_prefix)):
            raise PlacementError(
                f"function_prefix {self.function_prefix!r} with database {self.database!r} and "
                f"collection_prefix {self.collection_prefix!r}: an install keeps its data in a "
                "database of its own or under a collection prefix in the default database, one "
                "or the other (`counters init` refuses any other placement)", "database")

    @classmethod
    def read(cls, codebase: Path) -> Placement:
        """The placement a backend codebase's PLACEMENT_FILE states; PlacementError, saying what
        to do, when the file is missing or wrong."""
        path = codebase / PLACEMENT_FILE
        try:
            text = path.read_text()[:MAX_PLACEMENT_BYTES + 1]
        except FileNotFoundError:
            raise PlacementError(
                f"{path} not found: this backend does not start without it (it says which "
                "database and collections the backend uses; without it, it would write to the "
                "default database's unprefixed collections). Restore it from git (git checkout "
                f"-- {PLACEMENT_FILE} in {codebase}), or run `counters init` again in the host "
                "project (docs/adopt.md)") from None
        fields = [f.name for f in dataclasses.fields(cls)]
        try:
            data = json.loads(text) if len(text) <= MAX_PLACEMENT_BYTES else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or sorted(data) != sorted(fields):
            raise PlacementError(f"{path}: must be a JSON object of {', '.join(fields)} (at "
                                 f"most {MAX_PLACEMENT_BYTES} bytes), as `counters init` writes "
                                 "it")
        try:
            placement = cls(**data)
        except PlacementError as error:
            raise PlacementError(f"{path}: {error}. {_placement_fix(codebase)}",
                                 error.field) from None
        placement.check_agrees(codebase)
        return placement

    def check_agrees(self, codebase: Path) -> None:
        """PlacementError, naming both files and the fix, unless the files beside `codebase`
        that say where it lives agree with this placement: its INSTALL_RECORD and the codebase's
        entry in the host's firebase.json (its prefix). Either may be absent (a deployed
        codebase has neither); an unreadable one is for its own reader to refuse."""
        path = codebase / PLACEMENT_FILE
        found: list[tuple[Path, dict[str, Any]]] = []
        record = _json_object(codebase / INSTALL_RECORD)
        if record is not None:
            found.append((codebase / INSTALL_RECORD, {
                "function_prefix": record.get("name"), "database": record.get("database"),
                "collection_prefix": record.get("collection_prefix")}))
        firebase = _json_object(codebase.parent / "firebase.json")
        entries = (firebase or {}).get("functions")
        for entry in entries if isinstance(entries, list) else [entries]:
            if (isinstance(entry, dict) and isinstance(entry.get("source"), str)
                    and (codebase.parent / entry["source"]).resolve() == codebase.resolve()):
                found.append((codebase.parent / "firebase.json",
                              {"function_prefix": entry.get("prefix", "")}))
        for other, said in found:
            differ = [f"{name} {getattr(self, name)!r} in {path}, {value!r} in {other}"
                      for name, value in said.items() if getattr(self, name) != value]
            if differ:
                raise PlacementError(
                    f"{path} and {other} disagree on where this backend lives ("
                    + "; ".join(differ) + "): it does not start on a placement its install did "
                    f"not write. {_placement_fix(codebase)}")

    def to_json(self) -> str:
        """The PLACEMENT_FILE that states this placement (what `read` reads)."""
        return json.dumps(dataclasses.asdict(self), indent=2) + "\n"

    @functools.cached_property
    def names(self) -> Names:
        """Its collection ids: each of COLLECTION_IDS after `collection_prefix`."""
        return Names.prefixed(self.collection_prefix)

    def function_id(self, name: str) -> str:
        """The deployed id of the function exported as `name` (firebase-tools' prefixing)."""
        return f"{self.function_prefix}-{name}" if self.function_prefix else name

