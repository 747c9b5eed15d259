"""The demo data `make dev` seeds, so that a fresh stack's web page has something to show.

`seed(project)` creates, when missing: the demo post's counters (claps, a `unique` likes counter and
a rate-limited views counter), a configured demo tenant with its staff account, an admin account
for the operations dashboard, a few trending-tag events in two regions, and the documents the
demo collection counters count (comments on the demo post, orders). It runs against the emulators
named by the environment (FIRESTORE_EMULATOR_HOST, FIREBASE_AUTH_EMULATOR_HOST) and calls the
domain directly, with Admin privileges, as the rollup does. Running it again adds nothing that is
there.
"""

from __future__ import annotations

import datetime as dt

from callables import sign_up
from counting.features import collections, counters, declarations, trends
from counting.features.context import Context
from counting.features.sequences import documents, opening
from counting.foundation.config import Placement
from counting.writepath.policy import Policy
from google.api_core import exceptions as gexc
from google.cloud import firestore

# What the web client shows by default (web/src/main.js names the same post, tenant and account;
# web/src/post.js derives the likes and views counters' ids from the post's).
DEMO_COUNTER = "demo-post"  # claps: each tap +1 (the default policy)
DEMO_POST_COUNTERS: dict[str, Policy] = {
    DEMO_COUNTER: Policy(),
    f"likes:{DEMO_COUNTER}": Policy(unique=True),
    f"views:{DEMO_COUNTER}": Policy(min_interval_s=60),
}
# The operations dashboard's demo account (web/src/ops.js fills it in on the emulator build).
DEMO_ADMIN = ("admin@demo.test", "demo-password")
DEMO_TENANT = "demo-diner"
DEMO_TIMEZONE = "Europe/Paris"
DEMO_RESET_TIME = "04:00"
DEMO_STAFF = ("staff@demo-diner.test", "demo-password")
# Trending-tag events (one `track` call each) per region: enough for a ranked list in each region
# and in `global`, their sum. Counts stay far below the trending thresholds.
DEMO_TRENDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "eu": (("coffee", "croissant"), ("coffee", "brunch"), ("coffee",), ("croissant",),
           ("brunch", "pancakes")),
    "us": (("pancakes", "coffee"), ("pancakes", "brunch"), ("pancakes",), ("waffles",)),
}
# The events' request ids are scoped to this user, like any caller's.
DEMO_UID = "demo-seed"
# Documents the collection counters count (functions/declarations.json): comments:demo-post,
# orders:{status} and revenue:{status}.
DEMO_COMMENTS = ("First!", "Nice post.", "Counting documents, exactly once?")
DEMO_ORDERS = (("paid", 1200), ("paid", 450), ("shipped", 3000), ("pending", 800))


def seed(project: str) -> None:
    """Create whatever of the demo data is missing in `project`."""
    db = firestore.Client(project=project)
    ctx = Context.for_process(placement=Placement())  # this repository's stack: the defaults
    for counter, policy in DEMO_POST_COUNTERS.items():
        counters.create_counter(ctx, db, counter, policy=policy)  # leaves an existing one as is
    if not documents.sequence_ref(db, ctx.names, DEMO_TENANT).get().exists:
        opening.configure_sequence(ctx, db, DEMO_TENANT, timezone=DEMO_TIMEZONE,
                                   reset_time=DEMO_RESET_TIME)
    email, password = DEMO_STAFF
    sign_up({"tenants": [DEMO_TENANT]}, email=email, password=password, project=project)
    email, password = DEMO_ADMIN
    sign_up({"admin": True}, email=email, password=password, project=project)
    seed_trends(ctx, db)
    seed_documents(db)
    # The triggers count what was just created; a backfill counts anything they missed (written
    # before the Functions emulator was ready) and nothing twice.
    for watch in declarations.Declared.of_codebase(declarations.CODEBASE).watches:
        collections.backfill(collections.Counting(ctx, db, watch))


def seed_documents(db: firestore.Client) -> int:
    """Create the demo comments, orders and page that are missing. Returns how many it created."""
    wanted: list[tuple[firestore.DocumentReference, dict[str, object]]] = []
    comments = db.collection("posts", DEMO_COUNTER, "comments")
    for number, text in enumerate(DEMO_COMMENTS, 1):
        wanted.append((comments.document(f"demo-{number}"), {
            "author": DEMO_UID, "text": text, "created_at": firestore.SERVER_TIMESTAMP}))
    # The demo post's page, whose `visits` the extension counter keeps: the rules let a device's
    # shard be written only under a page that exists.
    wanted.append((db.collection("pages").document(DEMO_COUNTER), {"title": DEMO_COUNTER}))
    for number, (status, amount) in enumerate(DEMO_ORDERS, 1):
        wanted.append((db.collection("orders").document(f"demo-{number}"),
                       {"status": status, "amount": amount}))
    created = 0
    for ref, fields in wanted:
        try:
            ref.create(fields)
        except gexc.AlreadyExists:
            continue
        created += 1
    return created


def seed_trends(ctx: Context, db: firestore.Client, now: dt.datetime | None = None) -> bool:
    """Track the demo events of each region whose 24 h list is empty.

    The rollup publishes a list a moment after its events, so a stack stopped in between still
    finds it empty. The request ids name the hour, so seeding again within that hour counts
    nothing twice. Returns whether it tracked anything."""
    now = now or dt.datetime.now(dt.UTC)
    hour = now.strftime("%Y%m%d%H")
    tracked = False
    for region, events in DEMO_TRENDS.items():
        if trends.top_tags(db, ctx.names, region, 1, "24h").items:
            continue
        for number, tags in enumerate(events):
            trends.track(ctx, db, region, tags, request_id=f"demo-{region}-{hour}-{number}",
                         uid=DEMO_UID, now=now)
            tracked = True
    return tracked
