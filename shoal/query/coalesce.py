"""Fewer, larger snapshot batches for DataFusion.

The snapshot holds one small record batch per acknowledged request, and
handing a batch to DataFusion costs about 40 µs however small it is: with
thousands of requests between flushes that would dominate a query. So the
batches of each complete run of consecutive LSNs (:data:`LSN_SPANS`, in
levels: runs of 16, 256 and 4096 LSNs) are concatenated once and the result
is reused by every later query while that run is unchanged.

A run is combined only once it is complete: the table already holds a batch
of a later run, and the snapshot appends in LSN order, so no batch can still
join it. The newest 16-LSN run is passed as it is. The cost is one copy of the
combined rows while they stay in the snapshot (at most ``flush_max_bytes``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa

LSN_SPANS = (4096, 256, 16)
"""Run lengths in LSNs, largest first: a query sees at most ~15 batches per level plus
the newest 16-LSN run as it is."""

_Key = tuple[str, str, int, int]
_Stamp = tuple[tuple[int, int], ...]


class BatchCoalescer:
    """Per (tenant, table): combined batches of complete LSN runs, reused across queries."""

    def __init__(self, spans: Sequence[int] = LSN_SPANS) -> None:
        self._spans = tuple(sorted(spans, reverse=True))
        self._lock = threading.Lock()
        self._cache: dict[_Key, tuple[_Stamp, pa.RecordBatch]] = {}
        self.combined = 0

    def coalesce(
        self,
        tenant: str,
        table: str,
        lsns: Sequence[int],
        batches: Sequence[pa.RecordBatch],
    ) -> list[pa.RecordBatch]:
        """``batches`` (in LSN order, ``lsns`` parallel) as fewer batches with the same rows."""
        if len(batches) <= 1:
            return list(batches)
        newest = max(lsns)
        # Each batch goes to the largest run that is complete (ends before the newest LSN's run).
        groups: dict[tuple[int, int], list[int]] = {}
        raw: list[int] = []
        for i, lsn in enumerate(lsns):
            for span in self._spans:
                if lsn // span < newest // span:
                    groups.setdefault((span, lsn // span), []).append(i)
                    break
            else:
                raw.append(i)
        out: list[tuple[int, pa.RecordBatch]] = []
        live: set[_Key] = set()
        for (span, run), idx in groups.items():
            if len(idx) == 1:
                out.append((idx[0], batches[idx[0]]))
                continue
            key = (tenant, table, span, run)
            stamp = tuple((lsns[i], batches[i].num_rows) for i in idx)
            live.add(key)
            with self._lock:
                cached = self._cache.get(key)
            if cached is not None and cached[0] == stamp:
                out.append((idx[0], cached[1]))
                continue
            combined = pa.concat_batches([batches[i] for i in idx])
            with self._lock:
                self._cache[key] = (stamp, combined)
                self.combined += 1
            out.append((idx[0], combined))
        out.extend((i, batches[i]) for i in raw)
        self._forget(tenant, table, live)
        return [b for _, b in sorted(out, key=lambda item: item[0])]
    def _forget(self, tenant: str, table: str, live: set[_Key]) -> None:
        """Drop runs of this table that the snapshot no longer holds (flushed)."""
        with self._lock:
            stale = [k for k in self._cache if k[0] == tenant and k[1] == table and k not in live]
            for key in stale:
                del self._cache[key]
