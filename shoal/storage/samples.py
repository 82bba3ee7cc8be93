"""A few metrics' rows over a time range, read from a tenant's view without SQL.

PromQL reads whole metrics over a time range, and a dashboard reads the same ones
again at every refresh. Going through SQL costs a plan, a pruning pass and a Parquet
scan each time, 15-25 ms before the first row for even a small metric
(docs/benchmarks.md). A committed Parquet file never changes, so the rows one metric
has in one file are decoded once and kept in :class:`FileSlices`, bounded in bytes.
UnflushedRows batches never change either (an LSN names them): a metric's rows are picked
once per complete run of LSNs (the :class:`BatchCoalescer`'s combined runs) or, for the
newest LSNs, per batch, sorted by series and time like a file's, and kept alike.

:func:`read_metrics` returns exactly the rows that
``SELECT <columns> FROM metrics WHERE metric_name IN (<names>) AND time_unix_nano >=
start AND time_unix_nano < end`` returns over the same view: every row once, from a
file or from the unflushed rows (:func:`~shoal.storage.view.collect_view`). ``metric_name``
comes back dictionary-encoded; each file's slice keeps the file's row order (by
series, then time, as the flusher and compaction write it), and so does each unflushed
part.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.storage.runs import BatchCoalescer
from shoal.storage.types import ScanFile
from shoal.storage.view import TableInput

NAME = "metric_name"
TIME = "time_unix_nano"

PACK_MIN_ROWS = 256
"""Slices smaller than this are kept plain: they save little, and expanding costs
the same few calls whatever the size."""

_Key = tuple[object, str, tuple[str, ...]]
"""(a file's path, or an unflushed run's identity), a metric name, the columns."""


class FileSlices:
    """Each (file, metric, columns)'s rows, least recently used first out, at most
    ``max_bytes`` of Arrow buffers in all. Thread-safe; 0 bytes keeps nothing."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[_Key, pa.Table] = collections.OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: _Key) -> pa.Table | None:
        with self._lock:
            table = self._entries.get(key)
            if table is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
        return _unpack(table)

    def has(self, key: _Key) -> bool:
        """Whether ``key``'s rows are kept (not counted as a read)."""
        with self._lock:
            return key in self._entries

    def put(self, key: _Key, table: pa.Table) -> None:
        if self.bytes + table.nbytes > self.max_bytes // 2:
            # room is getting short: keep it run-end encoded (expanding it on every
            # read costs tens of microseconds, worth paying only when memory is short)
            table = _pack(table)
        size = table.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old.nbytes
            self._entries[key] = table
            self.bytes += size
            while self.bytes > self.max_bytes:
                self.bytes -= self._entries.popitem(last=False)[1].nbytes

    def __len__(self) -> int:
        return len(self._entries)


def _pack(table: pa.Table) -> pa.Table:
    """``table`` with each column that repeats its values in runs (a series' id and
    start time over its points, flags that are all 0, the same bucket bounds on every
    row) run-end encoded, when that at least halves it: a cached slice then takes
    about half the memory, so twice the rows stay kept."""
    if table.num_rows < PACK_MIN_ROWS:
        return table
    columns = []
    for column in table.columns:
        plain = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        try:
            encoded = pc.run_end_encode(plain)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            columns.append(plain)
            continue
        columns.append(encoded if encoded.nbytes * 2 <= plain.nbytes else plain)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _unpack(table: pa.Table) -> pa.Table:
    """The plain columns of a table from :func:`_pack`."""
    if not any(pa.types.is_run_end_encoded(f.type) for f in table.schema):
        return table
    columns = []
    for column in table.columns:
        if not pa.types.is_run_end_encoded(column.type):
            columns.append(column)
            continue
        array = column.chunk(0)
        values = array.values
        if array.offset == 0 and values.null_count == 0 and pa.types.is_primitive(values.type):
            # numpy's repeat is several times faster than Arrow's run_end_decode here
            ends = np.asarray(array.run_ends.to_numpy(), dtype=np.int64)
            lengths = np.diff(ends, prepend=0)
            lengths[-1] -= ends[-1] - len(array)  # the last run may reach past the end
            repeated = np.repeat(values.to_numpy(), lengths)
            columns.append(pa.array(repeated, type=values.type))
        else:
            columns.append(pc.run_end_decode(array))
    return pa.Table.from_arrays(columns, names=table.column_names)


def _row_groups(meta: pq.FileMetaData, column: int, names: Sequence[str]) -> list[int]:
    """The row groups whose ``metric_name`` statistics may hold one of ``names``."""
    out = []
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            out.append(i)
        elif any(stats.min <= n <= stats.max for n in names):
            out.append(i)
    return out


def _decode(path: str, names: Sequence[str], columns: tuple[str, ...]) -> dict[str, pa.Table]:
    """The rows of each of ``names`` in the Parquet file ``path`` (its row order kept)."""
    parquet = pq.ParquetFile(path)
    column = parquet.schema_arrow.get_field_index(NAME)
    groups = _row_groups(parquet.metadata, column, names)
    if not groups:
        table = parquet.schema_arrow.empty_table().select([NAME, *columns])
    else:
        table = parquet.read_row_groups(groups, columns=[NAME, *columns], use_threads=False)
    found = table.column(NAME)
    rest = table.drop_columns([NAME])
    out = {}
    for n in names:
        mask = pc.equal(found, n)
        rows = np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool))
        if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
            # files are sorted by metric name: its rows are one range, taken without a filter
            out[n] = rest.slice(int(rows[0]), len(rows)).combine_chunks()
        else:
            out[n] = rest.filter(mask).combine_chunks()
    return out


def _kept(
    slices: FileSlices,
    where: object,
    names: Sequence[str],
    columns: tuple[str, ...],
    decode: Callable[[list[str]], dict[str, pa.Table]],
) -> list[pa.Table]:
    """Each of ``names``' rows in one file or unflushed run (``where``): kept, or decoded
    (all missing names at once) and kept."""
    found = {n: slices.get((where, n, columns)) for n in names}
    missing = [n for n, rows in found.items() if rows is None]
    if missing:
        for n, rows in decode(missing).items():
            slices.put((where, n, columns), rows)
            found[n] = rows
    return [rows for rows in found.values() if rows is not None]


def _pick(
    batches: Sequence[pa.RecordBatch],
    names: Sequence[str],
    schema: pa.Schema,
    ordered: bool = False,
) -> dict[str, pa.Table]:
    """The rows of each of ``names`` in ``batches``, in ``schema``'s columns; ``ordered``
    sorts them by series and time as a file's rows are (the snapshot has them in arrival
    order), worth it for rows that are kept."""
    out: dict[str, list[pa.RecordBatch]] = {n: [] for n in names}
    for batch in batches:
        found = batch.column(NAME)
        for n in names:
            picked = batch.filter(pc.equal(found, n))
            if picked.num_rows:
                out[n].append(picked.select(schema.names))
    tables = {}
    for n, picked in out.items():
        rows = pa.Table.from_batches(picked).combine_chunks() if picked else schema.empty_table()
        if ordered and rows.num_rows > 1:
            rows = rows.take(
                pc.sort_indices(rows, [("series_id", "ascending"), (TIME, "ascending")])
            )
        tables[n] = rows
    return tables


def _overlaps(f: ScanFile, start_ns: int, end_ns: int) -> bool:
    # the statistics are of ``timestamp``: microseconds, the floor of the nanoseconds
    return f.min_time_us * 1000 < end_ns and (f.max_time_us + 1) * 1000 > start_ns


def _inside(f: ScanFile, start_ns: int, end_ns: int) -> bool:
    return f.min_time_us * 1000 >= start_ns and (f.max_time_us + 1) * 1000 <= end_ns


def _cut(table: pa.Table, start_ns: int, end_ns: int) -> pa.Table:
    t = table.column(TIME)
    return table.filter(pc.and_(pc.greater_equal(t, start_ns), pc.less(t, end_ns)))


def read_metrics(
    table: TableInput,
    tenant: str,
    names: Sequence[str],
    columns: Sequence[str],
    start_ns: int,
    end_ns: int,
    slices: FileSlices,
    coalescer: BatchCoalescer,
    max_rows: int | None = None,
    local: Callable[[Sequence[ScanFile]], list[ScanFile]] | None = None,
) -> pa.Table:
    """The rows of metrics ``names`` in ``[start_ns, end_ns)`` of one view of ``metrics``;
    with ``max_rows``, reading stops once more rows than that are found (the answer then
    has more than ``max_rows`` rows, not all of them).

    A file that vanished since the view was collected (a vacuum after compaction)
    raises FileNotFoundError: collect the view again and retry. ``local`` gives the
    files to decode as local files (the read cache of tables in a bucket): those whose
    rows are not all kept are fetched together, before the first is decoded.
    """
    # times a row can have: int64 nanoseconds (a range may reach further, years 1-9999)
    start_ns = max(start_ns, -(2**63))
    end_ns = min(end_ns, 2**63 - 1)
    wanted = sorted(set(names))
    cols = tuple(c for c in columns if c != NAME)
    if TIME not in cols:
        cols = (*cols, TIME)
    dictionary = pa.array(wanted, pa.string())
    schema = pa.schema([table.schema.field(c) for c in cols])
    parts: list[tuple[int, pa.Table]] = []  # (code of the metric name, its rows)

    def full() -> bool:
        return max_rows is not None and sum(rows.num_rows for _, rows in parts) > max_rows

    files = sorted(
        (f for f in table.files if _overlaps(f, start_ns, end_ns)),
        key=lambda f: (f.min_time_us, f.path),
    )
    where = {f.path: f.path for f in files}
    if local is not None:
        cold = [f for f in files if any(not slices.has((f.path, n, cols)) for n in wanted)]
        where.update((f.path, copy.path) for f, copy in zip(cold, local(cold), strict=True))
    for f in files:
        if full():
            break
        found = _kept(
            slices, f.path, wanted, cols, functools.partial(_decode, where[f.path], columns=cols)
        )
        inside = _inside(f, start_ns, end_ns)
        for code, rows in enumerate(found):
            if rows.num_rows:
                parts.append((code, rows if inside else _cut(rows, start_ns, end_ns)))

    if table.batches and not full():
        runs, _ = coalescer.runs(tenant, table.name, table.lsns, table.batches)
        for run in runs:
            # a run's rows never change (its stamp names every LSN and row count in it)
            key: tuple[object, ...] = ("snapshot", tenant, table.name, run.span, run.stamp)
            pick = functools.partial(_pick, run.batches, schema=schema, ordered=True)
            found = _kept(slices, key, wanted, cols, pick)
            for code, rows in enumerate(found):
                if rows.num_rows:
                    parts.append((code, _cut(rows, start_ns, end_ns)))
        # the newest batches, not yet in a complete run, one by one (an LSN's batches
        # never change either)
        in_runs = {lsn for run in runs for lsn, _ in run.stamp}
        seen: dict[int, int] = {}
        for lsn, batch in zip(table.lsns, table.batches, strict=True):
            k = seen[lsn] = seen.get(lsn, -1) + 1
            if lsn in in_runs or not batch.num_rows:
                continue
            key = ("batch", tenant, table.name, lsn, k, batch.num_rows)
            pick = functools.partial(_pick, [batch], schema=schema, ordered=True)
            for code, rows in enumerate(_kept(slices, key, wanted, cols, pick)):
                if rows.num_rows:
                    parts.append((code, _cut(rows, start_ns, end_ns)))

    chunks = [(code, rows) for code, rows in parts if rows.num_rows]
    same = [rows if rows.schema == schema else rows.cast(schema) for _, rows in chunks]
    body = pa.concat_tables(same) if same else schema.empty_table()
    codes = [
        pa.DictionaryArray.from_arrays(np.full(rows.num_rows, code, dtype=np.int32), dictionary)
        for code, rows in chunks
    ]
    kind = pa.dictionary(pa.int32(), pa.string())
    return body.append_column(NAME, pa.chunked_array(codes, type=kind))
