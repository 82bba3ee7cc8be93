"""Other engines read a tenant's tables straight from the bucket and agree with the server.

Polars (its own object-store reader, the Delta log through deltalake) and DuckDB
(over deltalake's pyarrow dataset of the table, read through delta-rs's object
store: DuckDB's httpfs extension is not needed) get the same rows, per metric, as
the server's SQL over the same tenant's table.
"""

from __future__ import annotations

from typing import Any

import duckdb
import httpx
import polars as pl
from deltalake import DeltaTable

from loadtest import payloads
from loadtest.ingest import BASE_NS
from tests.server.conftest import ServerFactory, metric_value, scrape
from tests.server.test_object_storage import PB, committed_rows, wait_for

POINTS = 2000
QUERY = (
    "SELECT metric_name, count(*) AS n, sum(value) AS s, min(timestamp) AS first "
    "FROM metrics GROUP BY metric_name ORDER BY metric_name"
)


def _rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(name, int(n), round(float(s), 6), str(first)) for name, n, s, first in rows]


def test_polars_and_duckdb_read_the_bucket_and_agree_with_the_server(
    start_server: ServerFactory, s3_url: str, s3_server: Any
) -> None:
    server = start_server(env={"SHOAL_STORAGE_URL": s3_url, "SHOAL_FLUSH_MAX_AGE_S": "0.3"})
    for seed in range(3):
        body = payloads.metrics_request(
            points=POINTS, series=50, start_ns=BASE_NS + seed * 3_600_000_000_000, seed=seed
        )
        answer = httpx.post(
            server.url + "/v1/metrics", content=body.SerializeToString(), headers=PB
        )
        assert answer.status_code == 200
    table = f"{s3_url}/default/metrics"
    wait_for(lambda: committed_rows(table) == 3 * POINTS)
    wait_for(lambda: metric_value(scrape(server), "shoal_snapshot_rows") == 0)
    answer = httpx.post(server.url + "/api/v1/sql", content=QUERY, timeout=30)
    assert answer.status_code == 200, answer.text
    ours = answer.json()
    names = [c["name"] if isinstance(c, dict) else c for c in ours["columns"]]
    assert names == ["metric_name", "n", "s", "first"]
    expected = [(r[0], r[1], r[2], r[3].replace("T", " ").rstrip("Z")) for r in ours["rows"]]
    assert sum(r[1] for r in expected) == 3 * POINTS

    # Polars: the Delta log through deltalake, the Parquet files by its own S3 reader
    options = {"aws_endpoint_url": s3_server.endpoint, "aws_allow_http": "true"}
    frame = (
        pl.scan_delta(table, storage_options=options)
        .group_by("metric_name")
        .agg(
            n=pl.len(),
            s=pl.col("value").sum(),
            first=pl.col("timestamp").min().dt.strftime("%Y-%m-%d %H:%M:%S%.6f"),
        )
        .sort("metric_name")
        .collect()
    )
    assert _rounded(frame.rows()) == _rounded(expected)

    # DuckDB over the table's pyarrow dataset (delta-rs's filesystem reads the bucket)
    dataset = DeltaTable(table, storage_options={"AWS_ALLOW_HTTP": "true"}).to_pyarrow_dataset()
    con = duckdb.connect()
    con.register("metrics", dataset)
    rows = con.sql(
        "SELECT metric_name, count(*), sum(value), "
        "strftime(min(timestamp) AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S.%f') "
        "FROM metrics GROUP BY metric_name ORDER BY metric_name"
    ).fetchall()
    assert _rounded(rows) == _rounded(expected)
