"""How shoal lays out and writes Parquet files: the rules in one place.

The flusher, imports that rewrite and the Spark jobs all follow these rules,
so every file of a table looks the same to a reader:

* a file holds rows of one hour of the time column and lives in
  ``hour=YYYY-MM-DDTHH/part-<uuid>.parquet`` of an *unpartitioned* Delta table
  (the directory is layout only: a Hive partition value would live only in the
  directory name, and a file read on its own would lack that column);
* rows sorted by the table's sort columns (series first, then time);
* zstd, dictionary encoding for string columns, statistics and page indexes,
  row groups of :data:`ROW_GROUP_ROWS` rows;
* the Delta add action carries ``stats`` with ``numRecords`` and
  min/max/nullCount of the time column (and of primitive sort columns).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import functools
import io
import itertools
import json
import math
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shoal.schema import TableSpec
from shoal.storage import blank
from shoal.storage.durable import fsync_file
from shoal.storage.place import Place
from shoal.text import parse_utc, utc_micros

HOUR_US = 3_600_000_000
ROW_GROUP_ROWS = 128 * 1024
DATA_PAGE_BYTES = 1024 * 1024
COMPRESSION = "zstd"
COMPRESSION_LEVEL = 1
STRING_STATS_PREFIX = 32
"""Longest string kept in Delta min/max stats (a longer min is cut; a longer max is left out)."""

COVERAGE_DIR = "_coverage"
SERIES_DIR = "_series"
LOOKUP_DIR = "_lookup"
IMPORT_DIR = "imported"

_MIN_TIME_US = -(2**63)
_MAX_TIME_US = 2**63 - 1


def hour_index(time_us: int) -> int:
    """The hour (counted from the epoch) that holds ``time_us``."""
    return time_us // HOUR_US


def hour_dir(hour: int) -> str:
    """``hour=YYYY-MM-DDTHH`` for an hour index."""
    start = dt.datetime.fromtimestamp(hour * 3600, tz=dt.UTC)
    return "hour=" + start.strftime("%Y-%m-%dT%H")


def new_file_name() -> str:
    return f"part-{uuid.uuid4().hex}.parquet"


def hour_file_path(hour: int) -> str:
    """A new relative path for a file holding rows of one hour."""
    return f"{hour_dir(hour)}/{new_file_name()}"


def flat_name(data_path: str) -> str:
    """A data file's relative path as one file name (for the summaries kept beside it)."""
    return _flat(data_path)


def _flat(data_path: str) -> str:
    flat = data_path.replace("/", "__")
    return flat[: -len(".parquet")] if flat.endswith(".parquet") else flat


def coverage_path(data_path: str) -> str:
    """The relative path of the coverage bitmaps of a data file (derived from its path)."""
    return f"{COVERAGE_DIR}/{_flat(data_path)}.roar"


def series_path(data_path: str) -> str:
    """The relative path of the series summary of a data file (derived from its path)."""
    return f"{SERIES_DIR}/{_flat(data_path)}.parquet"


def lookup_path(data_path: str) -> str:
    """The relative path of the lookup filter of a data file (derived from its path)."""
    return f"{LOOKUP_DIR}/{_flat(data_path)}.bloom"


def row_group_rows(spec: TableSpec) -> int:
    """Rows per row group of the table's files (its spec's, or :data:`ROW_GROUP_ROWS`)."""
    return spec.row_group_rows or ROW_GROUP_ROWS


# -- writer properties ---------------------------------------------------------


@functools.lru_cache(maxsize=32)
def string_leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """Parquet leaf column paths of string type (including inside maps, lists, structs)."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    buf.seek(0)
    pschema = pq.ParquetFile(buf).schema
    return tuple(
        pschema.column(i).path
        for i in range(len(pschema))
        if pschema.column(i).physical_type == "BYTE_ARRAY"
    )


def writer_options(schema: pa.Schema, sort_columns: Sequence[str] = ()) -> dict[str, Any]:
    """Keyword arguments for ``pq.ParquetWriter`` / ``pq.write_table``."""
    sorting = [c for c in sort_columns if c in schema.names]
    options: dict[str, Any] = {
        "compression": COMPRESSION,
        "compression_level": COMPRESSION_LEVEL,
        "use_dictionary": list(string_leaf_paths(schema)),
        # nested columns (maps, lists) get none: nothing prunes by them, and their
        # statistics cost 7% of a metrics flush's Parquet encoding (docs/benchmarks.md)
        "write_statistics": [f.name for f in schema if not pa.types.is_nested(f.type)],
        "write_page_index": True,
        "data_page_size": DATA_PAGE_BYTES,
        "version": "2.6",
    }
    if sorting:
        options["sorting_columns"] = pq.SortingColumn.from_ordering(
            schema, [(c, "ascending") for c in sorting]
        )
    return options


def write_parquet(table: pa.Table, path: Path, spec: TableSpec) -> int:
    """Write ``table`` (already sorted) to ``path`` with shoal's properties, fsync it.

    Returns the file size. The directory is not fsynced here (callers batch that).
    """
    pq.write_table(
        table,
        path,
        row_group_size=row_group_rows(spec),
        **writer_options(table.schema, spec.sort_columns),
    )
    fsync_file(path)
    return os.path.getsize(path)


def write_to(table: pa.Table, place: Place, rel: str, spec: TableSpec) -> int:
    """:func:`write_parquet` into a table's place (local disk or a bucket); the size."""
    return place.write_parquet(
        rel,
        table,
        keep=True,
        row_group_size=row_group_rows(spec),
        **writer_options(table.schema, spec.sort_columns),
    )


# -- statistics ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FileStats:
    """What a Delta add action says about a file."""

    rows: int
    min_time_us: int
    max_time_us: int
    min_values: dict[str, Any]
    max_values: dict[str, Any]
    null_count: dict[str, int]

    def to_json(self) -> str:
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": self.min_values,
                "maxValues": self.max_values,
                "nullCount": self.null_count,
            },
            separators=(",", ":"),
        )


def parse_stats(text: str, time_column: str) -> FileStats:
    """Read back a Delta stats JSON text made by :meth:`FileStats.to_json`."""
    raw = json.loads(text)
    mins = dict(raw.get("minValues") or {})
    maxs = dict(raw.get("maxValues") or {})
    lo = mins.get(time_column)
    hi = maxs.get(time_column)
    return FileStats(
        rows=int(raw["numRecords"]),
        min_time_us=parse_timestamp_us(lo) if lo else _MIN_TIME_US,
        max_time_us=parse_timestamp_us(hi) if hi else _MAX_TIME_US,
        min_values=mins,
        max_values=maxs,
        null_count={k: int(v) for k, v in (raw.get("nullCount") or {}).items()},
    )


def parse_timestamp_us(text: str) -> int:
    return utc_micros(parse_utc(text))


def format_timestamp_us(us: int) -> str:
    """Delta's JSON text for a timestamp statistic, microsecond precision, UTC."""
    seconds, micros = divmod(us, 1_000_000)
    base = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=seconds)
    return base.strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"


def time_as_us(column: pa.ChunkedArray | pa.Array) -> np.ndarray[Any, np.dtype[np.int64]]:
    """A timestamp column as int64 microseconds (nulls are an error for the caller to check)."""
    typ = column.type
    if not pa.types.is_timestamp(typ):
        raise TypeError(f"time column has type {typ}, expected a timestamp")
    if typ.unit != "us":
        column = pc.cast(column, pa.timestamp("us", tz=typ.tz))
    ints = pc.cast(column, pa.int64())
    if isinstance(ints, pa.ChunkedArray):
        ints = ints.combine_chunks() if ints.num_chunks != 1 else ints.chunk(0)
    return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64)


def _stat_value(value: Any, typ: pa.DataType, is_max: bool) -> Any | None:
    if value is None:
        return None
    if pa.types.is_timestamp(typ):
        return format_timestamp_us(int(value))
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        text = str(value)
        if len(text) <= STRING_STATS_PREFIX:
            return text
        return None if is_max else text[:STRING_STATS_PREFIX]
    if pa.types.is_floating(typ):
        number = float(value)
        return number if math.isfinite(number) else None
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ):
        return value
    return None


def compute_stats(table: pa.Table, spec: TableSpec) -> FileStats:
    """Delta stats for rows about to be written (time column and primitive sort columns)."""
    time_us = time_as_us(table.column(spec.time_column))
    if table.num_rows:
        tmin, tmax = int(time_us.min()), int(time_us.max())
    else:
        tmin, tmax = _MAX_TIME_US, _MIN_TIME_US
    min_values: dict[str, Any] = {}
    max_values: dict[str, Any] = {}
    null_count: dict[str, int] = {}
    columns = [spec.time_column, *[c for c in spec.sort_columns if c != spec.time_column]]
    for name in columns:
        if name not in table.schema.names:
            continue
        col = table.column(name)
        typ = col.type
        if not (pa.types.is_primitive(typ) or pa.types.is_string(typ)):
            continue
        null_count[name] = col.null_count
        if table.num_rows == col.null_count:
            continue
        if name == spec.time_column:
            lo, hi = tmin, tmax
        elif pa.types.is_timestamp(typ):
            continue
        else:
            mm = pc.min_max(col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
        low = _stat_value(lo, typ, is_max=False)
        high = _stat_value(hi, typ, is_max=True)
        if low is not None:
            min_values[name] = low
        if high is not None:
            max_values[name] = high
    return FileStats(table.num_rows, tmin, tmax, min_values, max_values, null_count)


def stats_for_file(path: str | os.PathLike[str], spec: TableSpec) -> FileStats:
    """Delta add-action stats for an already written Parquet file (reads only the stat columns).

    The Spark jobs call this for each file they write before committing it.
    """
    return stats_of(pq.ParquetFile(path), spec)


def stats_of(pf: pq.ParquetFile, spec: TableSpec) -> FileStats:
    """:func:`stats_for_file` of an opened Parquet file."""
    names = pf.schema_arrow.names
    wanted = [c for c in dict.fromkeys([spec.time_column, *spec.sort_columns]) if c in names]
    return compute_stats(pf.read(columns=wanted), spec)


# -- splitting rows into hourly files -------------------------------------------


def _sort_key(column: pa.ChunkedArray | pa.Array) -> np.ndarray[Any, Any] | None:
    """An integer array that orders like ``column`` in Arrow's sort (nulls last), or None.

    Integer, boolean and timestamp columns without nulls are used as they are;
    strings and dictionaries become the dense rank of each value among their
    distinct values (bytewise, as Arrow compares them), nulls ranking after
    every value. Anything else (floats with their NaNs, nulls in numbers,
    nested types) returns None and the caller lets Arrow sort.
    """
    typ = column.type
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_dictionary(typ):
        encoded = column if pa.types.is_dictionary(typ) else pc.dictionary_encode(column)
        dense = pc.rank(encoded.dictionary, sort_keys="ascending", tiebreaker="dense")
        ranks = np.append(dense.to_numpy().astype(np.int64) - 1, len(encoded.dictionary))
        indices = encoded.indices.fill_null(len(encoded.dictionary))
        return np.asarray(ranks[indices.to_numpy(zero_copy_only=False)], dtype=np.int64)
    if column.null_count:
        return None
    if pa.types.is_timestamp(typ):
        column = column.view(pa.int64())
    elif not (pa.types.is_integer(typ) or pa.types.is_boolean(typ)):
        return None
    return np.asarray(column.to_numpy(zero_copy_only=False))


def sort_order(
    table: pa.Table, keys: Sequence[str], hours: np.ndarray[Any, np.dtype[np.int64]]
) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Row order by (hour, ``keys`` ascending, nulls last), stable: Arrow's ``sort_indices``.

    Built with ``numpy.lexsort`` over integer keys (strings as dictionary
    ranks), about 5x cheaper than Arrow's multi-column sort on the flusher's
    string + integer keys; other key types are sorted by Arrow.
    """
    columns = []
    for name in keys:
        key = _sort_key(table.column(name))
        if key is None:
            sort_input = table.select(list(keys)).append_column("__hour", pa.array(hours))
            order = pc.sort_indices(
                sort_input,
                sort_keys=[("__hour", "ascending"), *[(k, "ascending") for k in keys]],
            )
            return np.asarray(order.to_numpy(), dtype=np.intp)
        columns.append(key)
    # lexsort sorts by the last key first
    return np.lexsort([*reversed(columns), hours]).astype(np.intp, copy=False)


def _same_in_every_row(column: pa.ChunkedArray) -> bool:
    """True when every row holds null, or every row an empty list or map."""
    if column.null_count == len(column):
        return True
    if column.null_count or not (pa.types.is_list(column.type) or pa.types.is_map(column.type)):
        return False
    if pa.types.is_map(column.type):  # the same offsets, read as lists of entries
        t = column.type
        column = column.cast(pa.list_(pa.struct([t.key_field, t.item_field])))
    # one kernel over every chunk (a flush has one per request), without the interpreter
    # lock; reading each chunk's offsets in Python took 8 µs a chunk and column
    longest = pc.max(pc.list_value_length(column)).as_py()
    return longest is None or longest == 0


def reorder(
    table: pa.Table,
    order: np.ndarray[Any, np.dtype[np.intp]],
    helpers: concurrent.futures.Executor | None = None,
) -> pa.Table:
    """``table.take(order)``, column by column; a column equal in every row is not taken.

    Any order of an all-null (or all-empty) column is the column itself, and the
    decoders leave many of them (histogram fields in gauge rows, exemplars and
    the like): taking them would allocate and fill their buffers for nothing.
    They come back as one chunk each (:mod:`shoal.storage.blank`), which the
    Parquet writer encodes faster than the decoders' chunk per request.
    Chunked columns are taken as they are; copying them into one chunk first
    costs more and doubles the peak memory of a flush. With ``helpers`` (such as
    :data:`HELPERS`) the columns are taken on their threads, side by side (a take runs
    without the interpreter lock).
    """
    indices = pa.array(order)

    def take(column: pa.ChunkedArray) -> pa.ChunkedArray:
        if not _same_in_every_row(column):
            return column.take(indices)
        whole = blank.column(column.type, len(column), column.null_count == len(column))
        return column if whole is None else whole

    columns = helpers.map(take, table.columns) if helpers else map(take, table.columns)
    return pa.Table.from_arrays(list(columns), schema=table.schema)


HELPERS = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="shoal-write")
"""Two threads for the Arrow work of writing files, which runs without the interpreter
lock: column takes side by side, a file's Parquet encoding beside its summaries. The
flusher hands them a round only when it has fallen behind (docs/rationale.md). Their
threads start on first use. Work handed to them never hands work to them in turn, so
they cannot wait on each other."""


def split_by_hour(
    table: pa.Table, spec: TableSpec, helpers: concurrent.futures.Executor | None = None
) -> list[tuple[int, pa.Table]]:
    """Sort rows by (hour, sort columns) and cut them into one table per hour (``helpers``:
    see :func:`reorder`)."""
    if table.num_rows == 0:
        return []
    time_us = time_as_us(table.column(spec.time_column))
    hours = time_us // HOUR_US
    keys = [c for c in spec.sort_columns if c in table.schema.names]
    if not keys:
        keys = [spec.time_column]
    order = sort_order(table, keys, hours)
    if not np.all(order[1:] > order[:-1]):
        table = reorder(table, order, helpers)
        hours = hours[order]
    cuts = np.flatnonzero(np.diff(hours)) + 1
    bounds = [0, *cuts.tolist(), table.num_rows]
    return [(int(hours[lo]), table.slice(lo, hi - lo)) for lo, hi in itertools.pairwise(bounds)]
