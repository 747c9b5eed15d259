"""A shard write's protobuf, built directly (`shards.encoded`), is the one the client builds for
the same `update` or `set(merge=True)`: the same document, fields, mask, transforms and
precondition, for every kind of value the write paths send."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from counting.writepath.shards import encoded
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from hypothesis import given
from hypothesis import strategies as st

DB = firestore.Client(project="demo-encoding", credentials=AnonymousCredentials())
REF = DB.collection("counters", "c", "shards").document("3")

names = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
values = st.one_of(
    st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.text(max_size=20),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.datetimes(timezones=st.just(dt.UTC)).map(lambda t: t.replace(microsecond=0)),
    st.integers(min_value=-10**9, max_value=10**9).map(firestore.Increment),
    st.just(firestore.SERVER_TIMESTAMP),
)


def normal(write: Any) -> tuple[Any, ...]:
    """What a Write means, whatever the order of its mask and transforms."""
    pb = type(write).pb(write)
    return (pb.update.name, dict(pb.update.fields), pb.HasField("update_mask"),
            sorted(pb.update_mask.field_paths),
            sorted(t.SerializeToString(deterministic=True) for t in pb.update_transforms),
            pb.HasField("current_document"), pb.current_document.SerializeToString())


@given(st.dictionaries(names, values, min_size=1, max_size=8))
def test_an_update_is_encoded_as_the_client_encodes_it(fields: dict[str, Any]) -> None:
    ours = encoded(REF, fields, exists=True)
    theirs = _helpers.pbs_for_update(REF._document_path, fields, None)
    assert len(theirs) == 1
    assert normal(ours) == normal(theirs[0])


@given(st.dictionaries(names, values, min_size=1, max_size=8))
def test_a_merge_is_encoded_as_the_client_encodes_it(fields: dict[str, Any]) -> None:
    ours = encoded(REF, fields, exists=False)
    theirs = _helpers.pbs_for_set_with_merge(REF._document_path, fields, merge=True)
    assert len(theirs) == 1
    assert normal(ours) == normal(theirs[0])


def test_a_shard_write_as_the_counters_send_it() -> None:
    fields = {"count": firestore.Increment(5), "writes": firestore.Increment(1),
              "updated_at": firestore.SERVER_TIMESTAMP, "stripe": 7}
    assert normal(encoded(REF, fields, exists=True)) == normal(
        _helpers.pbs_for_update(REF._document_path, fields, None)[0])


@pytest.mark.parametrize("name", ["a.b", "`a`", "a b", "1a", ""])
def test_a_field_path_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a plain field name"):
        encoded(REF, {name: 1}, exists=True)
