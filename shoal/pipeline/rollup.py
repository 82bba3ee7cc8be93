"""Rollups: downsample a tenant's ``metrics`` into ``metrics_1m`` and ``metrics_1h``, incrementally.

Progress is a Delta transaction id on each derived table: ``(shoal-rollup, p)``
means every source version below ``p`` has been rolled up. A run diffs the
source's file list at ``p - 1`` against the latest one; the hours touched by
files that appeared since (their coverage says which) are the hours to redo.
For those hours only, the tasks read the raw points through Arrow
(:mod:`shoal.pipeline.source`; plus one hour before, the lookback of the
cumulative rule in :mod:`shoal.pipeline.aggregate`), Spark
aggregates them and writes one sorted file per hour; a single commit on the
derived table replaces its files of those hours and records the new progress.
Running again with no new source commits does nothing; recomputing an hour
gives the same rows, so a rerun after a crash converges on the same table.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import pyarrow as pa

from shoal.config import Config
from shoal.errors import StorageError
from shoal.pipeline.aggregate import LOOKBACK_S, rollup, with_increments
from shoal.pipeline.commit import run_with_retries
from shoal.pipeline.compact import with_hour, write_hourly
from shoal.pipeline.plan import file_hour
from shoal.pipeline.schema import ROLLUP_SOURCE, ROLLUP_WIDTHS_S, rollup_spec
from shoal.pipeline.source import read_hours
from shoal.pipeline.writer import HOUR_COLUMN, WriteTarget
from shoal.storage.commit import Commit, Txn
from shoal.storage.layout import hour_index
from shoal.storage.types import ScanFile, TableSnapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from shoal.storage.store import TableStore
    from shoal.storage.table import Table

logger = logging.getLogger(__name__)

ROLLUP_APP_ID = "shoal-rollup"
RAW_COLUMNS = (
    "timestamp",
    "time_unix_nano",
    "start_time_unix_nano",
    "metric_name",
    "metric_type",
    "metric_unit",
    "aggregation_temporality",
    "is_monotonic",
    "series_id",
    "service_name",
    "attributes",
    "resource_attributes",
    "value",
    "count",
    "sum",
    "min",
    "max",
    "bucket_counts",
    "explicit_bounds",
)
"""The raw columns a rollup reads (Spark reads no others)."""
OPERATION = "ROLLUP"


@dataclasses.dataclass(frozen=True)
class RollupResult:
    table: str
    source_version: int
    hours: int
    version: int | None
    rows: int


def _hours_to_redo(source: Table, current: TableSnapshot, progress: int) -> list[int]:
    previous: tuple[ScanFile, ...] | None = None
    if progress > 0:
        try:
            previous = source.snapshot_at(progress - 1).files
        except StorageError:
            logger.warning(
                "%s: version %d is gone; recomputing every hour", source.label, progress - 1
            )
    before = {f.path for f in previous} if previous is not None else set()
    added = [f for f in current.files if f.path not in before]
    hours: set[int] = set()
    for f in added:
        if file_hour(f) is not None:
            hours.add(hour_index(f.min_time_us))
            continue
        # a file spanning hours (an import): its coverage names the hours it holds
        buckets = source.file_coverage(f).buckets
        per_hour = 3600 // source.bucket_s
        hours.update(int(b) // per_hour for b in buckets)
    return sorted(hours)


def _raw_points(
    spark: SparkSession, source: Table, files: list[ScanFile], hours: list[int]
) -> DataFrame:
    wanted = sorted(set(hours) | {h - LOOKBACK_S // 3600 for h in hours})
    schema = pa.schema([source.spec.schema.field(c) for c in RAW_COLUMNS])
    return read_hours(spark, source.place, files, schema, source.spec.time_column, wanted)


def rollup_tenant(
    spark: SparkSession, store: TableStore, tenant: str, config: Config, only: str | None = None
) -> list[RollupResult]:
    """Bring ``metrics_1m`` and ``metrics_1h`` (or ``only`` one) up to date with ``metrics``."""
    if ROLLUP_SOURCE not in store.tables(tenant):
        return []
    source = store.open(tenant, ROLLUP_SOURCE, create=False)
    results = []
    for name, width in ROLLUP_WIDTHS_S.items():
        if only is not None and name != only:
            continue
        derived = store.open(tenant, name, spec=rollup_spec(name))
        results.append(rollup_table(spark, source, derived, width, config))
    return results


def rollup_table(
    spark: SparkSession, source: Table, derived: Table, width_s: int, config: Config
) -> RollupResult:
    """Recompute the derived table's hours touched since its recorded progress."""
    current = source.snapshot()
    stats: dict[str, int] = {"hours": 0, "rows": 0}
    target = WriteTarget.for_table(derived, config)

    def attempt(snapshot: TableSnapshot) -> Commit | None:
        progress = derived.committed_lsn(ROLLUP_APP_ID)
        if progress > current.version:
            return None
        hours = _hours_to_redo(source, current, progress)
        if not hours:
            return None
        logger.info(
            "rollup %s -> %s: %d hours (source versions %d..%d)",
            source.label,
            derived.name,
            len(hours),
            progress,
            current.version,
        )
        points = with_increments(_raw_points(spark, source, list(current.files), hours))
        rows = with_hour(rollup(points, width_s), "timestamp")
        from pyspark.sql import functions as F

        rows = rows.where(F.col(HOUR_COLUMN).isin(hours))
        written = write_hourly(spark, rows, target, len(hours))
        redo = set(hours)
        old = [f for f in snapshot.files if file_hour(f) in redo]
        stats.update(hours=len(hours), rows=sum(w.rows for w in written))
        return Commit(
            operation=OPERATION,
            adds=tuple(w.new_file() for w in written),
            removes=tuple(derived.place.rel(f.path) for f in old),
            data_change=True,
            txn=Txn(ROLLUP_APP_ID, current.version + 1),
        )

    result = run_with_retries("rollup", derived, attempt, int(config.maintenance_commit_attempts))
    return RollupResult(
        table=derived.label,
        source_version=current.version,
        hours=stats["hours"] if result else 0,
        version=None if result is None else result.version,
        rows=stats["rows"] if result else 0,
    )
