"""The operator command's pure parts: target selection, percentiles, the load loop, input
errors caught before anything is contacted, and what it prints for the domain's answers (the
domain replaced by fakes)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import threading
from pathlib import Path
from typing import Any, NoReturn
from unittest.mock import sentinel

import click
import numpy
import pytest
from click.testing import CliRunner, Result
from counters_cli import PROJECT_COMMANDS, cli, install, installed_backend
from counters_cli.claims import changed_claims
from counters_cli.load import percentile, run_load
from counters_cli.session import Domain, Target, resolve_target
from counting.features import trends
from counting.foundation import config, kinds
from counting.foundation.errors import NotFound
from counting.rollup import repartition, status
from counting.writepath import partitions
from counting.writepath.partitions import WHOLE, Part
from hypothesis import given
from hypothesis import strategies as st

from ..tables import table_rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("project", "env", "expected"),
    [
        (None, {}, Target(project="demo-counters", emulator_host="127.0.0.1:8080")),
        (None, {"FIRESTORE_EMULATOR_HOST": "localhost:9000", "GCLOUD_PROJECT": "demo-x"},
         Target(project="demo-x", emulator_host="localhost:9000")),
        ("my-app", {}, Target(project="my-app", emulator_host=None)),
        (None, {"GOOGLE_CLOUD_PROJECT": "my-app"}, Target(project="my-app", emulator_host=None)),
        ("my-app", {"FIRESTORE_EMULATOR_HOST": "127.0.0.1:8080"},
         Target(project="my-app", emulator_host="127.0.0.1:8080")),
        ("demo-other", {}, Target(project="demo-other", emulator_host="127.0.0.1:8080")),
    ],
)
def test_target_is_production_only_for_a_named_project_without_emulator(
    project: str | None, env: dict[str, str], expected: Target
) -> None:
    """Production needs a named, non-demo project and no emulator host; else the emulator."""
    assert resolve_target(project, env) == expected


def test_target_line_says_which_firestore() -> None:
    """The announcement names the emulator host or says PRODUCTION, and what gave the project."""
    assert Target(project="demo-counters", emulator_host="127.0.0.1:8080").describe() == (
        "target: Firestore emulator 127.0.0.1:8080, project demo-counters (no --project, "
        "$GOOGLE_CLOUD_PROJECT or .firebaserc names one)")
    assert resolve_target("my-app", {}).describe() == (
        "target: PRODUCTION Firestore, project my-app (from --project)")


def test_percentile_at_the_bounds() -> None:
    """One value is every percentile; p=0 and p=100 are the extremes; between ranks the value is
    interpolated linearly (p99 of 1..100 is 99.01, not 99 or 100)."""
    assert [percentile([7.0], p) for p in (0, 50, 99, 100)] == [7.0, 7.0, 7.0, 7.0]
    assert [percentile([20.0, 10.0], p) for p in (0, 50, 100)] == [10.0, 15.0, 20.0]
    assert percentile([20.0, 10.0], 99) == pytest.approx(19.9)
    hundred = [float(v) for v in range(100, 0, -1)]
    assert [percentile(hundred, p) for p in (0, 100)] == [1.0, 100.0]
    assert percentile(hundred, 99) == pytest.approx(99.01)
    with pytest.raises(ValueError):
        percentile([], 50)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1), st.floats(0, 100))
def test_percentile_is_numpys_default(values: list[float], p: float) -> None:
    """Any percentile is numpy's, whose default method interpolates linearly too."""
    assert percentile(values, p) == pytest.approx(float(numpy.percentile(values, p)), abs=1e-6)


def test_load_counts_calls_applied_and_errors() -> None:
    """Every call is attempted once; failures are counted by type, successes timed."""
    calls = itertools.count()
    lock = threading.Lock()

    def call() -> bool:
        with lock:
            n = next(calls)
        if n % 4 == 3:
            raise TimeoutError("slow")
        return True

    result = run_load(call, rate=200, seconds=0.5, concurrency=4)
    summary = result.summary()
    assert summary["attempted"] == 100  # the schedule: 200/s for 0.5 s
    assert summary["applied"] == 75
    assert summary["errors"] == 25
    assert summary["errors_by_type"] == {"TimeoutError": 25}
    assert summary["first_error"] == "TimeoutError: slow"
    assert len(result.latencies_ms) == 75
    assert summary["latency_p50_ms"] is not None


def test_load_without_rate_runs_until_the_time_is_up() -> None:
    """Without a rate, calls go back to back until `seconds` have passed."""
    result = run_load(lambda: True, rate=None, seconds=0.2, concurrency=2)
    assert result.attempted == result.applied > 0
    assert result.elapsed_s >= 0.2


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["get", "bad id!"], "counter:"),
        (["create", "no spaces allowed"], "counter:"),
        (["inc", "likes", "--by", "2000000000"], "by:"),
        (["inc", "likes", "--request-id", "no spaces"], "request_id:"),
        (["create", "likes", "--strategy", "fastest"], "strategy:"),
        (["create", "likes", "--shards", "0"], "shards:"),
        (["seq", "configure", "org-1", "--timezone", "Mars/Olympus"], "timezone:"),
        (["seq", "configure", "org-1", "--timezone", "UTC", "--reset-time", "25:00"],
         "reset_time:"),
        (["load", "_private"], "counter:"),
        (["top", "--region", "Not a region"], "region:"),
        (["track", "global", "coffee"], "region:"),
        (["track", "eu", "#"], "tags[0]:"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(args: list[str], field: str) -> None:
    """Invalid input exits 1 with the field named, before any Firestore is contacted."""
    result = CliRunner().invoke(cli, args, env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {field}")
    assert "Traceback" not in result.output and "target:" not in result.output


# --- What the commands print, with the domain faked ----------------------------------------------

AS_OF = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)


def unfaked(*args: object, **kwargs: object) -> NoReturn:
    pytest.fail("the command made a domain call the test does not fake (it would contact "
                "Firestore or Cloud Tasks)")


# The domain none of whose calls may be made.
NOTHING = Domain(**{field.name: unfaked for field in dataclasses.fields(Domain)})


@pytest.fixture
def calls() -> dict[str, list[Any]]:
    """What the faked `top_tags` and `track` were asked, and the items `top_tags` answers (none
    unless a test puts some in `calls["items"]`)."""
    return {"top_tags": [], "track": [], "items": []}


@pytest.fixture
def domain(calls: dict[str, list[Any]]) -> Domain:
    """The domain calls the commands make, faked: a client of nothing, tags (recorded in
    `calls`) and no counter; a test gives the others it needs (`dataclasses.replace`)."""
    def top_tags(db: object, names: object, region: str | None, k: int,
                 window: kinds.Window) -> trends.TopTags:
        calls["top_tags"].append(region)
        return trends.TopTags(region=region or "global", window=window,
                              items=calls["items"][:k], as_of=AS_OF)

    def track(ctx: object, db: object, region: str, tags: list[str], *,
              request_id: str | None, uid: str) -> int:
        calls["track"].append((region, tags, request_id))
        return 0 if request_id == "seen" else len(tags)

    def get_count(db: object, names: object, counter: str,
                  consistency: str = "rollup") -> NoReturn:
        raise NotFound(f"counter: {counter!r} does not exist")

    return dataclasses.replace(
        NOTHING, connect=lambda target, placement, firebase_json: sentinel.client,
        top_tags=top_tags, track=track, get_count=get_count)


def invoke(domain: Domain, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args), obj=domain,
                                env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


@pytest.mark.parametrize("region", [[], ["--region", "global"], ["--region", "GLOBAL"]])
def test_top_without_a_region_or_with_global_reads_all_regions(
    calls: dict[str, list[Any]], domain: Domain, region: list[str]
) -> None:
    """`global`, in any case, is what no --region means: the sum of all regions."""
    invoke(domain, "top", *region)
    assert calls["top_tags"] == [None]


@pytest.mark.parametrize("typed", ["EU", "eu", " Eu "])
def test_region_names_are_case_insensitive(
    calls: dict[str, list[Any]], domain: Domain, typed: str
) -> None:
    """A region is read and tracked in lowercase, however it was typed."""
    invoke(domain, "top", "--region", typed)
    invoke(domain, "track", typed, "coffee")
    assert calls["top_tags"] == ["eu"]
    assert calls["track"] == [("eu", ["coffee"], None)]


def test_top_with_no_tags_says_nothing_yet(domain: Domain) -> None:
    """An empty list is one sentence, not an empty table."""
    result = invoke(domain, "top", "--region", "eu", "--window", "1h")
    assert result.stdout == "nothing yet: no tags in eu in the last 1h\n"


def test_top_lists_tags_in_a_table(calls: dict[str, list[Any]], domain: Domain) -> None:
    """Listed tags are shown ranked, with their counts, the scope, the window and the time."""
    calls["items"] += [trends.TagCount(tag="coffee", count=3),
                       trends.TagCount(tag="brunch", count=2)]
    out = invoke(domain, "top").stdout
    assert table_rows(out) == [["1", "coffee", "3"], ["2", "brunch", "2"]]
    lines = out.splitlines()
    assert (lines[0], lines[-1]) == ("top 10 in global, last 24h", "as of 2024-05-01T12:00:00Z")


def test_top_json_is_one_line_for_programs(calls: dict[str, list[Any]], domain: Domain) -> None:
    """With --json, stdout is the answer as one line of JSON and nothing else."""
    calls["items"] += [trends.TagCount(tag="coffee", count=3)]
    result = invoke(domain, "top", "--region", "eu", "-k", "5", "--json")
    assert result.stdout == (
        '{"region": "eu", "window": "24h", "items": [{"tag": "coffee", "count": 3}], '
        '"as_of": "2024-05-01T12:00:00Z"}\n')


def test_track_counts_each_tag_once_and_says_what_it_recorded(
    calls: dict[str, list[Any]], domain: Domain
) -> None:
    """Tags are normalised and deduplicated, and the target is announced first."""
    result = invoke(domain, "track", "us", "#Coffee", "coffee", "Brunch", "--request-id", "r-1")
    assert calls["track"] == [("us", ["coffee", "brunch"], "r-1")]
    assert result.stderr.startswith("target: Firestore emulator 127.0.0.1:1")
    assert result.stdout.startswith("us: recorded coffee, brunch")


def test_track_retried_request_records_nothing(domain: Domain) -> None:
    """A request id that was applied already is reported as such."""
    result = invoke(domain, "track", "us", "coffee", "--request-id", "seen")
    assert result.stdout == "us: request seen was applied already; nothing recorded\n"


@pytest.mark.parametrize("check", ["--check", "--no-check"])
def test_load_on_a_missing_counter_is_one_clear_error(domain: Domain, check: str) -> None:
    """No load runs against a counter that does not exist; the error says how to create it."""
    result = invoke(domain, "load", "nothing-here", check, "--seconds", "0.1", code=1)
    assert result.stderr.splitlines()[-1] == (
        "Error: counter: 'nothing-here' does not exist (`counters create nothing-here` "
        "creates it)")


@pytest.mark.parametrize("stale", [None, "no tick for 200 s: the housekeeping has stopped"])
def test_status_exits_non_zero_when_the_rollup_is_stale(domain: Domain, stale: str | None) -> None:
    """`status` prints the rollup's health and fails, saying why, when it looks stuck."""
    found = status.RollupStatus(holder="h-1-x", active=True, last_tick_at=AS_OF,
                                 last_tick_age_s=0.4, tick_s=0.03, lag_s=1.0, holder_since=AS_OF,
                                 errors=["2026-01-01T00:00:00Z big: sum outside 64-bit"],
                                 stale=stale)
    domain = dataclasses.replace(domain, read_statuses=lambda db, names: [(WHOLE, found)],
                                 audit_state=lambda db, names: AUDITED,
                                 lost_records=lambda db, names: 2)
    result = invoke(domain, "status", code=1 if stale else 0)
    assert table_rows(result.stdout) == [
        ["state", "active"], ["holder", "h-1-x"], ["holder_since", "2024-05-01T12:00:00Z"],
        ["last_tick_at", "2024-05-01T12:00:00Z"], ["last_tick_age_s", "0.4"], ["tick_s", "0.03"],
        ["lag_s", "1.0"], ["stale", stale or "-"],
        ["last_run_at", "2024-05-01T12:00:00Z"], ["checked", "12"], ["suspects", "[]"],
        ["last_drift_at", "-"], ["records_lost", "2"]]
    assert "  2026-01-01T00:00:00Z big: sum outside 64-bit" in result.stdout.splitlines()
    assert "no drift found" in result.stdout.splitlines()
    if stale:
        assert result.stderr.splitlines()[-1] == f"Error: the rollup is stale: {stale}"


@pytest.mark.parametrize(("before", "grant", "admin", "tenant", "after"), [
    ({}, True, True, None, {"admin": True}),
    ({"admin": True, "plan": "pro"}, False, True, None, {"plan": "pro"}),
    ({"tenants": ["a"]}, True, False, "b", {"tenants": ["a", "b"]}),
    ({"tenants": ["a"]}, True, False, "a", {"tenants": ["a"]}),
    ({"tenants": ["a"], "admin": True}, False, False, "a", {"admin": True}),
    ({}, False, False, "a", {}),
])
def test_claims_change_one_role_and_keep_the_rest(
    before: dict[str, Any], grant: bool, admin: bool, tenant: str | None, after: dict[str, Any]
) -> None:
    """Granting or revoking one role leaves every other claim as it was."""
    assert changed_claims(before, grant=grant, admin=admin, tenant=tenant) == after


@pytest.mark.parametrize("roles", [[], ["--admin", "--tenant", "t"]])
def test_claims_grant_takes_exactly_one_role(roles: list[str]) -> None:
    """`grant` with no role or with both is a usage error, before Auth is contacted."""
    result = CliRunner().invoke(cli, ["claims", "grant", *roles, "someone"],
                                env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "Error: grant takes --admin or --tenant T"
    assert "target:" not in result.output


AUDITED: dict[str, Any] = {"last_run_at": AS_OF, "checked": 12}


def test_status_fails_on_drift_the_audit_found(domain: Domain) -> None:
    """Drift recorded by the exactness audit fails `status`, naming the counter."""
    healthy = status.RollupStatus(holder="h-1-x", active=True, last_tick_at=AS_OF,
                                  last_tick_age_s=0.4, tick_s=0.03, lag_s=1.0,
                                  holder_since=AS_OF, errors=[], stale=None)
    drift = {"counter": "likes", "published": 4, "shards": 8,
             "as_of": AS_OF - dt.timedelta(minutes=1), "found_at": AS_OF}
    domain = dataclasses.replace(
        domain, read_statuses=lambda db, names: [(WHOLE, healthy)],
        audit_state=lambda db, names: {**AUDITED, "last_drift_at": AS_OF, "drift": [drift]},
        lost_records=lambda db, names: 0)
    result = invoke(domain, "status", "--json", code=1)
    assert json.loads(result.stdout)["audit"]["drift"] == [{
        **drift, "as_of": "2024-05-01T11:59:00Z", "found_at": "2024-05-01T12:00:00Z"}]
    assert "'counter': 'likes'" in result.stderr.splitlines()[-1]


def test_status_of_partitions_names_the_stale_one(domain: Domain) -> None:
    """With P partitions, one table each; one stuck partition fails the command, named."""
    healthy = status.RollupStatus(holder="h-1-x", active=True, last_tick_at=AS_OF,
                                  last_tick_age_s=0.4, tick_s=0.03, lag_s=1.0,
                                  holder_since=AS_OF, errors=[], stale=None)
    stuck = dataclasses.replace(healthy, active=False, last_tick_age_s=200.0,
                                stale="no tick for 200 s", errors=["boom"])
    domain = dataclasses.replace(
        domain, read_statuses=lambda db, names: [(Part(2, 0), healthy), (Part(2, 1), stuck)],
        audit_state=lambda db, names: AUDITED, lost_records=lambda db, names: 0)
    result = invoke(domain, "status", "--json", code=1)
    figures = json.loads(result.stdout)
    assert (figures["partitions"], figures["state"]) == (2, "active")
    assert figures["stale"] == "partition 2 of 2: no tick for 200 s"
    assert figures["errors"] == ["2 of 2: boom"]
    assert [one["state"] for one in figures["by_partition"]] == [
        "active", "idle (ticks when written)"]


def test_partitions_shows_and_changes_the_count(domain: Domain) -> None:
    """`partitions` prints P; `partitions N` changes it and wakes each new partition; a P the
    deploy has no tick functions for is refused before anything is written."""
    changes: list[int] = []
    woken: list[Part] = []

    def change(db: Any, names: Any, new: int, *, known: partitions.Known) -> repartition.Changed:
        changes.append(new)
        return repartition.Changed(before=1, after=new, watermark=AS_OF, spread=4,
                                   narrow_at=AS_OF)

    def enqueue(db: Any, placement: Any, reason: str, part: Part, slot: int | None = None) -> bool:
        woken.append(part)
        return True

    domain = dataclasses.replace(domain, read_count=lambda db, names: 1, repartition=change,
                                 enqueue_tick=enqueue)
    assert invoke(domain, "partitions").stdout == "partitions: 1\n"
    result = invoke(domain, "partitions", "4", "--json")
    assert json.loads(result.stdout)["woken"] == 4
    assert changes == [4] and woken == partitions.parts(4)
    invoke(domain, "partitions", "3", code=2)  # not a power of two
    # The emulator serves 32 tick functions (functions/.env.local over .env's 16): 64 partitions
    # would have none.
    refused = invoke(domain, "partitions", "64", code=1)
    assert "ROLLUP_PARTITIONS_MAX=64" in refused.output and "deploy first" in refused.output
    invoke(domain, "partitions", "32")
    assert changes == [4, 32]


def test_the_cli_finds_the_backend_of_the_project_it_runs_in(tmp_path: Path) -> None:
    """From any folder of a project, the CLI operates the backend codebase its firebase.json
    lists (a folder with placement.json, or install.json); none, several or no project at all
    and it refuses rather than use a default placement."""
    with pytest.raises(click.UsageError, match="no Firebase project here.*--backend"):
        installed_backend(tmp_path)
    (tmp_path / "firebase.json").write_text('{"functions": [{"source": "functions"}, '
                                            '{"source": "shop", "codebase": "shop"}]}')
    (tmp_path / "functions").mkdir()
    with pytest.raises(click.UsageError, match="lists no counters backend.*counters init"):
        installed_backend(tmp_path)
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / install.RECORD).write_text("{}")  # its placement.json hidden by git
    (tmp_path / "web" / "src").mkdir(parents=True)
    assert installed_backend(tmp_path) == installed_backend(tmp_path / "web" / "src") \
        == tmp_path / "shop"
    (tmp_path / "functions" / "placement.json").write_text("{}")
    with pytest.raises(click.UsageError, match="several backends .*functions, shop.*--backend"):
        installed_backend(tmp_path / "web")
    (tmp_path / "admin").mkdir()  # an install firebase.json does not list is none
    (tmp_path / "admin" / install.RECORD).write_text("{}")
    with pytest.raises(click.UsageError, match=r"several backends \(functions, shop\)"):
        installed_backend(tmp_path)


def test_this_repositorys_stack_states_its_own_backend() -> None:
    """The repository's firebase.json lists functions/, whose placement.json states the
    defaults: that, and nothing implicit, is what the CLI operates here."""
    assert installed_backend(ROOT / "web") == ROOT / "functions"
    assert config.Placement.read(ROOT / "functions") == config.Placement()


def test_outside_a_project_every_command_refuses_and_contacts_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in sorted(set(cli.commands) - PROJECT_COMMANDS):
        result = CliRunner().invoke(cli, [name], obj=NOTHING,
                                    env={"FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"})
        assert result.exit_code == 2, (name, result.output)
        assert "no Firebase project here" in result.stderr and "Traceback" not in result.output
    assert CliRunner().invoke(cli, ["get", "--help"]).exit_code == 0  # help needs no backend


def test_watch_shows_the_rate_decayed_from_its_instant() -> None:
    """`counters watch` shows the rate as the rollup measures it now: decayed from `rate_at`
    (the rollup does not write a falling rate), 0 below what it publishes as 0."""
    from counters_cli import watch

    now = dt.datetime.now(dt.UTC)
    assert watch.shown_rate({"rate": 4.0}) == 4.0
    assert watch.shown_rate({"rate": 4.0, "rate_at": now}) == pytest.approx(4.0, rel=0.01)
    ten = watch.shown_rate({"rate": 4.0, "rate_at": now - dt.timedelta(seconds=10)})
    assert ten == pytest.approx(4.0 / numpy.e, rel=0.01)
    assert watch.shown_rate({"rate": 4.0, "rate_at": now - dt.timedelta(seconds=60)}) == 0.0
