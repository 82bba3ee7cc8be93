"""Which streams a selector selects, by their labels: a stream's labels from its row
(a push's as pushed, an OTLP resource's as Loki maps it), the selector's test of them, the
log index's minutes summed per stream, and the ``service_name`` values of the selected
streams (what narrows the rows a query reads, the files being sorted by it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.logql import mapping
from shoal.logql import model as m
from shoal.regex import compile_pattern
from shoal.schema import LOKI_PUSH_SCOPE
from shoal.storage import logindex

STREAM_COLUMNS = ("service_name", "scope_name", "resource_attributes")
"""What makes a stream: a push's labels, or an OTLP resource (with its scope's origin)."""


def matches(labels: dict[str, str], matchers: Sequence[m.Matcher]) -> bool:
    """Whether a stream's labels satisfy a selector (an absent label reads as ``""``)."""
    for matcher in matchers:
        value = labels.get(matcher.name, "")
        if matcher.op in ("=", "!="):
            hit = value == matcher.value
        else:
            hit = compile_pattern(matcher.value).matches(value)
        if hit == (matcher.op in ("!=", "!~")):
            return False
    return True


def _streams(minutes: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each summary row's stream number, and the first row of each stream."""
    keys = pc.binary_join_element_wise(
        pc.fill_null(minutes.column("scope_name"), "\x00"),
        pc.fill_null(minutes.column("service_name"), "\x00"),
        logindex.map_key(minutes.column("resource_attributes").combine_chunks()),
        "\x1d",
    )
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    codes = keys.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, first = np.unique(codes, return_index=True)
    return codes, first


def per_stream(minutes: pa.Table, by: tuple[str, ...] = ()) -> pa.Table:
    """The log index's minutes summed per stream (and per value of the columns ``by``)."""
    if not minutes.num_rows:
        return minutes
    codes, first = _streams(minutes)
    summed = pa.table({
        "stream": codes, "entries": minutes.column("entries"), "bytes": minutes.column("bytes"),
        "first_ns": minutes.column("first_ns"), "last_ns": minutes.column("last_ns"),
        **{name: minutes.column(name) for name in by},
    }).group_by(["stream", *by]).aggregate([
        ("entries", "sum"), ("bytes", "sum"), ("first_ns", "min"), ("last_ns", "max"),
    ])  # fmt: skip
    rows = pa.array(first, pa.int64()).take(summed.column("stream"))
    return pa.table({
        **{name: minutes.column(name).take(rows) for name in STREAM_COLUMNS},
        "entries": summed.column("entries_sum"), "bytes": summed.column("bytes_sum"),
        "first_ns": summed.column("first_ns_min"), "last_ns": summed.column("last_ns_max"),
        **{name: summed.column(name) for name in by},
    })  # fmt: skip


def stream_labels(row: dict[str, Any]) -> dict[str, str]:
    """A stream's labels from a row's ``service_name``, ``scope_name`` and
    ``resource_attributes``: a push's as pushed, an OTLP resource's as Loki maps it."""
    resource = row["resource_attributes"] or []
    if row["scope_name"] == LOKI_PUSH_SCOPE:
        return dict(resource)
    labels, _ = mapping.otlp_stream(resource, row["service_name"])
    return labels


def services(minutes: pa.Table, matchers: Sequence[m.Matcher]) -> set[str | None]:
    """The ``service_name`` column values (None for rows without one) of the streams in
    the log index's ``minutes`` whose labels satisfy ``matchers``."""
    if not minutes.num_rows:
        return set()
    _, first = _streams(minutes)
    found: set[str | None] = set()
    for row in minutes.select(list(STREAM_COLUMNS)).take(first).to_pylist():
        if row["service_name"] not in found and matches(stream_labels(row), matchers):
            found.add(row["service_name"])
    return found
