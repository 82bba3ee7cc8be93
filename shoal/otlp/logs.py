"""``ExportLogsServiceRequest`` (as ptars' nested struct) to rows of ``LOGS_SCHEMA``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValueList

from shoal.errors import DecodeError
from shoal.otlp import anyvalue, attributes
from shoal.otlp.common import scoped_items, text_or_null
from shoal.rows.columns import (
    BOOL,
    hex_ids,
    over_int64,
    owned,
    timestamps,
    u32_as_int64,
    u64,
)
from shoal.rows.result import DecodeResult, Rejections
from shoal.schema import LOGS_SCHEMA


def _any_value(row: dict[str, object]) -> AnyValue:
    """Rebuild an ``AnyValue`` from ptars' struct of its oneof fields."""
    if row["bool_value"] is not None:
        return AnyValue(bool_value=bool(row["bool_value"]))
    if row["int_value"] is not None:
        return AnyValue(int_value=int(row["int_value"]))  # type: ignore[call-overload]
    if row["double_value"] is not None:
        return AnyValue(double_value=float(row["double_value"]))  # type: ignore[arg-type]
    if row["bytes_value"] is not None:
        return AnyValue(bytes_value=bytes(row["bytes_value"]))  # type: ignore[call-overload]
    if row["array_value"] is not None:
        return AnyValue(array_value=ArrayValue.FromString(row["array_value"]))  # type: ignore[arg-type]
    if row["kvlist_value"] is not None:
        return AnyValue(kvlist_value=KeyValueList.FromString(row["kvlist_value"]))  # type: ignore[arg-type]
    return AnyValue()


def bodies(body: pa.StructArray) -> tuple[pa.Array, pa.Array]:
    """``(body, body_type)`` columns from a struct of ``AnyValue`` fields (null = absent)."""
    n = len(body)
    present = body.is_valid()
    strings = body.field("string_value")
    other = pc.and_(present, strings.is_null()).to_numpy(zero_copy_only=False)
    text = pc.if_else(present, strings, pa.scalar(None, pa.string()))
    if not other.any():
        return text, pa.nulls(n, pa.string())
    rows = np.nonzero(other)[0]
    texts: list[str | None] = text.to_pylist()
    types: list[str | None] = [None] * n
    for i, row in zip(rows, body.take(pa.array(rows)).to_pylist(), strict=True):
        try:
            value = _any_value(row)
        except (ProtoDecodeError, RuntimeError) as exc:
            raise DecodeError(f"log record body: malformed array or kvlist value: {exc}") from None
        texts[i], types[i] = anyvalue.encode(value)
    return pa.array(texts, pa.string()), pa.array(types, pa.string())


def decode(request: pa.StructArray) -> DecodeResult:
    """Rows of ``LOGS_SCHEMA`` from the decoded request struct."""
    sc, records, scope_idx = scoped_items(request, "logs", "log_records")
    rej = Rejections()
    keep: BOOL = np.ones(len(records), dtype=np.bool_)
    time = u64(records.field("time_unix_nano"))
    observed = u64(records.field("observed_time_unix_nano"))
    rej.mask("time beyond year 2262", over_int64(time) | over_int64(observed), keep)
    rej.mask(
        "log record has neither time_unix_nano nor observed_time_unix_nano",
        (time == 0) & (observed == 0),
        keep,
    )
    trace_id, bad_trace = hex_ids(records.field("trace_id"), 16)
    span_id, bad_span = hex_ids(records.field("span_id"), 8)
    rej.mask("trace_id is not 16 bytes", bad_trace, keep)
    rej.mask("span_id is not 8 bytes", bad_span, keep)
    time_i = np.where(over_int64(time), 0, time).astype(np.int64)
    observed_i = np.where(over_int64(observed), 0, observed).astype(np.int64)
    body, body_type = bodies(records.field("body"))
    attrs = attributes.decode_lists(records.field("attributes"), "log record attributes")
    columns: dict[str, pa.Array] = {
        "timestamp": timestamps(np.where(time_i != 0, time_i, observed_i)),
        "time_unix_nano": pa.array(time_i),
        "observed_timestamp": timestamps(observed_i, observed_i != 0),
        "observed_time_unix_nano": pa.array(observed_i),
        "severity_number": owned(records.field("severity_number")),
        "severity_text": text_or_null(records.field("severity_text")),
        "body": body,
        "body_type": body_type,
        "event_name": text_or_null(records.field("event_name")),
        "trace_id": trace_id,
        "span_id": span_id,
        "flags": u32_as_int64(records.field("flags")),
        "attributes": attrs.values,
        "attributes_types": attrs.types,
        "dropped_attributes_count": u32_as_int64(records.field("dropped_attributes_count")),
        **sc.take(scope_idx),
    }
    return rej.result(columns, LOGS_SCHEMA, keep)
