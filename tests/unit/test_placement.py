"""Where the backend lives is carried by each context, not by the process: two contexts with
different placements, in one process and on one database (the simulation's Firestore model),
write and roll up each in the collections of its own placement."""

from __future__ import annotations

import random
from typing import cast

from counting.features import counters, trends
from counting.features.context import Context
from counting.foundation import config
from counting.foundation.config import AutoscaleParams, Names, Placement
from counting.rollup.lease import Lease, state_ref
from counting.rollup.tick import Rollup
from google.cloud import firestore

from tests.sim.faults import CALM
from tests.sim.model import Client, Model
from tests.sim.virtual import Sim


def test_names_are_the_base_ids_under_the_placements_prefix() -> None:
    assert Names() == Placement().names
    assert Names().counters == config.COUNTERS and Names().trend_minutes == config.TREND_MINUTES
    shop = Placement(collection_prefix="shop_").names
    assert [getattr(shop, name.lower()) for name in config.COLLECTION_IDS] == [
        "shop_" + base for base in config.COLLECTION_IDS.values()]


def test_two_placements_in_one_process_keep_to_their_own_collections() -> None:
    sim = Sim(random.Random(1))
    model = Model(sim, random.Random(2), CALM)
    db = cast(firestore.Client, Client(model))

    def step() -> None:  # what was committed becomes visible
        sim.now_us += 1_000_000

    plain = Context.offline()
    shop = Context.offline(placement=Placement(collection_prefix="shop_"))
    for ctx, by in ((plain, 2), (shop, 5)):
        counters.create_counter(ctx, db, "likes", shards=2)
        step()
        counters.increment(ctx, db, "likes", by, request_id="r1", uid="ann")
        trends.track(ctx, db, "eu", ["coffee"], request_id="t1", uid="ann")
    step()
    for ctx in (plain, shop):
        lease = Lease(db, state_ref(db, ctx.names), "holder", 10.0)
        assert lease.acquire()
        step()
        Rollup(db, lease, AutoscaleParams(enabled=False), writing=ctx.writing).tick()
    step()

    assert counters.get_count(db, plain.names, "likes").count == 2
    assert counters.get_count(db, shop.names, "likes").count == 5
    written = {path[0::2] for path in model.docs}  # the collection ids of each document's path
    prefixed = {ids for ids in written if ids[0].startswith("shop_")}
    assert all(all(name.startswith("shop_") for name in ids) for ids in prefixed)
    assert all(not name.startswith("shop_") for ids in written - prefixed for name in ids)
    used = {name for ids in written - prefixed for name in ids}
    assert {"shop_" + name for name in used} == {name for ids in prefixed for name in ids}
    assert used >= {config.COUNTERS, config.SHARDS, config.MEMORY, config.REQUESTS,
                    config.INTERNAL, config.TREND_MINUTES}
