"""The one place for collection names, limits and defaults."""

from __future__ import annotations

import datetime as dt

# Collections and documents.
COUNTERS = "counters"
SHARDS = "shards"
REQUESTS = "requests"  # exactly-once markers, expired by the TTL policy on EXPIRES_AT
INTERNAL = "internal"  # server-only state: the rollup lease and watermark
ROLLUP_STATE_DOC = "rollup"
EXPIRES_AT = "expires_at"

# Counter limits (CONTRACT.md).
MIN_SHARDS = 1
MAX_SHARDS = 1000
MAX_ABS_BY = 1_000_000_000
MAX_BATCH = 500
MAX_EXPECTED_RATE = 1_000_000.0
STRATEGIES = ("random", "round_robin", "least_loaded")
DEFAULT_STRATEGY = "random"

# Sizing: shards = ceil(expected_rate / (SHARD_WRITE_RATE * TARGET_UTILISATION)), clamped.
# 1 sustained write/s per document is the production guidance; running shards at half of it
# leaves room for bursts. Without a hint a counter is sized for DEFAULT_EXPECTED_RATE.
SHARD_WRITE_RATE = 1.0
TARGET_UTILISATION = 0.5
DEFAULT_EXPECTED_RATE = 5.0  # -> 10 shards

# Exactly-once markers live at least this long (TTL deletion follows within about a day).
REQUEST_MARKER_TTL = dt.timedelta(hours=24)

# The write path caches a counter's configuration per instance for this long: a changed
# num_shards reaches every instance within this time.
CONFIG_CACHE_TTL_S = 5.0

# Shard writes carry a random `stripe` in 0..STRIPES-1 in front of their `updated_at` in the one
# index the rollup queries, so no index range takes more than 1/STRIPES of all shard writes
# (about 500 writes/s per range for sequential values in production).
STRIPES = 16

# The rollup loop.
ROLLUP_PERIOD_S = 1.0
ROLLUP_LEASE_S = 10.0
ROLLUP_INVOCATION_S = 55.0  # of each minute-long scheduled invocation
