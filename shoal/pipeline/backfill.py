"""``shoal import --engine spark``: the backfill run on Spark, with the same overlap rejection.

For inputs too large for one process. Spark reads the input files; each task
computes the coverage (time buckets per series) of its rows with storage's
coverage code and the driver unions them and compares the result with the
table's coverage: any overlap is refused, naming the ranges, unless
``--allow-overlap``, before anything is written. Then rows are split by hour,
sorted and written with the flusher's layout rules (one task per hour) and
appended in one commit. A crash before the commit leaves only unreferenced
files, which vacuum removes; rerunning the import redoes it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap, FrozenBitMap

from shoal.config import Config
from shoal.errors import CoverageOverlapError, SchemaMismatchError
from shoal.otlp.schema import UTC_US, TableSpec
from shoal.pipeline.commit import Change, run_with_retries
from shoal.pipeline.compact import with_hour, write_hourly
from shoal.pipeline.writer import WriteTarget
from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.types import CommitResult, NewFile, TableSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from shoal.storage.table import Table

logger = logging.getLogger(__name__)

OPERATION = "import"
_WHOLE = "\x00whole"
_COVERAGE_DDL = "key string, bitmap binary"


def _check_schemas(table: Table, paths: Sequence[Path]) -> None:
    wanted = table.spec.schema.names
    problems = []
    for path in paths:
        names = set(pq.read_schema(path).names)
        missing = [n for n in wanted if n not in names]
        if missing:
            problems.append(f"{path}: missing column(s) {', '.join(missing)}")
    if problems:
        raise SchemaMismatchError(table.label, problems)


def _task_coverage(
    spec: TableSpec, bucket_s: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the coverage of a task's rows as (series key, bitmap) rows."""
    whole = BitMap()
    per_series: dict[str, BitMap] = {}
    for batch in batches:
        time_col = batch.column(spec.time_column).cast(UTC_US)
        series = batch.column(spec.series_columns[0]) if spec.series_columns else None
        part = cov.compute(layout.time_as_us(time_col), series, bucket_s)
        whole |= part.buckets
        for key, bm in part.series.items():
            per_series.setdefault(key, BitMap()).update(bm)
    keys = [_WHOLE, *per_series]
    maps = [whole, *per_series.values()]
    yield pa.RecordBatch.from_pydict(
        {"key": keys, "bitmap": [m.serialize() for m in maps]},
        schema=pa.schema([("key", pa.string()), ("bitmap", pa.binary())]),
    )


def input_coverage(df: DataFrame, spec: TableSpec, bucket_s: int) -> cov.Coverage:
    """The coverage of every row of ``df``, computed by the tasks, unioned on the driver."""
    columns = [spec.time_column, *spec.series_columns[:1]]
    fn = functools.partial(_task_coverage, spec, bucket_s)
    whole = BitMap()
    series: dict[str, BitMap] = {}
    for row in df.select(*columns).mapInArrow(fn, _COVERAGE_DDL).collect():
        bm = BitMap.deserialize(bytes(row["bitmap"]))
        if row["key"] == _WHOLE:
            whole |= bm
        else:
            series.setdefault(row["key"], BitMap()).update(bm)
    return cov.Coverage(
        bucket_s, FrozenBitMap(whole), {k: FrozenBitMap(v) for k, v in series.items()}
    )


def overlap(table: Table, incoming: cov.Coverage, snapshot: TableSnapshot) -> BitMap:
    """Buckets of ``incoming`` the table already covers (per series when it has series)."""
    existing = table.covered(snapshot)
    if not table.spec.series_columns:
        return BitMap(existing.buckets & incoming.buckets)
    found = BitMap()
    for key, bm in incoming.series.items():
        prior = existing.series.get(key)
        if prior is not None:
            found |= prior & bm
    return found


def backfill(
    spark: SparkSession,
    table: Table,
    paths: Sequence[Path],
    config: Config,
    *,
    allow_overlap: bool = False,
) -> CommitResult | None:
    """Append the rows of ``paths`` to ``table`` (see the module docstring)."""
    if not paths:
        return None
    _check_schemas(table, paths)
    spec = table.spec
    df = spark.read.parquet(*[str(p) for p in paths]).select(*spec.schema.names)
    target = WriteTarget(
        str(table.path), spec, int(config.compact_target_file_bytes), table.bucket_s
    )

    def attempt(snapshot: TableSnapshot) -> Change | None:
        incoming = input_coverage(df, spec, table.bucket_s)
        clash = overlap(table, incoming, snapshot)
        if clash and not allow_overlap:
            unit = table.bucket_s * 1_000_000
            ranges = [
                (cov.from_us(a * unit).isoformat(), cov.from_us(b * unit).isoformat())
                for a, b in cov.runs(clash)
            ]
            raise CoverageOverlapError(table.label, ranges)
        per_hour = 3600 // table.bucket_s
        hours = {int(b) // per_hour for b in incoming.buckets}
        written = write_hourly(spark, with_hour(df, spec.time_column), target, len(hours))
        logger.info(
            "backfill %s: wrote %d files for %d hours", table.label, len(written), len(hours)
        )
        return Change(
            adds=tuple(NewFile(w.path, w.size, w.stats) for w in written),
            removes=(),
            operation=OPERATION,
            written=tuple(w.absolute(table.path) for w in written),
            data_change=True,
        )

    return run_with_retries("import", table, attempt, int(config.maintenance_commit_attempts))


def run_spark_import(
    table: Table, paths: Sequence[Path], config: Config, master: str | None, allow_overlap: bool
) -> int:
    """The ``shoal import --engine spark`` command body: start Spark, backfill, report."""
    from shoal.pipeline.session import create_session

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
