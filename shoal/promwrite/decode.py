"""Prometheus remote-write bodies -> rows of the ``metrics`` table, column by column.

ptars turns the message into Arrow (one struct per series, its labels and samples as
lists); labels, names and metadata are then handled per series with Arrow and NumPy,
and the per-series columns are repeated for their samples with ``take``.

The rows are stored so that the PromQL view (:mod:`shoal.promql.mapping`) reads back
exactly the labels that were written: the scope ``prometheus.remote_write`` tells the
view to take the metric name as it is (no unit or ``_total`` suffixes added); ``job``
becomes the resource attributes ``service.namespace``/``service.name`` it comes from
(split at the first ``/``), ``instance`` becomes ``service.instance.id``, every other
label a point attribute. Counters (by their metadata) are monotonic cumulative sums,
everything else gauges; the metadata's type, family name, unit and help are kept.
A stale marker (the NaN with bits ``0x7ff0000000000002``) becomes a point with OTLP's
no-recorded-value flag, which the view reads as staleness.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from shoal.errors import UnsupportedMediaTypeError
from shoal.promwrite import histograms
from shoal.promwrite.cached import decode_cached_v1
from shoal.promwrite.labels import (
    Meta,
    Samples,
    family_meta,
    has_entries,
    lengths,
    series_keys,
    v1_labels,
    v1_metadata,
    v2_labels,
)
from shoal.promwrite.proto import DECODER, V1, V2
from shoal.promwrite.rows import (
    Written,
    constant_columns,
    exemplar_columns,
    sample_rows,
    series_columns,
)
from shoal.rows.known import KnownSeries, gather
from shoal.rows.result import DecodeResult, all_null
from shoal.schema import METRICS_SCHEMA

__all__ = ["V1", "V2", "Written", "decode", "message_of"]


def message_of(content_type: str) -> str:
    """The proto message a ``Content-Type`` names (1.0 when it names none); raises
    :class:`UnsupportedMediaTypeError` for any other media type or message."""
    media, _, params = content_type.partition(";")
    if media.strip().lower() != "application/x-protobuf":
        raise UnsupportedMediaTypeError(
            f"unsupported content type {content_type!r}: send application/x-protobuf "
            f"(proto={V1} or proto={V2})"
        )
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "proto":
            value = value.strip().strip('"')
            if value not in (V1, V2):
                raise UnsupportedMediaTypeError(
                    f"unsupported remote-write message {value!r}: send {V1} or {V2}"
                )
            return value
    return V1


KNOWN = KnownSeries(max_series=200_000, max_bytes=64 << 20)
"""Series seen before, across requests and tenants (a row depends on the label set only);
bounded by the ``series_cache_bytes`` setting in the server."""


def decode(body: bytes, message: str, known: KnownSeries | None = KNOWN) -> Written:
    """Decode an uncompressed (snappy already undone) remote-write body of ``message``.

    The columns of each distinct label set come from ``known`` when it has them
    (``None``: work every series out)."""
    if known is not None and message == V1:
        seen = decode_cached_v1(body, known)
        if seen is not None:
            return seen
    batch = DECODER.batch(message, body, f"body is not a valid {message}")
    series = batch.column("timeseries").flatten()
    n = len(series)
    symbols: pa.Array | None = None
    if message == V2:
        symbols = batch.column("symbols")[0].values
        labels, v2_meta, created = v2_labels(batch, series)
        key_extra: list[pa.Array] | None = v2_meta.key_columns()

        def metas(names: list[str | None], positions: np.ndarray[Any, Any]) -> list[Meta]:
            return v2_meta.metas(names, positions)
    else:
        labels = v1_labels(series)
        created = np.zeros(n, dtype=np.int64)
        metadata = v1_metadata(batch)
        key_extra = None
        if metadata:  # 1.0 sends metadata in requests of their own; these are rare
            known = None

        def metas(names: list[str | None], positions: np.ndarray[Any, Any]) -> list[Meta]:
            if not metadata:
                return [Meta()] * len(names)
            per_name = {name: family_meta(str(name or ""), metadata) for name in set(names)}
            return [per_name[name] for name in names]

    def build(positions: np.ndarray[Any, Any]) -> pa.Table:
        subset = labels.subset(positions, n)
        return series_columns(subset, len(positions), lambda names: metas(names, positions))

    if known is None or not n:
        table = build(np.arange(n))
        rows = np.arange(n)
        named = np.asarray(table.column("metric_name").is_valid(), dtype=np.bool_)
    else:
        table, rows, named = known.rows(series_keys(labels, n, key_extra), build)
    written = sample_rows(Samples.of(series), table, rows, named, created, series, symbols)
    if n and has_entries(series.field("histograms")):
        written = _with_histograms(written, len(body), series, table, rows, named, created, symbols)
    return written


def _with_histograms(
    written: Written,
    body_bytes: int,
    series: pa.StructArray,
    table: pa.Table,
    rows: np.ndarray[Any, Any],
    named: np.ndarray[Any, Any],
    created_ms: np.ndarray[Any, Any],
    symbols: pa.Array | None,
) -> Written:
    """``written`` and the request's native histograms (shoal/promwrite/histograms.py):
    their rows after the float samples', the series' exemplars on its last histogram
    when it has no float sample."""
    found = histograms.decode(
        series.field("histograms"), named, created_ms, histograms.budget(body_bytes)
    )
    n = len(found.owner)
    gathered = gather(table, rows[found.owner])
    columns: dict[str, pa.Array | pa.ChunkedArray] = dict(constant_columns(n))
    columns.update(zip(gathered.column_names, gathered.columns, strict=True))
    columns.update(found.columns)
    only = np.bincount(found.owner, minlength=len(series)) * (lengths(series.field("samples")) == 0)
    exemplars, exemplar_count = exemplar_columns(series, found.owner, only, named, n, symbols)
    if exemplar_count:
        columns["exemplars"] = exemplars
    arrays = list(columns.values())
    before = written.result
    table = pa.concat_tables([before.table, pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)])
    mine = all_null(arrays, n)
    result = DecodeResult(
        table.combine_chunks(),
        before.accepted + n,
        before.rejected + found.rejected,
        before.errors + found.errors,
        None
        if before.all_null is None
        else tuple(a and b for a, b in zip(before.all_null, mine, strict=True)),
    )
    return Written(result, written.samples, written.exemplars + exemplar_count, n)
