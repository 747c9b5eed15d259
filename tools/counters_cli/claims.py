"""`counters claims`: roles in Firebase Auth custom claims (docs/api.md, roles and claims)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import click
import firebase_admin
from counting.foundation import inputs
from firebase_admin import auth as firebase_auth

from .session import Session, check_reachable, json_option, pass_session, start_command

DEFAULT_AUTH_EMULATOR_HOST = "127.0.0.1:9099"
CLI_APP = "counters-cli"  # the firebase_admin app the claims commands use


def auth_client(session: Session) -> firebase_auth.Client:
    """Firebase Auth of the session's project: the Auth emulator when the target is an emulator
    (FIREBASE_AUTH_EMULATOR_HOST, default firebase.json's), else production with Application
    Default Credentials."""
    session.db()  # announces the target
    if session.production:
        os.environ.pop("FIREBASE_AUTH_EMULATOR_HOST", None)
    else:
        host = os.environ.get("FIREBASE_AUTH_EMULATOR_HOST") or DEFAULT_AUTH_EMULATOR_HOST
        check_reachable(host, "Auth", start_command(session.firebase_json))
        os.environ["FIREBASE_AUTH_EMULATOR_HOST"] = host
    try:
        app = firebase_admin.get_app(CLI_APP)
    except ValueError:
        app = firebase_admin.initialize_app(options={"projectId": session.target.project},
                                            name=CLI_APP)
    return firebase_auth.Client(app)


def find_user(auth: firebase_auth.Client, who: str) -> firebase_auth.UserRecord:
    """A user by email (anything with an @) or by uid."""
    try:
        return auth.get_user_by_email(who) if "@" in who else auth.get_user(who)
    except firebase_auth.UserNotFoundError:
        raise click.ClickException(f"no user {who!r} in Firebase Auth") from None


def changed_claims(claims: Mapping[str, Any], *, grant: bool, admin: bool,
                   tenant: str | None) -> dict[str, Any]:
    """`claims` with the admin role or one tenant granted or revoked; other claims are kept."""
    result = dict(claims)
    if admin:
        if grant:
            result["admin"] = True
        else:
            result.pop("admin", None)
    if tenant is not None:
        tenants = [t for t in result.get("tenants") or [] if t != tenant]
        if grant:
            tenants.append(tenant)
        if tenants:
            result["tenants"] = tenants
        else:
            result.pop("tenants", None)
    return result


@click.command()
@click.argument("action", type=click.Choice(["grant", "revoke", "show"]))
@click.argument("user")
@click.option("--admin", is_flag=True, help="The administrator role.")
@click.option("--tenant", metavar="T", help="A tenant the user works for.")
@json_option
@pass_session
def claims(session: Session, action: str, user: str, admin: bool, tenant: str | None,
           as_json: bool) -> None:
    """Roles in Firebase Auth custom claims: grant or revoke USER (a uid or an email) the admin
    role (--admin) or one tenant (--tenant T); show prints USER's claims."""
    if action != "show" and admin == (tenant is not None):
        raise click.UsageError(f"{action} takes --admin or --tenant T")
    if tenant is not None:
        tenant = inputs.tenant_id(tenant)
    auth = auth_client(session)
    record = find_user(auth, user)
    found = record.custom_claims or {}
    if action != "show":
        found = changed_claims(found, grant=action == "grant", admin=admin, tenant=tenant)
        try:
            auth.set_custom_user_claims(record.uid, found or None)
        except ValueError as error:  # e.g. the claims would pass Firebase's 1,000-byte limit
            raise click.ClickException(str(error)) from None
    session.report(as_json, {"uid": record.uid, "claims": dict(found)},
                   f"{record.uid}: {json.dumps(dict(found), sort_keys=True)}")
    if action != "show" and not as_json:
        session.err.print("The user's next ID token carries them (within an hour, or at once "
                          "after signing in again).")
