"""How a query reads each table, read before loading: time bounds, other filters, and
what the real plan then loads (files, snapshot batches, Parquet filter pushdown)."""

from __future__ import annotations

import os
import subprocess
import sys

from datafusion import SessionContext

from shoal.sql import sessions
from shoal.sql.probe import TimeProbe
from shoal.sql.prune import TableRead
from shoal.storage.types import ScanFile
from shoal.storage.view import collect_view

from .helpers import BASE_US, HOUR_US, Harness, metric_rows


def _probe_reads(harness: Harness, sql: str) -> dict[str, TableRead]:
    view = collect_view(harness.store, harness.unflushed, "t")
    tables = {name: (t.schema, t.time_column) for name, t in view.tables.items()}
    probe = TimeProbe(SessionContext(sessions.session_config()))
    return probe.reads(sql, tables, sessions.sql_options())


def test_probe_reads_time_bounds_and_other_filters(harness: Harness) -> None:
    lo, hi = "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"
    only_time = _probe_reads(
        harness, f"SELECT count(*) FROM metrics WHERE timestamp >= '{lo}' AND timestamp < '{hi}'"
    )
    assert only_time == {
        "metrics": TableRead((BASE_US + 2 * HOUR_US, BASE_US + 3 * HOUR_US), time_only=True)
    }
    mixed = _probe_reads(
        harness, f"SELECT count(*) FROM metrics WHERE timestamp >= '{lo}' AND value > 3"
    )
    assert mixed == {"metrics": TableRead((BASE_US + 2 * HOUR_US, None), time_only=False)}
    unbounded = _probe_reads(harness, "SELECT count(*) FROM metrics WHERE timestamp IS NOT NULL")
    assert unbounded["metrics"].bounds is None
    # no time column named: nothing to learn, the probe is not planned at all
    assert _probe_reads(harness, "SELECT count(*) FROM metrics WHERE value > 3") == {}
    # a query the probe cannot plan yields nothing (the real planning reports the error)
    assert _probe_reads(harness, "SELECT timestamp FROM no_such_table") == {}
    assert _probe_reads(harness, "DROP TABLE metrics") == {}


def test_pushdown_only_off_when_the_time_filter_keeps_every_row() -> None:
    files = [ScanFile("a", 1, 1, 10, 20), ScanFile("b", 1, 1, 30, 40)]
    assert not sessions.wants_pushdown(TableRead((0, 50), time_only=True), files)
    assert not sessions.wants_pushdown(TableRead((10, 40), time_only=True), files)
    # a file that the range cuts, or any other filter: pushdown stays on
    assert sessions.wants_pushdown(TableRead((15, 50), time_only=True), files)
    assert sessions.wants_pushdown(TableRead((0, 50), time_only=False), files)
    assert sessions.wants_pushdown(None, files)


def test_snapshot_batches_outside_the_time_range_are_not_loaded(harness: Harness) -> None:
    committed = metric_rows(3_000, start_us=BASE_US, span_us=3 * HOUR_US)
    harness.ingest("t", "metrics", committed)
    harness.flush("t", "metrics")
    stamps = committed.column("timestamp").cast("int64").to_pylist()
    second_hour = sum(1 for s in stamps if BASE_US + HOUR_US <= s < BASE_US + 2 * HOUR_US)
    # 40 acknowledged requests an hour later: complete runs of 16 LSNs form snapshot levels
    for i in range(40):
        harness.ingest("t", "metrics", metric_rows(50, start_us=BASE_US + 4 * HOUR_US, seed=i))
    service = harness.service()
    try:
        far = service.run_sync(
            "t",
            "EXPLAIN SELECT count(*) FROM metrics "
            "WHERE timestamp >= '2026-01-01T01:00:00Z' AND timestamp < '2026-01-01T02:00:00Z'",
        )
        plan = "\n".join(str(v) for v in far.column(far.num_columns - 1).to_pylist())
        assert "DataSourceExec: partitions=" not in plan, plan  # no memory scan
        near = service.run_sync(
            "t", "EXPLAIN SELECT count(*) FROM metrics WHERE timestamp >= '2026-01-01T04:00:00Z'"
        )
        plan = "\n".join(str(v) for v in near.column(near.num_columns - 1).to_pylist())
        assert "DataSourceExec: partitions=" in plan, plan
        for start, end, expected in (
            ("01", "02", second_hour),
            ("04", "05", 2_000),
            ("00", "06", 5_000),
        ):
            got = (
                service.run_sync(
                    "t",
                    f"SELECT count(*) AS n FROM metrics WHERE timestamp >= "
                    f"'2026-01-01T{start}:00:00Z' AND timestamp < '2026-01-01T{end}:00:00Z'",
                )
                .column("n")[0]
                .as_py()
            )
            assert got == expected, (start, end)
    finally:
        service.shutdown()


def test_exact_file_edges_count_right_without_pushdown(harness: Harness) -> None:
    rows = metric_rows(4_000, start_us=BASE_US, span_us=4 * HOUR_US, seed=5)
    harness.ingest("t", "metrics", rows)
    harness.flush("t", "metrics")
    stamps = sorted(rows.column("timestamp").cast("int64").to_pylist())
    service = harness.service()
    try:
        for f in harness.store.open("t", "metrics").snapshot().files:
            for op, edge in (
                ("<", f.max_time_us),
                ("<=", f.max_time_us),
                (">", f.min_time_us),
                (">=", f.min_time_us),
            ):
                stamp = f"to_timestamp_micros({edge}) AT TIME ZONE 'UTC'"
                sql = f"SELECT count(*) AS n FROM metrics WHERE timestamp {op} {stamp}"
                expected = sum(
                    1
                    for s in stamps
                    if {"<": s < edge, "<=": s <= edge, ">": s > edge, ">=": s >= edge}[op]
                )
                assert service.run_sync("t", sql).column("n")[0].as_py() == expected, sql
    finally:
        service.shutdown()


def test_allocator_settings_apply_before_datafusion_loads() -> None:
    code = "import os, shoal.sql; print(os.environ.get('MIMALLOC_ALLOW_THP'))"
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_ALLOW_THP"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"
    env["MIMALLOC_ALLOW_THP"] = "1"  # an operator's own setting wins
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1"
