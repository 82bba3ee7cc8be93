"""Synthetic ``metrics`` rows (the frozen schema) for the pipeline tests and benchmark.

Vectorised with numpy so that ten million rows take seconds. Every fourth
series is a gauge, a cumulative monotonic counter (with a restart halfway),
a delta counter and a cumulative explicit histogram, in that order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shoal.schema import ATTRS, METRICS_SCHEMA

_ROUTES = np.array(["/", "/api/items", "/api/users", "/login", "/search"])
_SERVICES = np.array(["checkout", "frontend", "payments", "inventory"])
_BOUNDS = [1.0, 5.0, 10.0]
_TYPES = np.array(["gauge", "sum", "sum", "histogram"])


def _arr(values: np.ndarray, typ: pa.DataType | None = None) -> pa.Array:
    out = pa.array(values, typ)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _map(keys: list[str], values: list[np.ndarray], rows: int) -> pa.MapArray:
    width = len(keys)
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * width)
    if width == 0:
        return pa.MapArray.from_arrays(
            offsets, pa.array([], pa.string()), pa.array([], pa.string())
        )
    key_arr = _arr(np.tile(np.array(keys), rows))
    item_arr = _arr(np.stack(values, axis=1).reshape(-1))
    return pa.MapArray.from_arrays(offsets, key_arr, item_arr, type=ATTRS)


def metrics_table(
    rows: int,
    *,
    start_us: int,
    span_s: int,
    series: int = 100,
    seed: int = 0,
    first_series: int = 0,
) -> pa.Table:
    """``rows`` points of ``series`` series spread evenly over ``span_s`` seconds from ``start_us``.

    Points of one series are ``span_s / (rows / series)`` seconds apart, in
    time order, with distinct timestamps.
    """
    rng = np.random.default_rng(seed)
    per_series = max(1, rows // series)
    rows = per_series * series
    sid_local = np.repeat(np.arange(series, dtype=np.int64), per_series)
    sid = sid_local + first_series
    k = np.tile(np.arange(per_series, dtype=np.int64), series)
    step_us = max(1, span_s * 1_000_000 // per_series)
    ts_us = start_us + k * step_us + (sid % 997) * (step_us // 1000 + 1)
    time_ns = ts_us * 1000
    kind = sid % 4
    mtype = _TYPES[kind]
    restart = k >= per_series // 2
    start_ns = np.where(restart, start_us * 1000 + (span_s // 2) * 1_000_000_000, start_us * 1000)
    start_ns = np.where(kind == 0, 0, start_ns)
    increments = rng.integers(0, 10, rows).astype(np.float64)
    # cumulative per series, restarting at the half
    seg = sid_local * 2 + restart.astype(np.int64)
    csum = np.cumsum(increments)
    seg_first = np.r_[0, np.flatnonzero(np.diff(seg)) + 1]
    seg_base = np.repeat(csum[seg_first] - increments[seg_first], np.diff(np.r_[seg_first, rows]))
    cumulative = csum - seg_base
    value = np.where(kind == 0, rng.normal(50.0, 10.0, rows), 0.0)
    value = np.where(kind == 1, cumulative, value)
    value = np.where(kind == 2, increments, value)
    is_hist = kind == 3
    temporality = np.where(kind == 2, 1, 2).astype(np.int32)
    hist_count = cumulative.astype(np.int64) * 3
    hist_rows = int(is_hist.sum())

    def masked(values: np.ndarray, mask: np.ndarray, typ: pa.DataType) -> pa.Array:
        return pa.array(values, typ, mask=~mask)

    bc_values = np.stack(
        [
            hist_count // 3,
            hist_count // 3,
            hist_count - 2 * (hist_count // 3),
            np.zeros(rows, np.int64),
        ],
        axis=1,
    )
    list_offsets = np.zeros(rows + 1, dtype=np.int32)
    list_offsets[1:] = np.cumsum(np.where(is_hist, 4, 0))
    bucket_counts = pa.ListArray.from_arrays(
        pa.array(list_offsets),
        pa.array(bc_values[is_hist].reshape(-1)),
        mask=pa.array(~is_hist),
    ).cast(pa.list_(pa.int64()))
    bound_offsets = np.zeros(rows + 1, dtype=np.int32)
    bound_offsets[1:] = np.cumsum(np.where(is_hist, 3, 0))
    explicit_bounds = pa.ListArray.from_arrays(
        pa.array(bound_offsets), pa.array(np.tile(_BOUNDS, hist_rows)), mask=pa.array(~is_hist)
    ).cast(pa.list_(pa.float64()))
    names = np.char.add("metric.", (sid % 23).astype(str))
    route = _ROUTES[sid % len(_ROUTES)]
    host = np.char.add("host-", (sid % 7).astype(str))
    service = _SERVICES[sid % len(_SERVICES)]
    empty = _map([], [], rows)
    columns: dict[str, pa.Array] = {
        "timestamp": pa.array(ts_us, pa.timestamp("us", tz="UTC")),
        "time_unix_nano": pa.array(time_ns),
        "start_timestamp": pa.array(
            start_ns // 1000, pa.timestamp("us", tz="UTC"), mask=start_ns == 0
        ),
        "start_time_unix_nano": pa.array(start_ns),
        "metric_name": _arr(names),
        "metric_description": pa.nulls(rows, pa.string()),
        "metric_unit": _arr(np.where(kind == 0, "1", "{request}")),
        "metric_type": _arr(mtype),
        "aggregation_temporality": masked(temporality, kind != 0, pa.int32()),
        "is_monotonic": masked(np.ones(rows, bool), (kind == 1) | (kind == 2), pa.bool_()),
        "series_id": pa.array(sid * 7919 + 12345),
        "attributes": _map(["http.route", "host.name"], [route, host], rows),
        "attributes_types": empty,
        "value": masked(value, ~is_hist, pa.float64()),
        "value_int": pa.nulls(rows, pa.int64()),
        "count": masked(hist_count, is_hist, pa.int64()),
        "sum": masked(cumulative * 2.5, is_hist, pa.float64()),
        "min": masked(np.zeros(rows), is_hist, pa.float64()),
        "max": masked(np.full(rows, 20.0), is_hist, pa.float64()),
        "bucket_counts": bucket_counts,
        "explicit_bounds": explicit_bounds,
        "flags": pa.array(np.zeros(rows, np.int64)),
        "metric_metadata": empty,
        "metric_metadata_types": empty,
        "service_name": _arr(service),
        "resource_attributes": _map(["service.name"], [service], rows),
        "resource_attributes_types": empty,
        "resource_dropped_attributes_count": pa.array(np.zeros(rows, np.int64)),
        "scope_name": _arr(np.full(rows, "shoal.test")),
        "scope_attributes": empty,
        "scope_attributes_types": empty,
        "scope_dropped_attributes_count": pa.array(np.zeros(rows, np.int64)),
    }
    arrays = [
        columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in METRICS_SCHEMA
    ]
    return pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)
