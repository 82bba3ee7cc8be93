"""Where the query layer gets the not-yet-flushed rows from.

The server's in-memory snapshot implements :class:`SnapshotSource`; tests use
:class:`MemorySnapshot`. Each batch carries the WAL LSN of the record it came
from. A query copies the batch references *first*, then reads each table's
latest Delta snapshot and keeps only batches whose LSN is above that
snapshot's committed WAL LSN (the Delta transaction version of app
``shoal-wal``). Because the flusher drops records from the snapshot only after
their commit, this sees every acknowledged record exactly once without holding
any lock while Delta is read.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

import pyarrow as pa


class LsnBatch(NamedTuple):
    lsn: int
    batch: pa.RecordBatch


class SnapshotSource(Protocol):
    def batches(self, tenant: str) -> Mapping[str, Sequence[LsnBatch]]:
        """The tenant's unflushed batches per table, copied under a short lock."""
        ...

    def last_lsn(self) -> int:
        """The highest LSN visible in the snapshot (for ETags)."""
        ...


class MemorySnapshot:
    """A plain in-memory :class:`SnapshotSource` for tests and the CLI."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, list[LsnBatch]]] = {}
        self._last_lsn = 0

    def add(self, tenant: str, table: str, lsn: int, batch: pa.RecordBatch) -> None:
        with self._lock:
            self._data.setdefault(tenant, {}).setdefault(table, []).append(LsnBatch(lsn, batch))
            self._last_lsn = max(self._last_lsn, lsn)

    def drop_through(self, tenant: str, table: str, lsn: int) -> None:
        with self._lock:
            items = self._data.get(tenant, {}).get(table, [])
            self._data.setdefault(tenant, {})[table] = [b for b in items if b.lsn > lsn]

    def batches(self, tenant: str) -> Mapping[str, Sequence[LsnBatch]]:
        with self._lock:
            return {name: list(items) for name, items in self._data.get(tenant, {}).items()}

    def last_lsn(self) -> int:
        with self._lock:
            return self._last_lsn
