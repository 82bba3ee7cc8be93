"""Fewer, larger batches of the unflushed rows for DataFusion.

The unflushed rows are one small record batch per acknowledged request, and
handing a batch to DataFusion costs the same however small it is: with
thousands of requests between flushes that would dominate a query. So the
batches of each complete run of consecutive LSNs (:data:`LSN_SPANS`, in
levels: runs of 16, 256 and 4096 LSNs) are concatenated once and the result
is reused by every later query while that run is unchanged.

A run is combined only once it is complete: the table already holds a batch
of a later run, and the unflushed rows grow in LSN order, so no batch can still
join it. The newest 16-LSN run is passed as it is. The cost is one copy of the
combined rows while they stay unflushed (at most ``flush_max_bytes``).

A run becomes several batches of at most :data:`MAX_BATCH_ROWS` rows, each a
copy with buffers of its own, never one huge batch nor slices of one: a map
lookup such as ``attributes['host']`` is several times slower over one huge
batch, and far slower over slices (DataFusion's map lookup walks a slice's
whole underlying arrays); docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

LSN_SPANS = (4096, 256, 16)
"""Run lengths in LSNs, largest first: a query sees at most ~15 batches per level plus
the newest 16-LSN run as it is."""

MAX_BATCH_ROWS = 32_768
"""Largest batch the coalescer makes (8k-32k rows measured fastest for DataFusion)."""

_Key = tuple[str, str, int, int]
_Stamp = tuple[tuple[int, int], ...]


UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "µs": 1_000, "us": 1_000, "ns": 1}
"""Nanoseconds in one unit of an Arrow timestamp."""

TimeRange = tuple[int, int]
"""The smallest and largest time in some rows, in microseconds since the epoch (inclusive)."""


def time_range(batches: Iterable[pa.RecordBatch], column: str) -> TimeRange | None:
    """The range of ``column`` (a timestamp of any unit) over ``batches``, rounded outwards
    to microseconds; None when unknown (no such timestamp column).

    Null times are left out (no time filter matches them); batches without a non-null time
    give the empty range ``(1, 0)``, which meets no bounds.
    """
    lo: int | None = None
    hi: int | None = None
    for batch in batches:
        index = batch.schema.get_field_index(column)
        if index < 0:
            return None
        values = batch.column(index)
        if not pa.types.is_timestamp(values.type):
            return None
        extremes = pc.min_max(values.cast(pa.int64()))
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
        if low is None or high is None:
            continue
        ns = UNIT_NS[values.type.unit]
        low, high = low * ns // 1000, -(-high * ns // 1000)
        lo = low if lo is None else min(lo, low)
        hi = high if hi is None else max(hi, high)
    if lo is None or hi is None:
        return (1, 0)
    return (lo, hi)


class Run:
    """The combined batches of one complete LSN run."""

    __slots__ = ("batches", "span", "stamp")

    def __init__(self, span: int, stamp: _Stamp, batches: list[pa.RecordBatch]) -> None:
        self.span = span
        self.stamp = stamp
        self.batches = batches


class Level:
    """All complete runs of one length in a table's unflushed rows, and what a caller made of them.

    ``derived`` holds one object made from ``batches``: the query engine keeps its
    DataFusion table of the level there, so batches are handed to DataFusion once
    per level change, not once per query, and a query
    scans at most one table per run length (a table per run cost more planning).
    """

    __slots__ = ("_ranges", "batches", "derived", "runs")

    def __init__(self, runs: tuple[Run, ...]) -> None:
        self.runs = runs
        self.batches = [b for run in runs for b in run.batches]
        self.derived: object | None = None
        self._ranges: dict[str, TimeRange | None] = {}

    def time_range(self, column: str) -> TimeRange | None:
        """The range of the time ``column`` over the level's rows (computed once)."""
        if column not in self._ranges:
            self._ranges[column] = time_range(self.batches, column)
        return self._ranges[column]

    def same_runs(self, runs: Sequence[Run]) -> bool:
        return len(runs) == len(self.runs) and all(
            a is b for a, b in zip(runs, self.runs, strict=True)
        )


class Loose:
    """The batches of no complete run (the newest), as they are, with their time ranges
    computed once while the table's unflushed rows are unchanged."""

    __slots__ = ("_ranges", "batches")

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        self.batches = batches
        self._ranges: dict[str, list[TimeRange | None]] = {}

    def ranges(self, column: str) -> list[TimeRange | None]:
        """The range of the time ``column`` of each batch."""
        if column not in self._ranges:
            self._ranges[column] = [time_range((b,), column) for b in self.batches]
        return self._ranges[column]


class BatchCoalescer:
    """Per (tenant, table): combined batches of complete LSN runs, reused across queries."""

    def __init__(self, spans: Sequence[int] = LSN_SPANS) -> None:
        self._spans = tuple(sorted(spans, reverse=True))
        self._lock = threading.Lock()
        self._cache: dict[_Key, Run] = {}
        self._levels: dict[tuple[str, str, int], Level] = {}
        self._last: dict[tuple[str, str], tuple[_Stamp, list[Level], Loose]] = {}
        self.combined = 0

    def coalesce(
        self,
        tenant: str,
        table: str,
        lsns: Sequence[int],
        batches: Sequence[pa.RecordBatch],
    ) -> list[pa.RecordBatch]:
        """``batches`` (in LSN order, ``lsns`` parallel) as fewer batches with the same rows."""
        runs, rest = self.runs(tenant, table, lsns, batches)
        return [b for run in runs for b in run.batches] + rest

    def runs(
        self,
        tenant: str,
        table: str,
        lsns: Sequence[int],
        batches: Sequence[pa.RecordBatch],
    ) -> tuple[list[Run], list[pa.RecordBatch]]:
        """The complete runs of ``batches`` (combined, cached) and the batches left as they are.

        Together they hold exactly the rows of ``batches``: the runs' rows first, in
        LSN order, then the rest's, in LSN order.
        """
        if len(batches) <= 1:
            return [], list(batches)
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
        runs: list[tuple[int, Run]] = []
        live: set[_Key] = set()
        for (span, run), idx in groups.items():
            if len(idx) == 1:
                raw.append(idx[0])
                continue
            key = (tenant, table, span, run)
            stamp = tuple((lsns[i], batches[i].num_rows) for i in idx)
            live.add(key)
            with self._lock:
                cached = self._cache.get(key)
            if cached is None or cached.stamp != stamp:
                cached = Run(span, stamp, _combine([batches[i] for i in idx]))
                with self._lock:
                    self._cache[key] = cached
                    self.combined += 1
            runs.append((idx[0], cached))
        self._forget(tenant, table, live)
        runs.sort(key=lambda item: item[0])
        return [r for _, r in runs], [batches[i] for i in sorted(raw)]

    def levels(
        self,
        tenant: str,
        table: str,
        lsns: Sequence[int],
        batches: Sequence[pa.RecordBatch],
    ) -> tuple[list[Level], Loose]:
        """:meth:`runs`, grouped by run length; a level is reused while its runs stay.

        While the table's batches stay the same (the same LSNs with the same row
        counts: an LSN names one immutable batch), the answer of the previous call
        is returned as it is, so an idle table costs no regrouping.
        """
        stamp = tuple(zip(lsns, (b.num_rows for b in batches), strict=True))
        with self._lock:
            last = self._last.get((tenant, table))
        if last is not None and last[0] == stamp:
            return list(last[1]), last[2]
        runs, rest = self.runs(tenant, table, lsns, batches)
        by_span: dict[int, list[Run]] = {}
        for run in runs:
            by_span.setdefault(run.span, []).append(run)
        out: list[Level] = []
        with self._lock:
            for span in self._spans:
                key = (tenant, table, span)
                members = by_span.get(span)
                if not members:
                    self._levels.pop(key, None)
                    continue
                level = self._levels.get(key)
                if level is None or not level.same_runs(members):
                    level = Level(tuple(members))
                    self._levels[key] = level
                out.append(level)
            loose = Loose(rest)
            self._last[(tenant, table)] = (stamp, out, loose)
        return list(out), loose

    def forget(self, tenant: str, table: str) -> None:
        """Drop everything kept for a table with no unflushed rows left."""
        with self._lock:
            if self._last.pop((tenant, table), None) is None and not any(
                k[0] == tenant and k[1] == table for k in self._levels
            ):
                return
            for span in self._spans:
                self._levels.pop((tenant, table, span), None)
        self._forget(tenant, table, set())

    def _forget(self, tenant: str, table: str, live: set[_Key]) -> None:
        """Drop runs of this table that are no longer unflushed (flushed)."""
        with self._lock:
            stale = [k for k in self._cache if k[0] == tenant and k[1] == table and k not in live]
            for key in stale:
                del self._cache[key]


def _combine(batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """Consecutive ``batches`` concatenated into copies of at most MAX_BATCH_ROWS rows each
    (a single batch larger than that stays whole)."""
    out: list[pa.RecordBatch] = []
    start, rows = 0, 0
    for i, batch in enumerate(batches):
        if rows and rows + batch.num_rows > MAX_BATCH_ROWS:
            out.append(pa.concat_batches(batches[start:i]))
            start, rows = i, 0
        rows += batch.num_rows
    out.append(pa.concat_batches(batches[start:]))
    return out
