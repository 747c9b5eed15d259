"""The operator command `counters` against the stack's Firestore emulator (project demo-counters,
where the rollup loop runs)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from callables import Callables, CallError, sign_up
from click.testing import CliRunner, Result
from counters_cli import cli
from counting import counters
from google.cloud import firestore

from ..waiting import eventually


def run(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.stderr.startswith("target: Firestore emulator "), result.stderr
    return json.loads(result.stdout)


def test_create_inc_get_strong(suffix: str) -> None:
    """A created counter counts what `inc` adds, strong and then in the rollup."""
    counter = f"cli-{suffix}"
    assert run_json("create", counter, "--shards", "4") == {
        "counter": counter, "shards": 4, "created": True}
    assert run_json("create", counter)["created"] is False
    run("inc", counter, "--by", "5")
    assert run_json("inc", counter, "--by", "-2", "--request-id", f"r-{suffix}")["applied"]
    assert not run_json("inc", counter, "--by", "-2", "--request-id", f"r-{suffix}")["applied"]
    assert run_json("get", counter, "--strong")["strong"]["count"] == 3
    human = run("get", counter, "--strong").stdout
    assert "strong" in human and "rollup" in human


def test_reset_zeroes_the_counter(suffix: str) -> None:
    """`reset` brings the strong count back to 0."""
    counter = f"cli-reset-{suffix}"
    run("create", counter, "--shards", "2")
    run("inc", counter, "--by", "7")
    assert "reset to 0" in run("reset", counter).stdout
    assert run_json("get", counter, "--strong")["strong"]["count"] == 0


def test_unknown_counter_is_a_clean_error(suffix: str) -> None:
    """A missing counter is a one-line error with exit status 1."""
    result = run("inc", f"nothing-{suffix}", code=1)
    assert result.stderr.splitlines()[-1] == f"Error: counter: 'nothing-{suffix}' does not exist"


def test_bad_counter_id_names_the_field() -> None:
    """Malformed input exits 1 naming the field."""
    result = run("create", "no spaces allowed", code=1)
    assert result.stderr.startswith("Error: counter: must be")


def test_load_applies_every_increment_exactly(suffix: str, db: firestore.Client) -> None:
    """A 2 s load has no errors, and the strong count grows by exactly what it applied."""
    counter = f"cli-load-{suffix}"
    run("create", counter, "--shards", "8")
    summary = run_json("load", counter, "--seconds", "2", "--rate", "100", "--concurrency", "4",
                       "--by", "3")
    assert summary["errors"] == 0
    assert summary["attempted"] == summary["applied"] > 0
    assert summary["check"] == "ok"
    assert counters.get_count(db, counter, "strong").count == 3 * summary["applied"]
    assert summary["latency_p50_ms"] <= summary["latency_p95_ms"] <= summary["latency_p99_ms"]


def test_load_prints_a_summary_table(suffix: str) -> None:
    """Without --json the summary is a table with the rate and the percentiles."""
    counter = f"cli-load-table-{suffix}"
    run("create", counter, "--shards", "2")
    out = run("load", counter, "--seconds", "1", "--rate", "20").stdout
    for row in ("attempted", "applied", "errors", "rate_per_s", "latency_p99_ms", "check"):
        assert row in out


def test_seq_numbers_count_from_one(suffix: str) -> None:
    """A configured tenant gets 1 then 2; a reset starts again at 1."""
    tenant = f"org-{suffix}"
    assert run_json("seq", "configure", tenant, "--timezone", "Europe/Paris",
                    "--reset-time", "04:00") == {
        "tenant": tenant, "timezone": "Europe/Paris", "reset_time": "04:00"}
    assert [run_json("seq", "next", tenant)["number"] for _ in range(2)] == [1, 2]
    run("seq", "reset", tenant)
    assert run_json("seq", "next", tenant)["number"] == 1


def test_seq_next_unconfigured_is_a_clean_error(suffix: str) -> None:
    """An unconfigured tenant is a one-line error with exit status 1."""
    result = run("seq", "next", f"org-none-{suffix}", code=1)
    assert result.stderr.splitlines()[-1].startswith("Error: ")


def test_watch_shows_the_rollup_after_an_inc(suffix: str, db: firestore.Client) -> None:
    """`watch --for 3` prints the rollup's count once the rollup loop has seen an increment."""
    counter = f"cli-watch-{suffix}"
    run("create", counter, "--shards", "3")
    timer = threading.Timer(0.3, lambda: counters.increment(db, counter, 4))
    timer.start()
    result = run("watch", counter, "--for", "3")
    timer.join()
    assert result.stdout.splitlines()[-1].startswith("count=4 num_shards=3 updated_at=")


def test_load_on_a_missing_counter_is_a_clean_error(suffix: str) -> None:
    """`load` refuses a counter that does not exist before it starts."""
    result = run("load", f"nothing-{suffix}", "--seconds", "1", code=1)
    assert result.stderr.splitlines()[-1].startswith(
        f"Error: counter: 'nothing-{suffix}' does not exist")


def test_tracked_tags_show_in_top_whatever_the_region_case(suffix: str) -> None:
    """`track` counts an event once per request id; `top` then ranks its tags in that region."""
    region = f"cli-{suffix}"
    assert run("top", "--region", region).stdout.startswith("nothing yet")
    run("track", region.upper(), "#Coffee", "brunch", "coffee")
    assert run_json("track", region, "coffee", "--request-id", f"t-{suffix}")["recorded"] == 1
    assert run_json("track", region, "coffee", "--request-id", f"t-{suffix}")["recorded"] == 0
    expected = [{"tag": "coffee", "count": 2}, {"tag": "brunch", "count": 1}]
    eventually(lambda: run_json("top", "--region", region.upper())["items"] == expected)
    assert "coffee" in run("top", "--region", region).stdout


def test_top_lists_tags() -> None:
    """`top` answers with the region, the window and a ranked list."""
    found = run_json("top", "--window", "1h", "-k", "3")
    assert (found["region"], found["window"]) == ("global", "1h")
    assert len(found["items"]) <= 3
    counts = [item["count"] for item in found["items"]]
    assert counts == sorted(counts, reverse=True)


def test_claims_grant_and_revoke_roles_that_the_callables_honour(suffix: str) -> None:
    """`claims grant/revoke` change a user's custom claims in the Auth emulator, found by email
    or uid; the user's next ID token carries them and the callables act on them."""
    email = f"claims-{suffix}@example.test"
    person = sign_up(email=email, password="secret-pass")
    counter = f"cli-claims-{suffix}"
    assert run_json("claims", "grant", "--admin", email) == {
        "uid": person.uid, "claims": {"admin": True}}
    admin = Callables(sign_up(email=email, password="secret-pass").id_token)
    assert admin.call("create_counter", counter=counter)["created"]
    granted = run_json("claims", "grant", "--tenant", f"shop-{suffix}", person.uid)
    assert granted["claims"] == {"admin": True, "tenants": [f"shop-{suffix}"]}
    assert run_json("claims", "revoke", "--admin", email)["claims"] == {
        "tenants": [f"shop-{suffix}"]}
    demoted = Callables(sign_up(email=email, password="secret-pass").id_token)
    with pytest.raises(CallError) as refused:
        demoted.call("reset_counter", counter=counter)
    assert refused.value.status == "PERMISSION_DENIED"
    assert run_json("claims", "show", email)["claims"] == {"tenants": [f"shop-{suffix}"]}


def test_claims_of_an_unknown_user_is_a_clean_error(suffix: str) -> None:
    result = run("claims", "grant", "--admin", f"nobody-{suffix}@example.test", code=1)
    assert result.stderr.splitlines()[-1].startswith("Error: no user ")
    run("claims", "grant", "--admin", "--tenant", "t", "someone", code=2)


def test_backfill_counts_documents_once_and_refuses_direct_writes(
    db: firestore.Client, suffix: str
) -> None:
    """`backfill orders` reads every order and counts none twice (the trigger counted them);
    `inc` and `reset` on a collection counter, and an unknown declaration, are clean errors."""
    status = f"cli-{suffix}"
    db.collection("orders").document(f"cli-{suffix}").set({"status": status, "amount": 3})
    counter = f"orders:{status}"
    eventually(lambda: counters.get_count(db, counter, "strong").count == 1
               if db.collection("counters").document(counter).get().exists else False,
               timeout_s=60.0)
    found = run_json("backfill", "orders")
    assert found["declarations"] == ["orders"] and found["documents"] >= 1
    assert counter not in found["deltas"]
    assert "documents read" in run("backfill", "count_orders").stdout
    assert "collection counter" in run("inc", counter, code=1).stderr
    assert "collection counter" in run("reset", counter, code=1).stderr
    assert "no declaration 'nope'" in run("backfill", "nope", code=1).stderr
    assert counters.get_count(db, counter, "strong").count == 1
