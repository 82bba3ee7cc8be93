"""Helpers for the query tests: metric rows of the frozen schema, a real data dir."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from shoal.schema import SIGNAL_TABLES
from shoal.sql.limits import Limits
from shoal.sql.service import QueryService
from shoal.storage.reader import TenantReader
from shoal.storage.store import TableStore
from shoal.storage.unflushed import MemoryUnflushed

HOUR_US = 3_600_000_000
BASE_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def _map(keys: list[str], columns: list[np.ndarray]) -> pa.MapArray:
    n = len(columns[0]) if columns else 0
    k = len(keys)
    offsets = pa.array(
        np.arange(0, (n + 1) * k, k, dtype=np.int32) if k else np.zeros(n + 1, dtype=np.int32)
    )
    flat_keys = np.tile(np.array(keys, dtype=object), n)
    flat_vals = np.empty(n * k, dtype=object)
    for i, col in enumerate(columns):
        flat_vals[i::k] = col
    return pa.MapArray.from_arrays(
        offsets, pa.array(flat_keys, pa.string()), pa.array(flat_vals, pa.string())
    )


def metric_rows(
    n: int,
    start_us: int = BASE_US,
    span_us: int = HOUR_US,
    series: int = 20,
    seed: int = 0,
    metric_prefix: str = "m",
    host_prefix: str = "host",
) -> pa.Table:
    """``n`` gauge points of ``series`` series spread over ``[start_us, start_us+span_us)``."""
    rng = np.random.default_rng(seed)
    sid = rng.integers(0, series, n).astype(np.int64)
    ts = start_us + np.sort(rng.integers(0, span_us, n)).astype(np.int64)
    names = np.array([f"{metric_prefix}{i % 5}" for i in range(series)], dtype=object)
    hosts = np.array([f"{host_prefix}-{i % 4}" for i in range(series)], dtype=object)
    schema = SIGNAL_TABLES["metrics"].schema
    values: dict[str, pa.Array] = {
        "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "time_unix_nano": pa.array(ts * 1000),
        "start_time_unix_nano": pa.array(np.zeros(n, dtype=np.int64)),
        "metric_name": pa.array(names[sid], pa.string()),
        "metric_type": pa.array(np.full(n, "gauge", dtype=object), pa.string()),
        "series_id": pa.array(sid),
        "attributes": _map(["host"], [hosts[sid]]),
        "value": pa.array(rng.random(n) * 100),
        "flags": pa.array(np.zeros(n, dtype=np.int64)),
        "service_name": pa.array(np.full(n, "checkout", dtype=object), pa.string()),
    }
    arrays = []
    for field in schema:
        if field.name in values:
            arrays.append(values[field.name])
        elif pa.types.is_map(field.type):
            arrays.append(
                _map([], [])
                if n == 0
                else pa.MapArray.from_arrays(
                    pa.array(np.zeros(n + 1, dtype=np.int32)),
                    pa.array([], pa.string()),
                    pa.array([], pa.string()),
                )
            )
        elif not field.nullable:
            arrays.append(pa.array(np.zeros(n, dtype=np.int64), field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class Harness:
    """A data dir with a real TableStore and a MemoryUnflushed, driven like the server drives them.

    ``ingest`` acknowledges rows (a new LSN, added to the snapshot); ``flush``
    commits a table's snapshot batches to Delta and then drops them from the
    snapshot, in the server's order.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.store = TableStore(data_dir)
        self.unflushed = MemoryUnflushed()
        self._lsn = 0
        self._lock = threading.Lock()
        self.acked: dict[tuple[str, str], int] = {}

    def ingest(self, tenant: str, table: str, rows: pa.Table) -> int:
        with self._lock:
            self._lsn += 1
            lsn = self._lsn
            for batch in rows.to_batches():
                self.unflushed.add(tenant, table, lsn, batch)
            self.acked[(tenant, table)] = self.acked.get((tenant, table), 0) + rows.num_rows
        return lsn

    def flush(self, tenant: str, table: str) -> int:
        """Commit everything pending for ``tenant/table``; returns the rows flushed."""
        pending = list(self.unflushed.batches(tenant).get(table, ()))
        if not pending:
            return 0
        lsn = max(b.lsn for b in pending)
        handle = self.store.open(tenant, table, create=True)
        handle.flush([b.batch for b in pending], lsn)
        self.unflushed.drop_through(tenant, table, lsn)
        return sum(b.batch.num_rows for b in pending)

    def service(self, **limits: Any) -> QueryService:
        base = {"memory_bytes": 64 << 20, "timeout_s": 20.0}
        cache = limits.pop("sample_cache_bytes", 128 << 20)
        base.update(limits)
        return QueryService(TenantReader(self.store, self.unflushed, cache), Limits(**base))


def count(service: QueryService, tenant: str, sql: str) -> int:
    table = service.run_sync(tenant, sql)
    return int(table.column(0)[0].as_py())


def tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time."""
    out: dict[str, tuple[int, int]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def log_rows(n: int, body: str, start_us: int = BASE_US, service: str = "svc") -> pa.Table:
    """``n`` log records with the given body text."""
    schema = SIGNAL_TABLES["logs"].schema
    ts = start_us + np.arange(n, dtype=np.int64) * 1000
    values: dict[str, pa.Array] = {
        "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "time_unix_nano": pa.array(ts * 1000),
        "body": pa.array([f"{body} {i}" for i in range(n)], pa.string()),
        "severity_text": pa.array(["INFO"] * n, pa.string()),
        "service_name": pa.array([service] * n, pa.string()),
    }
    arrays = []
    for field in schema:
        if field.name in values:
            arrays.append(values[field.name])
        elif pa.types.is_map(field.type):
            arrays.append(
                pa.MapArray.from_arrays(
                    pa.array(np.zeros(n + 1, dtype=np.int32)),
                    pa.array([], pa.string()),
                    pa.array([], pa.string()),
                )
            )
        elif not field.nullable:
            arrays.append(pa.array(np.zeros(n, dtype=np.int64)).cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
