"""Rows of the ``logs`` table as Loki streams: the OTLP → Loki mapping of Loki 3's
defaults, and pushed rows read back as they were pushed.

A row pushed by Loki's API (``scope_name = 'loki.push'``) has its stream labels in
``resource_attributes`` and its structured metadata in ``attributes``. A row that came
by OTLP is mapped as Loki 3 maps OTLP logs by default (its ``otlp_config``):

* stream labels: the resource attributes of :data:`INDEX_LABELS`, named as Loki names
  them (``k8s.pod.name`` → ``k8s_pod_name``), and ``service_name`` (discovered from the
  other stream labels, else ``unknown_service``, when the resource has no service name);
* structured metadata: the other resource attributes, the scope's attributes and its
  ``scope_name``, ``scope_version`` and ``scope_dropped_attributes_count``, the
  record's attributes, and ``observed_timestamp``, ``severity_number``,
  ``severity_text``, ``dropped_attributes_count``, ``flags``, ``trace_id``, ``span_id``
  and ``event_name`` where set; and ``detected_level``, as Loki's push adds it;
* the line: the body's text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.logql.frame import METADATA, STREAM, Frame, Label, concat, per_stream
from shoal.lokipush import labels as lbl
from shoal.lokipush import levels
from shoal.schema import LOKI_PUSH_SCOPE
from shoal.storage import logindex

INDEX_LABELS = frozenset({
    "service.name", "service.namespace", "service.instance.id", "deployment.environment",
    "deployment.environment.name", "cloud.region", "cloud.availability_zone",
    "k8s.cluster.name", "k8s.namespace.name", "k8s.pod.name", "k8s.container.name",
    "container.name", "k8s.replicaset.name", "k8s.deployment.name", "k8s.statefulset.name",
    "k8s.daemonset.name", "k8s.cronjob.name", "k8s.job.name",
})  # fmt: skip
"""The resource attributes Loki 3 makes stream labels by default
(``distributor.otlp.default_resource_attributes_as_index_labels``)."""

COLUMNS = (
    "ts", "body", "service_name", "scope_name", "resource_attributes", "attributes",
    "severity_number", "severity_text", "trace_id", "span_id", "flags", "time_unix_nano",
    "observed_time_unix_nano", "event_name", "dropped_attributes_count", "scope_version",
    "scope_attributes", "scope_dropped_attributes_count",
)  # fmt: skip
"""What :func:`frame` reads of each row (``ts``: the record's time, or its observed time)."""

TS_SQL = "CASE WHEN time_unix_nano <> 0 THEN time_unix_nano ELSE observed_time_unix_nano END AS ts"


def frame(table: pa.Table) -> Frame:
    """The entries of ``table`` (columns :data:`COLUMNS`), pushed and OTLP rows alike."""
    if not table.num_rows:
        return Frame(np.zeros(0, np.int64), pa.array([], pa.string()), {})
    pushed = pc.fill_null(pc.equal(table.column("scope_name"), LOKI_PUSH_SCOPE), False)
    parts = []
    mask = pushed.combine_chunks() if isinstance(pushed, pa.ChunkedArray) else pushed
    if pc.any(mask).as_py():
        parts.append(_pushed(table.filter(mask)))
    if not pc.all(mask).as_py():
        parts.append(_otlp(table.filter(pc.invert(mask))))
    out = concat(parts)
    if len(parts) > 1:
        order = np.argsort(out.ts, kind="stable")
        out = out.take(order)
    return out


def _array(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _map_columns(maps: pa.MapArray, rename: bool) -> dict[str, pa.Array]:
    """One column per key of ``maps`` (renamed as Loki names OTel attributes, or not)."""
    out: dict[str, pa.Array] = {}
    for key in sorted(k for k in levels.keys_of(maps) if k):
        name = lbl.otel_name(key) if rename else key
        values = pc.map_lookup(maps, key, "first")
        out[name] = pc.coalesce(out[name], values) if name in out else values
    return out


def _streams(keys: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Each row's stream index and the first row of each stream, from per-row keys."""
    encoded = keys.dictionary_encode()
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, first = np.unique(indices, return_index=True)
    return encoded.indices, first


def _pushed(table: pa.Table) -> Frame:
    resources = _array(table, "resource_attributes")
    stream, first = _streams(logindex.map_key(resources))
    label_sets = [dict(resources[int(i)].as_py()) for i in first]
    labels = {
        name: Label(STREAM, per_stream([s.get(name) for s in label_sets], stream))
        for name in sorted({k for s in label_sets for k in s})
    }
    for name, values in _map_columns(_array(table, "attributes"), rename=False).items():
        if name not in labels:
            labels[name] = Label(METADATA, values)
    return Frame(
        np.asarray(_array(table, "ts").to_numpy(zero_copy_only=False), dtype=np.int64),
        pc.fill_null(_array(table, "body"), ""),
        labels,
    )


def otlp_stream(resource: Sequence[tuple[str, str]], service: str | None) -> tuple[
    dict[str, str], dict[str, str]
]:  # fmt: skip
    """A resource's stream labels and its structured metadata, as Loki 3 maps them."""
    stream: dict[str, str] = {}
    meta: dict[str, str] = {}
    for key, value in resource:
        name = lbl.otel_name(key)
        if key in INDEX_LABELS:
            if value != "":
                stream[name] = value
        else:
            meta[name] = value
    if not stream.get(lbl.SERVICE_NAME):
        stream.pop(lbl.SERVICE_NAME, None)
        found = next((stream[n] for n in lbl.DISCOVER_SERVICE_NAME if stream.get(n)), None)
        stream[lbl.SERVICE_NAME] = found or lbl.UNKNOWN_SERVICE
    del service  # the column repeats service.name
    return stream, meta


def _nonzero_text(values: pa.Array) -> pa.Array:
    text = values.cast(pa.string())
    return pc.if_else(pc.equal(values, 0), None, text)


def _otlp(table: pa.Table) -> Frame:
    resources = _array(table, "resource_attributes")
    keys = pc.binary_join_element_wise(
        pc.fill_null(_array(table, "service_name"), ""), logindex.map_key(resources), "\x1d"
    )
    stream, first = _streams(keys)
    services = _array(table, "service_name")
    mapped = [otlp_stream(resources[int(i)].as_py(), services[int(i)].as_py()) for i in first]
    labels: dict[str, Label] = {}
    for name in sorted({k for s, _ in mapped for k in s}):
        labels[name] = Label(STREAM, per_stream([s.get(name) for s, _ in mapped], stream))
    meta: dict[str, pa.Array] = {}
    for name in sorted({k for _, md in mapped for k in md}):
        meta[name] = per_stream([md.get(name) for _, md in mapped], stream).cast(pa.string())
    for name, values in _map_columns(_array(table, "scope_attributes"), rename=True).items():
        meta[name] = values
    meta["scope_name"] = _array(table, "scope_name")
    meta["scope_version"] = _array(table, "scope_version")
    meta["scope_dropped_attributes_count"] = _nonzero_text(
        _array(table, "scope_dropped_attributes_count")
    )
    for name, values in _map_columns(_array(table, "attributes"), rename=True).items():
        meta[name] = values
    time_set = pc.not_equal(_array(table, "time_unix_nano"), 0)
    observed = _array(table, "observed_time_unix_nano")
    meta["observed_timestamp"] = pc.if_else(
        pc.and_(time_set, pc.not_equal(observed, 0)), observed.cast(pa.string()), None
    )
    severity = _array(table, "severity_number")
    meta["severity_number"] = _nonzero_text(severity)
    meta["severity_text"] = _array(table, "severity_text")
    meta["dropped_attributes_count"] = _nonzero_text(_array(table, "dropped_attributes_count"))
    meta["flags"] = _nonzero_text(_array(table, "flags"))
    for name in ("trace_id", "span_id", "event_name"):
        meta[name] = _array(table, name)
    body = pc.fill_null(_array(table, "body"), "")
    named = [meta[n] for n in levels.LEVEL_FIELDS if n in meta]
    meta[levels.DETECTED_LEVEL] = levels.detect(body, named, severity)
    for name, values in meta.items():
        if name not in labels:
            labels[name] = Label(METADATA, pc.if_else(pc.equal(values, ""), None, values))
    return Frame(
        np.asarray(_array(table, "ts").to_numpy(zero_copy_only=False), np.int64), body, labels
    )
