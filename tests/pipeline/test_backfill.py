"""``shoal import --engine spark``: overlap rejection via coverage, rows appended once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.errors import CoverageOverlapError, SchemaMismatchError
from shoal.pipeline.backfill import backfill
from shoal.schema import METRICS_SCHEMA
from shoal.storage.store import TableStore
from tests.pipeline.conftest import HOUR_US, T0_US, delta_rows, rows_multiset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_backfill_rejects_overlap_and_appends(
    spark: SparkSession, store: TableStore, cfg: config_mod.Config, tmp_path: Path
) -> None:
    table = store.open("acme", "metrics")
    live = metrics_table(200, start_us=T0_US + 3 * HOUR_US, span_s=1800, series=10, seed=1)
    table.flush(live, wal_lsn=1)
    # history: three hours before the live data, in two input files
    old = [
        metrics_table(300, start_us=T0_US + i * 90 * 60_000_000, span_s=5400, series=10, seed=i)
        for i in range(2)
    ]
    inputs = []
    for i, data in enumerate(old):
        pq.write_table(data, tmp_path / f"old{i}.parquet")
        inputs.append(tmp_path / f"old{i}.parquet")
    clash = tmp_path / "clash.parquet"
    pq.write_table(
        metrics_table(50, start_us=T0_US + 3 * HOUR_US, span_s=600, series=10, seed=1), clash
    )

    version = table.snapshot().version
    with pytest.raises(CoverageOverlapError, match="overlaps existing data") as info:
        backfill(spark, table, [*inputs, clash], cfg)
    assert info.value.ranges[0][0].startswith("2026-11-20T03:00")
    assert table.snapshot().version == version  # nothing committed

    result = backfill(spark, table, inputs, cfg)
    assert result is not None and result.rows_added == 600
    expected = pa.concat_tables([live, *old])
    assert rows_multiset(delta_rows(table.path)) == rows_multiset(expected)
    files = table.snapshot().files
    assert all(pq.read_schema(f.path).equals(METRICS_SCHEMA) for f in files)
    # importing the same files again overlaps what they brought
    with pytest.raises(CoverageOverlapError):
        backfill(spark, table, inputs, cfg)
    # unless told otherwise
    again = backfill(spark, table, inputs[:1], cfg, allow_overlap=True)
    assert again is not None and again.rows_added == 300


def test_backfill_names_missing_columns(
    spark: SparkSession, store: TableStore, cfg: config_mod.Config, tmp_path: Path
) -> None:
    table = store.open("acme", "metrics")
    bad = tmp_path / "bad.parquet"
    pq.write_table(metrics_table(10, start_us=T0_US, span_s=60, series=1).drop(["value"]), bad)
    with pytest.raises(SchemaMismatchError, match=r"missing column.*value"):
        backfill(spark, table, [bad], cfg)


def test_a_flush_landing_before_the_backfill_commit_makes_it_fail_cleanly(
    spark: SparkSession,
    store: TableStore,
    cfg: config_mod.Config,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Overlap is checked again on the version the commit lands on. The interleaving is
    forced: the server's flusher (its own store, as in another process) commits the
    same minutes after the job wrote its files and before it commits them."""
    table = store.open("acme", "metrics")
    history = tmp_path / "history.parquet"
    pq.write_table(metrics_table(300, start_us=T0_US, span_s=3600, series=10, seed=5), history)
    server = TableStore(store.data_dir).open("acme", "metrics")
    live = metrics_table(20, start_us=T0_US + 600_000_000, span_s=60, series=10, seed=6)
    real_commit = table.commit

    def flush_first(*args: object, **kwargs: object) -> object:
        server.flush(live, wal_lsn=1)
        return real_commit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(table, "commit", flush_first)
    with pytest.raises(CoverageOverlapError):
        backfill(spark, table, [history], cfg)
    # exactly the flushed rows; the job's written files are gone again
    assert rows_multiset(delta_rows(table.path)) == rows_multiset(live)
    committed = {f.path for f in table.snapshot().files}
    data_files = {  # the series summaries under _series/ are not data
        str(p)
        for p in table.path.rglob("*.parquet")
        if not p.relative_to(table.path).parts[0].startswith("_")
    }
    assert data_files == committed
