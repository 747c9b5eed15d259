"""`counters seq`: per-tenant ticket numbers that restart every business day."""

from __future__ import annotations

import click
from counting.features.sequences import issuing, opening, resetting
from counting.foundation import config, inputs

from .session import CLI_UID, CommandGroup, Session, json_option, pass_session


@click.group(cls=CommandGroup)
def seq() -> None:
    """Per-tenant ticket numbers that restart every business day."""


@seq.command("configure")
@click.argument("tenant")
@click.option("--timezone", required=True, metavar="TZ", help="IANA name, e.g. Europe/Paris.")
@click.option("--reset-time", metavar="HH:MM",
              help=f"Local time the business day starts (default {config.DEFAULT_RESET_TIME}).")
@json_option
@pass_session
def configure(session: Session, tenant: str, timezone: str, reset_time: str | None,
              as_json: bool) -> None:
    """Set TENANT's business-day rule."""
    tenant = inputs.tenant_id(tenant)
    timezone = inputs.timezone(timezone)
    reset_time = inputs.reset_time(reset_time)
    found = opening.configure_sequence(session.context(), session.db(), tenant, timezone=timezone,
                                       reset_time=reset_time)
    session.report(
        as_json, {"tenant": found.tenant, "timezone": found.timezone,
                  "reset_time": found.reset_time},
        f"{found.tenant}: business day starts at {found.reset_time} {found.timezone}")


@seq.command("next")
@click.argument("tenant")
@click.option("--request-id", metavar="ID", help="A retry returns the number it got first.")
@json_option
@pass_session
def next_number(session: Session, tenant: str, request_id: str | None, as_json: bool) -> None:
    """Issue TENANT's next number."""
    tenant = inputs.tenant_id(tenant)
    request_id = inputs.request_id(request_id)
    ticket = issuing.next_number(session.context(), session.db(), tenant,
                                 request_id=request_id, uid=CLI_UID)
    day = ticket.business_day.isoformat()
    session.report(
        as_json, {"tenant": ticket.tenant, "number": ticket.number, "business_day": day},
        f"{ticket.tenant}: number {ticket.number} (business day {day})")


@seq.command("reset")
@click.argument("tenant")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation on production.")
@json_option
@pass_session
def reset(session: Session, tenant: str, yes: bool, as_json: bool) -> None:
    """Restart TENANT's numbering at 1 within the business day (a shift change)."""
    tenant = inputs.tenant_id(tenant)
    session.confirm_destructive(f"restart numbering of {tenant}", yes)
    done = resetting.reset_sequence(session.context(), session.db(), tenant, uid=CLI_UID)
    day = done.business_day.isoformat()
    session.report(as_json, {"tenant": done.tenant, "business_day": day},
                   f"{done.tenant}: numbering restarts at 1 (business day {day})")
