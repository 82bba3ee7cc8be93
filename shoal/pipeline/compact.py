"""Compaction: merge each hour's small files into few well-sized, sorted files.

The plan comes from the committed file list (:func:`shoal.pipeline.plan.compaction_groups`):
per hour, runs of small files of about the target size. The runs are dealt
into one batch per Spark slot (a task costs tens of milliseconds to start, a
run a fraction of a second to merge); a task merges its runs one after the
other: it reads each run's files with Arrow, sorts their rows together by the
table's sort columns and writes them with the flusher's layout rules
(:mod:`shoal.pipeline.merge`, :mod:`shoal.pipeline.writer`), through the
table's place (local disk or a bucket, by pyarrow's filesystems), so rows never
pass through Spark's row format (measured 50-100x slower for this wide,
nested schema; docs/rationale.md).
One commit then removes the old files and adds the new ones
(``dataChange=false``): readers see the same rows before and after. Removed
files stay on disk until vacuum deletes them, ``vacuum_retention_hours``
later, so queries already running keep working.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING

from shoal.config import Config
from shoal.errors import MaintenanceError
from shoal.pipeline.commit import run_with_retries
from shoal.pipeline.merge import merge_runs
from shoal.pipeline.plan import HourGroup, compaction_groups, task_batches
from shoal.pipeline.writer import (
    HOUR_COLUMN,
    WRITTEN_DDL,
    WriteTarget,
    WrittenFile,
    write_sorted,
)
from shoal.storage.commit import Commit
from shoal.storage.layout import HOUR_US
from shoal.storage.types import TableSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from shoal.storage.table import Table

logger = logging.getLogger(__name__)

OPERATION = "OPTIMIZE"


@dataclasses.dataclass(frozen=True)
class CompactResult:
    table: str
    version: int | None
    hours: int
    files_removed: int
    files_added: int
    rows: int


def with_hour(df: DataFrame, time_column: str) -> DataFrame:
    """Add the hour index (hours since the epoch) of each row, as HOUR_COLUMN."""
    from pyspark.sql import functions as F

    return df.withColumn(
        HOUR_COLUMN, F.expr(f"floor(unix_micros(`{time_column}`) / {HOUR_US})").cast("long")
    )


def write_hourly(
    spark: SparkSession, df: DataFrame, target: WriteTarget, hours: int
) -> list[WrittenFile]:
    """Write ``df`` (with HOUR_COLUMN) as sorted hourly files; one task per hour."""
    spec = target.spec
    parts = max(1, hours)
    ordered = df.repartitionByRange(parts, HOUR_COLUMN).sortWithinPartitions(
        HOUR_COLUMN, *spec.sort_columns
    )
    rows = ordered.mapInArrow(functools.partial(write_sorted, target), WRITTEN_DDL).collect()
    return [WrittenFile.from_row(r.asDict()) for r in rows]


def merge_groups(
    spark: SparkSession, target: WriteTarget, groups: list[HourGroup]
) -> list[WrittenFile]:
    """Merge each group's files into sorted hourly files, in Spark tasks.

    Groups are dealt into one batch per slot (``defaultParallelism``), balanced
    by input bytes; a task merges its batch's groups one after the other.
    """
    sc = spark.sparkContext
    batches = [
        [[target.place.rel(f.path) for f in groups[i].files] for i in batch]
        for batch in task_batches([g.bytes for g in groups], sc.defaultParallelism)
    ]
    rdd = sc.parallelize(batches, max(1, len(batches)))
    rows = rdd.flatMap(functools.partial(merge_runs, target)).collect()
    return [WrittenFile.from_row(r) for r in rows]


def compact_table(
    spark: SparkSession,
    table: Table,
    config: Config,
    *,
    since_us: int | None = None,
    until_us: int | None = None,
) -> CompactResult:
    """Compact one table; safe to run while the server flushes into it."""
    target = WriteTarget.for_table(table, config)
    planned: dict[str, int] = {}

    def attempt(snapshot: TableSnapshot) -> Commit | None:
        groups = compaction_groups(
            snapshot.files,
            target_file_bytes=target.target_file_bytes,
            since_us=since_us,
            until_us=until_us,
        )
        if not groups:
            return None
        inputs = [f for g in groups for f in g.files]
        logger.info(
            "compacting %s: %d hours, %d files, %d rows",
            table.label,
            len(groups),
            len(inputs),
            sum(f.rows for f in inputs),
        )
        written = merge_groups(spark, target, groups)
        rows_in, rows_out = sum(f.rows for f in inputs), sum(w.rows for w in written)
        if rows_in != rows_out:
            table.files.discard(w.new_file() for w in written)
            raise MaintenanceError(
                f"compact {table.label}: read {rows_in} rows but wrote "
                f"{rows_out}; nothing was committed"
            )
        planned.update(hours=len({g.hour for g in groups}), rows=rows_out)
        return Commit(
            operation=OPERATION,
            adds=tuple(w.new_file() for w in written),
            removes=tuple(table.place.rel(f.path) for f in inputs),
            data_change=False,
        )

    result = run_with_retries("compact", table, attempt, int(config.maintenance_commit_attempts))
    return CompactResult(
        table=table.label,
        version=None if result is None else result.version,
        hours=planned.get("hours", 0) if result else 0,
        files_removed=0 if result is None else result.files_removed,
        files_added=0 if result is None else result.files_added,
        rows=planned.get("rows", 0) if result else 0,
    )
