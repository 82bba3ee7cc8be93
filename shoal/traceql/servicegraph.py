"""Tempo's service-graph metrics, computed from the spans, for PromQL to serve.

Grafana's node graph (the Tempo data source's *service graph*) draws from the series
Tempo's metrics generator writes: ``traces_service_graph_request_total``,
``..._request_failed_total``, and the histograms ``..._request_server_seconds`` and
``..._request_client_seconds`` (``_bucket`` with ``le``, ``_sum``, ``_count``), labelled
``client`` and ``server`` (services) and, for queues, ``connection_type="messaging_system"``.
Here they are worked out from the spans when a query asks, with no generator: an edge is
a client (or producer) span and the server (or consumer) span whose parent it is, joined
on ``(trace_id, parent_span_id) = (trace_id, span_id)`` with one Arrow hash join; it
counts at the later of the two spans' ends; it failed when either span's status is an
error; the server's and the client's durations go to the histograms (Tempo's default
buckets). Counters are cumulative from the start of the window read, sampled on a grid
of :func:`grid_step` (15 s, coarser over long windows), so ``rate()`` and ``increase()``
over any range inside the window come out as the edges in that range; an edge seen in the
15 minutes before the window keeps its series (at zero), as a generator keeps a series.

:class:`ServiceGraph` implements PromQL's ``DerivedSeries`` (shoal/promql/source.py): the
one seam between the two query languages, which know nothing else of each other.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from shoal.schema import METRICS_SCHEMA, REMOTE_WRITE_SCOPE, UTC_US
from shoal.storage.reader import TenantReader
from shoal.storage.view import TableInput

PREFIX = "traces_service_graph_"
NAMES = (
    f"{PREFIX}request_total",
    f"{PREFIX}request_failed_total",
    *(f"{PREFIX}request_{side}_seconds_{part}" for side in ("server", "client")
      for part in ("bucket", "sum", "count")),
)  # fmt: skip
BUCKETS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8)
"""Tempo's default histogram buckets of the service graph, in seconds."""
MIN_STEP_NS = 15 * 10**9
MAX_POINTS = 1000
_COLUMNS = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "kind",
    "status_code",
    "service_name",
    "start_time_unix_nano",
    "end_time_unix_nano",
)
_CLIENT_KINDS = pa.array([3, 4], pa.int32())  # client, producer
_SERVER_KINDS = pa.array([2, 5], pa.int32())  # server, consumer


def grid_step(start_ns: int, end_ns: int) -> int:
    """The sample spacing over a window: 15 s, or coarser so a window has at most
    :data:`MAX_POINTS` samples per series."""
    span = max(end_ns - start_ns, 1)
    step = max(MIN_STEP_NS, -(-span // MAX_POINTS))
    return -(-step // 10**9) * 10**9


def _side(spans: pa.Table, kinds: pa.Array, role: str, join_id: str) -> pa.Table:
    """The spans of ``kinds`` as one side of an edge: trace id, ``join_id`` as the span id
    to join on, the service as ``role``, and kind, status, start and end prefixed by the
    role's initial (``c_start``)."""
    side = spans.filter(pc.is_in(spans.column("kind"), kinds))
    initial = role[0]
    return pa.table(
        {
            "trace_id": side.column("trace_id"),
            "span_id": side.column(join_id),
            role: pc.fill_null(side.column("service_name"), ""),
            f"{initial}_kind": side.column("kind"),
            f"{initial}_status": side.column("status_code"),
            f"{initial}_start": side.column("start_time_unix_nano"),
            f"{initial}_end": side.column("end_time_unix_nano"),
        }
    )


def edges(spans: pa.Table) -> pa.Table:
    """One row per client/server pair: client, server, connection_type, time_ns, failed,
    server_s, client_s."""
    left = _side(spans, _CLIENT_KINDS, "client", "span_id")
    right = _side(spans, _SERVER_KINDS, "server", "parent_span_id")
    joined = left.join(right, keys=["trace_id", "span_id"], join_type="inner")
    messaging = pc.equal(joined.column("c_kind"), 4)
    failed = pc.or_(pc.equal(joined.column("c_status"), 2), pc.equal(joined.column("s_status"), 2))
    return pa.table(
        {
            "client": joined.column("client"),
            "server": joined.column("server"),
            "connection_type": pc.if_else(messaging, "messaging_system", ""),
            "time_ns": pc.max_element_wise(joined.column("c_end"), joined.column("s_end")),
            "failed": failed,
            "server_s": _seconds(joined, "s"),
            "client_s": _seconds(joined, "c"),
        }
    )


def _seconds(joined: pa.Table, side: str) -> pa.Array:
    took = pc.subtract(joined.column(f"{side}_end"), joined.column(f"{side}_start"))
    return pc.divide(pc.cast(took, pa.float64()), 1e9)


def _series_id(name: str, labels: Sequence[tuple[str, str]]) -> int:
    text = name + "\x00" + "\x00".join(f"{k}\x01{v}" for k, v in sorted(labels))
    return int.from_bytes(
        hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True
    )


def _rows(
    names: list[str], labels: list[list[tuple[str, str]]], values: np.ndarray[Any, Any], grid: Any
) -> pa.Table:
    """Rows of METRICS_SCHEMA: series ``i`` (``names[i]``, ``labels[i]``) has value
    ``values[i, j]`` at ``grid[j]``."""
    n_series, n_points = values.shape
    n = n_series * n_points
    series = np.repeat(np.arange(n_series), n_points)
    times = np.tile(np.asarray(grid, dtype=np.int64), n_series)
    ids = np.array([_series_id(nm, lb) for nm, lb in zip(names, labels, strict=True)], np.int64)
    label_maps = pa.array(labels, pa.map_(pa.string(), pa.string())).take(pa.array(series))
    columns: dict[str, Any] = {
        "timestamp": pa.array(times // 1000, UTC_US),
        "time_unix_nano": pa.array(times),
        "start_time_unix_nano": pa.array(np.zeros(n, dtype=np.int64)),
        "metric_name": pa.array(names, pa.string()).take(pa.array(series)),
        "metric_type": pa.array(["sum"] * n, pa.string()),
        "aggregation_temporality": pa.array(np.full(n, 2, dtype=np.int32)),
        "is_monotonic": pa.array(np.ones(n, dtype=np.bool_)),
        "series_id": pa.array(ids[series]),
        "attributes": label_maps,
        "value": pa.array(values.reshape(-1).astype(np.float64)),
        "flags": pa.array(np.zeros(n, dtype=np.int64)),
        "scope_name": pa.array([REMOTE_WRITE_SCOPE] * n, pa.string()),
    }
    arrays = []
    for field in METRICS_SCHEMA:
        if field.name in columns:
            arrays.append(columns[field.name])
        elif pa.types.is_map(field.type):
            arrays.append(pa.array([[]] * n, field.type))
        elif not field.nullable:
            arrays.append(pa.array(np.zeros(n, dtype=np.int64)).cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)


def metric_rows(found: pa.Table, start_ns: int, end_ns: int) -> pa.Table:
    """The service graph's series over ``[start_ns, end_ns)`` from the edges ``found``."""
    step = grid_step(start_ns, end_ns)
    first = -(-start_ns // step) * step
    grid = np.arange(first, end_ns, step, dtype=np.int64)
    if found.num_rows == 0 or len(grid) == 0:
        return METRICS_SCHEMA.empty_table()
    keys = pc.binary_join_element_wise(
        found.column("client"), found.column("server"), found.column("connection_type"), "\x00"
    )
    encoded = pc.dictionary_encode(
        keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    )
    edge = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    pairs = [k.split("\x00") for k in encoded.dictionary.to_pylist()]
    times = np.asarray(found.column("time_ns").to_numpy(), dtype=np.int64)
    slot = np.searchsorted(grid, times, side="left")  # first grid point at or after the edge
    # edges before the window make their series exist (at zero), as a generator keeps a
    # series it has seen; only the window's edges count
    inside = (slot < len(grid)) & (times >= start_ns)
    n_edges = len(pairs)

    def cumulative(weights: np.ndarray[Any, Any] | None, mask: np.ndarray[Any, Any]) -> Any:
        out = np.zeros((n_edges, len(grid)))
        chosen = inside & mask
        w = None if weights is None else weights[chosen]
        np.add.at(out, (edge[chosen], slot[chosen]), 1.0 if w is None else w)
        return np.cumsum(out, axis=1)

    everything = np.ones(len(times), dtype=np.bool_)
    failed = np.asarray(found.column("failed").to_numpy(zero_copy_only=False), dtype=np.bool_)
    names: list[str] = []
    labels: list[list[tuple[str, str]]] = []
    blocks = []

    def add(name: str, extra: list[tuple[str, str]], block: Any) -> None:
        for client, server, kind in pairs:
            base = [("client", client), ("server", server)]
            if kind:
                base.append(("connection_type", kind))
            names.append(name)
            labels.append(base + extra)
        blocks.append(block)

    add(f"{PREFIX}request_total", [], cumulative(None, everything))
    add(f"{PREFIX}request_failed_total", [], cumulative(None, failed))
    for side in ("server", "client"):
        seconds = np.asarray(found.column(f"{side}_s").to_numpy(), dtype=np.float64)
        base = f"{PREFIX}request_{side}_seconds"
        for bound in (*BUCKETS, float("inf")):
            le = "+Inf" if bound == float("inf") else repr(bound)
            add(f"{base}_bucket", [("le", le)], cumulative(None, seconds <= bound))
        add(f"{base}_sum", [], cumulative(seconds, everything))
        add(f"{base}_count", [], cumulative(None, everything))
    return _rows(names, labels, np.concatenate(blocks, axis=0), grid)


class ServiceGraph:
    """The service graph of each tenant's spans, for PromQL (``DerivedSeries``).
    Thread-safe; a few recent answers are kept, keyed by the window and what was read."""

    def __init__(self, reader: TenantReader, keep: int = 16) -> None:
        self.reader = reader
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[tuple[Any, ...], pa.Table] = collections.OrderedDict()
        self.keep = keep

    def metric_rows(self, tenant: str, start_ns: int, end_ns: int) -> pa.Table:
        # a window reaching past what a timestamp column can hold reads as far as it can
        start_ns, end_ns = (min(max(t, 0), MAX_NS) for t in (start_ns, end_ns))
        view = self.reader.view(tenant, ("spans",))
        found = view.tables.get("spans")
        if found is None:
            return METRICS_SCHEMA.empty_table()
        identity = (found.version, found.committed_lsn, found.max_batch_lsn, len(found.batches))
        key = (tenant, start_ns, end_ns, identity)
        with self._lock:
            hit = self._kept.get(key)
        if hit is not None:
            return hit
        spans = read_spans(found, start_ns, end_ns)
        pairs = edges(spans)
        times = pairs.column("time_ns")
        held = pc.and_(pc.greater_equal(times, start_ns - HOLD_NS), pc.less(times, end_ns))
        pairs = pairs.filter(held)
        rows = metric_rows(pairs, start_ns, end_ns)
        with self._lock:
            self._kept[key] = rows
            while len(self._kept) > self.keep:
                self._kept.popitem(last=False)
        return rows


MAX_NS = 2**63 - 1
"""The latest time a nanosecond timestamp column holds."""
HOLD_NS = 15 * 60 * 10**9
"""How long an edge keeps its series in answers after its last request (a metrics
generator's stale-series time, 15 minutes)."""
EDGE_SLACK_NS = 3600 * 10**9
"""How long before the window a span may start and still end inside it (an hour)."""


def read_spans(found: TableInput, start_ns: int, end_ns: int) -> pa.Table:
    """The columns an edge needs, of the spans that start in the window or up to
    :data:`EDGE_SLACK_NS` before it (so that an edge ending inside it is whole)."""
    lo = max(0, start_ns - HOLD_NS - EDGE_SLACK_NS)
    files = [
        f.path for f in found.files if f.max_time_us * 1000 >= lo and f.min_time_us * 1000 < end_ns
    ]
    starts = ds.field("start_time_unix_nano")
    condition = (starts >= lo) & (starts < end_ns)
    schema = pa.schema([found.schema.field(c) for c in _COLUMNS])
    parts = []
    if files:
        dataset = ds.dataset(files, schema=found.schema, format="parquet")
        parts.append(dataset.to_table(columns=list(_COLUMNS), filter=condition))
    if found.batches:
        unflushed = pa.Table.from_batches(found.batches).select(list(_COLUMNS))
        parts.append(unflushed.filter(condition))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([p.cast(schema) for p in parts])
