"""A write's protobuf, built directly; one document read by the unary RPC.

The client's generic encoder (`batch.update`, `set(merge=True)`, `create`) parses every field name
as a path and builds about ten wrapped messages per write: on the write path that was most of
the process's own CPU per increment (docs/benchmarks.md, "The write path's profile"). The
write paths' writes have top-level fields of plain values, increments and server timestamps,
which `encoded` writes straight into the protobuf. tests/unit/test_encoding.py holds its bytes
to the client's for every kind of value.

The client's `DocumentReference.get` is a streaming BatchGetDocuments, for which grpc's sync API
starts a thread on every call: a paced counter's returning user spent a third of its increment's
time there. `get` reads the document by the unary GetDocument instead.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1._helpers import decode_dict, encode_value
from google.cloud.firestore_v1.base_batch import BaseWriteBatch
from google.cloud.firestore_v1.transforms import Increment
from google.cloud.firestore_v1.types.write import DocumentTransform, Write

_WRITE = Write.pb()
_REQUEST_TIME = DocumentTransform.FieldTransform.ServerValue.REQUEST_TIME
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def update(batch: firestore.WriteBatch, ref: firestore.DocumentReference,
           fields: dict[str, Any]) -> None:
    """`batch.update(ref, fields)`: the document must exist."""
    if isinstance(batch, BaseWriteBatch):  # the client's (the simulation has its own)
        batch._add_write_pbs([encoded(ref, fields, "update")])
    else:
        batch.update(ref, fields)


def update_at(batch: firestore.WriteBatch, db: firestore.Client, ref: firestore.DocumentReference,
              fields: dict[str, Any], version: dt.datetime) -> None:
    """`batch.update(ref, fields)` on the document as it was at `version` (its update time)."""
    if isinstance(batch, BaseWriteBatch):
        batch._add_write_pbs([encoded(ref, fields, "update", version=version)])
    else:
        batch.update(ref, fields, option=db.write_option(last_update_time=version))


def merge(batch: firestore.WriteBatch, ref: firestore.DocumentReference,
          fields: dict[str, Any]) -> None:
    """`batch.set(ref, fields, merge=True)`: created if missing."""
    if isinstance(batch, BaseWriteBatch):
        batch._add_write_pbs([encoded(ref, fields, "merge")])
    else:
        batch.set(ref, fields, merge=True)


def create(batch: firestore.WriteBatch, ref: firestore.DocumentReference,
           fields: dict[str, Any]) -> None:
    """`batch.create(ref, fields)`: the document must not exist."""
    if isinstance(batch, BaseWriteBatch):
        batch._add_write_pbs([encoded(ref, fields, "create")])
    else:
        batch.create(ref, fields)


def encoded(ref: firestore.DocumentReference, fields: dict[str, Any],
            kind: Literal["update", "merge", "create"], *,
            version: dt.datetime | None = None) -> Write:
    """The Write of `fields` into `ref` that the client's `update` (at `version`, if given),
    `set(merge=True)` or `create` builds. As the client does, fields and transforms go in name
    order (the order of a commit's transform results)."""
    pb = _WRITE()
    pb.update.name = ref._document_path
    if kind != "create":
        pb.update_mask.SetInParent()  # even empty: a write without a mask replaces the document
    for name, value in sorted(fields.items()):
        if not _FIELD_NAME.fullmatch(name):
            raise ValueError(f"not a plain field name: {name!r}")
        if isinstance(value, dict):  # the client merges maps field by field: not this
            raise ValueError(f"{name!r}: a map is not a plain value")
        if isinstance(value, Increment):
            _set_value(pb.update_transforms.add(field_path=name).increment, value.value)
        elif value is firestore.SERVER_TIMESTAMP:
            pb.update_transforms.add(field_path=name, set_to_server_value=_REQUEST_TIME)
        else:
            _set_value(pb.update.fields[name], value)
            if kind != "create":
                pb.update_mask.field_paths.append(name)
    if version is not None:  # to the microsecond, as the client sends it
        pb.current_document.update_time.FromDatetime(version)
    elif kind != "merge":
        pb.current_document.exists = kind == "update"
    written: Write = Write.wrap(pb)
    return written


def get(ref: firestore.DocumentReference) -> firestore.DocumentSnapshot[Any]:
    """`ref.get()` by the unary GetDocument RPC, with its default retries. Its answer has no read
    time, so neither has the snapshot: whatever measures time against a read (pacing) reads by
    the client's batched read, whose read time is Firestore's clock, never this instance's.
    NOT_FOUND is a missing document, unless it says the database does not exist."""
    if not isinstance(ref, firestore.DocumentReference):  # the simulation's: no read time either
        snapshot: firestore.DocumentSnapshot[Any] = ref.get_document()
        return snapshot
    client = ref._client
    try:
        document = client._firestore_api.get_document(
            request={"name": ref._document_path}, metadata=client._rpc_metadata)
    except gexc.NotFound as error:
        if _NO_DATABASE.match(error.message or ""):
            raise
        return firestore.DocumentSnapshot(ref, None, exists=False, read_time=None,
                                          create_time=None, update_time=None)
    return firestore.DocumentSnapshot(ref, decode_dict(document.fields, client), exists=True,
                                      read_time=None, create_time=document.create_time,
                                      update_time=document.update_time)


# Firestore's answer for a database that is not there: "The database (default) does not exist
# for project ...".
_NO_DATABASE = re.compile(r"^The database \S+ does not exist")


def _set_value(pb: Any, value: Any) -> None:
    if type(value) is int:
        pb.integer_value = value
    elif type(value) is str:
        pb.string_value = value
    else:
        pb.CopyFrom(encode_value(value)._pb)
