"""The two checks of `counters doctor` that use the backend rather than read its configuration:
the canary (a counter of doctor's own, created, incremented once, waited for until the rollup
publishes it, deleted; with a look at whether the callables serve) and the exactness audit's last
result (`internal/audit`, which the scheduled rollup writes: docs/operations.md).

Both go through small seams (`Canary`, `Clock`, the audit document's fields) that tests replace;
`FirestoreCanary` is the real one: the domain's own calls with the operator's Admin credentials,
as the other commands make them, so the increment is one a deployed rollup has to publish.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import requests
from counting.features import counters
from counting.features.context import Context
from counting.foundation import config
from google.cloud import firestore

from .session import CLI_UID

# pending: not yet what it will be without anyone's doing (an index or TTL policy being built, a
# scheduler job before its first run): not a failure, run doctor again in `again_in_min`.
Status = Literal["pass", "fail", "pending", "cannot-check"]

# A write is published by the next tick of its second (about a second later); the scheduled
# rollup publishes what no tick did within about 70 s (its minute, and a holder's lease).
TICK_PUBLISH_S = 10.0
PUBLISH_TIMEOUT_S = 90.0
POLL_S = 0.5  # two reads a second while it waits
# The audit runs in the scheduled rollup, every minute.
AUDIT_DOC = "audit"
AUDIT_STALE = dt.timedelta(minutes=5)
AUDIT_DRIFT_WINDOW = dt.timedelta(hours=24)
MAX_DRIFT_SHOWN = 5
# Which callable the canary calls without credentials: every callable refuses such a call with
# UNAUTHENTICATED (401) once its codebase has loaded, in the callable protocol's error body
# (`{"error": {"status": "UNAUTHENTICATED", ...}}`, docs/api.md). Only such a body counts as
# served: a 403 from Cloud Run's IAM (a service that does not let allUsers invoke it) or a
# Google front end's page is an answer the function never gave.
PROBED = "get_count"


@dataclass(frozen=True, kw_only=True)
class Probe:
    """What a call without credentials got: the HTTP `status`, and the callable protocol's
    error status when the body was one (None: a body the function did not write)."""

    status: int
    error_status: str | None = None

    @property
    def served(self) -> bool:
        return self.error_status is not None


def probe_of(status: int, body: str) -> Probe:
    """A probe's answer read as the callable protocol defines a refusal."""
    try:
        found = json.loads(body)
    except ValueError:
        return Probe(status=status)
    error = found.get("error") if isinstance(found, dict) else None
    code = error.get("status") if isinstance(error, dict) else None
    return Probe(status=status, error_status=code if isinstance(code, str) and code else None)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One check's verdict: what was `found` (every broken part, on a fail) and what `todo`."""

    check: str
    status: Status
    found: str
    todo: str = ""
    again_in_min: int = 0


class Canary(Protocol):
    """What the canary does to the deployed backend."""

    def probe(self) -> Probe:
        """What a call of a callable without credentials got."""

    def create(self, counter: str) -> None: ...

    def increment(self, counter: str) -> None: ...

    def count(self, counter: str) -> int | None:
        """The published count of `counter` (None: no document)."""

    def delete(self, counter: str) -> None: ...


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def canary_id() -> str:
    return f"doctor-canary-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def run_canary(canary: Canary, clock: Clock, *, ticks: bool, counter: str) -> Finding:
    """Probe the callables, then time one increment of a fresh counter until the rollup
    publishes it; the counter is deleted whatever happens. `ticks`: whether this process's
    writes enqueue tick tasks (the emulators, or the functions' runtime account's credentials);
    without, the scheduled rollup is what publishes."""
    probe = canary.probe()
    if not probe.served:
        return Finding(check="canary", status="fail",
                       found=f"{PROBED} answered HTTP {probe.status}, not the callable "
                             "protocol's error body, to a call without credentials (a function "
                             "that runs answers 401 UNAUTHENTICATED)",
                       todo="403: Cloud Run does not let the public invoke it (see the public "
                            "callables check; an organisation policy may forbid allUsers); "
                            "else the functions do not serve: read their logs (a codebase "
                            "without its placement.json refuses to start), then deploy again")
    canary.create(counter)
    try:
        canary.increment(counter)
        started = clock.monotonic()
        while canary.count(counter) != 1:
            if clock.monotonic() - started > PUBLISH_TIMEOUT_S:
                return Finding(check="canary", status="fail",
                               found=f"{counter}: not published {PUBLISH_TIMEOUT_S:.0f} s after "
                                     "its increment",
                               todo="the rollup is not running: see the scheduler and task "
                                    "queue checks, and `counters status`")
            clock.sleep(POLL_S)
        lag = clock.monotonic() - started
    finally:
        canary.delete(counter)
    if lag <= TICK_PUBLISH_S:
        return Finding(check="canary", status="pass",
                       found=f"{PROBED} serves; an increment was published {lag:.1f} s later "
                             "(by a tick)")
    if ticks:
        return Finding(check="canary", status="fail",
                       found=f"an increment was published only {lag:.0f} s later: no tick did "
                             "it, the scheduled rollup did",
                       todo="the tick tasks do not run: see the task queue and queue role "
                            "checks")
    return Finding(check="canary", status="pass",
                   found=f"{PROBED} serves; an increment was published {lag:.0f} s later, by "
                         "the scheduled rollup: these credentials are not the functions' runtime "
                         "account, so doctor's own write enqueued no tick (the callables' writes "
                         "do; run doctor as the runtime account to time the tick path)")


def audit_finding(audit: Mapping[str, Any] | None, now: dt.datetime,
                  names: config.Names) -> Finding:
    """The exactness audit's last result, from its document in `names.internal` (None: it never
    ran)."""
    where = f"{names.internal}/{AUDIT_DOC}"
    if audit is None:
        return Finding(check="audit", status="cannot-check",
                       found=f"{where} does not exist: the audit has never run",
                       todo="the scheduled rollup runs it every minute: see the scheduler check")
    last = audit.get("last_run_at")
    if not isinstance(last, dt.datetime) or now - last > AUDIT_STALE:
        ago = "never" if not isinstance(last, dt.datetime) else \
            f"{(now - last).total_seconds() / 60:.0f} min ago"
        return Finding(check="audit", status="fail",
                       found=f"{where}: last run {ago} (it runs every minute)",
                       todo="the scheduled rollup has stopped: see the scheduler check and "
                            "`counters status`")
    recent = [entry for entry in audit.get("drift") or []
              if isinstance(entry, Mapping) and isinstance(entry.get("found_at"), dt.datetime)
              and now - entry["found_at"] <= AUDIT_DRIFT_WINDOW]
    if recent:
        shown = "; ".join(
            f"{entry.get('counter')}: published {entry.get('published')}, shards "
            f"{entry.get('shards')} as of {entry.get('as_of')}"
            for entry in recent[-MAX_DRIFT_SHOWN:])
        return Finding(check="audit", status="fail",
                       found=f"{len(recent)} drift(s) found in the last 24 h: {shown}",
                       todo="a published count differed from its shards: `counters audit "
                            "COUNTER` checks one again; docs/operations.md says what to do")
    return Finding(check="audit", status="pass",
                   found=f"last run {(now - last).total_seconds():.0f} s ago, "
                         f"{audit.get('checked', 0)} counters audited, no drift in 24 h")


class FirestoreCanary:
    """The canary on the deployed backend: the domain's calls on its database, and the callable
    at `callable_url`."""

    def __init__(self, ctx: Context, db: firestore.Client, callable_url: str) -> None:
        self.ctx, self.db, self.callable_url = ctx, db, callable_url

    def probe(self) -> Probe:
        if not self.callable_url:
            return Probe(status=404)  # not deployed: no URL
        try:
            answer = requests.post(self.callable_url, json={"data": {}}, timeout=30)
        except requests.RequestException:
            return Probe(status=0)
        return probe_of(answer.status_code, answer.text)

    def create(self, counter: str) -> None:
        counters.create_counter(self.ctx, self.db, counter, shards=1)

    def increment(self, counter: str) -> None:
        counters.increment(self.ctx, self.db, counter, 1, request_id=uuid.uuid4().hex, uid=CLI_UID)

    def count(self, counter: str) -> int | None:
        found = self.db.collection(self.ctx.names.counters).document(counter).get()
        return int(found.get("count")) if found.exists else None

    def delete(self, counter: str) -> None:
        self.db.recursive_delete(self.db.collection(self.ctx.names.counters).document(counter))


def read_audit(db: firestore.Client, names: config.Names) -> dict[str, Any] | None:
    found = db.collection(names.internal).document(AUDIT_DOC).get()
    return found.to_dict() if found.exists else None
