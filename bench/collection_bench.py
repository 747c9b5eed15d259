"""Collection counters under load, through the stack's real Firestore triggers: RATE (and
SUSTAINED_RATE) comment documents a second, spread over PARENTS posts, for SECONDS, created as an
app creates them (one Firestore write each, no callable). The trigger counts each into
comments:{post}; the rollup publishes counters/{id}.

Measured, all on the server's clock (one machine: the emulators stamp commit times):
- counts: every post's published count and shard sum equal the comments it got;
- lag from a comment's commit to the first publish of its counter that includes it (its
  record's commit time <= the publish's `updated_at`), split into commit -> trigger applied and
  applied -> published; the trigger's backlog shows as a growing first part;
- Firestore operations per counted document: the trigger's, by its code path (it reads the
  document's record, writes the record and one shard; a counter's first event creates it; the
  configuration cache reads each counter at most once per 5 s per instance), and the rollup's,
  measured (internal/rollup_usage over the run).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cost_model
from counters_cli.load import percentile
from counting.features import collections, declarations
from counting.foundation import config
from counting.foundation.config import Names
from counting.rollup import cadence
from google.cloud import firestore

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

NAMES = Names()  # the collection ids of the default placement, which these run on

RATE = 300.0
# Below what the Functions emulator's trigger delivery sustains on a 2-core machine (it delivers
# one event at a time, ~80-100 events/s): the lag the design gives when triggers keep up.
SUSTAINED_RATE = 60.0
PARENTS = 50
SECONDS = float(os.environ.get("COLLECTION_S", 60))
WRITERS = 24
SETTLE_S = 600.0
COMMENTS = OWN.declarations[0]


class Publishes:
    """Every snapshot of the posts' counter documents: (commit time, updated_at, count)."""

    def __init__(self, db: firestore.Client, counters: list[str]) -> None:
        self.seen: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        self._lock = threading.Lock()
        refs = [db.collection(config.COUNTERS).document(c) for c in counters]
        self._watches = [ref.on_snapshot(self._on_snapshot) for ref in refs]

    def _on_snapshot(self, docs: list[Any], changes: Any, read_time: Any) -> None:
        with self._lock:
            for doc in docs:
                data = doc.to_dict() or {} if doc.exists else {}
                if "updated_at" in data:
                    self.seen[doc.id].append((doc.update_time.timestamp(),
                                              data["updated_at"].timestamp(),
                                              int(data.get("count") or 0)))

    def first_including(self, counter: str, applied_at: float) -> float | None:
        with self._lock:
            found = [at for at, as_of, _ in self.seen[counter] if as_of >= applied_at]
        return min(found) if found else None

    def close(self) -> None:
        for watch in self._watches:
            watch.unsubscribe()  # type: ignore[no-untyped-call]


def create_comments(db: firestore.Client, posts: list[str],
                    rate: float) -> list[tuple[str, str, float]]:
    """`rate` documents/s for SECONDS, round-robin over the posts: (post, path, commit time)."""
    created: list[tuple[str, str, float]] = []
    lock = threading.Lock()
    interval = WRITERS / rate
    stop_at = time.monotonic() + SECONDS

    def writer(n: int) -> None:
        next_at = time.monotonic() + n * interval / WRITERS
        i = n
        while next_at < stop_at:
            post = posts[i % len(posts)]
            ref = db.collection("posts", post, "comments").document(uuid.uuid4().hex)
            result = ref.create({"author": "bench", "text": "load"})
            with lock:
                created.append((post, ref.path, result.update_time.timestamp()))
            i += WRITERS
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))

    with ThreadPoolExecutor(WRITERS) as pool:
        for future in [pool.submit(writer, n) for n in range(WRITERS)]:
            future.result()
    return created


def settled(db: firestore.Client, expected: dict[str, int]) -> bool:
    refs = [db.collection(config.COUNTERS).document(c) for c in expected]
    published = {s.id: (s.to_dict() or {}).get("count") for s in db.get_all(refs) if s.exists}
    return published == expected


def applied_times(db: firestore.Client, paths: list[str]) -> dict[str, float]:
    """When the trigger applied each document: its record's last commit."""
    found: dict[str, float] = {}
    for start in range(0, len(paths), 300):
        chunk = paths[start:start + 300]
        refs = {collections.record_ref(db, NAMES, p).id: p for p in chunk}
        for snapshot in db.get_all([collections.record_ref(db, NAMES, p) for p in chunk]):
            if snapshot.exists:
                found[refs[snapshot.id]] = snapshot.update_time.timestamp()
    return found


def run(rate: float = RATE) -> dict[str, Any]:
    db = firestore.Client(project=os.environ["GCLOUD_PROJECT"])
    tag = uuid.uuid4().hex[:6]
    posts = [f"bench-{tag}-{n}" for n in range(PARENTS)]
    counters = [COMMENTS.counter_id(post) for post in posts]
    # Warm-up: one comment per post starts the trigger's workers and creates the counters.
    warm = [db.collection("posts", p, "comments").document("warm") for p in posts]
    for ref in warm:
        ref.create({"author": "bench", "text": "warm-up"})
    deadline = time.monotonic() + SETTLE_S
    while not settled(db, dict.fromkeys(counters, 1)) and time.monotonic() < deadline:
        time.sleep(0.5)
    publishes = Publishes(db, counters)
    before = cadence.usage_ref(db, NAMES).get().to_dict() or {}
    began = time.monotonic()
    created = create_comments(db, posts, rate)
    wrote_s = time.monotonic() - began
    per_post: dict[str, int] = defaultdict(lambda: 1)
    for post, _, _ in created:
        per_post[COMMENTS.counter_id(post)] += 1
    expected = {c: per_post[c] for c in counters}
    deadline = time.monotonic() + SETTLE_S
    while not settled(db, expected) and time.monotonic() < deadline:
        time.sleep(0.5)
    settle_s = time.monotonic() - began - wrote_s
    exact_rollup = settled(db, expected)
    strong = {c: sum(int((s.to_dict() or {}).get("count") or 0)
                     for s in db.collection(config.COUNTERS, c, config.SHARDS).stream())
              for c in counters}
    after = cadence.usage_ref(db, NAMES).get().to_dict() or {}
    publishes.close()

    applied = applied_times(db, [path for _, path, _ in created])
    to_trigger, to_publish, total = [], [], []
    series: list[tuple[float, float, float]] = []  # (s into the run, commit->published, ->trigger)
    first = min(committed for _, _, committed in created)
    unseen = 0
    for post, path, committed in created:
        at = applied.get(path)
        shown = None if at is None else publishes.first_including(COMMENTS.counter_id(post), at)
        if at is None or shown is None:
            unseen += 1
            continue
        to_trigger.append(at - committed)
        to_publish.append(shown - at)
        total.append(shown - committed)
        series.append((committed - first, shown - committed, at - committed))
    rollup_usage = cost_model.usage_delta(before, after)
    documents = len(created)
    return {
        "offered_rate": rate,
        "parents": PARENTS,
        "seconds": SECONDS,
        "documents": documents,
        "achieved_rate": round(documents / wrote_s, 1),
        "counts_exact": exact_rollup and strong == expected,
        "settled_after_writes_s": round(settle_s, 1),
        "lag_p50_s": round(percentile(total, 50), 3),
        "lag_p99_s": round(percentile(total, 99), 3),
        "lag_max_s": round(max(total), 3),
        "commit_to_trigger_p50_s": round(percentile(to_trigger, 50), 3),
        "commit_to_trigger_p99_s": round(percentile(to_trigger, 99), 3),
        "trigger_to_publish_p50_s": round(percentile(to_publish, 50), 3),
        "trigger_to_publish_p99_s": round(percentile(to_publish, 99), 3),
        "unseen": unseen,
        # Per counted document, besides the app's own write of it.
        "trigger_ops_per_document": {"reads": 1, "writes": 2},
        "rollup_usage": rollup_usage,
        "rollup_ops_per_document": {
            "reads": round(rollup_usage["reads"] / documents, 4),
            "writes": round(rollup_usage["writes"] / documents, 4)},
        "series": series,
    }
