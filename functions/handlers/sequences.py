"""Callables for resetting sequences: configure_sequence, next_number, reset_sequence."""

from __future__ import annotations

from typing import Any

from counting.features.sequences import issuing, opening, resetting
from counting.foundation import inputs

from handlers import Request, caller, client_callable, context, db, require_admin


def require_member(req: Request, tenant: str) -> str:
    """The caller's uid, when the `tenants` claim lists `tenant` or the caller is an admin (now:
    `require_admin`)."""
    uid, claims = caller(req)
    tenants = claims.get("tenants")
    if not (isinstance(tenants, list) and tenant in tenants):
        require_admin(req, f"tenant: this operation needs {tenant!r} in the tenants claim")
    return uid


@client_callable
def configure_sequence(req: Request) -> dict[str, Any]:
    uid = require_admin(req)
    data = inputs.payload(req.data, {"tenant", "timezone", "reset_time", "request_id"})
    configured = opening.configure_sequence(
        context(),
        db(),
        inputs.tenant_id(inputs.required(data, "tenant")),
        timezone=inputs.timezone(inputs.required(data, "timezone")),
        reset_time=inputs.reset_time(data.get("reset_time")),
        uid=uid,
        request_id=inputs.request_id(data.get("request_id")),
    )
    return {"tenant": configured.tenant, "timezone": configured.timezone,
            "reset_time": configured.reset_time}


@client_callable
def next_number(req: Request) -> dict[str, Any]:
    caller(req)
    data = inputs.payload(req.data, {"tenant", "request_id"})
    tenant = inputs.tenant_id(inputs.required(data, "tenant"))
    request_id = inputs.request_id(data.get("request_id"))
    uid = require_member(req, tenant)
    ticket = issuing.next_number(context(), db(), tenant, request_id=request_id, uid=uid)
    return {"tenant": ticket.tenant, "number": ticket.number,
            "business_day": ticket.business_day.isoformat()}


@client_callable
def reset_sequence(req: Request) -> dict[str, Any]:
    caller(req)
    data = inputs.payload(req.data, {"tenant", "request_id"})
    tenant = inputs.tenant_id(inputs.required(data, "tenant"))
    request_id = inputs.request_id(data.get("request_id"))
    uid = require_member(req, tenant)
    reset = resetting.reset_sequence(context(), db(), tenant, uid=uid, request_id=request_id)
    return {"tenant": reset.tenant, "business_day": reset.business_day.isoformat()}
