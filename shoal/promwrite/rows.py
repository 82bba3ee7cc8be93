"""Rows of the ``metrics`` table from a request's series and samples, column by column.

Each distinct label set's columns are worked out once (:func:`series_columns`) and
repeated for its samples with ``take`` (:func:`sample_rows`); ``job`` and ``instance``
become the resource attributes they come from, every other label a point attribute,
and a stale marker a point with OTLP's no-recorded-value flag.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.errors import DecodeError
from shoal.promwrite.labels import (
    SPECIAL,
    Labels,
    Meta,
    Samples,
    has_entries,
    lengths,
    names_of,
    offsets,
    pick,
)
from shoal.rows.columns import (
    distinct,
    empty_lists,
    empty_maps,
    hash_text,
    nulls,
    series_ids,
    sum_per_list,
)
from shoal.rows.known import gather
from shoal.rows.result import DecodeResult, all_null
from shoal.schema import METRICS_SCHEMA, REMOTE_WRITE_SCOPE, UTC_US

STALE_NAN = 0x7FF0000000000002
"""The bits of Prometheus' stale marker."""
NO_RECORDED_VALUE = 1
"""OTLP's flag for a point that marks its series as gone."""
_EXEMPLARS = METRICS_SCHEMA.field("exemplars").type
_MAP = pa.map_(pa.string(), pa.string())


@dataclasses.dataclass
class Written:
    """What a request held: its rows, and the counts the 2.0 response headers report."""

    result: DecodeResult
    samples: int
    exemplars: int
    histograms: int = 0


@functools.lru_cache(maxsize=1 << 16)
def _entry_hash(key: str, value: str) -> int:
    return hash_text(key, "", value)


@functools.lru_cache(maxsize=1 << 16)
def _name_hash(name: str) -> int:
    return hash_text(name)


def _set_hashes(keys: pa.Array, values: pa.Array, offsets: np.ndarray[Any, Any]) -> Any:
    """Per series (entries sorted by series, ``offsets``), the sum of its entries' hashes;
    each distinct entry is hashed once."""
    codes, first = distinct(keys, values)
    take = pa.array(first)
    hashes = np.fromiter(
        map(_entry_hash, keys.take(take).to_pylist(), values.take(take).to_pylist()),
        np.uint64,
        len(first),
    )
    return sum_per_list(hashes[codes], offsets)


def _resource(
    job: pa.Array, instance: pa.Array
) -> tuple[pa.MapArray, np.ndarray[Any, Any], pa.Array]:
    """Per series: its resource attributes from job (``ns/name`` or ``name``) and
    instance, their set hash, and the service name; computed once per distinct pair."""
    index, first = distinct(job, instance)
    take = pa.array(first)
    entries: list[list[tuple[str, str]]] = []
    for j, inst in zip(job.take(take).to_pylist(), instance.take(take).to_pylist(), strict=True):
        items: list[tuple[str, str]] = []
        if j:
            namespace, name = j.split("/", 1) if "/" in j else ("", j)
            items.append(("service.name", name))
            if namespace:
                items.append(("service.namespace", namespace))
        if inst:
            items.append(("service.instance.id", inst))
        entries.append(sorted(items))
    hashes = np.array(
        [sum(_entry_hash(k, v) for k, v in items) % (1 << 64) for items in entries],
        dtype=np.uint64,
    )
    services = pa.array([dict(items).get("service.name") for items in entries], pa.string())
    by_pair = pa.array(index)
    return pa.array(entries, _MAP).take(by_pair), hashes[index], services.take(by_pair)


def series_columns(
    labels: Labels, n_series: int, metas_of: Callable[[list[str | None]], list[Meta]]
) -> pa.Table:
    """The columns each of ``n_series`` series repeats on its samples, one row per series;
    ``metric_name`` is null for a series without one. Raises DecodeError for label sets
    that can never be stored.

    Column-wise: what is worked out in Python (hashes, resource entries, metadata) is
    worked out once per distinct name, label, job and instance, or metadata and name."""
    names = names_of(labels, n_series)
    name_list = names.to_pylist()
    metas = metas_of(name_list)
    # attributes: every label but __name__, job and instance, with a value
    keep = ~labels.called(SPECIAL) & labels.with_value
    a_owner = labels.owner[keep]
    a_keys = labels.names.filter(pa.array(keep))
    a_values = labels.values.filter(pa.array(keep))
    order = np.argsort(a_owner, kind="stable")
    a_owner, a_keys, a_values = a_owner[order], a_keys.take(order), a_values.take(order)
    a_offsets = offsets(a_owner, n_series)
    attributes = pa.MapArray.from_arrays(pa.array(a_offsets), a_keys, a_values)
    resource, resource_hash, service = _resource(
        pick(labels, "job", n_series), pick(labels, "instance", n_series)
    )
    by_name, first_name = distinct(names)
    name_hash = np.array(
        [_name_hash(name_list[i] or "") for i in first_name.tolist()], dtype=np.uint64
    )[by_name]
    point_hash = _set_hashes(a_keys, a_values, a_offsets)
    # what the metadata decides, once per distinct (metadata, name)
    meta_index = _one_per_equal(metas)
    if meta_index.any():
        by_pair, first_pair = distinct(pa.array(meta_index), pa.array(by_name))
    else:
        by_pair, first_pair = by_name, first_name
    distinct_pairs = [(metas[i], name_list[i]) for i in first_pair.tolist()]
    counter = [
        m.kind == "counter" and bool(x) and (x == m.family or x == m.family + "_total")
        for m, x in distinct_pairs
    ]
    metadata_rows = [
        [("prometheus.type", m.kind)] + ([("prometheus.family", m.family)] if m.family else [])
        for m, _ in distinct_pairs
    ]
    per_meta: dict[str, pa.Array] = {
        "metric_description": pa.array([m.help or None for m, _ in distinct_pairs], pa.string()),
        "metric_unit": pa.array([m.unit or None for m, _ in distinct_pairs], pa.string()),
        "metric_type": pa.array(["sum" if c else "gauge" for c in counter], pa.string()),
        "aggregation_temporality": pa.array([2 if c else None for c in counter], pa.int32()),
        "is_monotonic": pa.array([True if c else None for c in counter], pa.bool_()),
        "metric_metadata": pa.array(metadata_rows, _MAP),
    }
    take_meta = pa.array(by_pair)
    columns: dict[str, pa.Array] = {
        "metric_name": names,
        "series_id": series_ids(name_hash, point_hash, resource_hash),
        "attributes": attributes,
        "resource_attributes": resource,
        "service_name": service,
        **{name: array.take(take_meta) for name, array in per_meta.items()},
    }
    return pa.table(
        list(columns.values()),
        schema=pa.schema([METRICS_SCHEMA.field(name) for name in columns]),
    )


def _one_per_equal(metas: list[Meta]) -> np.ndarray[Any, Any]:
    """Per series, a number its metadata shares with every equal one: all zeros when every
    series holds equal metadata (a request without any hands each the same object)."""
    if not metas or metas.count(metas[0]) == len(metas):  # identity first: no hashing
        return np.zeros(len(metas), dtype=np.int64)
    index: dict[Meta, int] = {}
    return np.fromiter((index.setdefault(m, len(index)) for m in metas), np.int64, len(metas))


@functools.lru_cache(maxsize=8)
def constant_columns(n: int) -> dict[str, pa.Array]:
    """The columns equal in every row of a remote-written request of ``n`` rows
    (arrays are immutable, so one set serves every request of that size)."""
    empty = empty_maps(n)
    zeros = pa.array(np.zeros(n, dtype=np.int64))
    return {f.name: nulls(n, f.type) for f in METRICS_SCHEMA} | {
        "attributes_types": empty,
        "metric_metadata_types": empty,
        "resource_attributes_types": empty,
        "scope_name": pa.array(np.full(n, REMOTE_WRITE_SCOPE, dtype=object), pa.string()),
        "scope_attributes": empty,
        "scope_attributes_types": empty,
        "resource_dropped_attributes_count": zeros,
        "scope_dropped_attributes_count": zeros,
        # defaults, replaced where a request holds other values
        "start_time_unix_nano": zeros,
        "start_timestamp": nulls(n, UTC_US),
        "flags": zeros,
        "exemplars": empty_lists(n, _EXEMPLARS),
    }


def sample_rows(
    samples: Samples,
    table: pa.Table,
    rows: np.ndarray[Any, Any],
    named: np.ndarray[Any, Any],
    created_ms: np.ndarray[Any, Any] | None,
    series: pa.StructArray | None,
    symbols: pa.Array | None,
) -> Written:
    """The request's rows: series ``i``'s columns are row ``rows[i]`` of ``table``, repeated
    for its samples; the samples of series without a name are refused.

    ``created_ms`` None: no series has a created timestamp. ``series`` (the decoded
    series, for their exemplars) None: no series has exemplars."""
    counts, owner, values, t_ms = samples.counts, samples.owner, samples.values, samples.t_ms
    if named.all():  # the common case: nothing to refuse, nothing to leave out
        errors: list[str] = []
        rejected = 0
    else:
        errors = [f"series {i}: no __name__ label" for i in np.flatnonzero(~named)[:10]]
        rejected = int(counts[~named].sum())
        take = np.flatnonzero(named[owner])
        owner, values, t_ms = owner[take], values[take], t_ms[take]
    n = len(owner)
    gathered = gather(table, rows[owner])
    # every column of the schema, in its order: nulls and constants, then this request's
    columns: dict[str, pa.Array | pa.ChunkedArray] = dict(constant_columns(n))
    columns.update(zip(gathered.column_names, gathered.columns, strict=True))
    columns.update(
        {
            "timestamp": pa.array(t_ms * 1000).view(UTC_US),  # a 10th of the cost of typing it
            "time_unix_nano": pa.array(t_ms * 1_000_000),
            "value": pa.array(values),
        }
    )
    # the columns most requests leave at their defaults are built only where they do not
    stale = values.view(np.uint64) == np.uint64(STALE_NAN)
    if stale.any():
        columns["value"] = pa.array(np.where(stale, np.nan, values))
        columns["flags"] = pa.array(np.where(stale, NO_RECORDED_VALUE, 0).astype(np.int64))
    start = created_ms[owner] * 1_000_000 if created_ms is not None else None
    if start is not None and start.any():
        columns["start_time_unix_nano"] = pa.array(start)
        columns["start_timestamp"] = pa.array(start // 1000, UTC_US, mask=start <= 0)
    exemplar_count = 0
    if series is not None:
        exemplars, exemplar_count = exemplar_columns(series, owner, counts, named, n, symbols)
        if exemplar_count:
            columns["exemplars"] = exemplars
    arrays = list(columns.values())
    result = pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)
    return Written(
        DecodeResult(result, n, rejected, errors, all_null(arrays, n)), n, exemplar_count
    )


def exemplar_columns(
    series: pa.StructArray,
    owner: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
    named: np.ndarray[Any, Any],
    n: int,
    symbols: pa.Array | None,
) -> tuple[pa.Array, int]:
    """The exemplars column: a series' exemplars on its last sample of the request."""
    if not has_entries(series.field("exemplars")):
        return constant_columns(n)["exemplars"], 0
    per_series = lengths(series.field("exemplars"))
    with_any = np.flatnonzero((per_series > 0) & named & (counts > 0))
    if not len(with_any):
        return constant_columns(n)["exemplars"], 0
    rows: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    last_row = {int(s): int(r) for r, s in enumerate(owner)}  # the last row of each series
    total = 0
    for s in with_any:
        items = series[int(s)].as_py()["exemplars"]
        out = []
        for ex in items:
            labels = _exemplar_labels(ex, symbols)
            out.append(
                {
                    "time_unix_nano": ex["timestamp"] * 1_000_000,
                    "value": ex["value"],
                    "value_int": None,
                    "trace_id": labels.get("trace_id"),
                    "span_id": labels.get("span_id"),
                    "filtered_attributes": [
                        (k, v)
                        for k, v in sorted(labels.items())
                        if k not in ("trace_id", "span_id")
                    ],
                    "filtered_attributes_types": [],
                }
            )
        rows[last_row[int(s)]] = out
        total += len(out)
    return pa.array(rows, _EXEMPLARS), total


def _exemplar_labels(ex: dict[str, Any], symbols: pa.Array | None) -> dict[str, str]:
    if symbols is None:
        return {lb["name"]: lb["value"] for lb in ex["labels"] if lb["value"]}
    refs = ex["labels_refs"]
    if len(refs) % 2 or any(r >= len(symbols) for r in refs):
        raise DecodeError("an exemplar's labels_refs are odd or beyond the symbols table")
    texts = [symbols[r].as_py() for r in refs]
    return {texts[i]: texts[i + 1] for i in range(0, len(texts), 2) if texts[i + 1]}
