"""Import (backfill): append Parquet files to a table, refusing overlaps found via coverage.

For each file: check its schema against the table's, read only its time (and
series) column, compute its coverage and compare it with the coverage of
every committed file and of the files earlier in the same import. Overlap is
per series when the table has a series column (two series may share a
minute; one series may not get the same minute twice), else per table.

A file whose schema is exactly the table's is *adopted*: copied byte for
byte into the table (``hour=.../`` when its rows fall in one hour, else
``imported/``) without decoding it, so an import costs a read of one column
plus a file copy. Any other file is *rewritten*: cast to the table schema,
split by hour, sorted and written with shoal's writer rules. All files of
one import land in one commit.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from shoal.errors import SchemaMismatchError, StorageError
from shoal.schema import UTC_US, TableSpec
from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.commit import Commit, PreparedFile
from shoal.storage.log import overlap, overlap_error
from shoal.storage.spec import schema_differences
from shoal.storage.table import Table
from shoal.storage.types import CommitResult

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Plan:
    source: Path
    adopt: bool
    coverage: cov.Coverage
    stats: layout.FileStats
    hours: set[int]


def spec_for_file(name: str, path: Path, time_column: str | None) -> TableSpec:
    """The spec of a new user table made from a Parquet file's schema.

    Timestamps become microseconds (Delta's unit); the time column becomes
    ``timestamp[us, tz=UTC]``.
    """
    if not time_column:
        raise StorageError(f"{name}: a new table needs --time-column")
    schema = _open(path).schema_arrow.remove_metadata()
    if time_column not in schema.names:
        raise SchemaMismatchError(name, [f"time column {time_column!r} not in {path}"])
    fields = []
    for field in schema:
        typ = field.type
        if field.name == time_column:
            if not pa.types.is_timestamp(typ):
                raise SchemaMismatchError(
                    name, [f"time column {time_column!r} is {typ}, not a timestamp"]
                )
            typ = UTC_US
        elif pa.types.is_timestamp(typ) and typ.unit != "us":
            typ = pa.timestamp("us", tz=typ.tz)
        fields.append(pa.field(field.name, typ, field.nullable))
    return TableSpec(
        name=name,
        schema=pa.schema(fields),
        time_column=time_column,
        sort_columns=(time_column,),
        series_columns=(),
    )


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except FileNotFoundError:
        raise StorageError(f"{path}: no such file") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise StorageError(f"{path}: not a readable Parquet file: {exc}") from None


def _plan(table: Table, path: Path, rewrite: bool | None) -> _Plan:
    spec = table.spec
    pf = _open(path)
    file_schema = pf.schema_arrow
    diffs = schema_differences(file_schema.remove_metadata(), spec.schema)
    if spec.time_column not in file_schema.names:
        raise SchemaMismatchError(
            table.label, [f"{path}: missing time column {spec.time_column!r}"]
        )
    wanted = [
        c
        for c in dict.fromkeys([spec.time_column, *spec.series_columns, *spec.sort_columns])
        if c in file_schema.names
    ]
    cols = pf.read(columns=wanted)
    time_col = cols.column(spec.time_column)
    if not pa.types.is_timestamp(time_col.type):
        raise SchemaMismatchError(
            table.label, [f"{path}: time column {spec.time_column!r} is {time_col.type}"]
        )
    if time_col.null_count:
        raise StorageError(f"{path}: {time_col.null_count} rows have no {spec.time_column!r}")
    if time_col.type != UTC_US:
        cols = cols.set_column(
            cols.schema.get_field_index(spec.time_column),
            spec.time_column,
            time_col.cast(UTC_US),
        )
    time_us = layout.time_as_us(cols.column(spec.time_column))
    coverage = table.files.compute_coverage(cols)
    stats = layout.compute_stats(cols, spec)
    hours: set[int] = set()
    if len(time_us):
        hours = {int(time_us.min()) // layout.HOUR_US, int(time_us.max()) // layout.HOUR_US}
    adopt = not diffs and rewrite is not True
    if rewrite is False and diffs:
        raise SchemaMismatchError(table.label, [f"{path}: {d}" for d in diffs])
    return _Plan(path, adopt, coverage, stats, hours)


def import_files(
    table: Table,
    paths: Sequence[Path],
    *,
    time_column: str | None = None,
    allow_overlap: bool = False,
    progress: Callable[[int, int], None] | None = None,
    rewrite: bool | None = None,
) -> CommitResult:
    """Append Parquet files to ``table`` in one commit; see the module docstring.

    ``rewrite``: None adopts files whose schema is exactly the table's and
    rewrites the others; True rewrites every file; False refuses files that
    would need rewriting.
    """
    started = time.perf_counter()
    if time_column is not None and time_column != table.spec.time_column:
        raise SchemaMismatchError(
            table.label, [f"time column is {table.spec.time_column!r}, not {time_column!r}"]
        )
    if not paths:
        raise StorageError("nothing to import")
    plans = [_plan(table, Path(p), rewrite) for p in paths]
    incoming = tuple(plan.coverage for plan in plans)
    found = overlap(table.covered(), incoming, bool(table.spec.series_columns))
    if found and not allow_overlap:
        raise overlap_error(table.label, found, table.bucket_s)  # before any file is written
    if found:
        logger.warning(
            "%s: importing over %d already covered buckets (--allow-overlap)",
            table.label,
            len(found),
        )
    prepared: list[PreparedFile] = []
    try:
        for i, plan in enumerate(plans):
            if plan.adopt:
                item = table.files.adopt(plan.source, plan.hours, plan.stats, plan.coverage)
                prepared.append(item)
            else:
                prepared.extend(table.files.write(table.conform(pq.read_table(plan.source))))
            if progress is not None:
                progress(i + 1, len(plans))
    except BaseException:
        table.files.discard(prepared)
        raise
    result = table.commit(
        Commit(
            operation="import",
            adds=tuple(prepared),
            # checked again on the version the import lands on: a flush or another
            # import may have committed the same buckets since
            no_overlap=None if allow_overlap else incoming,
            metadata={"shoal.sources": [p.source.name for p in plans]},
        ),
        started=started,
    )
    assert result is not None  # an import carries no transaction id
    return result
