"""``ExportMetricsServiceRequest`` (as ptars' nested struct) to rows of ``METRICS_SCHEMA``.

One row per data point. The five metric types are flattened separately (each
has its own point struct); rows come grouped by type (gauges, sums, histograms,
exponential histograms, summaries), each group in request order.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.otlp import attributes, exemplars
from shoal.otlp.common import scoped_items, text_or_null
from shoal.rows.cache import DecodeCache
from shoal.rows.columns import (
    BOOL,
    I64,
    U64,
    Broadcast,
    as_int64,
    flatten,
    hash_text,
    list_offsets,
    nulls,
    over_int64,
    owned,
    series_ids,
    timestamps,
    u32_as_int64,
    u64,
)
from shoal.rows.result import DecodeResult, Rejections
from shoal.schema import METRICS_SCHEMA

TYPES = ("gauge", "sum", "histogram", "exponential_histogram", "summary")
_I64_LIST = pa.list_(pa.int64())


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
            value = owned(as_double)
        elif as_double.null_count == n:
            value = pc.cast(as_int, pa.float64(), safe=False)
        else:
            value = pc.coalesce(as_double, pc.cast(as_int, pa.float64(), safe=False))
        if value.null_count:
            rej.mask("number data point has no value", value.is_null().to_numpy(False), keep)
        cols["value"] = value
        cols["value_int"] = owned(as_int)
    else:
        count = u64(points.field("count"))
        rej.mask("count beyond int64", over_int64(count), keep)
        cols["count"] = as_int64(count)
        cols["sum"] = owned(points.field("sum"))
        if kind != "summary":
            cols["min"] = owned(points.field("min"))
            cols["max"] = owned(points.field("max"))
    if kind == "histogram":
        buckets, over = _counts_list(points.field("bucket_counts"))
        rej.mask("bucket count beyond int64", over, keep)
        bounds = points.field("explicit_bounds")
        n_buckets = pc.list_value_length(buckets).to_numpy(zero_copy_only=False)
        n_bounds = pc.list_value_length(bounds).to_numpy(zero_copy_only=False)
        mismatch = (n_buckets != 0) & (n_buckets != n_bounds + 1)
        rej.mask("histogram bucket_counts length is not len(explicit_bounds) + 1", mismatch, keep)
        cols["bucket_counts"] = buckets
        cols["explicit_bounds"] = owned(bounds)
    elif kind == "exponential_histogram":
        zero = u64(points.field("zero_count"))
        rej.mask("count beyond int64", over_int64(zero), keep)
        cols["exp_scale"] = owned(points.field("scale"))
        cols["exp_zero_count"] = as_int64(zero)
        cols["exp_zero_threshold"] = owned(points.field("zero_threshold"))
        for side in ("positive", "negative"):
            buckets = points.field(side)
            counts, over = _counts_list(buckets.field("bucket_counts"))
            rej.mask("bucket count beyond int64", over, keep)
            cols[f"exp_{side}_offset"] = owned(buckets.field("offset").fill_null(0))
            cols[f"exp_{side}_bucket_counts"] = counts
    elif kind == "summary":
        quantiles = points.field("quantile_values")
        cols["quantile_values"] = pa.ListArray.from_arrays(
            pa.array(list_offsets(quantiles).astype(np.int32)),
            owned(quantiles.flatten()),
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


@dataclasses.dataclass(frozen=True)
class _Kinds:
    """Per metric: its data field (index into TYPES, -1 for none), its temporality
    where it has one, and its monotonicity where it is a sum."""

    code: np.ndarray[Any, np.dtype[np.int8]]
    temporality: np.ndarray[Any, np.dtype[np.int32]]
    has_temporality: BOOL
    monotonic: BOOL
    is_sum: BOOL

    @property
    def present(self) -> BOOL:
        return self.code >= 0

    def key(self) -> bytes:
        parts = (self.code, self.temporality, self.has_temporality, self.monotonic, self.is_sum)
        return b"".join(part.tobytes() for part in parts)


def _kinds(metrics: pa.Array) -> _Kinds:
    n = len(metrics)
    code = np.full(n, -1, dtype=np.int8)
    temporality = np.zeros(n, dtype=np.int32)
    has_temporality = np.zeros(n, dtype=np.bool_)
    is_sum = np.zeros(n, dtype=np.bool_)
    monotonic = np.zeros(n, dtype=np.bool_)
    for i, kind in enumerate(TYPES):
        container = metrics.field(kind)
        if container.null_count == n:
            continue
        valid: BOOL | slice
        if container.null_count == 0:
            valid = _ALL
        else:
            valid = container.is_valid().to_numpy(zero_copy_only=False)
        code[valid] = i
        if kind == "sum":
            is_sum[valid] = True
            flag = container.field("is_monotonic")
            if flag.null_count:
                flag = flag.fill_null(False)
            monotonic = flag.to_numpy(zero_copy_only=False) & is_sum
        if kind in _WITH_TEMPORALITY:
            values = container.field("aggregation_temporality")
            if values.null_count:
                values = values.fill_null(0)
            temporality[valid] = values.to_numpy(zero_copy_only=False)[valid]
            has_temporality[valid] = True
    return _Kinds(code, temporality, has_temporality, monotonic, is_sum)


_KIND_NAMES = pa.array(TYPES, pa.string())


def _metric_level(metrics: pa.Array, kinds: _Kinds, metadata: attributes.Attributes) -> Broadcast:
    """Per-metric columns."""
    n = len(metrics)
    monotonic = (
        pa.array(kinds.monotonic, mask=~kinds.is_sum)
        if kinds.is_sum.any()
        else nulls(n, pa.bool_())
    )
    return Broadcast(
        {
            "metric_name": metrics.field("name"),
            "metric_description": text_or_null(metrics.field("description")),
            "metric_unit": text_or_null(metrics.field("unit")),
            "metric_type": _KIND_NAMES.take(pa.array(kinds.code, mask=~kinds.present)),
            "aggregation_temporality": pa.array(kinds.temporality, mask=~kinds.has_temporality),
            "is_monotonic": monotonic,
            "metric_metadata": metadata.values,
            "metric_metadata_types": metadata.types,
        }
    )


_MetricKey = tuple[tuple[Any, ...], ...]
_metric_blocks: DecodeCache[_MetricKey, Broadcast] = DecodeCache(
    max_bytes=8 << 20, max_entries=4096
)
_metric_rows: DecodeCache[tuple[_MetricKey, bytes], dict[str, pa.Array | pa.ChunkedArray]] = (
    DecodeCache(max_bytes=16 << 20, max_entries=1024)
)
_BLOCK_OVERHEAD = 500
"""Bytes of a cached block besides its Arrow buffers and its key's text."""


def _metric_block(
    metrics: pa.Array, names: list[str], kinds: _Kinds
) -> tuple[_MetricKey, Broadcast]:
    """The per-metric columns, kept by all they are made of: a sender exports the same
    metrics (names, descriptions, units, metadata, kinds) export after export."""
    key: _MetricKey = (
        tuple(names),
        tuple(metrics.field("description").to_pylist()),
        tuple(metrics.field("unit").to_pylist()),
        tuple(tuple(entries) for entries in metrics.field("metadata").to_pylist()),
        (kinds.key(),),
    )
    hit = _metric_blocks.get(key)
    if hit is None:
        metadata = attributes.decode_lists(metrics.field("metadata"), "metric metadata")
        hit = _metric_level(metrics, kinds, metadata)
        text = sum(len(t) for part in key[:3] for t in part if t) + len(key[4][0])
        _metric_blocks.put(key, hit, _BLOCK_OVERHEAD * len(names) + text + hit.nbytes)
    return key, hit


def _metric_columns(
    key: _MetricKey, block: Broadcast, owner: I64
) -> Mapping[str, pa.Array | pa.ChunkedArray]:
    """``block.take(owner)``, kept by the metrics and the rows' metric numbers (the same
    metrics with the same points per metric give the same columns, export after export;
    arrays are immutable, so they are given again)."""
    taken_key = (key, np.ascontiguousarray(owner, dtype=np.int64).tobytes())
    hit = _metric_rows.get(taken_key)
    if hit is None:
        hit = block.take(owner)
        size = len(taken_key[1]) + sum(int(c.nbytes) for c in hit.values())
        _metric_rows.put(taken_key, hit, _BLOCK_OVERHEAD * len(hit) + size)
    return hit


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
    sc, metrics, metric_scope = scoped_items(request, "metrics", "metrics")
    rej = Rejections()
    names = metrics.field("name")
    name_list = names.to_pylist()
    name_hash = np.array([_name_hash(s) for s in name_list], dtype=np.uint64)
    nameless = pc.equal(names, "").to_numpy(zero_copy_only=False)
    metric_kinds = _kinds(metrics)
    metric_key, per_metric = _metric_block(metrics, name_list, metric_kinds)
    absent = int((~metric_kinds.present).sum())
    rej.add("metric has no data field (gauge, sum, histogram, ...)", absent, False)
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
    metric_columns = _metric_columns(metric_key, per_metric, owner)
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
