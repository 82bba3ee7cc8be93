"""Rows of ``SPANS_SCHEMA`` back to OTLP's ``TracesData``: the inverse of :mod:`shoal.otlp.spans`.

Every stored column maps back to the field it came from: ids from lowercase hex to
bytes, the nanosecond times, kinds, flags and dropped counts as they were, attribute
maps through :func:`shoal.otlp.anyvalue.decode` with their type maps (so an int stays
an int, a double keeps its value), events, links and the status. Spans are grouped by
resource (its attributes, dropped count and schema URL) and, within it, by scope (name,
version, attributes, dropped count, schema URL), in the order each first appears in the
rows, as OTLP groups them. A proto3 string has no presence: a null string is the empty
string, as the decoder stored the empty string as null.

Building the messages is a loop over the spans of the answer (one trace, a few thousand
spans at most); the columns are converted to Python lists once, column by column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, TracesData

from shoal.otlp import anyvalue
from shoal.otlp.common import RESOURCE_COLUMNS, SCOPE_COLUMNS

RESOURCE_KEY = RESOURCE_COLUMNS
SCOPE_KEY = SCOPE_COLUMNS
SPAN_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "trace_state",
    "flags",
    "name",
    "kind",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "attributes",
    "attributes_types",
    "dropped_attributes_count",
    "events",
    "dropped_events_count",
    "links",
    "dropped_links_count",
    "status_code",
    "status_message",
)
COLUMNS = (*SPAN_COLUMNS, *RESOURCE_KEY, *SCOPE_KEY)
"""The columns :func:`encode` reads (a subset of ``SPANS_SCHEMA``)."""

Pairs = Sequence[tuple[str, str]] | None


def _types(types: Pairs) -> dict[str, list[str]]:
    """Each key's type tags in order (a list: a key may repeat in OTLP's lists)."""
    out: dict[str, list[str]] = {}
    for key, tag in types or ():
        out.setdefault(key, []).append(tag)
    return out


def keyvalues(entries: Pairs, types: Pairs) -> list[KeyValue]:
    """The ``KeyValue`` list a stored attribute map and its type map stand for."""
    if not entries:
        return []
    tags = _types(types)
    out = []
    for key, text in entries:
        pending = tags.get(key)
        tag = pending.pop(0) if pending else None
        try:
            value = anyvalue.decode(text, tag)
        except ValueError:
            # OTLP's keys are unique within a list; a list that repeats a key keeps one
            # type entry per typed value, and the pairing can fail: the text stands
            value = AnyValue(string_value=text)
        out.append(KeyValue(key=key, value=value))
    return out


def _id(text: str | None) -> bytes:
    return bytes.fromhex(text) if text else b""


def _hashable(entries: Pairs) -> tuple[tuple[str, str], ...]:
    return tuple(entries or ())


def _group_key(row: dict[str, Any], names: Iterable[str]) -> tuple[Any, ...]:
    return tuple(_hashable(row[n]) if isinstance(row[n], list) else row[n] for n in names)


def _span(row: dict[str, Any]) -> Span:
    span = Span(
        trace_id=_id(row["trace_id"]),
        span_id=_id(row["span_id"]),
        parent_span_id=_id(row["parent_span_id"]),
        trace_state=row["trace_state"] or "",
        flags=row["flags"],
        name=row["name"] or "",
        kind=row["kind"],
        start_time_unix_nano=row["start_time_unix_nano"],
        end_time_unix_nano=row["end_time_unix_nano"],
        attributes=keyvalues(row["attributes"], row["attributes_types"]),
        dropped_attributes_count=row["dropped_attributes_count"],
        dropped_events_count=row["dropped_events_count"],
        dropped_links_count=row["dropped_links_count"],
    )
    for event in row["events"] or ():
        span.events.add(
            time_unix_nano=event["time_unix_nano"],
            name=event["name"] or "",
            attributes=keyvalues(event["attributes"], event["attributes_types"]),
            dropped_attributes_count=event["dropped_attributes_count"],
        )
    for link in row["links"] or ():
        span.links.add(
            trace_id=_id(link["trace_id"]),
            span_id=_id(link["span_id"]),
            trace_state=link["trace_state"] or "",
            attributes=keyvalues(link["attributes"], link["attributes_types"]),
            dropped_attributes_count=link["dropped_attributes_count"],
            flags=link["flags"],
        )
    if row["status_code"] or row["status_message"]:
        span.status.code = row["status_code"]
        span.status.message = row["status_message"] or ""
    return span


def encode(rows: pa.Table) -> TracesData:
    """``TracesData`` holding every row of ``rows`` (which has at least :data:`COLUMNS`)."""
    data = TracesData()
    columns = {name: rows.column(name).to_pylist() for name in COLUMNS}
    resources: dict[tuple[Any, ...], ResourceSpans] = {}
    scopes: dict[tuple[Any, ...], ScopeSpans] = {}
    for i in range(rows.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        rkey = _group_key(row, RESOURCE_KEY)
        resource = resources.get(rkey)
        if resource is None:
            resource = resources[rkey] = data.resource_spans.add(
                resource=Resource(
                    attributes=keyvalues(
                        row["resource_attributes"], row["resource_attributes_types"]
                    ),
                    dropped_attributes_count=row["resource_dropped_attributes_count"],
                ),
                schema_url=row["resource_schema_url"] or "",
            )
        skey = (rkey, _group_key(row, SCOPE_KEY))
        scope = scopes.get(skey)
        if scope is None:
            scope = scopes[skey] = resource.scope_spans.add(
                scope=InstrumentationScope(
                    name=row["scope_name"] or "",
                    version=row["scope_version"] or "",
                    attributes=keyvalues(row["scope_attributes"], row["scope_attributes_types"]),
                    dropped_attributes_count=row["scope_dropped_attributes_count"],
                ),
                schema_url=row["scope_schema_url"] or "",
            )
        scope.spans.append(_span(row))
    return data
