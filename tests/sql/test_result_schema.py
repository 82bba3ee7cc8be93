"""Results whose batches differ from the plan's schema in nullability still encode."""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pytest

from shoal.sql.service import conform

from .api_app import Tokens, client
from .helpers import Harness, metric_rows


def test_conform_relaxes_nullability_and_keeps_values() -> None:
    declared = pa.schema([pa.field("m", pa.timestamp("us", tz="UTC"), nullable=True)])
    got = pa.RecordBatch.from_arrays(
        [pa.array([dt.datetime(2026, 11, 1, tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC"))],
        schema=pa.schema([pa.field("m", pa.timestamp("us", tz="UTC"), nullable=False)]),
    )
    out = conform(got, declared)
    assert out.schema.equals(declared)
    assert out.column(0).to_pylist() == got.column(0).to_pylist()
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, declared) as writer:
        writer.write_batch(out)  # refused for `got` itself
    assert pa.ipc.open_stream(sink.getvalue()).read_all().num_rows == 1


def test_conform_casts_other_differences() -> None:
    declared = pa.schema([pa.field("n", pa.int64())])
    got = pa.RecordBatch.from_arrays([pa.array([1, 2], pa.int32())], names=["n"])
    assert conform(got, declared).column(0).type == pa.int64()
    with pytest.raises(pa.ArrowInvalid):
        conform(pa.RecordBatch.from_arrays([pa.array(["x"])], names=["n"]), declared)


@pytest.mark.parametrize("fmt", ["json", "csv", "ndjson", "arrow"])
def test_aggregates_from_statistics_encode_in_every_format(harness: Harness, fmt: str) -> None:
    harness.ingest("acme", "metrics", metric_rows(300, seed=3))
    harness.flush("acme", "metrics")  # Parquet only: min/max/count come from its statistics
    headers = Tokens(harness).create("acme", "query")
    service = harness.service()
    sql = "SELECT count(*) AS n, min(timestamp) AS lo, max(timestamp) AS hi FROM metrics"
    with client(harness, service) as tc:
        r = tc.post(f"/api/v1/sql?format={fmt}", content=sql, headers=headers)
    service.shutdown()
    assert r.status_code == 200, r.text[:300]
    if fmt == "arrow":
        table = pa.ipc.open_stream(r.content).read_all()
        assert table.column("n").to_pylist() == [300]
        assert table.column("lo").to_pylist()[0] is not None
    else:
        assert "300" in r.text
