"""Callables for trending tags: track, top_tags."""

from __future__ import annotations

from typing import Any

from counting.features import trends
from counting.foundation import inputs, kinds

from handlers import Request, caller, client_callable, context, db, placement, rfc3339


@client_callable
def track(req: Request) -> dict[str, Any]:
    uid, _ = caller(req)
    data = inputs.payload(req.data, {"region", "tags", "request_id"})
    region = inputs.region(inputs.required(data, "region"))
    tags = inputs.tags(inputs.required(data, "tags"))
    request_id = inputs.request_id(data.get("request_id"))
    recorded = trends.track(context(), db(), region, tags, request_id=request_id, uid=uid)
    return {"recorded": recorded}


@client_callable
def top_tags(req: Request) -> dict[str, Any]:
    caller(req)
    data = inputs.payload(req.data, {"region", "k", "window"})
    region = inputs.region(data["region"]) if "region" in data else None
    k = inputs.top_k(data.get("k"))
    window = inputs.choice(data.get("window"), "window", kinds.WINDOWS, kinds.DEFAULT_WINDOW)
    top = trends.top_tags(db(), placement().names, region, k, window)
    return {"region": top.region, "window": top.window, "as_of": rfc3339(top.as_of),
            "items": [{"tag": item.tag, "count": item.count} for item in top.items]}
