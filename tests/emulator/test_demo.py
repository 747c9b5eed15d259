"""The demo data `make dev` seeds: what the web page shows by default, seeded once however often
the stack is started."""

from __future__ import annotations

import os

import demo
from callables import Callables, sign_up
from counting.features import trends
from counting.foundation.config import Names
from google.cloud import firestore

from ..waiting import always, eventually

NAMES = Names()  # the collection ids of the default placement, which these run on

# Seeded events reach the lists through the rollup, which may be asleep until its next
# scheduled minute: the events do not wake it.
PUBLISHED_S = 90.0


def demo_lists(db: firestore.Client) -> dict[str, list[tuple[str, int]]]:
    return {region: [(item.tag, item.count) for item in trends.top_tags(db, NAMES, region, 10,
                                                                         "24h").items]
            for region in demo.DEMO_TRENDS}


def test_seeding_twice_gives_the_demo_once(db: firestore.Client) -> None:
    """The demo post's counters with their policies, a staff account of the demo tenant, an admin
    account and ranked demo tags exist, once."""
    project = os.environ["GCLOUD_PROJECT"]
    demo.seed(project)
    for counter, policy in demo.DEMO_POST_COUNTERS.items():
        assert db.document(f"counters/{counter}").get().get("policy") == policy.to_document()
    email, password = demo.DEMO_ADMIN
    admin = Callables(sign_up(email=email, password=password).id_token)
    assert admin.call("get_count", counter=demo.DEMO_COUNTER, consistency="strong")["count"] == 0
    email, password = demo.DEMO_STAFF
    staff = Callables(sign_up(email=email, password=password).id_token)
    assert staff.call("next_number", tenant=demo.DEMO_TENANT)["number"] >= 1

    expected = {"eu": [("coffee", 3), ("brunch", 2), ("croissant", 2), ("pancakes", 1)],
                "us": [("pancakes", 3), ("brunch", 1), ("coffee", 1), ("waffles", 1)]}
    eventually(lambda: demo_lists(db) == expected, timeout_s=PUBLISHED_S)
    demo.seed(project)
    always(lambda: demo_lists(db) == expected, for_s=3.0)
    eventually(lambda: trends.top_tags(db, NAMES, None, 1, "24h").items, timeout_s=PUBLISHED_S)


def test_seeded_comments_and_orders_are_counted_once(db: firestore.Client) -> None:
    """The demo post's comments and the demo orders are counted, once however often the demo
    is seeded."""
    project = os.environ["GCLOUD_PROJECT"]
    demo.seed(project)
    demo.seed(project)
    expected = {f"comments:{demo.DEMO_COUNTER}": len(demo.DEMO_COMMENTS), "orders:paid": 2,
                "revenue:paid": 1650, "orders:shipped": 1, "revenue:shipped": 3000}

    def published() -> dict[str, int | None]:
        found = {c: db.collection("counters").document(c).get() for c in expected}
        return {c: s.get("count") if s.exists else None for c, s in found.items()}

    eventually(lambda: published() == expected, timeout_s=PUBLISHED_S)
