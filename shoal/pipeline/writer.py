"""Executor-side Parquet writer: Spark rows in, files laid out like the flusher's out.

Spark hands each task its rows as Arrow record batches (``mapInArrow``), already
sorted by hour and the table's sort columns. :func:`write_sorted` casts them to
the table's exact Arrow schema (Spark reports every column nullable and names
list items ``element``) and writes them with ``shoal.storage.layout``'s writer
properties, one file per hour, rolling to a new file once a file reaches the
target size. :func:`write_hour` does the same for rows already in memory
(compaction, imports), also when their strings are dictionaries. Files go
through the table's :class:`~shoal.storage.place.Place`, shipped to the task:
on local disk each file is fsynced, its directory too; in a bucket each is one
upload (pyarrow's S3 filesystem, credentials from the executor's own
environment), visible only once whole. Its Delta statistics and coverage are
computed from the rows written, and the task yields one row per file for the
driver to commit. Nothing here commits: a file no commit references is
invisible and vacuum removes it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shoal.pipeline import encoded
from shoal.schema import TableSpec
from shoal.storage import layout, logindex
from shoal.storage.commit import NewFile, PreparedFile
from shoal.storage.files import TableFiles, conform
from shoal.storage.place import Place

if TYPE_CHECKING:
    from shoal.config import Config
    from shoal.storage.table import Table

HOUR_COLUMN = "_shoal_hour"
"""Column the jobs add to rows to partition and sort them by hour; not written."""

WRITTEN_SCHEMA = pa.schema(
    [
        pa.field("path", pa.string()),
        pa.field("hour", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("min_time_us", pa.int64()),
        pa.field("max_time_us", pa.int64()),
        pa.field("stats", pa.string()),
    ]
)
"""One row per file a task wrote (what :func:`write_sorted` yields)."""

_SPARK_TYPES = {pa.string(): "string", pa.int64(): "long"}

WRITTEN_DDL = ", ".join(f"{f.name} {_SPARK_TYPES[f.type]}" for f in WRITTEN_SCHEMA)
""":data:`WRITTEN_SCHEMA` in Spark's DDL (the rows ``mapInArrow`` is told to expect)."""


@dataclasses.dataclass(frozen=True)
class WriteTarget:
    """Where and how a task writes: shipped (pickled) to the executors."""

    place: Place
    """The table's directory or bucket prefix (pickled as its location: no secret)."""
    spec: TableSpec
    target_file_bytes: int
    coverage_bucket_s: int | None = None
    """When set, each file's coverage bitmaps are written beside it, as storage does."""

    @classmethod
    def for_table(cls, table: Table, config: Config) -> WriteTarget:
        """How a job writes ``table``'s files: ``compact_target_file_bytes`` each, with
        their coverage."""
        return cls(table.place, table.spec, int(config.compact_target_file_bytes), table.bucket_s)


@dataclasses.dataclass(frozen=True)
class WrittenFile:
    """A file a task wrote, as the driver sees it."""

    path: str
    hour: int
    size: int
    rows: int
    min_time_us: int
    max_time_us: int
    stats: str

    @classmethod
    def from_row(cls, row: dict[str, object]) -> WrittenFile:
        return cls(**row)  # type: ignore[arg-type]

    def new_file(self) -> NewFile:
        """The file as a commit adds it (its statistics already computed)."""
        return NewFile(self.path, self.size, self.stats)


class _HourFile:
    """One open output file; rows are buffered up to a full row group."""

    def __init__(self, target: WriteTarget, hour: int, schema: pa.Schema | None = None) -> None:
        self.target = target
        self.hour = hour
        self.relpath = layout.hour_file_path(hour)
        self.sink = target.place.open_output(self.relpath)
        table_schema = target.spec.schema
        self.schema = table_schema if schema is None else schema
        options = layout.writer_options(table_schema, target.spec.sort_columns)
        if self.schema.equals(table_schema):
            self.writer = pq.ParquetWriter(self.sink, table_schema, **options)
        else:
            # rows arrive with dictionary strings (encoded.dictionary_schema): written as
            # they are, the file stores the table's own schema, as the flusher's files do
            self.writer = pq.ParquetWriter(self.sink, self.schema, store_schema=False, **options)
            self.writer.add_key_value_metadata(encoded.stored_schema_metadata(table_schema))
        self.buffer: list[pa.RecordBatch] = []
        self.buffered = 0
        self.rows = 0
        # the stat and coverage columns of every row written, so that close() need not
        # read the file back
        self._kept = [
            c
            for c in dict.fromkeys(
                [target.spec.time_column, *target.spec.sort_columns, *target.spec.series_columns]
            )
            if c in table_schema.names
        ]
        self._columns: list[pa.RecordBatch] = []

    def add(self, batch: pa.RecordBatch) -> None:
        self._columns.append(batch.select(self._kept))
        self.buffer.append(batch)
        self.buffered += batch.num_rows
        if self.buffered >= layout.ROW_GROUP_ROWS:
            self._write_buffer()

    def _write_buffer(self) -> None:
        if not self.buffer:
            return
        data = pa.Table.from_batches(self.buffer, schema=self.schema)
        self.writer.write_table(data, row_group_size=layout.row_group_rows(self.target.spec))
        self.rows += data.num_rows
        self.buffer, self.buffered = [], 0

    def full(self) -> bool:
        return int(self.sink.tell()) >= self.target.target_file_bytes

    def close(self) -> dict[str, object]:
        self._write_buffer()
        self.writer.close()
        size = int(self.sink.tell())
        self.sink.close()
        self.target.place.seal(self.relpath)
        schema = self.target.spec.schema
        kept = pa.Table.from_batches(
            self._columns, schema=pa.schema([self.schema.field(c) for c in self._kept])
        )
        kept = conform(kept, pa.schema([schema.field(c) for c in self._kept]), self.relpath)
        stats = layout.compute_stats(kept, self.target.spec)
        if stats.rows != self.rows:
            raise AssertionError(f"{self.relpath}: wrote {self.rows} rows, counted {stats.rows}")
        if self.target.coverage_bucket_s is not None:
            spec = self.target.spec
            files = TableFiles(self.target.place, spec, self.target.coverage_bucket_s, spec.name)
            files.write_coverage(
                [PreparedFile(self.relpath, size, stats, files.compute_coverage(kept))]
            )
        if self.target.spec.name == "logs":  # the log index of the file, as the flush writes it
            rows = self.target.place.read_table(self.relpath, columns=list(logindex.COLUMNS))
            logindex.write(self.target.place, self.relpath, rows)
        written = WrittenFile(
            self.relpath,
            self.hour,
            size,
            stats.rows,
            stats.min_time_us,
            stats.max_time_us,
            stats.to_json(),
        )
        return dataclasses.asdict(written)


def write_sorted(
    target: WriteTarget, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: write rows sorted by (HOUR_COLUMN, sort columns) to hourly files."""
    current: _HourFile | None = None
    written: list[dict[str, object]] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        hours = np.asarray(batch.column(HOUR_COLUMN).to_numpy(zero_copy_only=False))
        rows = conform(batch, target.spec.schema, target.spec.name)
        cuts = [0, *(np.flatnonzero(np.diff(hours)) + 1).tolist(), rows.num_rows]
        for start, end in itertools.pairwise(cuts):
            hour = int(hours[start])
            if current is not None and current.hour != hour:
                written.append(current.close())
                current = None
            if current is None:
                current = _HourFile(target, hour)
            current.add(rows.slice(start, end - start))
            if current.buffered == 0 and current.full():
                written.append(current.close())
                current = None
    if current is not None:
        written.append(current.close())
    if written:
        yield pa.RecordBatch.from_pylist(written, schema=WRITTEN_SCHEMA)


def write_table(target: WriteTarget, table: pa.Table) -> list[dict[str, object]]:
    """Split rows by hour, sort each hour by the sort columns and write hourly files."""
    written: list[dict[str, object]] = []
    data = conform(table, target.spec.schema, target.spec.name)
    for hour, piece in layout.split_by_hour(data, target.spec):
        written.extend(write_hour(target, hour, piece))
    return written


def write_hour(
    target: WriteTarget, hour: int, rows: pa.Table, schema: pa.Schema | None = None
) -> list[dict[str, object]]:
    """Write rows of one hour, already sorted, to as many files as the target size asks.

    ``schema`` is the rows' schema when it is not the table's own (dictionary
    strings, see :mod:`shoal.pipeline.encoded`).
    """
    written: list[dict[str, object]] = []
    current = _HourFile(target, hour, schema)
    for start in range(0, rows.num_rows, layout.ROW_GROUP_ROWS):
        for batch in rows.slice(start, layout.ROW_GROUP_ROWS).to_batches():
            current.add(batch)
        if (
            current.buffered == 0
            and current.full()
            and start + layout.ROW_GROUP_ROWS < rows.num_rows
        ):
            written.append(current.close())
            current = _HourFile(target, hour, schema)
    written.append(current.close())
    return written
