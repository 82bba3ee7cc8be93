"""``ExportTraceServiceRequest`` (as ptars' nested struct) to rows of ``SPANS_SCHEMA``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.otlp import attributes
from shoal.otlp.common import scoped_items, text_or_null
from shoal.rows.columns import (
    BOOL,
    I64,
    as_int64,
    hex_ids,
    list_offsets,
    over_int64,
    owned,
    timestamps,
    u32_as_int64,
    u64,
)
from shoal.rows.result import DecodeResult, Rejections
from shoal.schema import SPAN_EVENT, SPAN_LINK, SPANS_SCHEMA


def _owner_bad(bad: BOOL, offsets: I64, n: int) -> BOOL:
    """Per parent row: whether any of its children is ``bad``."""
    out = np.zeros(n, dtype=np.bool_)
    if bad.any():
        out[np.searchsorted(offsets, np.nonzero(bad)[0], side="right") - 1] = True
    return out


def _events(lists: pa.Array) -> tuple[pa.Array, BOOL]:
    offsets = list_offsets(lists)
    events = lists.flatten()
    time = u64(events.field("time_unix_nano"))
    attrs = attributes.decode_lists(events.field("attributes"), "span event attributes")
    structs = pa.StructArray.from_arrays(
        [
            as_int64(time),
            text_or_null(events.field("name")),
            attrs.values,
            attrs.types,
            u32_as_int64(events.field("dropped_attributes_count")),
        ],
        fields=list(SPAN_EVENT),
    )
    out = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), structs, type=pa.list_(SPAN_EVENT)
    )
    return out, _owner_bad(over_int64(time), offsets, len(lists))


def _links(lists: pa.Array) -> tuple[pa.Array, BOOL]:
    offsets = list_offsets(lists)
    links = lists.flatten()
    trace_id, bad_trace = hex_ids(links.field("trace_id"), 16)
    span_id, bad_span = hex_ids(links.field("span_id"), 8)
    attrs = attributes.decode_lists(links.field("attributes"), "span link attributes")
    structs = pa.StructArray.from_arrays(
        [
            trace_id,
            span_id,
            text_or_null(links.field("trace_state")),
            attrs.values,
            attrs.types,
            u32_as_int64(links.field("dropped_attributes_count")),
            u32_as_int64(links.field("flags")),
        ],
        fields=list(SPAN_LINK),
    )
    out = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), structs, type=pa.list_(SPAN_LINK)
    )
    return out, _owner_bad(bad_trace | bad_span, offsets, len(lists))


def decode(request: pa.StructArray) -> DecodeResult:
    """Rows of ``SPANS_SCHEMA`` from the decoded request struct."""
    sc, spans, scope_idx = scoped_items(request, "spans", "spans")
    rej = Rejections()
    keep: BOOL = np.ones(len(spans), dtype=np.bool_)
    trace_id, bad_trace = hex_ids(spans.field("trace_id"), 16)
    span_id, bad_span = hex_ids(spans.field("span_id"), 8)
    parent, bad_parent = hex_ids(spans.field("parent_span_id"), 8)
    rej.mask(
        "trace_id is not a valid 16-byte id", bad_trace | trace_id.is_null().to_numpy(False), keep
    )
    rej.mask("span_id is not a valid 8-byte id", bad_span | span_id.is_null().to_numpy(False), keep)
    rej.mask("parent_span_id is not 8 bytes", bad_parent, keep)
    start = u64(spans.field("start_time_unix_nano"))
    end = u64(spans.field("end_time_unix_nano"))
    rej.mask("time beyond year 2262", over_int64(start) | over_int64(end), keep)
    rej.mask("span start_time_unix_nano is 0", start == 0, keep)
    rej.mask("span ends before it starts", end < start, keep)
    events, bad_events = _events(spans.field("events"))
    rej.mask("span event time beyond year 2262", bad_events, keep)
    links, bad_links = _links(spans.field("links"))
    rej.mask("span link has an invalid trace_id or span_id", bad_links, keep)
    start_i = np.where(over_int64(start), 0, start).astype(np.int64)
    end_i = np.where(over_int64(end), 0, end).astype(np.int64)
    status = spans.field("status")
    status_valid = status.is_valid()
    null_str = pa.scalar(None, pa.string())
    attrs = attributes.decode_lists(spans.field("attributes"), "span attributes")
    columns: dict[str, pa.Array] = {
        "timestamp": timestamps(start_i),
        "end_timestamp": timestamps(end_i),
        "start_time_unix_nano": pa.array(start_i),
        "end_time_unix_nano": pa.array(end_i),
        "duration_ns": pa.array(end_i - start_i),
        "trace_id": trace_id.fill_null(""),
        "span_id": span_id.fill_null(""),
        "parent_span_id": parent,
        "trace_state": text_or_null(spans.field("trace_state")),
        "flags": u32_as_int64(spans.field("flags")),
        "name": owned(spans.field("name")),
        "kind": owned(spans.field("kind")),
        "status_code": pc.if_else(status_valid, status.field("code"), 0).cast(pa.int32()),
        "status_message": pc.if_else(
            status_valid, text_or_null(status.field("message").fill_null("")), null_str
        ),
        "attributes": attrs.values,
        "attributes_types": attrs.types,
        "dropped_attributes_count": u32_as_int64(spans.field("dropped_attributes_count")),
        "events": events,
        "dropped_events_count": u32_as_int64(spans.field("dropped_events_count")),
        "links": links,
        "dropped_links_count": u32_as_int64(spans.field("dropped_links_count")),
        **sc.take(scope_idx),
    }
    return rej.result(columns, SPANS_SCHEMA, keep)
