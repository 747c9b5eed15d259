"""Callables for sharded counters: create_counter, configure_counter, increment, get_count,
reset_counter."""

from __future__ import annotations

from typing import Any

from counting.features import counters
from counting.foundation import inputs, kinds
from counting.foundation.errors import InvalidArgument
from counting.writepath import policy, shards

from handlers import (
    Request,
    caller,
    client_callable,
    context,
    db,
    declared,
    is_admin,
    placement,
    require_admin,
    rfc3339,
)


@client_callable
def create_counter(req: Request) -> dict[str, Any]:
    require_admin(req)
    data = inputs.payload(req.data, {"counter", "shards", "expected_rate", "strategy", "policy"})
    counter = inputs.counter_id(inputs.required(data, "counter"))
    declared().check_plain(counter)
    created = counters.create_counter(
        context(),
        db(),
        counter,
        shards=inputs.shard_count(data.get("shards")),
        expected_rate=inputs.expected_rate(data.get("expected_rate")),
        strategy=inputs.choice(data.get("strategy"), "strategy", kinds.STRATEGIES,
                               kinds.DEFAULT_STRATEGY),
        policy=policy.parse(data["policy"]) if "policy" in data else None,
    )
    return {"counter": created.counter, "shards": created.shards, "created": created.created,
            "policy": created.policy.to_document()}


@client_callable
def configure_counter(req: Request) -> dict[str, Any]:
    uid = require_admin(req)
    data = inputs.payload(req.data, {"counter", "policy", "request_id"})
    counter = inputs.counter_id(inputs.required(data, "counter"))
    chosen = policy.parse(inputs.required(data, "policy"))
    configured = counters.configure_counter(context(), db(), counter, chosen, uid=uid,
                                            request_id=inputs.request_id(data.get("request_id")))
    return {"counter": counter, "policy": configured.to_document()}


@client_callable
def increment(req: Request) -> dict[str, Any]:
    uid, claims = caller(req)
    admin = is_admin(claims)
    data = inputs.payload(req.data, {"counter", "by", "request_id", "increments"})
    request_id = inputs.request_id(data.get("request_id"))
    if "increments" in data:
        if "counter" in data or "by" in data:
            raise InvalidArgument("increments: give either increments or counter/by")
        batch = inputs.increments(data["increments"])
        applied = counters.increment_many(context(), db(), batch, request_id=request_id, uid=uid,
                                          admin=admin)
        return {"applied": applied > 0, "count": applied}
    counter = inputs.counter_id(inputs.required(data, "counter"))
    by = inputs.increment_by(data.get("by"))
    committed = counters.increment(context(), db(), counter, by, request_id=request_id, uid=uid,
                                   admin=admin)
    if committed is not None:
        return {"counter": counter, "applied": True, "committed_at": rfc3339(committed)}
    # A retry of a request that was applied: when that was, so that a client whose answer was
    # lost can still tell whether the rollup includes it.
    first = None if request_id is None else shards.applied_at(db(), placement().names, uid,
                                                              request_id)
    if first is None:
        return {"counter": counter, "applied": False}
    return {"counter": counter, "applied": False, "committed_at": rfc3339(first)}


@client_callable
def get_count(req: Request) -> dict[str, Any]:
    uid, _ = caller(req)
    data = inputs.payload(req.data, {"counter", "consistency"})
    counter = inputs.counter_id(inputs.required(data, "counter"))
    consistency = inputs.choice(data.get("consistency"), "consistency", kinds.CONSISTENCIES,
                                "rollup")
    if consistency == "strong":
        # It reads every shard: up to 1,000 reads a call.
        require_admin(req, "consistency: strong reads are for admins")
    found = counters.get_count(db(), placement().names, counter, consistency, uid=uid)
    result = {"counter": found.counter, "count": found.count, "as_of": rfc3339(found.as_of),
              "consistency": found.consistency}
    if found.mine is not None:
        result["mine"] = found.mine
    return result


@client_callable
def reset_counter(req: Request) -> dict[str, Any]:
    uid = require_admin(req)
    data = inputs.payload(req.data, {"counter", "request_id"})
    counter = inputs.counter_id(inputs.required(data, "counter"))
    counters.reset_counter(context(), db(), counter, uid=uid,
                           request_id=inputs.request_id(data.get("request_id")))
    return {"counter": counter, "count": 0}
