"""Serialized OTLP ``Exemplar`` lists to the ``exemplars`` column.

Exemplars are rare next to data points, so each one is decoded with upb in
Python; a batch without any costs one length check.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.metrics.v1.metrics_pb2 import Exemplar

from shoal.errors import DecodeError
from shoal.otlp import anyvalue
from shoal.rows.columns import INT64_MAX, empty_lists, list_offsets
from shoal.schema import EXEMPLAR

EXEMPLARS = pa.list_(EXEMPLAR)


def _id(raw: bytes, size: int, what: str) -> str | None:
    if not raw or not any(raw):
        return None
    if len(raw) != size:
        raise ValueError(f"exemplar {what} is {len(raw)} bytes, expected {size}")
    return raw.hex()


def _row(raw: bytes) -> dict[str, Any]:
    try:
        ex = Exemplar.FromString(raw)
    except (ProtoDecodeError, RuntimeError) as exc:
        raise DecodeError(f"malformed exemplar: {exc}") from None
    if ex.time_unix_nano > INT64_MAX:
        raise DecodeError("exemplar time_unix_nano beyond year 2262")
    kind = ex.WhichOneof("value")
    attrs: dict[str, str] = {}
    types: dict[str, str] = {}
    for kv in ex.filtered_attributes:
        text, type_tag = anyvalue.encode(kv.value)
        attrs[kv.key] = text
        if type_tag is not None:
            types[kv.key] = type_tag
    try:
        trace_id = _id(ex.trace_id, 16, "trace_id")
        span_id = _id(ex.span_id, 8, "span_id")
    except ValueError as exc:
        raise DecodeError(str(exc)) from None
    return {
        "time_unix_nano": ex.time_unix_nano,
        "value": ex.as_double
        if kind == "as_double"
        else (float(ex.as_int) if kind == "as_int" else None),
        "value_int": ex.as_int if kind == "as_int" else None,
        "trace_id": trace_id,
        "span_id": span_id,
        "filtered_attributes": list(attrs.items()),
        "filtered_attributes_types": list(types.items()),
    }


def decode_lists(lists: pa.Array) -> pa.Array:
    """A ``list<binary>`` column of serialized exemplars as ``list<EXEMPLAR>``."""
    flat = lists.flatten()
    if len(flat) == 0:
        return empty_lists(len(lists), EXEMPLARS)
    offsets = list_offsets(lists)
    values = pa.array([_row(raw) for raw in flat.to_pylist()], EXEMPLAR)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, type=EXEMPLARS)
