"""The deploy manifest: every function's runtime options are the ones chosen on purpose
(functions/main.py and handlers/rollup.py give the reasons)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cost_model
import main
import pytest
import yaml
from counting.features import declarations
from counting.foundation import config
from counting.writepath import partitions
from firebase_functions.private import serving
from handlers.task_queues import RUNTIME_SERVICE_ACCOUNT

# This repository's collection counters (functions/declarations.json).
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)

ROOT = Path(__file__).resolve().parents[2]
CALLABLE = {"cpu": 1, "availableMemoryMb": 512, "concurrency": 80, "timeoutSeconds": 60,
            "minInstances": 0, "maxInstances": 100}
# One request per instance, one instance: gen-1 CPU sizing (a third of a vCPU at 512 MiB), which
# bench/cost_model.py prices.
ROLLUP = {"cpu": "gcf_gen1", "availableMemoryMb": 512, "timeoutSeconds": config.ROLLUP_TIMEOUT_S,
          "minInstances": 0, "concurrency": 1, "maxInstances": 1}
# The rollup's task queue functions, one per partition index (counting/writepath/partitions.py).
TICKS = ["rolluptick", *(f"rolluptick{index}" for index in range(1, partitions.DEFAULT_MAX))]
ROLLUPS = {"rollup", *TICKS}
EXPECTED = dict.fromkeys(ROLLUPS, ROLLUP)


def manifest() -> dict[str, Any]:
    """What firebase-tools reads from the functions at deploy time (functions.yaml)."""
    found: dict[str, Any] = yaml.safe_load(serving.functions_as_yaml(
        {name: getattr(main, name) for name in main.__all__}))
    return found


def endpoints() -> dict[str, Any]:
    endpoints: dict[str, Any] = manifest()["endpoints"]
    return endpoints


def dotenv(name: str) -> dict[str, str]:
    """A functions/ dotenv file's variables, as firebase-tools reads the simple lines we write."""
    lines = (ROOT / "functions" / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.mark.parametrize("name", main.__all__)
def test_each_function_deploys_with_its_chosen_options(name: str) -> None:
    """cpu, memory, concurrency, timeout and instance bounds are pinned per function."""
    endpoint = endpoints()[name]
    expected = EXPECTED.get(name, CALLABLE)
    assert {key: endpoint.get(key) for key in expected} == expected
    assert endpoint["region"] == [config.REGION]


def test_only_the_rollup_runs_on_first_generation_cpu() -> None:
    """set_global_options would default cpu to gcf_gen1 (1/6 vCPU, one request at a time): only
    the rollup's one-request instances choose it."""
    gen1 = {name for name, endpoint in endpoints().items() if endpoint.get("cpu") == "gcf_gen1"}
    assert gen1 == ROLLUPS


def test_callables_serve_many_requests_per_instance() -> None:
    """Every client-facing callable serves at least 80 requests at once per instance."""
    callables = {n: e for n, e in endpoints().items() if "callableTrigger" in e}
    assert len(callables) == len(main.__all__) - len(ROLLUPS) - len(OWN.watches)
    assert all(e["concurrency"] >= 80 for e in callables.values())


def test_python_workers_serve_as_many_requests_as_the_callables_declare() -> None:
    """Deployed, a Python function serves its instance's requests on THREADS threads (default
    4 per CPU); functions/.env sets it to the concurrency every callable and trigger declares."""
    served = {n: e["concurrency"] for n, e in endpoints().items()
              if n not in ROLLUPS}
    assert set(served.values()) == {int(dotenv(".env")["THREADS"])}
    assert "THREADS" not in dotenv(".env.local")  # the emulators serve as a deploy does


def test_rollup_triggers() -> None:
    """Scheduled every minute without retries."""
    found = endpoints()
    assert found["rollup"]["scheduleTrigger"]["schedule"] == "every 1 minutes"
    assert found["rollup"]["scheduleTrigger"]["retryConfig"]["retryCount"] == 0


def test_the_functions_runtime_account_may_enqueue_rollup_ticks() -> None:
    """Each tick function's queue names the runtime service account as its invoker, a parameter
    firebase-tools resolves at deploy time: it grants that account the Cloud Tasks enqueuer role
    on the queue and the Cloud Run invoker role on the function."""
    found = endpoints()
    for name in TICKS:
        assert found[name]["taskQueueTrigger"]["invoker"] == [
            "{{ params.RUNTIME_SERVICE_ACCOUNT }}"], name
    declared = {param["name"]: param for param in manifest()["params"]}
    assert declared[RUNTIME_SERVICE_ACCOUNT.name]["type"] == "string"
    assert "default" not in declared[RUNTIME_SERVICE_ACCOUNT.name]  # per project, never guessed


def test_every_function_runs_as_the_runtime_account() -> None:
    """No function names its own service account: the callables and the rollup, which enqueue
    tick tasks, all run as the project's default compute account, the invoker above."""
    assert all(endpoint.get("serviceAccountEmail") is None for endpoint in endpoints().values())


def test_every_parameter_has_a_value_for_the_emulators_and_none_is_project_specific() -> None:
    """The Functions emulator prompts for a parameter without a value (and a stack without a
    terminal hangs); the runtime service account is per project, so functions/.env, which every
    deploy reads, leaves it to functions/.env.<project>."""
    local = {**dotenv(".env"), **dotenv(".env.local")}
    assert {param["name"] for param in manifest()["params"]} <= set(local)
    assert RUNTIME_SERVICE_ACCOUNT.name not in dotenv(".env")


def test_collection_triggers_watch_the_declared_documents() -> None:
    """One written-document trigger per declared path pattern (a created-document one for an
    extension counter's shards), on the default database."""
    found = endpoints()
    for watch in OWN.watches:
        trigger = found[watch.function_name]["eventTrigger"]
        assert trigger["eventType"] == "google.cloud.firestore.document.v1." + (
            "created" if watch.extension_shards else "written")
        assert trigger["eventFilterPathPatterns"] == {"document": watch.documents}
        assert trigger["eventFilters"]["database"] == "(default)"
    assert {w.function_name for w in OWN.watches} == {
        "count_orders", "count_posts_comments", "count_pages_counter_shards"}


@pytest.mark.parametrize("name", TICKS)
def test_each_tick_queue_dispatches_one_task_at_a_time_and_retries_soon(name: str) -> None:
    """One warm holder keeps its partition's ledger: one dispatch at once; a failed tick is
    tried again within seconds."""
    queue = endpoints()[name]["taskQueueTrigger"]
    assert queue["rateLimits"]["maxConcurrentDispatches"] == 1
    assert queue["retryConfig"]["minBackoffSeconds"] == 1
    assert queue["retryConfig"]["maxAttempts"] == 5


def test_the_cost_model_prices_the_deployed_sizes() -> None:
    """bench/cost_model.py prices the rollup and the callables at the sizes they deploy with."""
    found = endpoints()
    for name in ROLLUPS:
        assert found[name]["availableMemoryMb"] == cost_model.ROLLUP_MB
        assert found[name]["cpu"] == "gcf_gen1"
    callable_ = found["increment"]
    assert (callable_["cpu"], callable_["availableMemoryMb"] / 1024) == (
        cost_model.CALLABLE_VCPU, cost_model.CALLABLE_GIB)
    assert callable_["concurrency"] == cost_model.CALLABLE_CONCURRENCY


def test_the_deploy_settings_size_the_tick_functions() -> None:
    """functions/.env ships 16 tick functions at 512 MB; ROLLUP_PARTITIONS_MAX and ROLLUP_TICK_MB
    take other sizes, and a value the design has no answer for fails the load (and the deploy)."""
    from handlers import rollup

    shipped = dotenv(".env")
    assert (shipped["ROLLUP_PARTITIONS_MAX"], shipped["ROLLUP_TICK_MB"]) == ("16", "512")
    assert partitions.deployed_max(shipped) == len(TICKS)
    assert rollup.tick_runtime(shipped)["memory"] == 512
    assert rollup.tick_runtime({"ROLLUP_TICK_MB": "2048"})["memory"] == 2048
    for wrong in ("768", "4096", "x"):
        with pytest.raises(ValueError, match="ROLLUP_TICK_MB"):
            rollup.tick_runtime({"ROLLUP_TICK_MB": wrong})
