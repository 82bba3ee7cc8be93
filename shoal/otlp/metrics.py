"""``ExportMetricsServiceRequest`` (as ptars' nested struct) to rows of ``METRICS_SCHEMA``.

One row per data point. The five metric types are flattened separately (each
has its own point struct); rows come grouped by type (gauges, sums, histograms,
exponential histograms, summaries), each group in request order.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.otlp import attributes, exemplars
from shoal.otlp.columns import (
    BOOL,
    I64,
    U64,
    Broadcast,
    as_int64,
    flatten,
    fmix64,
    hash_text,
    list_offsets,
    nulls,
    over_int64,
    timestamps,
    u32_as_int64,
    u64,
)
from shoal.otlp.common import (
    DecodeResult,
    Rejections,
    scopes,
    text_or_null,
)
from shoal.schema import METRICS_SCHEMA

TYPES = ("gauge", "sum", "histogram", "exponential_histogram", "summary")
_POINT_SALT = np.uint64(0x5BD1E9955BD1E995)
_RESOURCE_SALT = np.uint64(0x27D4EB2F165667C5)
_I64_LIST = pa.list_(pa.int64())


def series_ids(name_hash: U64, point_hash: U64, resource_hash: U64) -> pa.Array:
    """``series_id`` from the per-row hashes of name, point attributes, resource attributes."""
    point = fmix64(point_hash ^ _POINT_SALT)
    resource = fmix64(resource_hash ^ _RESOURCE_SALT)
    mixed = fmix64(name_hash ^ point ^ resource)
    return pa.array(mixed.view(np.int64))


def _counts_list(lists: pa.Array) -> tuple[pa.Array, BOOL]:
    """A list<uint64> column as list<int64>, and which rows hold a value beyond int64."""
    offsets = list_offsets(lists)
    values = u64(lists.flatten())
    over = over_int64(values)
    bad_rows = np.zeros(len(lists), dtype=np.bool_)
    if over.any():
        owner = np.searchsorted(offsets, np.nonzero(over)[0], side="right") - 1
        bad_rows[owner] = True
    out = pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), as_int64(values), type=_I64_LIST
    )
    return out, bad_rows


def _point_columns(kind: str, points: pa.Array, rej: Rejections, keep: BOOL) -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {}
    if kind == "number":
        as_double = points.field("as_double")
        as_int = points.field("as_int")
        n = len(points)
        if as_int.null_count == n:
            value = as_double
        elif as_double.null_count == n:
            value = pc.cast(as_int, pa.float64(), safe=False)
        else:
            value = pc.coalesce(as_double, pc.cast(as_int, pa.float64(), safe=False))
        if value.null_count:
            rej.mask("number data point has no value", value.is_null().to_numpy(False), keep)
        cols["value"] = value
        cols["value_int"] = as_int
    else:
        count = u64(points.field("count"))
        rej.mask("count beyond int64", over_int64(count), keep)
        cols["count"] = as_int64(count)
        cols["sum"] = points.field("sum")
        if kind != "summary":
            cols["min"] = points.field("min")
            cols["max"] = points.field("max")
    if kind == "histogram":
        buckets, over = _counts_list(points.field("bucket_counts"))
        rej.mask("bucket count beyond int64", over, keep)
        bounds = points.field("explicit_bounds")
        n_buckets = pc.list_value_length(buckets).to_numpy(zero_copy_only=False)
        n_bounds = pc.list_value_length(bounds).to_numpy(zero_copy_only=False)
        mismatch = (n_buckets != 0) & (n_buckets != n_bounds + 1)
        rej.mask("histogram bucket_counts length is not len(explicit_bounds) + 1", mismatch, keep)
        cols["bucket_counts"] = buckets
        cols["explicit_bounds"] = bounds
    elif kind == "exponential_histogram":
        zero = u64(points.field("zero_count"))
        rej.mask("count beyond int64", over_int64(zero), keep)
        cols["exp_scale"] = points.field("scale")
        cols["exp_zero_count"] = as_int64(zero)
        cols["exp_zero_threshold"] = points.field("zero_threshold")
        for side in ("positive", "negative"):
            buckets = points.field(side)
            counts, over = _counts_list(buckets.field("bucket_counts"))
            rej.mask("bucket count beyond int64", over, keep)
            cols[f"exp_{side}_offset"] = buckets.field("offset").fill_null(0)
            cols[f"exp_{side}_bucket_counts"] = counts
    elif kind == "summary":
        quantiles = points.field("quantile_values")
        cols["quantile_values"] = pa.ListArray.from_arrays(
            pa.array(list_offsets(quantiles).astype(np.int32)),
            quantiles.flatten(),
            type=METRICS_SCHEMA.field("quantile_values").type,
        )
    if kind != "summary":
        cols["exemplars"] = exemplars.decode_lists(points.field("exemplars"))
    return cols


# gauges and sums share NumberDataPoint, so they are flattened together
_GROUPS = (
    ("number", ("gauge", "sum")),
    ("histogram", ("histogram",)),
    ("exponential_histogram", ("exponential_histogram",)),
    ("summary", ("summary",)),
)
_WITH_TEMPORALITY = ("sum", "histogram", "exponential_histogram")
_ALL = slice(None)


def _metric_level(metrics: pa.Array, metadata: attributes.Attributes) -> tuple[Broadcast, BOOL]:
    """Per-metric columns, and which metrics have a data field at all."""
    n = len(metrics)
    kinds = np.full(n, None, dtype=object)
    temporality = np.zeros(n, dtype=np.int32)
    has_temporality = np.zeros(n, dtype=np.bool_)
    present = np.zeros(n, dtype=np.bool_)
    is_sum: BOOL | None = None
    for kind in TYPES:
        container = metrics.field(kind)
        if container.null_count == n:
            continue
        valid: BOOL | slice
        if container.null_count == 0:
            valid = _ALL
        else:
            valid = container.is_valid().to_numpy(zero_copy_only=False)
        if kind == "sum":
            is_sum = np.ones(n, dtype=np.bool_) if isinstance(valid, slice) else valid
        kinds[valid] = kind
        present[valid] = True
        if kind in _WITH_TEMPORALITY:
            values = container.field("aggregation_temporality")
            if values.null_count:
                values = values.fill_null(0)
            temporality[valid] = values.to_numpy(zero_copy_only=False)[valid]
            has_temporality[valid] = True
    if is_sum is None:
        monotonic = nulls(n, pa.bool_())
    else:
        flag = metrics.field("sum").field("is_monotonic")
        if flag.null_count:
            flag = flag.fill_null(False)
        monotonic = pa.array(flag.to_numpy(zero_copy_only=False), mask=~is_sum)
    table = Broadcast(
        {
            "metric_name": metrics.field("name"),
            "metric_description": text_or_null(metrics.field("description")),
            "metric_unit": text_or_null(metrics.field("unit")),
            "metric_type": pa.array(kinds, pa.string()),
            "aggregation_temporality": pa.array(temporality, mask=~has_temporality),
            "is_monotonic": monotonic,
            "metric_metadata": metadata.values,
            "metric_metadata_types": metadata.types,
        }
    )
    return table, present


@functools.lru_cache(maxsize=65536)
def _cached_name_hash(name: str) -> int:
    return hash_text(name)


def _name_hash(name: str) -> int:
    # metric names repeat; a long one (names are not length-limited) is not kept
    return _cached_name_hash(name) if len(name) <= 256 else hash_text(name)


class _Concatenated:
    """Point structs of several metric types (gauge and sum), concatenated field by field.

    Concatenating the struct arrays themselves copies every child, exemplars
    and all; only the fields that are read are concatenated here.
    """

    def __init__(self, pieces: list[pa.Array]) -> None:
        self._pieces = pieces
        self._length = sum(len(p) for p in pieces)

    def __len__(self) -> int:
        return self._length

    def field(self, name: str) -> pa.Array:
        return pa.concat_arrays([p.field(name) for p in self._pieces])


def decode(request: pa.StructArray) -> DecodeResult:
    """Rows of ``METRICS_SCHEMA`` from the decoded request struct."""
    sc = scopes(request, "resource_metrics", "scope_metrics")
    metrics, metric_scope = flatten(sc.items.field("metrics"))
    rej = Rejections()
    names = metrics.field("name")
    name_hash = np.array([_name_hash(s) for s in names.to_pylist()], dtype=np.uint64)
    nameless = pc.equal(names, "").to_numpy(zero_copy_only=False)
    metadata = attributes.decode_lists(metrics.field("metadata"), "metric metadata")
    per_metric, present = _metric_level(metrics, metadata)
    rej.add("metric has no data field (gauge, sum, histogram, ...)", int((~present).sum()), False)
    tables: list[pa.Table] = []
    owners: list[I64] = []
    hashes: list[U64] = []
    for group, kinds in _GROUPS:
        pieces: list[pa.Array] = []
        piece_owners: list[I64] = []
        for kind in kinds:
            container = metrics.field(kind)
            if container.null_count == len(container):
                continue
            # an absent container decodes as a null struct over an empty list, so
            # flattening the whole column yields exactly the present points
            points, owner_of_point = flatten(container.field("data_points"))
            if container.null_count and len(points):
                valid = container.is_valid().to_numpy(zero_copy_only=False)
                if not valid[owner_of_point].all():  # not expected from ptars; be safe
                    lists = container.field("data_points")
                    lists = pc.if_else(valid, lists, pa.scalar([], lists.type))
                    points, owner_of_point = flatten(lists)
            if len(points):
                pieces.append(points)
                piece_owners.append(owner_of_point)
        if not pieces:
            continue
        points = pieces[0] if len(pieces) == 1 else _Concatenated(pieces)
        owner = piece_owners[0] if len(pieces) == 1 else np.concatenate(piece_owners)
        keep = np.ones(len(points), dtype=np.bool_)
        rej.mask("metric name is empty", nameless[owner], keep)
        cols = _point_columns(group, points, rej, keep)
        point_hash = _common_point_columns(points, rej, keep, cols)
        table = pa.table(cols)
        if not keep.all():
            table = table.filter(pa.array(keep))
            owner, point_hash = owner[keep], point_hash[keep]
        tables.append(table)
        owners.append(owner)
        hashes.append(point_hash)
    if not tables:
        return DecodeResult(METRICS_SCHEMA.empty_table(), 0, rej.total, rej.messages())
    points_table = (
        tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
    )
    owner = owners[0] if len(owners) == 1 else np.concatenate(owners)
    scope_idx = metric_scope[owner]
    series = series_ids(name_hash[owner], np.concatenate(hashes), sc.resource_hash[scope_idx])
    metric_columns = per_metric.take(owner)
    by_scope = sc.take(scope_idx)
    n = len(owner)
    columns = []
    point_columns = dict(zip(points_table.column_names, points_table.columns, strict=True))
    for f in METRICS_SCHEMA:
        if f.name == "series_id":
            columns.append(series)
        elif f.name in metric_columns:
            columns.append(metric_columns[f.name])
        elif f.name in by_scope:
            columns.append(by_scope[f.name])
        elif f.name in point_columns:
            column = point_columns[f.name]
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            columns.append(nulls(n, f.type))
    rows = pa.Table.from_arrays(columns, schema=METRICS_SCHEMA)
    if len(tables) > 1:
        rows = rows.combine_chunks()  # one record batch per request
    return DecodeResult(rows, rows.num_rows, rej.total, rej.messages())


def _common_point_columns(
    points: pa.Array, rej: Rejections, keep: BOOL, cols: dict[str, pa.Array]
) -> U64:
    time = u64(points.field("time_unix_nano"))
    start = u64(points.field("start_time_unix_nano"))
    rej.mask("data point time_unix_nano is 0", time == 0, keep)
    rej.mask("time beyond year 2262", over_int64(time) | over_int64(start), keep)
    time_i = np.where(over_int64(time), 0, time).astype(np.int64)
    start_i = np.where(over_int64(start), 0, start).astype(np.int64)
    attrs = attributes.decode_lists(points.field("attributes"), "data point attributes")
    cols["timestamp"] = timestamps(time_i)
    cols["time_unix_nano"] = pa.array(time_i)
    cols["start_timestamp"] = timestamps(start_i, start_i != 0)
    cols["start_time_unix_nano"] = pa.array(start_i)
    cols["attributes"] = attrs.values
    cols["attributes_types"] = attrs.types
    cols["flags"] = u32_as_int64(points.field("flags"))
    return attrs.set_hash
