"""``ExportMetricsServiceRequest`` (as ptars' nested struct) to rows of ``METRICS_SCHEMA``.

One row per data point. The five metric types are flattened separately (each
has its own point struct); rows come grouped by type (gauges, sums, histograms,
exponential histograms, summaries), each group in request order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.otlp import attributes, exemplars
from shoal.otlp.columns import (
    BOOL,
    I64,
    U64,
    as_int64,
    flatten,
    fmix64,
    hash_text,
    list_offsets,
    over_int64,
    timestamps,
    u64,
)
from shoal.otlp.common import (
    RESOURCE_SCOPE_COLUMNS,
    DecodeResult,
    Rejections,
    Scopes,
    scopes,
    text_or_null,
)
from shoal.otlp.schema import METRICS_SCHEMA

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


def _point_columns(
    kind: str, container: pa.Array, points: pa.Array, owner: I64, rej: Rejections, keep: BOOL
) -> dict[str, pa.Array]:
    cols: dict[str, pa.Array] = {}
    if kind in ("gauge", "sum"):
        as_double = points.field("as_double")
        as_int = points.field("as_int")
        no_value = pc.and_(as_double.is_null(), as_int.is_null()).to_numpy(zero_copy_only=False)
        rej.mask("number data point has no value", no_value, keep)
        cols["value"] = pc.coalesce(as_double, pc.cast(as_int, pa.float64()))
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
    if kind in ("sum", "histogram", "exponential_histogram"):
        temporality = container.field("aggregation_temporality")
        cols["aggregation_temporality"] = temporality.take(pa.array(owner))
    if kind == "sum":
        cols["is_monotonic"] = container.field("is_monotonic").take(pa.array(owner))
    if kind != "summary":
        cols["exemplars"] = exemplars.decode_lists(points.field("exemplars"))
    return cols


@dataclasses.dataclass
class _Part:
    """The points of one metric type: owning metric index, columns, which to keep."""

    owner: I64
    columns: dict[str, pa.Array]
    keep: BOOL
    point_hash: U64


def decode(request: pa.StructArray) -> DecodeResult:
    """Rows of ``METRICS_SCHEMA`` from the decoded request struct."""
    sc = scopes(request, "resource_metrics", "scope_metrics")
    metrics, metric_scope = flatten(sc.items.field("metrics"))
    rej = Rejections()
    names = metrics.field("name")
    name_hash = np.array([hash_text(s) for s in names.to_pylist()], dtype=np.uint64)
    nameless = (pc.equal(names, "")).to_numpy(zero_copy_only=False)
    metadata = attributes.decode_lists(metrics.field("metadata"), "metric metadata")
    present = np.zeros(len(metrics), dtype=np.bool_)
    parts: list[_Part] = []
    for kind in TYPES:
        container = metrics.field(kind)
        valid = container.is_valid().to_numpy(zero_copy_only=False)
        if not valid.any():
            continue
        present |= valid
        chosen = np.nonzero(valid)[0]
        sub = container.take(pa.array(chosen))
        points, local_owner = flatten(sub.field("data_points"))
        if len(points) == 0:
            continue
        owner = chosen[local_owner]
        keep = np.ones(len(points), dtype=np.bool_)
        rej.mask("metric name is empty", nameless[owner], keep)
        cols = _point_columns(kind, sub, points, local_owner, rej, keep)
        cols["metric_type"] = pa.array([kind] * len(points), pa.string())
        point_hash = _common_point_columns(points, rej, keep, cols)
        parts.append(_Part(owner, cols, keep, point_hash))
    rej.add("metric has no data field (gauge, sum, histogram, ...)", int((~present).sum()), False)
    rows = _assemble(parts, metrics, metric_scope, name_hash, metadata, sc)
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
    cols["flags"] = as_int64(u64(points.field("flags")))
    return attrs.set_hash


_METRIC_LEVEL = frozenset(
    {
        "metric_name",
        "metric_description",
        "metric_unit",
        "metric_metadata",
        "metric_metadata_types",
        "series_id",
        *RESOURCE_SCOPE_COLUMNS,
    }
)
_POINT_LEVEL = tuple(f for f in METRICS_SCHEMA if f.name not in _METRIC_LEVEL)


def _assemble(
    parts: list[_Part],
    metrics: pa.Array,
    metric_scope: I64,
    name_hash: U64,
    metadata: attributes.Attributes,
    sc: Scopes,
) -> pa.Table:
    if not parts:
        return METRICS_SCHEMA.empty_table()
    owners: list[I64] = []
    hashes: list[U64] = []
    chunks: dict[str, list[pa.Array]] = {f.name: [] for f in _POINT_LEVEL}
    for part in parts:
        sel = np.nonzero(part.keep)[0]
        idx = pa.array(sel, type=pa.int64())
        whole = len(sel) == len(part.keep)
        owners.append(part.owner[sel])
        hashes.append(part.point_hash[sel])
        for f in _POINT_LEVEL:
            arr = part.columns.get(f.name)
            if arr is None:
                chunks[f.name].append(pa.nulls(len(sel), f.type))
            else:
                chunks[f.name].append(arr if whole else arr.take(idx))
    owner = np.concatenate(owners)
    point_hash = np.concatenate(hashes)
    columns: dict[str, pa.Array] = {}
    for f in _POINT_LEVEL:
        parts_f = [c if c.type == f.type else c.cast(f.type) for c in chunks[f.name]]
        columns[f.name] = parts_f[0] if len(parts_f) == 1 else pa.concat_arrays(parts_f)
    scope_idx = metric_scope[owner]
    o = pa.array(owner, type=pa.int64())
    columns.update(sc.take(scope_idx))
    columns["metric_name"] = metrics.field("name").take(o)
    columns["metric_description"] = text_or_null(metrics.field("description")).take(o)
    columns["metric_unit"] = text_or_null(metrics.field("unit")).take(o)
    columns["metric_metadata"] = metadata.values.take(o)
    columns["metric_metadata_types"] = metadata.types.take(o)
    columns["series_id"] = series_ids(name_hash[owner], point_hash, sc.resource_hash[scope_idx])
    return pa.Table.from_arrays([columns[f.name] for f in METRICS_SCHEMA], schema=METRICS_SCHEMA)
