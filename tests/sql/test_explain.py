"""The Parquet side is a native scan: projection and filters reach it, time filters prune."""

from __future__ import annotations

import datetime as dt

from shoal.sql import sessions
from shoal.storage.view import collect_view

from .helpers import BASE_US, HOUR_US, Harness, metric_rows


def _iso(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plan_text(harness: Harness, sql: str, analyze: bool = False) -> str:
    view = collect_view(harness.store, harness.unflushed, "t")
    ctx = sessions.TenantSession("t", 64 << 20).load(view, sessions.ParquetViewCache())
    prefix = "EXPLAIN ANALYZE " if analyze else "EXPLAIN "
    batches = ctx.sql_with_options(prefix + sql, sessions.sql_options()).collect()
    return "\n".join(str(v) for b in batches for v in b.column(b.num_columns - 1).to_pylist())


def _six_hours(harness: Harness) -> None:
    rows = metric_rows(30_000, start_us=BASE_US, span_us=6 * HOUR_US, seed=7)
    harness.ingest("t", "metrics", rows)
    harness.flush("t", "metrics")  # one file per hour
    harness.ingest("t", "metrics", metric_rows(100, start_us=BASE_US + 6 * HOUR_US, seed=8))


def test_projection_and_time_filter_reach_the_parquet_scan(harness: Harness) -> None:
    _six_hours(harness)
    lo, hi = BASE_US + 2 * HOUR_US, BASE_US + 3 * HOUR_US
    sql = (
        "SELECT metric_name, avg(value) FROM metrics "
        f"WHERE timestamp >= '{_iso(lo)}' AND timestamp < '{_iso(hi)}' GROUP BY metric_name"
    )
    plan = _plan_text(harness, sql)
    scans = [line for line in plan.splitlines() if "file_type=parquet" in line]
    # one listing scan for the first five hours (one day), one for the newest hour
    assert len(scans) == 2, plan
    assert sum(line.count(".parquet") for line in scans) == 6, plan
    for line in scans:
        # only the columns the query returns come out of the scan ...
        assert "projection=[metric_name, value]" in line, line
        # ... and the time filter is evaluated in the scan itself (no cast, no filter above it),
        # both as a row filter and as a statistics pruning predicate
        assert f"predicate=timestamp@0 >= {lo} AND timestamp@0 < {hi}" in line, line
        assert "pruning_predicate=" in line, line
    # the snapshot side is the one scan that needs a FilterExec above it
    assert plan.count("DataSourceExec: partitions=") == 1
    assert plan.count("FilterExec") == 1, plan


def _scan_lines(plan: str) -> list[str]:
    return [line for line in plan.splitlines() if "file_type=parquet" in line]


def _metric(line: str, name: str) -> str:
    return line.split(name + "=", 1)[1].split(",", 1)[0]


def test_time_filter_prunes_files(harness: Harness) -> None:
    _six_hours(harness)
    lo, hi = BASE_US + 2 * HOUR_US, BASE_US + 3 * HOUR_US
    sql = (
        f"SELECT count(*) FROM metrics WHERE timestamp >= '{_iso(lo)}' AND timestamp < '{_iso(hi)}'"
    )
    plan = _plan_text(harness, sql, analyze=True)
    day, newest = _scan_lines(plan)
    # The newest hour's file is skipped on its statistics without reading any data ...
    assert _metric(newest, "files_ranges_pruned_statistics") == "1 total → 0 matched", plan
    assert _metric(newest, "bytes_scanned") == "0", plan
    # ... and of the other five, only the one that overlaps is read.
    assert _metric(day, "files_ranges_pruned_statistics") == "5 total → 1 matched", plan
    # (only that file gets as far as its row groups)
    assert _metric(day, "row_groups_pruned_statistics").startswith("1 total"), plan


def test_filter_prunes_row_groups_inside_a_file(harness: Harness) -> None:
    # 300k rows in one hour: one file of three row groups, sorted by metric_name first.
    harness.ingest("t", "metrics", metric_rows(300_000, series=50, seed=3))
    harness.flush("t", "metrics")
    plan = _plan_text(harness, "SELECT count(*) FROM metrics WHERE metric_name = 'm0'", True)
    (scan,) = _scan_lines(plan)
    groups = _metric(scan, "row_groups_pruned_statistics")
    total, matched = groups.split(" total → ")
    assert int(total) == 3, scan
    assert int(matched.split()[0]) < 3, scan
