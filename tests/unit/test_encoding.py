"""A write's protobuf, built directly (`encoding.encoded`), is the one the client builds for
the same `update` (at a version or not), `set(merge=True)` or `create`: the same bytes, so the
same document, fields, mask, transforms and precondition in the same order (a commit's
transform results come back in it), for every kind of value the write paths send."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from counting.foundation import encoding
from counting.foundation.encoding import encoded
from google.api_core import exceptions as gexc
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1._helpers import encode_value
from google.cloud.firestore_v1.types.document import Document
from hypothesis import given
from hypothesis import strategies as st

DB = firestore.Client(project="demo-encoding",
                      credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
REF = DB.collection("counters", "c", "shards").document("3")
PATH = REF._document_path

names = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
instants = st.datetimes(min_value=dt.datetime(1970, 1, 1), timezones=st.just(dt.UTC))
values = st.one_of(
    st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.text(max_size=20),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    instants,
    st.lists(st.text(max_size=5), max_size=3),
    st.integers(min_value=-10**9, max_value=10**9).map(firestore.Increment),
    st.just(firestore.SERVER_TIMESTAMP),
)
documents = st.dictionaries(names, values, min_size=1, max_size=8)


def raw(write: Any) -> bytes:
    serialized: bytes = type(write).pb(write).SerializeToString(deterministic=True)
    return serialized


@given(documents)
def test_an_update_is_the_clients(fields: dict[str, Any]) -> None:
    [theirs] = _helpers.pbs_for_update(PATH, fields, None)
    assert raw(encoded(REF, fields, "update")) == raw(theirs)


# A version is a document's update time: this century (the client turns it into seconds through
# a float, which rounds microseconds away centuries from now).
versions = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2100, 1, 1),
                        timezones=st.just(dt.UTC))


@given(documents, versions, st.integers(min_value=0, max_value=999))
def test_an_update_at_a_version_is_the_clients(fields: dict[str, Any], at: dt.datetime,
                                               nanos: int) -> None:
    version = DatetimeWithNanoseconds(  # type: ignore[no-untyped-call]
        at.year, at.month, at.day, at.hour, at.minute, at.second,
        nanosecond=at.microsecond * 1000 + nanos, tzinfo=dt.UTC)
    [theirs] = _helpers.pbs_for_update(PATH, fields, DB.write_option(last_update_time=version))
    assert raw(encoded(REF, fields, "update", version=version)) == raw(theirs)


@given(documents)
def test_a_merge_is_the_clients(fields: dict[str, Any]) -> None:
    [theirs] = _helpers.pbs_for_set_with_merge(PATH, fields, merge=True)
    assert raw(encoded(REF, fields, "merge")) == raw(theirs)


@given(documents)
def test_a_create_is_the_clients(fields: dict[str, Any]) -> None:
    [theirs] = _helpers.pbs_for_create(PATH, fields)
    assert raw(encoded(REF, fields, "create")) == raw(theirs)


def test_each_write_lands_in_a_client_batch_as_the_client_adds_it() -> None:
    fields = {"count": firestore.Increment(5), "writes": firestore.Increment(1),
              "updated_at": firestore.SERVER_TIMESTAMP, "stripe": 7}
    version = dt.datetime(2026, 11, 27, 8, 0, 0, 123456, tzinfo=dt.UTC)
    ours, theirs = DB.batch(), DB.batch()
    encoding.update(ours, REF, fields)
    encoding.update_at(ours, DB, REF, fields, version)
    encoding.merge(ours, REF, fields)
    encoding.create(ours, REF, fields)
    theirs.update(REF, fields)
    theirs.update(REF, fields, option=DB.write_option(last_update_time=version))
    theirs.set(REF, fields, merge=True)
    theirs.create(REF, fields)
    assert [raw(w) for w in ours._write_pbs] == [raw(w) for w in theirs._write_pbs]


@pytest.mark.parametrize("name", ["a.b", "`a`", "a b", "1a", ""])
def test_a_field_path_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a plain field name"):
        encoded(REF, {name: 1}, "update")


@pytest.mark.parametrize("value", [{}, {"b": 1}])
def test_a_map_is_refused(value: dict[str, Any]) -> None:
    """The client merges a map's fields one by one (`set(merge=True)`), which a plain value
    would not: the write paths send none."""
    with pytest.raises(ValueError, match="a map is not a plain value"):
        encoded(REF, {"a": value}, "merge")


class GetDocument:
    """The client's GetDocument, answering `answer` (a Document, or an error to raise)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.names: list[str] = []

    def get_document(self, request: dict[str, str], metadata: Any) -> Any:
        self.names.append(request["name"])
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def reading(answer: Any) -> tuple[firestore.DocumentReference, GetDocument]:
    db = firestore.Client(project="demo-encoding",
                          credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    api = GetDocument(answer)
    db._firestore_api_internal = api
    return db.collection("counters", "c", "paced").document("u"), api




def test_a_unary_read_decodes_the_document_and_gives_no_read_time() -> None:
    stamp = DatetimeWithNanoseconds(2026, 1, 2, 3, 4, 4, 123456,
                                    tzinfo=dt.UTC)  # type: ignore[no-untyped-call]
    document = Document(name="x", fields={"at": encode_value(stamp), "n": encode_value(3),
                                          "nonces": encode_value(["a", "b"])},
                        create_time=stamp, update_time=stamp)
    ref, api = reading(document)
    found = encoding.get(ref)
    assert api.names == [ref._document_path]
    assert found.exists and found.to_dict() == {"at": stamp, "n": 3, "nonces": ["a", "b"]}
    assert found.update_time == stamp and found.create_time == stamp
    assert found.read_time is None  # no local clock stands in for Firestore's


def test_a_missing_document_is_not_found_but_a_missing_database_is_an_error() -> None:
    gone = gexc.NotFound(  # type: ignore[no-untyped-call]
        'Document "projects/p/databases/(default)/documents/c/u" not found.')
    ref, _ = reading(gone)
    missing = encoding.get(ref)
    assert not missing.exists and missing.to_dict() is None and missing.update_time is None
    no_database = gexc.NotFound(  # type: ignore[no-untyped-call]
        "The database (default) does not exist for project p Please visit "
        "https://console.cloud.google.com/datastore/setup?project=p to add a Cloud Datastore "
        "or Cloud Firestore database.")
    ref, _ = reading(no_database)
    with pytest.raises(gexc.NotFound):
        encoding.get(ref)
