"""OTLP metrics requests of known series: read by the C scanner, their rows gathered.

An exporter sends the same resource, scope, metrics and attribute sets export after
export; only the points' times, values and flags change. The scanner in C
(``shoal/otlp/_scan.c``) reads a request of gauges and sums without the interpreter
lock and gives, per point, a key (the bytes its row's other columns are made of) and
its time, start time, value and flags. A key seen before has its columns in the cache
(:class:`~shoal.rows.known.KnownSeries`); a request with a key not seen before is
decoded in full by :mod:`shoal.otlp.metrics`, and its rows fill the cache.

Requests the scanner does not cover (histograms, summaries, exemplars, rows the decoder
refuses, anything unusual) go to :mod:`shoal.otlp.metrics` alone, as before; so does
every request when the scanner was not built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.otlp import metrics, wire
from shoal.rows.columns import empty_lists, nulls, timestamps
from shoal.rows.known import KnownSeries, gather
from shoal.rows.result import DecodeResult, all_null
from shoal.schema import METRICS_SCHEMA

_PER_POINT = (
    "timestamp",
    "time_unix_nano",
    "start_timestamp",
    "start_time_unix_nano",
    "value",
    "value_int",
    "flags",
)
_NUMBER_NULLS = frozenset(
    {"count", "sum", "min", "max", "bucket_counts", "explicit_bounds", "quantile_values"}
) | {f.name for f in METRICS_SCHEMA if f.name.startswith("exp_")}
"""Columns of histograms and summaries: null in every row of a gauge or a sum."""
_NULL_TYPES = tuple((f.name, f.type) for f in METRICS_SCHEMA if f.name in _NUMBER_NULLS)
_EXEMPLARS = METRICS_SCHEMA.field("exemplars").type
PER_SERIES = tuple(
    f.name
    for f in METRICS_SCHEMA
    if f.name not in _PER_POINT and f.name not in _NUMBER_NULLS and f.name != "exemplars"
)
"""The columns a point's key decides."""

KNOWN = KnownSeries(max_series=200_000, max_bytes=64 << 20)
"""Series of OTLP senders seen before, across requests and tenants (a row depends on its
key's bytes alone); bounded by the ``series_cache_bytes`` setting in the server."""

Scanned = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes]
"""What ``_scan.scan_metrics`` returns: point count, key offsets, keys, times, start
times, values, integer values, which values are integers, flags (see the C source)."""


def _load_scanner() -> Callable[[bytes], Scanned | None] | None:
    try:
        from shoal.otlp._scan import scan_metrics
    except ImportError:  # built without a C compiler: the decoder in Python does it all
        return None
    return scan_metrics


SCAN_METRICS = _load_scanner()


class _Refused(Exception):
    """The full decode of a scanned request refused rows (the scanner passes only requests
    whose every point makes a row, so this is a safeguard): its result is the answer."""

    def __init__(self, result: DecodeResult) -> None:
        super().__init__("rows refused")
        self.result = result


def decode(body: bytes, known: KnownSeries | None = None) -> DecodeResult | None:
    """The rows of ``body`` (an ``ExportMetricsServiceRequest``), or None when the
    scanner does not cover it and the caller decodes it in full. ``known``: the series
    cache (:data:`KNOWN` when not given).

    Raises DecodeError when a key not seen before is in a body that is not valid."""
    if SCAN_METRICS is None or not isinstance(body, bytes):
        return None
    if known is None:
        known = KNOWN
    scanned = SCAN_METRICS(body)
    if scanned is None:
        return None
    n, key_offsets, keys, times, starts, values, ints, is_int, flags = scanned
    key_array = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(key_offsets), pa.py_buffer(keys)]
    )

    def build(positions: np.ndarray[Any, Any]) -> pa.Table:
        full = metrics.decode(wire.to_struct("metrics", body))
        if full.rejected or full.accepted != n:
            raise _Refused(full)
        return full.table.select(list(PER_SERIES)).take(pa.array(positions))

    try:
        table, rows, _ = known.rows(key_array, build)
    except _Refused as refused:
        return refused.result
    # histograms' and summaries' columns null, the exemplars empty (cached arrays)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        name: nulls(n, type_) for name, type_ in _NULL_TYPES
    }
    columns["exemplars"] = empty_lists(n, _EXEMPLARS)
    gathered = gather(table, rows)
    columns.update(zip(gathered.column_names, gathered.columns, strict=True))
    time = np.frombuffer(times, np.int64)
    start = np.frombuffer(starts, np.int64)
    integer = np.frombuffer(is_int, np.bool_)
    columns.update(
        {
            "timestamp": timestamps(time),
            "time_unix_nano": pa.array(time),
            "start_timestamp": timestamps(start, start != 0),
            "start_time_unix_nano": pa.array(start),
            "value": pa.array(np.frombuffer(values, np.float64)),
            "value_int": pa.array(np.frombuffer(ints, np.int64), mask=~integer),
            "flags": pa.array(np.frombuffer(flags, np.int64)),
        }
    )
    arrays = [columns[f.name] for f in METRICS_SCHEMA]
    rows_table = pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)
    return DecodeResult(rows_table, n, 0, [], all_null(arrays, n))
