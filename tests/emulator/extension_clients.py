"""What each of the Distributed Counter extension's clients sends and reads, transcribed from
their sources (firebase/extensions, `firestore-counter/clients/*`, with the SDK each one uses):
the conformance table of docs/api.md ("What each client sends"), replayed on the wire by the
emulator tests.

- web (`clients/web/src/index.ts`): `incrementBy(val: number)` sends
  `FieldValue.increment(val)`; the JS SDK's `toNumber` (`packages/firestore/src/remote/
  number_serializer.ts`) sends a safe integer as `integerValue`, anything else as `doubleValue`.
  Its shard id is a lower-case `uuid.v4()` kept in a cookie. It reads the page, its shard and the
  partials `\\t` + id[:4], `\\t\\t` + id[:3], `\\t\\t\\t` + id[:2] and (a bug of its own since 2021)
  `\\t\\t\\t` + id[:1]; each value as a JS number (`|| 0`).
- android (`clients/android/.../FirestoreShardedCounter.java`): `incrementBy(double value)` sends
  `FieldValue.increment(double)`, a `doubleValue` always; a lower-case `UUID.randomUUID()`; reads
  the page, its shard and the four partials (`\\t\\t\\t\\t` + id[:1] last), each cast to `Double`.
- ios (`clients/ios/Sources/FirestoreCounter/FirestoreCounter.swift`): `increment(by delta:
  Double)` sends `FieldValue.increment(Double)`, a `doubleValue` always; an upper-case
  `UUID().uuidString`; reads as Android does, each as `Double` (an integer bridges).
- dart (`clients/dart/lib/distributed_counter.dart`): `incrementBy(int value)` sends
  `FieldValue.increment(int)`, an `integerValue` always; a lower-case `Uuid().v4()`; reads as
  Android does, each as `int`.

Each writes with `set({field: increment}, merge: true)`, a dotted field nested into maps: on the
wire an update with an empty mask and one field transform (below).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

DATABASE = f"projects/{os.environ.get('GCLOUD_PROJECT', '')}/databases/(default)"


@dataclass(frozen=True)
class Client:
    name: str
    wire: Callable[[int], dict[str, Any]]  # incrementBy(n) as the increment's operand
    shard_id: Callable[[], str]
    partials: Callable[[str], list[str]]  # the partial ids it reads beside its shard


def _safe_integer(n: int) -> dict[str, Any]:
    return {"integerValue": str(n)} if abs(n) <= 2**53 - 1 else {"doubleValue": float(n)}


def _double(n: int) -> dict[str, Any]:
    return {"doubleValue": float(n)}


def _partials(shard: str) -> list[str]:
    return ["\t" * k + shard[:5 - k] for k in range(1, 5)]


def _web_partials(shard: str) -> list[str]:
    return [*_partials(shard)[:3], "\t\t\t" + shard[:1]]


CLIENTS = [
    Client("web", _safe_integer, lambda: str(uuid.uuid4()), _web_partials),
    Client("android", _double, lambda: str(uuid.uuid4()), _partials),
    Client("ios", _double, lambda: str(uuid.uuid4()).upper(), _partials),
    Client("dart", lambda n: {"integerValue": str(n)}, lambda: str(uuid.uuid4()), _partials),
]


def increment_write(document: str, field: str, operand: dict[str, Any]) -> dict[str, Any]:
    """One write of `set({field: increment(operand)}, merge: true)` as the SDKs send it."""
    return {"update": {"name": document, "fields": {}}, "updateMask": {"fieldPaths": []},
            "updateTransforms": [{"fieldPath": field, "increment": operand}]}


def commit(token: str | None, *writes: dict[str, Any], database: str = DATABASE) -> int:
    """The writes committed as a client signed in with `token` (None: signed out): the status."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reply = requests.post(
        f"http://{os.environ.get('FIRESTORE_EMULATOR_HOST', '')}/v1/{database}/documents:commit",
        headers=headers, json={"writes": list(writes)}, timeout=10)
    return reply.status_code
