"""The operator command `counters` against the stack's Firestore emulator (project demo-counters,
where the rollup runs): what each command writes and reads there. What it prints for given
answers, and input errors caught before anything is contacted, are unit tests
(tests/unit/test_cli.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from callables import Callables, CallError, sign_up
from click.testing import CliRunner, Result
from counters_cli import cli
from counting.features import counter_refs, counters, declarations
from counting.features.context import Context
from counting.foundation import config
from counting.foundation.config import Names
from counting.foundation.errors import NotFound
from google.cloud import firestore

from ..tables import table_rows
from ..waiting import eventually
from .test_cadence import rollup_count, ticked_by_a_write

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

NAMES = Names()  # the collection ids of the default placement, which these run on

ROOT = Path(__file__).resolve().parents[2]
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"


def run(*args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.stderr.startswith("target: Firestore emulator "), result.stderr
    return json.loads(result.stdout)


def test_create_inc_get(suffix: str) -> None:
    """A created counter counts what `inc` adds, a request id once: at once in its shards, soon
    after in its rollup."""
    counter = f"cli-{suffix}"
    assert run_json("create", counter, "--shards", "4") == {
        "counter": counter, "shards": 4, "created": True}
    assert run("create", counter).stdout == (
        f"{counter} exists already with 4 shards: nothing changed\n")
    added = run("inc", counter, "--by", "5").stdout
    assert re.fullmatch(rf"{counter}: \+5 applied at {ISO}\n", added), added
    first = run_json("inc", counter, "--by", "-2", "--request-id", f"r-{suffix}")
    assert first["applied"] and re.fullmatch(ISO, first["committed_at"])
    assert run_json("inc", counter, "--by", "-2", "--request-id", f"r-{suffix}") == {
        "counter": counter, "by": -2, "request_id": f"r-{suffix}", "applied": False,
        "committed_at": None}
    strong = run_json("get", counter, "--strong")["strong"]
    assert (strong["count"], strong["documents_read"]) == (3, 4)
    eventually(lambda: run_json("get", counter)["rollup"]["count"] == 3)
    rows = table_rows(run("get", counter, "--strong").stdout)
    assert [[name, count, read] for name, count, _, read in rows] == [
        ["rollup", "3", "1"], ["strong", "3", "4"]]


def test_reset_zeroes_the_shards_and_the_rollup(suffix: str) -> None:
    """`reset` brings the strong count and the rollup back to 0."""
    counter = f"cli-reset-{suffix}"
    run("create", counter, "--shards", "2")
    run("inc", counter, "--by", "7")
    assert run("reset", counter).stdout == f"{counter}: reset to 0\n"
    assert run_json("get", counter, "--strong")["strong"]["count"] == 0
    eventually(lambda: run_json("get", counter)["rollup"]["count"] == 0)


def test_inc_on_an_unknown_counter_is_a_clean_error_and_writes_nothing(
    suffix: str, db: firestore.Client
) -> None:
    """A missing counter is a one-line error with exit status 1; no document is created."""
    counter = f"nothing-{suffix}"
    result = run("inc", counter, code=1)
    assert result.stderr.splitlines()[-1] == f"Error: counter: '{counter}' does not exist"
    ref = counter_refs.counter_ref(db, NAMES, counter)
    assert not ref.get().exists
    assert list(ref.collection(config.SHARDS).list_documents()) == []


def test_load_applies_every_increment_exactly(suffix: str, db: firestore.Client) -> None:
    """A 2 s load has no errors, and the strong count grows by exactly what it applied."""
    counter = f"cli-load-{suffix}"
    run("create", counter, "--shards", "8")
    summary = run_json("load", counter, "--seconds", "2", "--rate", "100", "--concurrency", "4",
                       "--by", "3")
    assert summary["errors"] == 0
    assert summary["attempted"] == summary["applied"] > 0
    assert summary["check"] == "ok"
    assert counters.get_count(db, NAMES, counter, "strong").count == 3 * summary["applied"]
    assert summary["latency_p50_ms"] <= summary["latency_p95_ms"] <= summary["latency_p99_ms"]


def test_load_prints_its_summary_as_a_table(suffix: str, db: firestore.Client) -> None:
    """Without --json the summary is a table of its figures, the check among them."""
    counter = f"cli-load-table-{suffix}"
    run("create", counter, "--shards", "2")
    out = run("load", counter, "--seconds", "1", "--rate", "20").stdout
    rows = {key: value for key, value in table_rows(out)}
    assert list(rows) == [
        "counter", "by", "target_rate_per_s", "attempted", "applied", "errors", "elapsed_s",
        "rate_per_s", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "strong_before",
        "strong_after", "expected", "check"]
    assert [rows[key] for key in ("counter", "by", "target_rate_per_s", "errors", "strong_before",
                                  "check")] == [counter, "1", "20.0", "0", "0", "ok"]
    assert rows["attempted"] == rows["applied"] == rows["strong_after"] == rows["expected"]
    assert counters.get_count(db, NAMES, counter, "strong").count == int(rows["applied"]) > 0


def test_seq_numbers_count_from_one(suffix: str) -> None:
    """A configured tenant gets 1 then 2; a reset starts again at 1 within the business day."""
    tenant = f"org-{suffix}"
    assert run_json("seq", "configure", tenant, "--timezone", "Europe/Paris",
                    "--reset-time", "04:00") == {
        "tenant": tenant, "timezone": "Europe/Paris", "reset_time": "04:00"}
    first, second = (run_json("seq", "next", tenant) for _ in range(2))
    assert (first["number"], second["number"]) == (1, 2)
    day = first["business_day"]
    assert run("seq", "reset", tenant).stdout == (
        f"{tenant}: numbering restarts at 1 (business day {day})\n")
    assert run("seq", "next", tenant).stdout == f"{tenant}: number 1 (business day {day})\n"


def test_seq_next_unconfigured_is_a_clean_error(suffix: str) -> None:
    """An unconfigured tenant is a one-line error with exit status 1."""
    tenant = f"org-none-{suffix}"
    result = run("seq", "next", tenant, code=1)
    assert result.stderr.splitlines()[-1] == (
        f"Error: tenant: '{tenant}' has no sequence; configure_sequence first")


def test_watch_follows_the_rollup_until_interrupted(
    suffix: str, db: firestore.Client, tmp_path: Path, ctx: Context
) -> None:
    """`watch` prints the rollup document as it is, then each state the rollup publishes, until
    Ctrl-C, which ends it cleanly."""
    counter = f"cli-watch-{suffix}"
    run("create", counter, "--shards", "3")
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), str(ROOT / "functions")])}
    with (tmp_path / "stderr").open("w") as stderr, subprocess.Popen(
        [sys.executable, "-c", "import counters_cli; counters_cli.main()", "watch", counter],
        stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
    ) as watching:
        printed: list[str] = []

        def read() -> None:
            assert watching.stdout is not None
            for line in watching.stdout:
                printed.append(line.rstrip("\n"))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            eventually(lambda: printed)
            assert re.fullmatch(rf"count=0 num_shards=3 updated_at=({ISO}|-)", printed[0]), printed
            counters.increment(ctx, db, counter, 4)
            eventually(lambda: printed[-1].startswith("count=4 "))
        finally:
            watching.send_signal(signal.SIGINT)
            try:
                watching.wait(timeout=30)
            finally:
                watching.kill()
        reader.join(timeout=30)
    assert watching.returncode == 0, (tmp_path / "stderr").read_text()
    assert re.fullmatch(rf"count=4 num_shards=3 updated_at={ISO}", printed[-1]), printed


def test_tracked_tags_show_in_top_whatever_the_region_case(suffix: str) -> None:
    """`track` counts an event once per request id; `top` then ranks its tags in that region."""
    region = f"cli-{suffix}"
    assert run("top", "--region", region).stdout == (
        f"nothing yet: no tags in {region} in the last 24h\n")
    run("track", region.upper(), "#Coffee", "brunch", "coffee")
    assert run_json("track", region, "coffee", "--request-id", f"t-{suffix}")["recorded"] == 1
    assert run_json("track", region, "coffee", "--request-id", f"t-{suffix}")["recorded"] == 0
    expected = [{"tag": "coffee", "count": 2}, {"tag": "brunch", "count": 1}]
    eventually(lambda: run_json("top", "--region", region.upper())["items"] == expected)
    assert table_rows(run("top", "--region", region).stdout) == [
        ["1", "coffee", "2"], ["2", "brunch", "1"]]


def test_top_lists_the_k_most_counted_tags_then_by_name(suffix: str) -> None:
    """`top -k 3 --window 1h` lists a region's three most counted tags of the last hour, count
    descending and then tag ascending; the fourth is left out."""
    region = f"cli-top-{suffix}"
    for tags in (["coffee", "brunch", "tea", "jam"], ["coffee", "brunch"], ["coffee", "tea"]):
        run("track", region, *tags)
    expected = [{"tag": "coffee", "count": 3}, {"tag": "brunch", "count": 2},
                {"tag": "tea", "count": 2}]

    def top() -> Any:
        return run_json("top", "--region", region, "--window", "1h", "-k", "3")

    eventually(lambda: top()["items"] == expected)
    found = top()
    assert (found["region"], found["window"], found["items"]) == (region, "1h", expected)


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
    """A user Firebase Auth does not know is a one-line error with exit status 1."""
    email = f"nobody-{suffix}@example.test"
    result = run("claims", "grant", "--admin", email, code=1)
    assert result.stderr.splitlines()[-1] == f"Error: no user '{email}' in Firebase Auth"


def test_backfill_counts_documents_once_and_refuses_direct_writes(
    db: firestore.Client, suffix: str
) -> None:
    """`backfill orders` reads every order and counts none twice (the trigger counted them);
    `inc` and `reset` on a collection counter, and an unknown declaration, are clean errors."""
    status = f"cli-{suffix}"
    db.collection("orders").document(f"cli-{suffix}").set({"status": status, "amount": 3})
    counter = f"orders:{status}"
    eventually(lambda: counters.get_count(db, NAMES, counter, "strong").count == 1
               if counter_refs.counter_ref(db, NAMES, counter).get().exists else False,
               timeout_s=60.0)
    found = run_json("backfill", "orders")
    assert found["declarations"] == ["orders"] and found["documents"] >= 1
    assert counter not in found["deltas"]
    out = run("backfill", "count_orders").stdout.splitlines()
    assert re.fullmatch(r"orders/\{order\}: \d+ documents read, \d+ counted now \(the others "
                        r"were counted already\), \d+ deleted documents uncounted", out[0]), out
    assert not any(status in line for line in out[1:]), out
    assert run("inc", counter, code=1).stderr.splitlines()[-1] == (
        f"Error: counter: '{counter}' is a collection counter (declaration 'orders'): it "
        "changes only with the documents it counts")
    assert run("reset", counter, code=1).stderr.splitlines()[-1] == (
        f"Error: counter: '{counter}' is a collection counter (declaration 'orders'): it "
        "counts documents, it cannot be reset")
    with pytest.raises(NotFound) as unknown:
        OWN.watch_of("nope")
    assert run("backfill", "nope", code=1).stderr.splitlines()[-1] == f"Error: {unknown.value}"
    assert counters.get_count(db, NAMES, counter, "strong").count == 1


def test_backfill_of_an_extension_counter_counts_and_moves_its_layout(
    db: firestore.Client, suffix: str,
) -> None:
    """`backfill visits:{page}` adds to the counter what a page's field holds beyond it (written
    there directly, as before the declaration), once; `extension-rules` prints what
    firestore.rules holds."""
    page = db.collection("pages").document(f"cli-{suffix}")
    page.collection("_counter_shards_").document("a1").set({"visits": 2})
    counter = f"visits:cli-{suffix}"
    eventually(lambda: counter_refs.counter_ref(db, NAMES, counter).get().exists
               and counters.get_count(db, NAMES, counter, "strong").count == 2
               and (page.get().to_dict() or {}).get("visits") == 2, timeout_s=60.0)
    page.update({"visits": firestore.Increment(5)})
    found = run_json("backfill", "visits:{page}")
    assert found["declarations"] == ["visits"] and found["documents"] >= 1
    assert found["deltas"][counter] == 5 and found["failed"] == {}
    assert counters.get_count(db, NAMES, counter, "strong").count == 7
    assert counter not in run_json("backfill", "visits:{page}")["deltas"]
    rules = run("extension-rules").stdout
    assert rules in (ROOT / "firestore.rules").read_text()
    assert "match /pages/{page}/_counter_shards_/{extensionShard}" in rules


# What `make exec` exports for the stack; a user's shell has none of them (README, "Operator CLI").
STACK_VARIABLES = ("GCLOUD_PROJECT", "FIRESTORE_EMULATOR_HOST", "FIREBASE_AUTH_EMULATOR_HOST",
                   "CLOUD_TASKS_EMULATOR_HOST", "COUNTERS_FUNCTIONS_URL", "COUNTERS_WEB_URL")


def test_a_write_from_a_plain_shell_is_ticked_by_its_slots_task(db: firestore.Client,
                                                                 suffix: str) -> None:
    """As the README runs it, from a shell without the stack's variables: `inc` writes to the
    emulator and its slot's task reaches the stack's Cloud Tasks emulator: the rollup
    publishes."""
    counter = f"cli-wake-{suffix}"
    run("create", counter, "--shards", "2")
    shell = {name: value for name, value in os.environ.items() if name not in STACK_VARIABLES}

    def inc() -> None:
        subprocess.run([str(ROOT / "functions" / "venv" / "bin" / "counters"), "inc", counter,
                        "--by", "5"], env=shell, cwd=ROOT, check=True, capture_output=True,
                       timeout=120)

    ticked_by_a_write(db, inc, lambda: rollup_count(db, counter) == 5)
