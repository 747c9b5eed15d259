"""What a write policy costs on the write path: `increment` through the real callable on a
`unique` counter and on a `min_interval_s` counter, beside a default counter, 16 clients.

Each request is a different user's first increment of the counter, so every one of them applies
(a like, a view), as it would in production: the policy's marker is created, not refused.
`min_interval_returning` is the other case of a paced counter: every user increments it once
before the measured rounds, which come more than `min_interval_s` later, so each measured
increment rewrites an existing pacing marker (read it, then a conditional write). The counters
take their rounds interleaved, so that the machine's drift hits them alike.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from callables import Callables, sign_up
from counters_cli.load import percentile

POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "unique": {"unique": True},
    "min_interval": {"min_interval_s": 3600},
    "min_interval_returning": {"min_interval_s": 1},
}


def users(count: int) -> list[Callables]:
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda _: Callables(sign_up().id_token), range(count)))


def one_round(counter: str, callers: list[list[Callables]]) -> tuple[float, list[float], int]:
    """Every client sends its callers' increments one after another, over one connection of
    its own (a connection per user, idle between its user's calls, would meet the emulator
    closing it: a reset): (seconds, latencies, applied)."""

    def client(mine: list[Callables]) -> tuple[list[float], int]:
        latencies, applied = [], 0
        with requests.Session() as session:
            for caller in mine:
                started = time.monotonic()
                sent = dataclasses.replace(caller, session=session)
                applied += bool(sent.call("increment", counter=counter)["applied"])
                latencies.append(time.monotonic() - started)
        return latencies, applied

    started = time.monotonic()
    with ThreadPoolExecutor(len(callers)) as pool:
        outcomes = list(pool.map(client, callers))
    seconds = time.monotonic() - started
    return (seconds, [lat for lats, _ in outcomes for lat in lats],
            sum(applied for _, applied in outcomes))


def run(clients: int = 16, per_client: int = 20, rounds: int = 6) -> dict[str, Any]:
    admin = Callables(sign_up({"admin": True}).id_token)
    stamp = time.strftime("%H%M%S")
    names = {kind: f"bench-policy-{kind}-{stamp}" for kind in POLICIES}
    for kind, policy in POLICIES.items():
        admin.call("create_counter", counter=names[kind], shards=16, policy=policy)
    warm = users(clients)
    for kind in POLICIES:  # the emulator starts one worker per concurrent request
        one_round(names[kind], [[caller] for caller in warm])
    pool = users(clients * per_client * rounds)
    everyone = [pool[c::clients] for c in range(clients)]
    one_round(names["min_interval_returning"], everyone)  # each user's first visit
    time.sleep(POLICIES["min_interval_returning"]["min_interval_s"])
    seconds = {kind: 0.0 for kind in POLICIES}
    latencies: dict[str, list[float]] = {kind: [] for kind in POLICIES}
    applied = {kind: 0 for kind in POLICIES}
    for n in range(rounds):
        batch = pool[n * clients * per_client:(n + 1) * clients * per_client]
        callers = [batch[c * per_client:(c + 1) * per_client] for c in range(clients)]
        order = list(POLICIES)[n % len(POLICIES):] + list(POLICIES)[:n % len(POLICIES)]
        for kind in order:  # the same users increment each counter once; who goes first rotates
            took, lats, done = one_round(names[kind], callers)
            seconds[kind] += took
            latencies[kind] += lats
            applied[kind] += done
    sent = clients * per_client * rounds
    figures: dict[str, Any] = {"clients": clients, "increments_per_policy": sent}
    for kind in POLICIES:
        count = admin.call("get_count", counter=names[kind], consistency="strong")["count"]
        figures[kind] = {
            "increments_per_s": round(applied[kind] / seconds[kind], 1),
            "p50_ms": round(1000 * percentile(latencies[kind], 50), 1),
            "p99_ms": round(1000 * percentile(latencies[kind], 99), 1),
            "applied": applied[kind],
            # The warm-up's increment of each client, and the first visits of the returning.
            "exact": count == sent * (2 if kind == "min_interval_returning" else 1) + clients,
        }
    base = figures["default"]["increments_per_s"]
    figures["unique_ratio"] = round(figures["unique"]["increments_per_s"] / base, 3)
    figures["min_interval_ratio"] = round(figures["min_interval"]["increments_per_s"] / base, 3)
    figures["min_interval_returning_ratio"] = round(
        figures["min_interval_returning"]["increments_per_s"] / base, 3)
    figures["target_ratio"] = 0.8
    return figures
