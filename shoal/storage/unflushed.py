"""The in-memory snapshot: acknowledged rows not yet committed to a Delta table.

Batches are appended only from the WAL's ``on_durable`` callback (and from
replay at startup), so each table's list is in LSN order. A query copies the
list references under the lock (:meth:`UnflushedRows.batches`); the flusher takes
everything up to an LSN (:meth:`UnflushedRows.take`) and, once committed, drops it
(:meth:`UnflushedRows.drop_through`). Nothing slow happens under the lock.

The read protocol (:class:`UnflushedSource`): each batch carries the WAL LSN
of the record it came from. A query copies the batch references *first*,
then reads each table's latest Delta snapshot and keeps only batches whose
LSN is above that snapshot's committed WAL LSN (the Delta transaction version
of app ``shoal-wal``). Because the flusher drops records from the snapshot
only after their commit, this sees every acknowledged record exactly once
without holding any lock while Delta is read. :class:`MemoryUnflushed` is a
plain implementation for tests and the CLI.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

import pyarrow as pa


class LsnBatch(NamedTuple):
    lsn: int
    batch: pa.RecordBatch
    nbytes: int = 0
    """What the batch counts in the snapshot's bytes."""


class UnflushedSource(Protocol):
    def batches(self, tenant: str) -> Mapping[str, Sequence[LsnBatch]]:
        """The tenant's unflushed batches per table, copied under a short lock."""
        ...

    def last_lsn(self) -> int:
        """The highest LSN visible in the snapshot (for ETags)."""
        ...


class MemoryUnflushed:
    """A plain in-memory :class:`UnflushedSource` for tests and the CLI."""

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


@dataclasses.dataclass
class _TableBuffer:
    batches: list[LsnBatch] = dataclasses.field(default_factory=list)
    added_at: list[float] = dataclasses.field(default_factory=list)
    rows: int = 0
    nbytes: int = 0


@dataclasses.dataclass(frozen=True)
class UnflushedStats:
    rows: int
    bytes: int
    batches: int
    oldest_age_s: float
    last_lsn: int


class UnflushedRows:
    """The server's :class:`UnflushedSource`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], _TableBuffer] = {}
        self._last_lsn = 0
        self.rows = 0
        """Rows held, over every table (changed under the lock, read without it)."""
        self.bytes = 0
        """What the rows held count, in bytes (see :class:`LsnBatch`)."""

    # -- writers ---------------------------------------------------------------

    def add(
        self, tenant: str, table: str, lsn: int, data: pa.Table, size: int | None = None
    ) -> None:
        self.add_many([(lsn, (tenant, table, data))], [size])

    def add_many(
        self,
        records: Iterable[tuple[int, tuple[str, str, pa.Table]]],
        sizes: Iterable[int | None] | None = None,
    ) -> None:
        """Append durable records in LSN order (the WAL's ``on_durable`` callback).

        ``sizes`` are the bytes each record's rows hold, where the caller knows them
        (rows that are slices of larger buffers); otherwise their buffer sizes count."""
        prepared = []
        now = time.monotonic()
        records = list(records)
        given = list(sizes) if sizes is not None else [None] * len(records)
        for (lsn, (tenant, table, data)), size in zip(records, given, strict=True):
            batches = data.to_batches()
            prepared.append((lsn, tenant, table, batches, _batch_sizes(batches, size)))
        with self._lock:
            for lsn, tenant, table, batches, sizes in prepared:
                buf = self._tables.get((tenant, table))
                if buf is None:
                    buf = self._tables[(tenant, table)] = _TableBuffer()
                for batch, size in zip(batches, sizes, strict=True):
                    buf.batches.append(LsnBatch(lsn, batch, size))
                    buf.added_at.append(now)
                    buf.rows += batch.num_rows
                    buf.nbytes += size
                    self.rows += batch.num_rows
                    self.bytes += size
                if lsn > self._last_lsn:
                    self._last_lsn = lsn

    def note_lsn(self, lsn: int) -> None:
        """Raise ``last_lsn`` to at least ``lsn`` (replay of already-committed records)."""
        with self._lock:
            self._last_lsn = max(self._last_lsn, lsn)

    def take(
        self, max_bytes: int | None = None
    ) -> tuple[int, dict[tuple[str, str], list[LsnBatch]]]:
        """``(L, batches)``: an LSN and every table's batches up to it, atomically.

        ``L`` is the last LSN; with ``max_bytes``, the first LSN at which the batches up to
        it reach ``max_bytes`` (all of them when they hold less), so that a round that
        starts behind takes a round's worth, not the whole backlog."""
        with self._lock:
            lsn = self._last_lsn
            if max_bytes is not None and self.bytes > max_bytes:
                lsn = self._cut(max_bytes)
            taken = {}
            for key, buf in self._tables.items():
                batches = [b for b in buf.batches if b.lsn <= lsn]
                if batches:
                    taken[key] = batches
            return lsn, taken

    def _cut(self, max_bytes: int) -> int:
        """The first LSN at which the batches up to it, over every table, hold at least
        ``max_bytes`` (the caller holds the lock; the snapshot holds more)."""
        sizes: dict[int, int] = {}
        for buf in self._tables.values():
            for batch in buf.batches:
                sizes[batch.lsn] = sizes.get(batch.lsn, 0) + batch.nbytes
        total = 0
        for lsn in sorted(sizes):
            total += sizes[lsn]
            if total >= max_bytes:
                return lsn
        return self._last_lsn

    def drop_through(self, tenant: str, table: str, lsn: int) -> int:
        """Drop a table's batches with LSN <= ``lsn`` (after their commit); returns rows dropped."""
        with self._lock:
            buf = self._tables.get((tenant, table))
            if buf is None:
                return 0
            cut = 0
            while cut < len(buf.batches) and buf.batches[cut].lsn <= lsn:
                cut += 1
            rows = int(sum(b.batch.num_rows for b in buf.batches[:cut]))
            nbytes = sum(b.nbytes for b in buf.batches[:cut])
            del buf.batches[:cut], buf.added_at[:cut]
            buf.rows -= rows
            buf.nbytes -= nbytes
            self.rows -= rows
            self.bytes -= nbytes
            if not buf.batches:
                del self._tables[(tenant, table)]
            return rows

    # -- readers ---------------------------------------------------------------

    def batches(self, tenant: str) -> Mapping[str, Sequence[LsnBatch]]:
        with self._lock:
            return {
                table: list(buf.batches)
                for (owner, table), buf in self._tables.items()
                if owner == tenant
            }

    def last_lsn(self) -> int:
        with self._lock:
            return self._last_lsn

    def tenants(self) -> list[str]:
        with self._lock:
            return sorted({tenant for tenant, _ in self._tables})

    def oldest_age_s(self) -> float:
        with self._lock:
            oldest = min((buf.added_at[0] for buf in self._tables.values()), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    def stats(self) -> UnflushedStats:
        with self._lock:
            oldest = min((buf.added_at[0] for buf in self._tables.values()), default=None)
            return UnflushedStats(
                rows=self.rows,
                bytes=self.bytes,
                batches=sum(len(b.batches) for b in self._tables.values()),
                oldest_age_s=0.0 if oldest is None else time.monotonic() - oldest,
                last_lsn=self._last_lsn,
            )


def _batch_sizes(batches: list[pa.RecordBatch], size: int | None) -> list[int]:
    """Bytes per batch: ``size`` shared out by rows, or else each batch's buffer sizes
    (not RecordBatch.nbytes: this runs on the WAL writer thread per request, and nbytes
    walks the values, 40x slower for these schemas)."""
    if size is None:
        return [b.get_total_buffer_size() for b in batches]
    rows = sum(b.num_rows for b in batches)
    shares = [size * b.num_rows // max(rows, 1) for b in batches]
    if shares:
        shares[-1] += size - sum(shares)
    return shares
