"""Benchmark of resetting sequences (ticket numbers), run against the Emulator Suite.

`run()` returns a dict of figures, measured in one run so that ratios compare like with like:
the domain's `next_number` for one tenant with 8 threads against a bare `Increment` on one
document (interleaved rounds, medians), against Redis `INCR` through redis-py on loopback (a
redis-server this module starts on a free port and stops), and the aggregate rate of 50 tenants
numbered in parallel. Every run also checks that the numbers it got are exactly 1..N.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from counting.features.context import Context
from counting.features.sequences import issuing, opening
from google.cloud import firestore
from readiness import wait_ready

CLIENTS = 8


def rate_of(work: Callable[[int], None], clients: int, per_client: int) -> float:
    """Calls per second of `work(client)`, `per_client` times on each of `clients` threads."""

    def client(i: int) -> None:
        for _ in range(per_client):
            work(i)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return clients * per_client / (time.perf_counter() - started)


def one_tenant_vs_bare(db: firestore.Client, per_client: int, rounds: int) -> dict[str, float]:
    ctx = Context.offline()
    tenant = f"bench-{uuid.uuid4().hex[:8]}"
    opening.configure_sequence(ctx, db, tenant, timezone="Europe/Paris")
    bare_ref = db.collection("bench").document(f"bare-{uuid.uuid4().hex[:8]}")
    bare_ref.set({"n": 0})
    numbers: list[int] = []

    def domain(_: int) -> None:
        numbers.append(issuing.next_number(ctx, db, tenant).number)

    def bare(_: int) -> None:
        bare_ref.update({"n": firestore.Increment(1)})

    def with_request_id(_: int) -> None:
        numbers.append(issuing.next_number(ctx, db, tenant, request_id=f"r{uuid.uuid4().hex}",
                                           uid="bench").number)

    # Warm up connections, the tenant cache and the emulator's JIT: a round of each (a bare
    # Increment's first hundreds of commits run at half its speed, which flattered the ratios).
    rate_of(domain, CLIENTS, per_client)
    rate_of(bare, CLIENTS, per_client)
    rate_of(with_request_id, CLIENTS, per_client // 2)
    domain_rates, bare_rates, request_id_rates = [], [], []
    for _ in range(rounds):  # interleaved: the machine's noise falls on all three alike
        domain_rates.append(rate_of(domain, CLIENTS, per_client))
        bare_rates.append(rate_of(bare, CLIENTS, per_client))
        request_id_rates.append(rate_of(with_request_id, CLIENTS, per_client // 2))
    assert sorted(numbers) == list(range(1, len(numbers) + 1)), "duplicate or missing numbers"
    domain_per_s = statistics.median(domain_rates)
    bare_per_s = statistics.median(bare_rates)
    request_id_per_s = statistics.median(request_id_rates)
    return {
        "domain_numbers_per_s": round(domain_per_s, 1),
        "bare_increments_per_s": round(bare_per_s, 1),
        "domain_to_bare_ratio": round(domain_per_s / bare_per_s, 3),
        "domain_with_request_id_per_s": round(request_id_per_s, 1),
        "with_request_id_to_bare_ratio": round(request_id_per_s / bare_per_s, 3),
    }


def many_tenants(db: firestore.Client, tenants: int, per_tenant: int) -> dict[str, float]:
    ctx = Context.offline()
    names = [f"bench-{uuid.uuid4().hex[:8]}-{i}" for i in range(tenants)]
    for name in names:
        opening.configure_sequence(ctx, db, name, timezone="America/New_York", reset_time="04:00")
    got: dict[str, list[int]] = {name: [] for name in names}

    def number(i: int) -> None:
        got[names[i]].append(issuing.next_number(ctx, db, names[i]).number)

    rate_of(number, tenants, 2)  # warm up
    per_s = rate_of(number, tenants, per_tenant)
    assert all(sorted(v) == list(range(1, len(v) + 1)) for v in got.values()), "bad numbers"
    return {"tenants": tenants, "aggregate_numbers_per_s": round(per_s, 1)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def redis_server() -> Iterator[int]:
    """A throwaway redis-server on a free loopback port, without persistence."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready("redis-server",
                   lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close(), 10,
                   every_s=0.05, exited=lambda: None if server.poll() is None else "it exited")
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def redis_incr(per_client: int, rounds: int) -> float | None:
    """Median INCR/s with 8 threads (one connection each), or None without redis-server."""
    if shutil.which("redis-server") is None:
        return None
    import redis

    with redis_server() as port:
        conns = [redis.Redis(host="127.0.0.1", port=port) for _ in range(CLIENTS)]
        key = f"seq:{uuid.uuid4().hex[:8]}"

        def incr(i: int) -> None:
            conns[i].incr(key)

        rate_of(incr, CLIENTS, 100)
        rates = [rate_of(incr, CLIENTS, per_client) for _ in range(rounds)]
        for conn in conns:
            conn.close()
    return statistics.median(rates)


def run(per_client: int = 150, rounds: int = 5, tenants: int = 50,
        per_tenant: int = 20) -> dict[str, Any]:
    db = firestore.Client(project=os.environ["GCLOUD_PROJECT"])
    figures: dict[str, Any] = {"clients": CLIENTS, "numbers_per_client": per_client,
                               "rounds": rounds}
    figures.update(one_tenant_vs_bare(db, per_client, rounds))
    redis_per_s = redis_incr(per_client * 10, rounds)
    figures["redis_incr_per_s"] = None if redis_per_s is None else round(redis_per_s, 1)
    figures["domain_to_redis_ratio"] = (
        None if redis_per_s is None
        else round(figures["domain_numbers_per_s"] / redis_per_s, 4))
    figures["many_tenants"] = many_tenants(db, tenants, per_tenant)
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
