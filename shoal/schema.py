"""The frozen Arrow schemas of shoal's three tables: ``metrics``, ``logs``, ``spans``.

These schemas are a published contract (docs/schema.md documents every
column). The same schema, type for type, is what the OTLP decoders produce,
what the in-memory WAL snapshot holds, what the flusher writes to Parquet and
what the Delta log declares: a difference between any two (``timestamp[ns]``
against ``timestamp[us]``, ``string`` against ``string_view``) makes DataFusion
cast above the scan and lose filter pushdown.

Conventions
-----------
* ``timestamp`` is the row's time as ``timestamp[us, tz=UTC]`` (Delta's
  timestamp type); the exact OTLP nanoseconds are kept in ``*_unix_nano``
  int64 columns.
* OTLP unsigned integers (fixed64 counts, uint32 flags and dropped counts) are
  stored as int64: Delta and Spark have no unsigned types.
* Trace and span ids are lowercase hex strings (32 and 16 characters); an
  absent id is null.
* Attributes are ``map<string, string>``: string values as they are, other
  values rendered as text (see ``shoal.otlp.anyvalue``), with a companion
  ``*_types`` map that holds a type tag for every non-string entry, so the
  pair round-trips losslessly while ``attributes['http.method']`` stays plain SQL.
* No tenant column: tables are per tenant.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

UTC_US = pa.timestamp("us", tz="UTC")
ATTRS = pa.map_(pa.string(), pa.string())


def _attr_fields(prefix: str) -> list[pa.Field]:
    return [
        pa.field(f"{prefix}attributes", ATTRS, nullable=False),
        pa.field(f"{prefix}attributes_types", ATTRS, nullable=False),
    ]


def _resource_scope_fields() -> list[pa.Field]:
    return [
        pa.field("service_name", pa.string()),
        *_attr_fields("resource_"),
        pa.field("resource_dropped_attributes_count", pa.int64(), nullable=False),
        pa.field("resource_schema_url", pa.string()),
        pa.field("scope_name", pa.string()),
        pa.field("scope_version", pa.string()),
        *_attr_fields("scope_"),
        pa.field("scope_dropped_attributes_count", pa.int64(), nullable=False),
        pa.field("scope_schema_url", pa.string()),
    ]


EXEMPLAR = pa.struct(
    [
        pa.field("time_unix_nano", pa.int64(), nullable=False),
        pa.field("value", pa.float64()),
        pa.field("value_int", pa.int64()),
        pa.field("trace_id", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("filtered_attributes", ATTRS, nullable=False),
        pa.field("filtered_attributes_types", ATTRS, nullable=False),
    ]
)

QUANTILE = pa.struct(
    [
        pa.field("quantile", pa.float64(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

METRICS_SCHEMA = pa.schema(
    [
        pa.field("timestamp", UTC_US, nullable=False),
        pa.field("time_unix_nano", pa.int64(), nullable=False),
        pa.field("start_timestamp", UTC_US),
        pa.field("start_time_unix_nano", pa.int64(), nullable=False),
        pa.field("metric_name", pa.string(), nullable=False),
        pa.field("metric_description", pa.string()),
        pa.field("metric_unit", pa.string()),
        # gauge | sum | histogram | exponential_histogram | summary
        pa.field("metric_type", pa.string(), nullable=False),
        # 0 unspecified, 1 delta, 2 cumulative (OTLP AggregationTemporality); null for gauge/summary
        pa.field("aggregation_temporality", pa.int32()),
        pa.field("is_monotonic", pa.bool_()),
        # hash of metric name + point attributes + resource attributes: one series
        pa.field("series_id", pa.int64(), nullable=False),
        *_attr_fields(""),
        # gauge and sum: value as double (ints converted) and the exact int when sent as int
        pa.field("value", pa.float64()),
        pa.field("value_int", pa.int64()),
        # histogram, exponential histogram, summary
        pa.field("count", pa.int64()),
        pa.field("sum", pa.float64()),
        pa.field("min", pa.float64()),
        pa.field("max", pa.float64()),
        pa.field("bucket_counts", pa.list_(pa.int64())),
        pa.field("explicit_bounds", pa.list_(pa.float64())),
        pa.field("exp_scale", pa.int32()),
        pa.field("exp_zero_count", pa.int64()),
        pa.field("exp_zero_threshold", pa.float64()),
        pa.field("exp_positive_offset", pa.int32()),
        pa.field("exp_positive_bucket_counts", pa.list_(pa.int64())),
        pa.field("exp_negative_offset", pa.int32()),
        pa.field("exp_negative_bucket_counts", pa.list_(pa.int64())),
        pa.field("quantile_values", pa.list_(QUANTILE)),
        pa.field("exemplars", pa.list_(EXEMPLAR)),
        pa.field("flags", pa.int64(), nullable=False),
        pa.field("metric_metadata", ATTRS, nullable=False),
        pa.field("metric_metadata_types", ATTRS, nullable=False),
        *_resource_scope_fields(),
    ]
)

LOGS_SCHEMA = pa.schema(
    [
        # time_unix_nano, or observed_time_unix_nano when time is 0 (OTLP spec)
        pa.field("timestamp", UTC_US, nullable=False),
        pa.field("time_unix_nano", pa.int64(), nullable=False),
        pa.field("observed_timestamp", UTC_US),
        pa.field("observed_time_unix_nano", pa.int64(), nullable=False),
        pa.field("severity_number", pa.int32(), nullable=False),
        pa.field("severity_text", pa.string()),
        # text rendering of the body AnyValue; body_type null for strings (see anyvalue)
        pa.field("body", pa.string()),
        pa.field("body_type", pa.string()),
        pa.field("event_name", pa.string()),
        pa.field("trace_id", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("flags", pa.int64(), nullable=False),
        *_attr_fields(""),
        pa.field("dropped_attributes_count", pa.int64(), nullable=False),
        *_resource_scope_fields(),
    ]
)

SPAN_EVENT = pa.struct(
    [
        pa.field("time_unix_nano", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("attributes", ATTRS, nullable=False),
        pa.field("attributes_types", ATTRS, nullable=False),
        pa.field("dropped_attributes_count", pa.int64(), nullable=False),
    ]
)

SPAN_LINK = pa.struct(
    [
        pa.field("trace_id", pa.string()),
        pa.field("span_id", pa.string()),
        pa.field("trace_state", pa.string()),
        pa.field("attributes", ATTRS, nullable=False),
        pa.field("attributes_types", ATTRS, nullable=False),
        pa.field("dropped_attributes_count", pa.int64(), nullable=False),
        pa.field("flags", pa.int64(), nullable=False),
    ]
)

SPANS_SCHEMA = pa.schema(
    [
        # the span's start time
        pa.field("timestamp", UTC_US, nullable=False),
        pa.field("end_timestamp", UTC_US, nullable=False),
        pa.field("start_time_unix_nano", pa.int64(), nullable=False),
        pa.field("end_time_unix_nano", pa.int64(), nullable=False),
        pa.field("duration_ns", pa.int64(), nullable=False),
        pa.field("trace_id", pa.string(), nullable=False),
        pa.field("span_id", pa.string(), nullable=False),
        pa.field("parent_span_id", pa.string()),
        pa.field("trace_state", pa.string()),
        pa.field("flags", pa.int64(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        # OTLP SpanKind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer
        pa.field("kind", pa.int32(), nullable=False),
        # OTLP StatusCode: 0 unset, 1 ok, 2 error
        pa.field("status_code", pa.int32(), nullable=False),
        pa.field("status_message", pa.string()),
        *_attr_fields(""),
        pa.field("dropped_attributes_count", pa.int64(), nullable=False),
        pa.field("events", pa.list_(SPAN_EVENT), nullable=False),
        pa.field("dropped_events_count", pa.int64(), nullable=False),
        pa.field("links", pa.list_(SPAN_LINK), nullable=False),
        pa.field("dropped_links_count", pa.int64(), nullable=False),
        *_resource_scope_fields(),
    ]
)


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """What the storage layer needs to know about a time-series table.

    ``sort_columns`` order rows inside a Parquet file (series first, then
    time); ``series_columns`` identify a series for per-series coverage.
    ``index_columns`` describe a series in the series index (taken from its
    earliest row, by ``index_time_column``); a table without them has no index.
    """

    name: str
    schema: pa.Schema
    time_column: str = "timestamp"
    sort_columns: tuple[str, ...] = ("timestamp",)
    series_columns: tuple[str, ...] = ()
    index_columns: tuple[str, ...] = ()
    index_time_column: str = "time_unix_nano"
    label_columns: tuple[str, ...] = ()
    """Columns the series key is a hash of, so the same in every row of a series (SQL
    aggregates by them per series first: :mod:`shoal.sql.series_first`)."""
    lookup_column: str | None = None
    """A column whose values each file keeps a filter of, so that the files holding one
    value are found without reading them (the spans' ``trace_id``)."""
    row_group_rows: int | None = None
    """Rows per Parquet row group (None: storage's default)."""


METRICS = TableSpec(
    name="metrics",
    schema=METRICS_SCHEMA,
    sort_columns=("metric_name", "series_id", "timestamp"),
    series_columns=("series_id",),
    index_columns=(
        "metric_name",
        "metric_type",
        "metric_unit",
        "metric_description",
        "is_monotonic",
        "aggregation_temporality",
        "scope_name",
        "service_name",
        "attributes",
        "resource_attributes",
        "explicit_bounds",
        "quantile_values",
    ),
    label_columns=("metric_name", "attributes", "resource_attributes"),
)
LOGS = TableSpec(
    name="logs",
    schema=LOGS_SCHEMA,
    sort_columns=("service_name", "timestamp"),
    series_columns=("service_name",),
)
SPANS = TableSpec(
    name="spans",
    schema=SPANS_SCHEMA,
    # a trace's spans side by side, so that the row groups' trace_id statistics point at
    # the few rows of one trace (docs/rationale.md, "Finding a trace")
    sort_columns=("trace_id", "timestamp"),
    series_columns=("service_name",),
    lookup_column="trace_id",
    row_group_rows=2048,
)

SIGNAL_TABLES: dict[str, TableSpec] = {spec.name: spec for spec in (METRICS, LOGS, SPANS)}


REMOTE_WRITE_SCOPE = "prometheus.remote_write"
"""The ``scope_name`` of rows that came by Prometheus remote write: the PromQL view keeps
their metric names and labels as written."""

LOKI_PUSH_SCOPE = "loki.push"
"""The ``scope_name`` of ``logs`` rows that came by Loki's push API: their
``resource_attributes`` are the stream's labels and their ``attributes`` its structured
metadata, which LogQL reads back as they were pushed."""
