"""Filters the pruning layer cannot read (scalar functions, map lookups) never fail a query
or change its answer: the rows kept are exactly those plain DataFusion keeps over the same
data, and the time bounds beside them still prune."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from shoal.errors import QueryError
from shoal.sql.service import QueryService
from shoal.storage.view import AsOf

from .helpers import BASE_US, HOUR_US, Harness, log_rows, metric_rows
from .test_probe import _probe_reads

LO = "2026-01-01T00:30:00Z"

QUERIES = [
    # time bounds (literal and relative) beside map lookups and string functions
    f"SELECT count(*) FROM metrics WHERE timestamp >= '{LO}' AND attributes['host'] = 'host-1'",
    "SELECT count(*) FROM metrics WHERE timestamp >= now() - INTERVAL '3650 days' "
    "AND attributes['host'] = 'host-1'",
    f"SELECT count(*) FROM metrics WHERE timestamp > '{LO}' AND lower(metric_name) = 'm1'",
    f"SELECT count(*) FROM metrics WHERE upper(metric_name) = 'M2' AND timestamp < '{LO}'",
    f"SELECT count(*) FROM metrics WHERE timestamp > '{LO}' AND strpos(metric_name, '1') > 0",
    f"SELECT count(*) FROM metrics WHERE timestamp > '{LO}' "
    "AND array_length(map_keys(attributes)) = 1",
    # a LIKE without wildcards is planned as `=`
    f"SELECT count(*) FROM metrics WHERE timestamp > '{LO}' AND attributes['host'] LIKE 'host-1'",
    f"SELECT count(*) FROM metrics WHERE timestamp BETWEEN '{LO}' AND '2026-01-01T01:30:00Z' "
    "AND (attributes['host'] = 'host-2' OR upper(metric_name) = 'M3')",
    # the word `timestamp` anywhere, no time bound at all
    "SELECT max(timestamp) FROM logs WHERE upper(severity_text) = 'INFO'",
    "SELECT count(*) FROM logs WHERE lower(body) LIKE 'hello%' AND timestamp IS NOT NULL",
]


def _plain_datafusion(harness: Harness, sql: str) -> pa.Table:
    """The same query by DataFusion alone over the same rows (no probe, no pruning)."""
    ctx = SessionContext()
    for table in ("metrics", "logs"):
        handle = harness.store.open("t", table, create=False)
        schema = handle.spec.schema
        parts = [
            pa.Table.from_batches([b.batch]) for b in harness.unflushed.batches("t").get(table, ())
        ]
        parts += [pq.read_table(f.path, schema=schema) for f in handle.snapshot().files]
        ctx.register_record_batches(table, [pa.concat_tables(parts).to_batches()])
    return ctx.sql(sql).to_arrow_table()


@pytest.fixture
def loaded(harness: Harness) -> Harness:
    harness.ingest("t", "metrics", metric_rows(2_000, span_us=HOUR_US))
    harness.ingest("t", "logs", log_rows(40, "hello"))
    harness.flush("t", "metrics")
    harness.flush("t", "logs")
    harness.ingest("t", "metrics", metric_rows(700, start_us=BASE_US + HOUR_US, seed=3))
    harness.ingest("t", "logs", log_rows(15, "HELLO", start_us=BASE_US + HOUR_US))
    return harness


@pytest.mark.parametrize("sql", QUERIES)
def test_opaque_filters_answer_as_plain_datafusion(
    loaded: Harness, service: QueryService, sql: str
) -> None:
    got = service.run_sync("t", sql)
    want = _plain_datafusion(loaded, sql)
    assert got.column(0).to_pylist() == want.column(0).to_pylist()


def test_time_bounds_beside_opaque_filters_still_prune(loaded: Harness) -> None:
    reads = _probe_reads(loaded, QUERIES[0])
    lo_us = int(dt.datetime.fromisoformat(LO.replace("Z", "+00:00")).timestamp() * 1e6)
    assert reads["metrics"].bounds == (lo_us, None)
    assert reads["metrics"].time_only is False


def test_time_travel_consults_only_the_tables_read(harness: Harness, service: QueryService) -> None:
    for seed in range(3):
        harness.ingest("t", "metrics", metric_rows(10, seed=seed))
        harness.flush("t", "metrics")  # metrics reaches version 3
    harness.ingest("t", "logs", log_rows(5, "x"))
    harness.flush("t", "logs")  # logs only version 1
    v3 = AsOf(version=3)
    assert service.run_sync("t", "SELECT 1 AS one", as_of=v3).to_pylist() == [{"one": 1}]
    n = service.run_sync("t", "SELECT count(*) AS n FROM metrics", as_of=v3)
    assert n.to_pylist() == [{"n": 30}]
    with pytest.raises(QueryError, match=r"table logs has versions 0 to 1; as_of_version=3"):
        service.run_sync("t", "SELECT count(*) FROM logs", as_of=v3)
    # a time before a table's first commit reads that table as empty
    long_ago = AsOf(timestamp=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert service.run_sync("t", "SELECT count(*) AS n FROM logs", as_of=long_ago).to_pylist() == [
        {"n": 0}
    ]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT nosuchcol FROM metrics", "No field named nosuchcol"),
        ("SELECT count(*) FROM metrics WHERE timestamp > 'abc'", "Error parsing timestamp"),
        ("SELECT * FROM nosuchtable", "nosuchtable"),
        ("SELEC 1", "Expected"),
    ],
)
def test_errors_are_one_line_for_people(service: QueryService, sql: str, expected: str) -> None:
    with pytest.raises(QueryError) as info:
        service.run_sync("t", sql)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    for internal in ("Expr::", "Some(", "DataFusionError", "caused by", '\\"'):
        assert internal not in message, message
