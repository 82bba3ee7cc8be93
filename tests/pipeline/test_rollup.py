"""Rollups on real tables: values against a plain-Python reference, incremental, idempotent."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.pipeline.aggregate import rollup, with_increments
from shoal.pipeline.rollup import ROLLUP_APP_ID, rollup_tenant
from shoal.pipeline.schema import ROLLUP_SCHEMA
from shoal.storage.store import TableStore
from tests.pipeline.conftest import T0_US, delta_rows, rows_multiset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _reference(raw: pa.Table, width_s: int) -> dict[tuple[int, int], dict[str, Any]]:
    """Per (series, bucket): the rollup computed point by point in Python."""
    width = width_s * 1_000_000
    by_series: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in raw.to_pylist():
        by_series[row["series_id"]].append(row)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for sid, rows in by_series.items():
        rows.sort(key=lambda r: r["time_unix_nano"])
        prev = None
        for r in rows:
            ts = r["time_unix_nano"] // 1000
            bucket = ts // width * width
            agg = out.setdefault(
                (sid, bucket), {"points": 0, "values": [], "increase": 0.0, "buckets": None}
            )
            agg["points"] += 1
            if r["metric_type"] in ("gauge", "sum"):
                agg["values"].append(r["value"])
            cumulative = r["aggregation_temporality"] == 2
            reset = prev is None or r["start_time_unix_nano"] != prev["start_time_unix_nano"]
            if r["metric_type"] == "sum":
                if not cumulative:
                    inc = r["value"]
                elif reset or r["value"] < prev["value"]:
                    inc = r["value"]
                else:
                    inc = r["value"] - prev["value"]
                agg["increase"] += inc
            if r["metric_type"] == "histogram":
                own = reset or r["count"] < prev["count"]
                inc_b = (
                    r["bucket_counts"]
                    if own
                    else [
                        a - b
                        for a, b in zip(r["bucket_counts"], prev["bucket_counts"], strict=True)
                    ]
                )
                agg["buckets"] = (
                    inc_b
                    if agg["buckets"] is None
                    else [a + b for a, b in zip(agg["buckets"], inc_b, strict=True)]
                )
            prev = r
    return out


def _fill(store: TableStore, flushes: int, first_lsn: int = 1, hours: int = 2) -> pa.Table:
    table = store.open("acme", "metrics")
    parts = []
    for i in range(flushes):
        data = metrics_table(
            240, start_us=T0_US, span_s=hours * 3600 - 1, series=8, seed=i, first_series=8 * i
        )
        table.flush(data, wal_lsn=first_lsn + i)
        parts.append(data)
    return pa.concat_tables(parts)


def _check(derived: pa.Table, raw: pa.Table, width_s: int) -> None:
    ref = _reference(raw, width_s)
    got = {(r["series_id"], int(r["timestamp"].timestamp() * 1e6)): r for r in derived.to_pylist()}
    assert set(got) == set(ref)
    for key, exp in ref.items():
        row = got[key]
        assert row["points"] == exp["points"]
        if exp["values"]:
            assert row["count"] == len(exp["values"])
            assert row["sum"] == pytest.approx(sum(exp["values"]))
            assert row["min"] == min(exp["values"]) and row["max"] == max(exp["values"])
            assert row["last"] == exp["values"][-1]
        if row["metric_type"] == "sum":
            assert row["increase"] == pytest.approx(exp["increase"])
        else:
            assert row["increase"] is None
        assert row["bucket_counts"] == exp["buckets"]


def test_rollup_values_incremental_and_idempotent(
    spark: SparkSession, store: TableStore, cfg: config_mod.Config
) -> None:
    raw = _fill(store, flushes=2)
    first = rollup_tenant(spark, store, "acme", cfg)
    assert [r.table for r in first] == ["acme/metrics_1m", "acme/metrics_1h"]
    assert all(r.hours == 2 for r in first)
    m1 = store.open("acme", "metrics_1m")
    m1h = store.open("acme", "metrics_1h")
    assert m1.spec.schema.equals(ROLLUP_SCHEMA)
    _check(delta_rows(m1.path), raw, 60)
    _check(delta_rows(m1h.path), raw, 3600)
    source_version = store.open("acme", "metrics").snapshot().version
    assert m1.committed_lsn(ROLLUP_APP_ID) == source_version + 1

    # nothing new: nothing done
    versions = (m1.snapshot().version, m1h.snapshot().version)
    again = rollup_tenant(spark, store, "acme", cfg)
    assert all(r.version is None for r in again)
    assert (m1.snapshot().version, m1h.snapshot().version) == versions

    # late data for the second hour only: only that hour is recomputed
    late = metrics_table(
        80, start_us=T0_US + 3600 * 1_000_000, span_s=3599, series=4, seed=7, first_series=100
    )
    store.open("acme", "metrics").flush(late, wal_lsn=50)
    third = rollup_tenant(spark, store, "acme", cfg)
    assert [r.hours for r in third] == [1, 1]
    everything = pa.concat_tables([raw, late])
    _check(delta_rows(m1.path), everything, 60)
    _check(delta_rows(m1h.path), everything, 3600)

    # and the incremental result is exactly a from-scratch rollup of all raw rows
    scratch = (
        rollup(
            with_increments(
                spark.read.parquet(
                    *[f.path for f in store.open("acme", "metrics").snapshot().files]
                )
            ),
            3600,
        )
        .toArrow()
        .cast(ROLLUP_SCHEMA)
    )
    assert rows_multiset(delta_rows(m1h.path)) == rows_multiset(scratch)
