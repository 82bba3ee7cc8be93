"""Prometheus remote-write bodies -> rows of the ``metrics`` table.

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

import dataclasses
import struct
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.errors import DecodeError, UnsupportedMediaTypeError
from shoal.otlp.columns import hash_text
from shoal.otlp.common import DecodeResult
from shoal.otlp.metrics import series_ids
from shoal.otlp.schema import METRICS_SCHEMA
from shoal.promwrite import SCOPE, proto

V1 = "prometheus.WriteRequest"
V2 = "io.prometheus.write.v2.Request"
STALE_NAN = 0x7FF0000000000002
NO_RECORDED_VALUE = 1
_COUNTER_SUFFIXES = ("_total", "")


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


@dataclasses.dataclass
class Written:
    """What a request held: its rows, and the counts the 2.0 response headers report."""

    result: DecodeResult
    samples: int
    exemplars: int


@dataclasses.dataclass(frozen=True)
class _Meta:
    kind: str = "unknown"
    family: str = ""
    help: str = ""
    unit: str = ""


@dataclasses.dataclass
class _Series:
    labels: dict[str, str]
    samples: list[tuple[float, int]]
    exemplars: list[tuple[dict[str, str], float, int]]
    meta: _Meta
    created_ms: int = 0


def decode(body: bytes, message: str) -> Written:
    """Decode an uncompressed (snappy already undone) remote-write body of ``message``."""
    try:
        series = list(_v2(body) if message == V2 else _v1(body))
    except DecodeError:
        raise
    except Exception as exc:  # protobuf's parse errors carry no useful type
        raise DecodeError(f"body is not a valid {message}: {exc}") from None
    return _rows(series)


def _labels(pairs: Iterable[tuple[str, str]], where: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for name, value in pairs:
        if not name:
            raise DecodeError(f"{where}: a label has an empty name")
        if name in labels:
            raise DecodeError(f"{where}: label {name!r} appears twice")
        if value:
            labels[name] = value
    return labels


def _v1(body: bytes) -> Iterator[_Series]:
    request = proto.WriteRequest.FromString(body)
    metadata = {
        m.metric_family_name: _Meta(proto.V1_TYPES.get(m.type, "unknown"), m.metric_family_name,
                                    m.help, m.unit)
        for m in request.metadata
    }  # fmt: skip
    for i, ts in enumerate(request.timeseries):
        if len(ts.histograms):
            raise DecodeError(f"series {i}: native histograms are not supported")
        labels = _labels(((lb.name, lb.value) for lb in ts.labels), f"series {i}")
        exemplars = [
            (_labels(((lb.name, lb.value) for lb in e.labels), f"series {i} exemplar"),
             e.value, e.timestamp)
            for e in ts.exemplars
        ]  # fmt: skip
        yield _Series(
            labels,
            [(s.value, s.timestamp) for s in ts.samples],
            exemplars,
            _family_meta(labels.get("__name__", ""), metadata),
        )


def _family_meta(name: str, metadata: dict[str, _Meta]) -> _Meta:
    """1.0 sends metadata per family: ``foo`` for ``foo_bucket``, ``foo_total`` or ``foo``."""
    for suffix in ("", "_total", "_bucket", "_sum", "_count", "_created", "_info"):
        if suffix and not name.endswith(suffix):
            continue
        found = metadata.get(name[: len(name) - len(suffix)] if suffix else name)
        if found is not None:
            return found
    return _Meta()


def _v2(body: bytes) -> Iterator[_Series]:
    request = proto.V2Request.FromString(body)
    symbols = list(request.symbols)
    if request.timeseries and (not symbols or symbols[0] != ""):
        raise DecodeError("the symbols table must start with the empty string")

    def text(ref: int, where: str) -> str:
        if ref >= len(symbols):
            raise DecodeError(f"{where}: symbol reference {ref} is beyond the table")
        return str(symbols[ref])

    def pairs(refs: Any, where: str) -> dict[str, str]:
        if len(refs) % 2:
            raise DecodeError(f"{where}: labels_refs has an odd length")
        refs = list(refs)
        return _labels(
            ((text(refs[j], where), text(refs[j + 1], where)) for j in range(0, len(refs), 2)),
            where,
        )

    for i, ts in enumerate(request.timeseries):
        where = f"series {i}"
        if len(ts.histograms):
            raise DecodeError(f"{where}: native histograms are not supported")
        labels = pairs(ts.labels_refs, where)
        meta = ts.metadata
        yield _Series(
            labels,
            [(s.value, s.timestamp) for s in ts.samples],
            [(pairs(e.labels_refs, where), e.value, e.timestamp) for e in ts.exemplars],
            _Meta(
                proto.V1_TYPES.get(meta.type, "unknown"),
                labels.get("__name__", ""),
                text(meta.help_ref, where),
                text(meta.unit_ref, where),
            ),
            ts.created_timestamp,
        )


def _is_stale(value: float) -> bool:
    return value != value and struct.unpack("<Q", struct.pack("<d", value))[0] == STALE_NAN


def _map(items: list[list[tuple[str, str]]]) -> pa.MapArray:
    return pa.array(items, pa.map_(pa.string(), pa.string()))


def _set_hash(items: Iterable[tuple[str, str]]) -> int:
    return sum(hash_text(k, "", v) for k, v in items) % (1 << 64)


def _rows(series: list[_Series]) -> Written:
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "time_unix_nano", "start_time_unix_nano", "metric_name", "metric_description",
            "metric_unit", "metric_type", "aggregation_temporality", "is_monotonic",
            "attributes", "value", "flags", "metric_metadata", "service_name",
            "resource_attributes", "exemplars",
        )
    }  # fmt: skip
    hashes: list[tuple[int, int, int]] = []
    errors: list[str] = []
    rejected = exemplar_count = 0
    for number, s in enumerate(series):
        labels = dict(s.labels)
        name = labels.pop("__name__", "")
        if not name:
            rejected += len(s.samples)
            errors.append(f"series {number}: no __name__ label")
            continue
        resource: dict[str, str] = {}
        job = labels.pop("job", "")
        if job:
            namespace, service = job.split("/", 1) if "/" in job else ("", job)
            resource["service.name"] = service
            if namespace:
                resource["service.namespace"] = namespace
        instance = labels.pop("instance", "")
        if instance:
            resource["service.instance.id"] = instance
        counter = s.meta.kind == "counter" and any(
            name == s.meta.family + suffix for suffix in _COUNTER_SUFFIXES
        )
        attributes = sorted(labels.items())
        resource_items = sorted(resource.items())
        metadata = [("prometheus.type", s.meta.kind)]
        if s.meta.family:
            metadata.append(("prometheus.family", s.meta.family))
        examples = [
            {
                "time_unix_nano": ts * 1_000_000,
                "value": value,
                "value_int": None,
                "trace_id": ex.get("trace_id"),
                "span_id": ex.get("span_id"),
                "filtered_attributes": [
                    (k, v) for k, v in sorted(ex.items()) if k not in ("trace_id", "span_id")
                ],
                "filtered_attributes_types": [],
            }
            for ex, value, ts in s.exemplars
        ]
        exemplar_count += len(examples)
        ids = (hash_text(name), _set_hash(attributes), _set_hash(resource_items))
        for k, (value, t_ms) in enumerate(s.samples):
            stale = _is_stale(value)
            columns["time_unix_nano"].append(t_ms * 1_000_000)
            columns["start_time_unix_nano"].append(s.created_ms * 1_000_000)
            columns["metric_name"].append(name)
            columns["metric_description"].append(s.meta.help or None)
            columns["metric_unit"].append(s.meta.unit or None)
            columns["metric_type"].append("sum" if counter else "gauge")
            columns["aggregation_temporality"].append(2 if counter else None)
            columns["is_monotonic"].append(True if counter else None)
            columns["attributes"].append(attributes)
            columns["value"].append(float("nan") if stale else value)
            columns["flags"].append(NO_RECORDED_VALUE if stale else 0)
            columns["metric_metadata"].append(metadata)
            columns["service_name"].append(resource.get("service.name"))
            columns["resource_attributes"].append(resource_items)
            columns["exemplars"].append(examples if k == len(s.samples) - 1 else [])
            hashes.append(ids)
    return Written(
        DecodeResult(_table(columns, hashes), len(hashes), rejected, errors),
        len(hashes),
        exemplar_count,
    )


def _table(columns: dict[str, list[Any]], hashes: list[tuple[int, int, int]]) -> pa.Table:
    n = len(hashes)
    ns = np.array(columns["time_unix_nano"], dtype=np.int64)
    start = np.array(columns["start_time_unix_nano"], dtype=np.int64)
    h = np.array(hashes, dtype=np.uint64).reshape(n, 3)
    empty = _map([[] for _ in range(n)])
    arrays: dict[str, pa.Array] = {
        "timestamp": pa.array(ns // 1000, pa.timestamp("us", tz="UTC")),
        "time_unix_nano": pa.array(ns),
        "start_timestamp": pa.array(
            np.where(start > 0, start // 1000, 0), pa.timestamp("us", tz="UTC"), mask=start <= 0
        ),
        "start_time_unix_nano": pa.array(start),
        "series_id": series_ids(h[:, 0], h[:, 1], h[:, 2]),
        "attributes": _map(columns["attributes"]),
        "attributes_types": empty,
        "metric_metadata": _map(columns["metric_metadata"]),
        "metric_metadata_types": empty,
        "resource_attributes": _map(columns["resource_attributes"]),
        "resource_attributes_types": empty,
        "scope_name": pa.array([SCOPE] * n, pa.string()),
        "scope_attributes": empty,
        "scope_attributes_types": empty,
        "resource_dropped_attributes_count": pa.array(np.zeros(n, dtype=np.int64)),
        "scope_dropped_attributes_count": pa.array(np.zeros(n, dtype=np.int64)),
    }
    out = []
    for field in METRICS_SCHEMA:
        if field.name in arrays:
            out.append(arrays[field.name])
        elif field.name in columns:
            out.append(pa.array(columns[field.name], field.type))
        else:
            out.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(out, schema=METRICS_SCHEMA)
