"""firestore.rules against the emulator: rollups are public, everything else server-only but the
demo collections that collection counters count, and a denial is plain whatever claims the token
lacks."""

from __future__ import annotations

import os

import pytest
import requests
from callables import Callables, User
from counters_cli import rules
from counting.features.collections import Declaration, Extension
from google.cloud import firestore

from .extension_clients import commit, increment_write

BASE = (f"http://{os.environ.get('FIRESTORE_EMULATOR_HOST', '')}/v1/projects/"
        f"{os.environ.get('GCLOUD_PROJECT', '')}/databases/(default)/documents")


def status(method: str, path: str, token: str | None, body: object = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    reply = requests.request(method, f"{BASE}/{path}", headers=headers, json=body, timeout=10)
    return reply.status_code


@pytest.fixture
def counter(admin: Callables, suffix: str) -> str:
    name = f"rules-{suffix}"
    admin.call("create_counter", counter=name, shards=2)
    admin.call("increment", counter=name, request_id=f"r-{suffix}")
    return name


@pytest.mark.parametrize("who", ["signed_out", "user", "admin"])
def test_clients_read_rollups_only(
    who: str, plain_user: User, admin_user: User, counter: str
) -> None:
    """Everyone reads counters/{id}; shards, markers and internal state stay hidden, but for the
    rollup's partition count, its partitions' health records and the exactness audit's record,
    which admins read."""
    token = {"signed_out": None, "user": plain_user.id_token, "admin": admin_user.id_token}[who]
    assert status("GET", f"counters/{counter}", token) == 200
    assert status("GET", f"counters/{counter}/shards/0", token) == 403
    assert status("GET", f"counters/{counter}/shards", token) == 403
    for health in ("rollup", "rollup_partitions", "rollup-4-0", "rollup-16-15", "audit"):
        assert status("GET", f"internal/{health}", token) in (
            (200, 404) if who == "admin" else (403,)), health
    for hidden in ("rollup_usage", "rollup-4", "rollup-4-0-old", "audits"):
        assert status("GET", f"internal/{hidden}", token) == 403, hidden
    assert status("GET", "internal", token) == 403
    assert status("GET", "requests", token) == 403
    assert status("GET", "counted_docs", token) == 403
    assert status("GET", "trends/global", token) in (200, 404)  # readable, perhaps not yet there
    # A rollup partition's lists, which partition 0 merges into trends/{scope}: server-only.
    assert status("GET", "trends/global/parts/2-1", token) == 403
    assert status("GET", "trends/global/parts", token) == 403
    for hidden in ("trend_minutes", "trend_hours", "trend_totals"):
        assert status("GET", hidden, token) == 403


@pytest.mark.parametrize("who", ["signed_out", "user", "admin"])
def test_clients_write_nothing(who: str, plain_user: User, admin_user: User, counter: str) -> None:
    """No client writes a rollup, a shard or a new document directly."""
    token = {"signed_out": None, "user": plain_user.id_token, "admin": admin_user.id_token}[who]
    body = {"fields": {"count": {"integerValue": "999"}}}
    assert status("PATCH", f"counters/{counter}", token, body) == 403
    assert status("PATCH", f"counters/{counter}/shards/0", token, body) == 403
    assert status("PATCH", f"counters/{counter}-forged", token, body) == 403
    assert status("DELETE", f"counters/{counter}", token) == 403
    assert status("PATCH", "trends/global", token, body) == 403
    assert status("PATCH", "trends/global/parts/2-1", token, body) == 403


def test_a_user_without_claims_is_denied_a_tenant_plainly(
    plain_user: User, admin: Callables, suffix: str
) -> None:
    """A signed-in user with no role claims gets a plain denial, not a rules evaluation error."""
    tenant = f"rules-{suffix}"
    admin.call("configure_sequence", tenant=tenant, timezone="UTC")
    reply = requests.get(f"{BASE}/sequences/{tenant}",
                         headers={"Authorization": f"Bearer {plain_user.id_token}"}, timeout=10)
    assert reply.status_code == 403
    assert "undefined" not in reply.json()["error"]["message"]


@pytest.mark.parametrize("who", ["signed_out", "user", "admin"])
def test_only_admins_list_counters_trends_and_sequences(
    who: str, plain_user: User, admin_user: User, counter: str
) -> None:
    """Nobody but an admin enumerates counter ids, regions or tenants; one document stays
    readable."""
    token = {"signed_out": None, "user": plain_user.id_token, "admin": admin_user.id_token}[who]
    expected = 200 if who == "admin" else 403
    for collection in ("counters", "trends", "sequences"):
        assert status("GET", collection, token) == expected, collection
    assert status("GET", f"counters/{counter}", token) == 200


def fields(**values: object) -> dict[str, object]:
    """A REST document body: strings, integers and booleans."""
    def value(v: object) -> dict[str, object]:
        if isinstance(v, bool):
            return {"booleanValue": v}
        if isinstance(v, int):
            return {"integerValue": str(v)}
        return {"stringValue": v}

    return {"fields": {name: value(v) for name, v in values.items()}}


def test_users_create_and_delete_their_own_comments_only(
    plain_user: User, admin_user: User, suffix: str
) -> None:
    """A signed-in user creates a small comment as its author and deletes it; nobody forges an
    author, adds fields, edits, or deletes another's comment; signed out, nothing."""
    me, other = plain_user, admin_user
    comments = f"posts/rules-{suffix}/comments"

    def create(comment: str, token: str | None, **values: object) -> int:
        return status("POST", f"{comments}?documentId={comment}", token, fields(**values))

    assert create("mine", me.id_token, author=me.uid, text="hello") == 200
    assert status("GET", f"{comments}/mine", None) == 200  # comments are public
    assert create("theirs", other.id_token, author=other.uid, text="hi") == 200
    assert create("forged", me.id_token, author=other.uid, text="as someone else") == 403
    assert create("anon", None, author=me.uid, text="signed out") == 403
    assert create("extra", me.id_token, author=me.uid, text="x", likes=1000) == 403
    assert create("long", me.id_token, author=me.uid, text="x" * 1001) == 403
    assert create("empty", me.id_token, author=me.uid, text="") == 403
    assert create("typed", me.id_token, author=me.uid, text=5) == 403
    assert create("x" * 129, me.id_token, author=me.uid, text="long id") == 403
    assert status("PATCH", f"{comments}/mine", me.id_token,
                  fields(author=me.uid, text="edited")) == 403
    assert status("DELETE", f"{comments}/theirs", me.id_token) == 403
    assert status("DELETE", f"{comments}/mine", None) == 403
    assert status("DELETE", f"{comments}/mine", me.id_token) == 200


def test_only_admins_read_and_write_orders(
    plain_user: User, admin_user: User, suffix: str
) -> None:
    """Orders are staff data: a user neither reads nor writes them; an admin writes well-formed
    ones."""
    order = f"orders?documentId=rules-{suffix}"
    valid = fields(status=f"paid-{suffix}", amount=250)
    assert status("POST", order, plain_user.id_token, valid) == 403
    assert status("POST", order, admin_user.id_token,
                  fields(status=f"paid-{suffix}", amount="250")) == 403
    assert status("POST", order, admin_user.id_token, valid) == 200
    assert status("GET", f"orders/rules-{suffix}", plain_user.id_token) == 403
    assert status("GET", f"orders/rules-{suffix}", admin_user.id_token) == 200
    assert status("DELETE", f"orders/rules-{suffix}", plain_user.id_token) == 403
    assert status("DELETE", f"orders/rules-{suffix}", admin_user.id_token) == 200


def increment(shard: str, token: str | None, by: int | float | str, field: str = "visits",
              value: dict[str, object] | None = None) -> int:
    """An extension client's write: a merge of `{field: increment(by)}` into the shard, as the
    SDKs send it (`extension_clients`: an integer or a double operand), or of `value`."""
    name = f"{BASE.split('/v1/', 1)[1]}/{shard}"
    amount = {"integerValue": str(by)} if isinstance(by, int) else {"doubleValue": by}
    write = increment_write(name, field, amount)
    if value is not None:
        write = {"update": {"name": name, "fields": value},
                 "updateMask": {"fieldPaths": list(value)}}
    return commit(token, write)


def test_extension_clients_write_only_their_shards_field_by_the_declared_bound(
    plain_user: User, admin_user: User, suffix: str
) -> None:
    """A signed-in user increments the `visits` of a shard by -1..1, as the extension's SDKs do;
    a larger change, another field, a float, a partial's id, a long id, a delete, a write of the
    page itself, or any write signed out, is refused. Everyone reads the page and its shards."""
    me = plain_user.id_token
    shards = f"pages/rules-{suffix}/_counter_shards_"
    mine = f"{shards}/0b8f6c2e-3a1d-4e5f-9a7b-1c2d3e4f5a6b"
    assert increment(mine, me, 1) == 200  # the demo's pages are made by their visits
    assert increment(mine, me, -1) == 200
    assert increment(mine, me, 1) == 200
    assert increment(mine, me, 2) == 403
    assert increment(mine, me, -2) == 403
    assert increment(mine, me, 0.5) == 403  # a fraction, from a client sending doubles
    assert increment(mine, me, 1.0) == 200  # the Android and iOS clients' 1.0
    assert increment(mine, me, -1.0) == 200
    assert increment(mine, me, 2.0) == 403
    for odd in ("NaN", "Infinity", "-Infinity"):  # doubles JSON spells as strings
        assert increment(mine, me, odd) == 403

    assert increment(mine, me, 1, field="likes") == 403
    assert increment(mine, me, 1, value={"visits": {"integerValue": "500"}}) == 403
    assert increment(mine, None, 1) == 403
    assert increment(f"{shards}/\tabcd", me, 1) == 403  # a partial's id starts with a tab
    assert increment(f"{shards}/{'a' * 65}", me, 1) == 403
    assert increment(f"{shards}/{'a' * 64}", me, 1) == 200
    assert status("DELETE", mine, me) == 403
    # Read, signed out: the trigger may have moved the shard into its page meanwhile (404, the
    # read let through all the same; a refusal is 403 whether the document exists or not).
    assert status("GET", mine, None) in (200, 404)
    assert status("GET", f"pages/rules-{suffix}", None) in (200, 404)
    assert status("PATCH", f"pages/rules-{suffix}", me, fields(visits=100)) == 403
    assert status("PATCH", f"pages/rules-{suffix}", admin_user.id_token, fields(visits=1)) == 200


def test_an_old_field_in_a_shard_locks_no_device_out_and_stays_as_it_is(
    plain_user: User, db: firestore.Client, suffix: str,
) -> None:
    """A shard holding a field the extension counted before that no declaration names (the
    extension's guide let any field in): the device's increments of the declared field are let
    through, and a write that changes the old field is refused."""
    me = plain_user.id_token
    page = db.collection("pages").document(f"rules-old-{suffix}")
    page.set({"title": "r"})
    shard = page.collection("_counter_shards_").document("5a0c6b1e-2f3d-4c5b-8a9e-0d1c2b3a4f5e")
    shard.set({"shares": 7, "visits": 0})
    assert increment(shard.path, me, 1) == 200
    assert increment(shard.path, me, 1, field="shares") == 403


def test_by_default_a_shard_is_refused_under_a_document_that_does_not_exist(
    plain_user: User, suffix: str,
) -> None:
    """The rules `counters extension-rules` generates for a declaration without
    `create_documents`, loaded into a project of their own: a client's shard under a post that
    does not exist is refused (no signed-in user makes documents and counters at will), and
    taken once the post exists."""
    project = f"demo-rules-{suffix}"
    declared = [Declaration(counter="likes:{post}", documents="posts/{post}",
                            extension=Extension(field="likes", by=(0, 1)))]
    text = ("rules_version = '2';\nservice cloud.firestore {\n  match /databases/{database}/"
            "documents {\n" + rules.extension_rules(declared) + "  }\n}\n")
    host = os.environ["FIRESTORE_EMULATOR_HOST"]
    loaded = requests.put(
        f"http://{host}/emulator/v1/projects/{project}/databases/(default):securityRules",
        json={"rules": {"files": [{"name": "firestore.rules", "content": text}]}}, timeout=30)
    assert loaded.status_code == 200, loaded.text
    database = f"projects/{project}/databases/(default)"
    shard = f"{database}/documents/posts/p1/_counter_shards_/5a0c6b1e-2f3d-4c5b-8a9e-0d1c2b3a4f5e"
    write = increment_write(shard, "likes", {"integerValue": "1"})
    assert commit(plain_user.id_token, write, database=database) == 403
    firestore.Client(project=project).document("posts/p1").set({"title": "hi"})
    assert commit(plain_user.id_token, write, database=database) == 200
