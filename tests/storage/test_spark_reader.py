"""PySpark, as an independent reader, sees exactly the rows shoal committed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from shoal.storage.store import TableStore

from .helpers import random_logs

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("shoal-storage-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    yield session
    session.stop()


def test_spark_reads_the_files_delta_rs_lists(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    table = TableStore(tmp_path).open("acme", "logs")
    rng = random.Random(11)
    written = []
    for lsn in range(1, 4):
        batch = random_logs(rng, 200, first_id=lsn * 1000, hours=3)
        written.append(batch)
        table.flush(batch, lsn)
    expected = pa.concat_tables(written)
    uris = DeltaTable(str(table.path)).file_uris()
    df = spark.read.parquet(*uris).withColumn("file", F.input_file_name())
    rows = df.select(
        "body",
        "service_name",
        F.col("timestamp").cast("long").alias("ts_s"),
        F.date_format("timestamp", "yyyy-MM-dd'T'HH").alias("hour"),
        "file",
    ).collect()
    got = sorted((r.body, r.service_name) for r in rows)
    want = sorted(
        zip(
            expected.column("body").to_pylist(),
            expected.column("service_name").to_pylist(),
            strict=True,
        )
    )
    assert got == want
    # the hour in the directory name is the hour of every row in the file
    for r in rows:
        assert f"/hour={r.hour}/" in r.file
    spark_times = sorted(r.ts_s for r in rows)
    arrow_times = sorted(
        t // 1_000_000 for t in expected.column("timestamp").cast(pa.int64()).to_pylist()
    )
    assert spark_times == arrow_times
