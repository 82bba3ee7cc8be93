"""Compaction on real tables: same rows, same query answers, fewer sorted files, idempotent."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.pipeline.compact import compact_table
from shoal.schema import METRICS_SCHEMA
from shoal.storage.store import TableStore
from tests.pipeline.conftest import HOUR_US, T0_US, datafusion_answers, delta_rows, rows_multiset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

QUERIES = [
    "SELECT metric_name, count(*) AS n, sum(value) AS s, min(value) AS lo, max(value) AS hi "
    "FROM m GROUP BY metric_name ORDER BY metric_name",
    "SELECT date_trunc('hour', timestamp) AS h, count(*) AS n, sum(count) AS c "
    "FROM m GROUP BY 1 ORDER BY 1",
    "SELECT count(*) AS n FROM m WHERE timestamp >= to_timestamp_micros("
    f"{T0_US + HOUR_US // 2}) AND timestamp < to_timestamp_micros({T0_US + 3 * HOUR_US // 2})",
]


def _flush_small_files(store: TableStore, batches: int, rows: int) -> None:
    table = store.open("acme", "metrics")
    for i in range(batches):
        data = metrics_table(
            rows, start_us=T0_US + i * 60_000_000, span_s=2 * 3600 - 600, series=20, seed=i
        )
        table.flush(data, wal_lsn=i + 1)


def test_compaction_keeps_rows_and_answers(
    spark: SparkSession, store: TableStore, cfg: config_mod.Config
) -> None:
    _flush_small_files(store, batches=6, rows=400)
    table = store.open("acme", "metrics")
    before_snap = table.snapshot()
    assert len(before_snap.files) == 12
    before = delta_rows(table.path)
    answers_before = datafusion_answers([f.path for f in before_snap.files], QUERIES)

    result = compact_table(spark, table, cfg)

    after_snap = table.snapshot()
    assert result.version == after_snap.version == before_snap.version + 1
    assert result.files_removed == 12
    assert len(after_snap.files) == 2
    after = delta_rows(table.path)
    assert after.num_rows == before.num_rows == 2400
    assert rows_multiset(after) == rows_multiset(before)
    assert datafusion_answers([f.path for f in after_snap.files], QUERIES) == answers_before
    for f in after_snap.files:
        # laid out like the flusher: exact frozen schema, hour directory, sorted rows, zstd
        meta = pq.ParquetFile(f.path)
        assert meta.schema_arrow.equals(METRICS_SCHEMA)
        assert Path(f.path).parent.name.startswith("hour=")
        assert meta.metadata.row_group(0).column(0).compression == "ZSTD"
        data = meta.read(columns=["metric_name", "series_id", "timestamp"])
        order = pc.sort_indices(
            data,
            sort_keys=[
                ("metric_name", "ascending"),
                ("series_id", "ascending"),
                ("timestamp", "ascending"),
            ],
        )
        assert order.to_pylist() == list(range(data.num_rows))
    # the old files are still on disk for queries that listed them (vacuum deletes them)
    assert all(Path(f.path).exists() for f in before_snap.files)


def test_compaction_is_idempotent_and_spares_large_files(
    spark: SparkSession, store: TableStore, cfg: config_mod.Config
) -> None:
    _flush_small_files(store, batches=3, rows=300)
    table = store.open("acme", "metrics")
    first = compact_table(spark, table, cfg)
    assert first.version is not None
    snap = table.snapshot()
    second = compact_table(spark, table, cfg)
    assert second.version is None
    assert table.snapshot().version == snap.version
    # a late flush into a compacted hour: with files under half the target size
    # both are small and are merged again ...
    table.flush(metrics_table(50, start_us=T0_US, span_s=60, series=5, seed=99), wal_lsn=100)
    again = compact_table(spark, table, cfg)
    assert (again.hours, again.files_removed, again.files_added) == (1, 2, 1)
    # ... but a file of at least half the target is never rewritten for one late file
    smallest = min(f.size for f in table.snapshot().files)
    big_target = cfg.replace(compact_target_file_bytes=2 * smallest)
    table.flush(metrics_table(50, start_us=T0_US, span_s=60, series=5, seed=98), wal_lsn=101)
    assert compact_table(spark, table, big_target).version is None


def test_since_until_limits_the_hours(
    spark: SparkSession, store: TableStore, cfg: config_mod.Config
) -> None:
    _flush_small_files(store, batches=3, rows=300)
    table = store.open("acme", "metrics")
    result = compact_table(
        spark, table, cfg, since_us=T0_US + HOUR_US, until_us=T0_US + 2 * HOUR_US
    )
    assert result.hours == 1
    hours = sorted(Path(f.path).parent.name for f in table.snapshot().files)
    assert hours.count("hour=2026-11-20T00") == 3
    assert hours.count("hour=2026-11-20T01") == 1


def test_relative_data_dir(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the default data dir is relative (./shoal-data): paths must still match the log
    monkeypatch.chdir(tmp_path)
    store = TableStore(Path("shoal-data"))
    _flush_small_files(store, batches=2, rows=200)
    table = store.open("acme", "metrics")
    cfg = config_mod.default()
    result = compact_table(spark, table, cfg)
    assert (result.files_removed, result.files_added) == (4, 2)
