"""The Spark jobs on tables in a bucket (the S3-compatible server of the tests).

The tasks read and write through the tables' places (pyarrow's S3 filesystem), the
driver commits through delta-rs: every job gives the bucket's table exactly what it
gives the same table on local disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.pipeline.backfill import backfill
from shoal.pipeline.compact import compact_table
from shoal.pipeline.retention import apply_retention
from shoal.pipeline.rollup import rollup_tenant
from shoal.storage.store import TableStore
from tests.pipeline.conftest import HOUR_US, T0_US, rows_multiset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

DAY_US = 24 * HOUR_US


def _bucket_rows(url: str) -> pa.Table:
    """The table as delta-rs alone reads it from the bucket."""
    return DeltaTable(url, storage_options={"AWS_ALLOW_HTTP": "true"}).to_pyarrow_table()


def _fill(store: TableStore) -> pa.Table:
    table = store.open("acme", "metrics")
    pieces = [metrics_table(250, start_us=T0_US, span_s=7000, series=8, seed=i) for i in range(4)]
    for lsn, piece in enumerate(pieces, 1):
        table.flush(piece, lsn)
    return pa.concat_tables(pieces)


def test_every_job_runs_on_a_table_in_the_bucket(
    spark: SparkSession, tmp_path: Path, s3_url: str, s3_server: Any
) -> None:
    cfg = config_mod.default().replace(data_dir=str(tmp_path / "data"), storage_url=s3_url)
    bucket = TableStore.for_config(cfg)
    local = TableStore(tmp_path / "local")
    rows = _fill(bucket)
    _fill(local)
    table = bucket.open("acme", "metrics")
    assert len(table.snapshot().files) == 8
    assert not (tmp_path / "data" / "tenants").exists()

    # compact: the tasks read the small files from the bucket and upload the merged ones
    before = s3_server.stats()
    done = compact_table(spark, table, cfg)
    assert (done.files_removed, done.files_added) == (8, 2)
    assert rows_multiset(_bucket_rows(f"{s3_url}/acme/metrics")) == rows_multiset(rows)
    assert s3_server.stats().get("PUT", 0) > before.get("PUT", 0)
    assert all(f.path.startswith(f"{s3_url}/acme/metrics/hour=") for f in table.snapshot().files)

    # rollup: the same rows as the same job on the same data on local disk
    [m1, h1] = rollup_tenant(spark, bucket, "acme", cfg)
    rollup_tenant(spark, local, "acme", config_mod.default().replace(data_dir=str(tmp_path)))
    assert m1.rows > 0 and h1.rows > 0
    for name in ("metrics_1m", "metrics_1h"):
        theirs = DeltaTable(str(tmp_path / "local" / "tenants" / "acme" / name))
        assert rows_multiset(_bucket_rows(f"{s3_url}/acme/{name}")) == rows_multiset(
            theirs.to_pyarrow_table()
        )

    # import --engine spark: one input from the bucket by URL, one from local disk
    old = [
        metrics_table(120, start_us=T0_US - 3 * DAY_US + i * HOUR_US, span_s=1800, series=4)
        for i in range(2)
    ]
    fs, path = bucket.location.input(f"{s3_url}/incoming/old0.parquet")
    with fs.open_output_stream(path) as out:
        pq.write_table(old[0], out)
    pq.write_table(old[1], tmp_path / "old1.parquet")
    inputs = [f"{s3_url}/incoming/old0.parquet", str(tmp_path / "old1.parquet")]
    imported = backfill(spark, table, inputs, cfg)
    assert imported is not None and imported.rows_added == 240
    assert rows_multiset(_bucket_rows(f"{s3_url}/acme/metrics")) == rows_multiset(
        pa.concat_tables([rows, *old])
    )

    # retention drops the imported days (metadata only), vacuum deletes what was removed
    now = T0_US + 2 * DAY_US
    kept = apply_retention(table, cfg.replace(retention_days=2), now_us=now)
    assert kept.rows_removed == 240
    assert rows_multiset(_bucket_rows(f"{s3_url}/acme/metrics")) == rows_multiset(rows)
    gone = table.vacuum(0)
    assert len([g for g in gone if g.endswith(".parquet") and "/part-" in g]) >= 8 + 2
    assert rows_multiset(_bucket_rows(f"{s3_url}/acme/metrics")) == rows_multiset(rows)
