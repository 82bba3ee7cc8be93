"""Writing a table's files before a commit: data conformed, split, sorted, fsynced, with coverage.

Steps 1 and 2 of the commit protocol (docs/storage.md): each Parquet file is
written under ``hour=.../`` and fsynced with its directory, then each file's
coverage under ``_coverage/`` (in a bucket, each file is one PUT:
:mod:`shoal.storage.place`). The result is a list of
:class:`~shoal.storage.commit.PreparedFile` that a :class:`~shoal.storage.commit.Commit`
adds; when the commit is refused, :meth:`TableFiles.discard` deletes them again.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

from shoal.errors import SchemaMismatchError, StorageError
from shoal.schema import TableSpec
from shoal.storage import coverage as cov
from shoal.storage import faults, layout, logindex, lookup, series
from shoal.storage.commit import NewFile, PreparedFile
from shoal.storage.durable import fsync_dir, fsync_file
from shoal.storage.place import Place
from shoal.storage.spec import schema_differences

logger = logging.getLogger(__name__)

Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def conform(data: Rows, schema: pa.Schema, label: str) -> Rows:
    """``data`` with exactly ``schema`` (columns selected and cast), or SchemaMismatchError."""
    if data.schema.equals(schema):
        return data
    diffs = schema_differences(data.schema, schema)
    try:
        data = data.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        raise SchemaMismatchError(label, diffs or ["incompatible types"]) from None
    for field in schema:
        if not field.nullable and data.column(field.name).null_count:
            raise SchemaMismatchError(
                label, [f"column {field.name!r} holds nulls but the table requires values"]
            )
    return data


def discard(place: Place, rels: Iterable[str]) -> None:
    """Delete files no commit references (best effort: vacuum catches leftovers)."""
    for rel in rels:
        try:
            place.delete(rel)
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not delete uncommitted file %s; vacuum will", place.full(rel))


class TableFiles:
    """The files of one table directory: how they are written, described and discarded."""

    def __init__(self, place: Place | Path, spec: TableSpec, bucket_s: int, label: str) -> None:
        if not isinstance(place, Place):
            from shoal.storage.location import StorageLocation

            place = Place(StorageLocation.local(place))
        self.place = place
        self.spec = spec
        self.bucket_s = bucket_s
        self.label = label
        self.summaries: Callable[[str, pa.Table], None] | None = None
        """Told of each series summary written (the table's series index keeps it)."""

    def conform(self, data: pa.Table) -> pa.Table:
        return conform(data, self.spec.schema, self.label)

    def compute_coverage(self, data: pa.Table) -> cov.Coverage:
        """The coverage of rows holding at least the time (and series) column."""
        time_us = layout.time_as_us(data.column(self.spec.time_column))
        series = None
        if self.spec.series_columns and self.spec.series_columns[0] in data.schema.names:
            series = data.column(self.spec.series_columns[0])
        return cov.compute(time_us, series, self.bucket_s)

    def coverage_of_file(self, rel: str | Path) -> cov.Coverage:
        """A data file's coverage, computed by reading its time and series columns."""
        parquet = self.place.parquet(rel)
        names = parquet.schema_arrow.names
        columns = [c for c in (self.spec.time_column, *self.spec.series_columns) if c in names]
        return self.compute_coverage(parquet.read(columns=columns))

    def write(
        self, data: pa.Table, helpers: concurrent.futures.Executor | None = None
    ) -> list[PreparedFile]:
        """Split conformed rows by hour, sort, write and fsync the files and their coverage.

        With ``helpers`` (``layout.HELPERS``), the columns are taken in sorted order on
        their threads, and each file's Parquet encoding runs there beside its summaries."""
        prepared: list[PreparedFile] = []
        dirs: set[str] = set()
        try:
            for hour, piece in layout.split_by_hour(data, self.spec, helpers):
                rel = layout.hour_file_path(hour)
                parent = rel.rsplit("/", 1)[0]
                if parent not in dirs:
                    self.place.ensure_dir(parent)
                    dirs.add(parent)
                if helpers is None:
                    size = layout.write_to(piece, self.place, rel, self.spec)
                    stats, coverage = self._describe(rel, piece)
                else:  # the Parquet encoding (no interpreter lock) beside the summaries
                    written = helpers.submit(layout.write_to, piece, self.place, rel, self.spec)
                    try:
                        stats, coverage = self._describe(rel, piece)
                    finally:
                        concurrent.futures.wait([written])  # never leave it half written
                    size = written.result()
                prepared.append(PreparedFile(rel, size, stats, coverage))
            for d in dirs:
                self.place.sync_dir(d)
            faults.point("parquet-written")
            self.write_coverage(prepared)
        except BaseException:
            self.discard(prepared)
            raise
        return prepared

    def _describe(self, rel: str, piece: pa.Table) -> tuple[layout.FileStats, cov.Coverage]:
        """A file's series summary and lookup filter (written beside it), statistics and
        coverage."""
        if self.spec.index_columns:
            summary = series.write_summary(self.place, self.spec, rel, piece)
            if self.summaries is not None:
                self.summaries(rel, summary)
        if self.spec.name == "logs":
            logindex.write(self.place, rel, piece)
        if self.spec.lookup_column:
            lookup.write_filter(self.place, self.spec, rel, piece)
        return layout.compute_stats(piece, self.spec), self.compute_coverage(piece)

    def adopt(
        self, source: Path, hours: set[int], stats: layout.FileStats, coverage: cov.Coverage
    ) -> PreparedFile:
        """Copy a file that already has the table's exact schema, byte for byte, fsynced.

        It goes to its hour's directory when its rows fall in one hour, else to
        ``imported/``.
        """
        if len(hours) == 1:
            rel = layout.hour_file_path(next(iter(hours)))
        else:
            rel = f"{layout.IMPORT_DIR}/{layout.new_file_name()}"
        self.place.ensure_dir(rel.rsplit("/", 1)[0])
        item = PreparedFile(rel, self.place.copy_in(source, rel), stats, coverage)
        try:
            self.write_coverage([item])
        except BaseException:
            self.discard([item])
            raise
        return item

    def prepare(self, adds: Sequence[PreparedFile | NewFile]) -> list[PreparedFile]:
        """Every add of a commit as a PreparedFile: files written elsewhere (Spark) are
        checked, described from their stats, fsynced, and given coverage if they lack it."""
        prepared: list[PreparedFile] = []
        missing: list[PreparedFile] = []
        for add in adds:
            if isinstance(add, PreparedFile):
                prepared.append(add)
                continue
            if not self.place.exists(add.path):
                raise StorageError(f"{self.label}: file to add does not exist: {add.path}")
            if add.stats is not None:
                stats = layout.parse_stats(add.stats, self.spec.time_column)
            else:
                stats = layout.stats_of(self.place.parquet(add.path), self.spec)
            size = add.size if add.size is not None else self.place.size(add.path)
            try:
                found = cov.decode(self.place.read(layout.coverage_path(add.path)))
                item = PreparedFile(add.path, size, stats, found)
            except FileNotFoundError:
                item = PreparedFile(add.path, size, stats, self.coverage_of_file(add.path))
                missing.append(item)
            prepared.append(item)
            if self.place.local:
                fsync_file(self.place.path(add.path))
                fsync_dir(
                    self.place.path(add.path.rsplit("/", 1)[0])
                    if "/" in add.path
                    else self.place.base
                )
        self.write_coverage(missing)
        return prepared

    def write_coverage(self, prepared: Sequence[PreparedFile]) -> None:
        if not prepared:
            return
        self.place.ensure_dir(layout.COVERAGE_DIR)
        for item in prepared:
            cov.write(self.place, layout.coverage_path(item.path), item.coverage)
        self.place.sync_dir(layout.COVERAGE_DIR)
        faults.point("coverage-written")

    def discard(self, adds: Iterable[PreparedFile | NewFile]) -> None:
        """Delete the data, coverage and series files of adds no commit will reference."""
        discard(
            self.place,
            (
                rel
                for add in adds
                for rel in (
                    add.path,
                    layout.coverage_path(add.path),
                    layout.series_path(add.path),
                    logindex.index_path(add.path),
                    layout.lookup_path(add.path),
                )
            ),
        )
