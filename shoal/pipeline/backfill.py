"""``shoal import --engine spark``: the backfill run on Spark, with the same overlap rejection.

For inputs too large for one process. Spark runs one task per input file:
first each task computes its file's coverage (time buckets per series, with
storage's coverage code, reading only two columns); the driver compares them
with the table's coverage and with each other, and any overlap is refused,
naming the ranges, unless ``--allow-overlap``, before anything is written,
and once more on the version the commit lands on (a flush may have committed
the same minutes meanwhile; the written files are then deleted). Each task
splits its file by hour, sorts and writes it with the flusher's layout rules,
and the driver appends every written file in one commit. A crash before the
commit leaves only unreferenced files, which vacuum removes; rerunning the
import redoes it.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from shoal.config import Config
from shoal.errors import SchemaMismatchError
from shoal.pipeline.commit import run_with_retries
from shoal.pipeline.writer import WriteTarget, WrittenFile, write_table
from shoal.schema import UTC_US, TableSpec
from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.commit import Commit
from shoal.storage.location import StorageLocation
from shoal.storage.log import overlap, overlap_error
from shoal.storage.types import CommitResult, TableSnapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from shoal.storage.table import Table

logger = logging.getLogger(__name__)

OPERATION = "import"


def open_input(location: StorageLocation, name: str) -> pq.ParquetFile:
    """An input file, named by a local path or an ``s3://`` URL, opened for reading."""
    fs, path = location.input(name)
    return pq.ParquetFile(fs.open_input_file(path))


def _check_schemas(table: Table, paths: Sequence[str]) -> None:
    wanted = table.spec.schema.names
    problems = []
    for path in paths:
        names = set(open_input(table.place.location, path).schema_arrow.names)
        missing = [n for n in wanted if n not in names]
        if missing:
            problems.append(f"{path}: missing column(s) {', '.join(missing)}")
    if problems:
        raise SchemaMismatchError(table.label, problems)


def file_coverage(
    location: StorageLocation, spec: TableSpec, bucket_s: int, path: str
) -> tuple[str, bytes]:
    """Task body: one input file's coverage, encoded (reads only the time and series columns)."""
    columns = [spec.time_column, *spec.series_columns[:1]]
    data = open_input(location, path).read(columns=columns)
    time_col = data.column(spec.time_column).cast(UTC_US)
    series = data.column(spec.series_columns[0]) if spec.series_columns else None
    return path, cov.encode(cov.compute(layout.time_as_us(time_col), series, bucket_s))


def import_file(target: WriteTarget, path: str) -> list[dict[str, object]]:
    """Task body: one input file split by hour, sorted, written with the layout rules."""
    source = open_input(target.place.location, path)
    return write_table(target, source.read(columns=list(target.spec.schema.names)))


def backfill(
    spark: SparkSession,
    table: Table,
    paths: Sequence[str],
    config: Config,
    *,
    allow_overlap: bool = False,
) -> CommitResult | None:
    """Append the rows of ``paths`` (local paths, which the executors must see at the
    same path, or ``s3://`` URLs) to ``table`` (see the module docstring)."""
    if not paths:
        return None
    location = table.place.location
    inputs = [p if "://" in p else location.input(p)[1] for p in map(str, paths)]
    _check_schemas(table, inputs)
    spec = table.spec
    target = WriteTarget.for_table(table, config)
    sc = spark.sparkContext

    def attempt(snapshot: TableSnapshot) -> Commit | None:
        tasks = sc.parallelize(inputs, len(inputs))
        coverage = functools.partial(file_coverage, location, spec, table.bucket_s)
        found = dict(tasks.map(coverage).collect())
        incoming = [cov.decode(found[p]) for p in inputs]

        if not allow_overlap:
            clash = overlap(table.covered(snapshot), incoming, bool(spec.series_columns))
            if clash:
                raise overlap_error(table.label, clash, table.bucket_s)
        rows = (
            sc.parallelize(inputs, len(inputs))
            .flatMap(functools.partial(import_file, target))
            .collect()
        )
        written = [WrittenFile.from_row(r) for r in rows]
        logger.info("backfill %s: wrote %d files", table.label, len(written))
        return Commit(
            operation=OPERATION,
            adds=tuple(w.new_file() for w in written),
            # again on the version the commit lands on: a flush may have committed since
            no_overlap=None if allow_overlap else tuple(incoming),
        )

    return run_with_retries("import", table, attempt, int(config.maintenance_commit_attempts))


def run_spark_import(
    table: Table, paths: Sequence[str], config: Config, master: str | None, allow_overlap: bool
) -> int:
    """The ``shoal import --engine spark`` command body: start Spark, backfill, report."""
    from shoal.pipeline.session import create_session

    sys.stderr.write(f"{table.label}: importing {len(paths)} file(s) on Spark...\n")
    spark = create_session(config, master, app_name="shoal-import")
    try:
        result = backfill(spark, table, paths, config, allow_overlap=allow_overlap)
    finally:
        spark.stop()
    if result is None:
        print(f"{table.label}: nothing to import")
    else:
        print(
            f"{table.label}: version {result.version}: "
            f"{result.files_added} files, {result.rows_added} rows imported (spark)"
        )
    return 0
