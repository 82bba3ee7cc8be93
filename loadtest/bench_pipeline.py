"""Compaction benchmark: shoal's Spark compaction beside delta-rs's optimize, and query speed.

One day of metrics (``--hours`` hourly partitions of ``--files-per-hour``
small files, ``--points`` points in all, each file written with the flusher's
layout rules) is generated once into ``.bench/pipeline/`` and copied twice.
On one copy shoal's compaction runs (``compact_table`` in a SparkSession that
is already started; the session start is reported separately), on the other
delta-rs's ``DeltaTable.optimize.compact()`` with the same target size. Then
the aggregation queries run with DataFusion over the table's native file list
(one ``read_parquet`` per file, unioned, as the query layer does), before and
after compaction.

    python -m loadtest.bench_pipeline                       # 10M points, 24 x 60 files
    python -m loadtest.bench_pipeline --points 1000000      # a smaller scale
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

from deltalake import DeltaTable

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.otlp.schema import METRICS_SCHEMA
from shoal.storage import layout
from shoal.storage.store import TableStore
from shoal.storage.types import NewFile

T0_US = 1_795_132_800_000_000  # 2026-11-20T00:00Z
HOUR_US = 3_600_000_000
TARGET_BYTES = 128 * 1024 * 1024

QUERIES = {
    "per-metric stats": (
        "SELECT metric_name, count(*) AS n, avg(value) AS mean, max(value) AS hi "
        "FROM metrics GROUP BY metric_name ORDER BY metric_name"
    ),
    "one metric per minute": (
        "SELECT date_trunc('minute', timestamp) AS t, sum(value) AS s FROM metrics "
        "WHERE metric_name = 'metric.5' GROUP BY 1 ORDER BY 1"
    ),
    "one hour, top series": (
        "SELECT series_id, max(value) - min(value) AS spread FROM metrics "
        f"WHERE timestamp >= to_timestamp_micros({T0_US + 12 * HOUR_US}) "
        f"AND timestamp < to_timestamp_micros({T0_US + 13 * HOUR_US}) "
        "GROUP BY series_id ORDER BY spread DESC LIMIT 10"
    ),
    "count by service": (
        "SELECT service_name, count(*) AS n FROM metrics GROUP BY service_name ORDER BY 1"
    ),
}


def generate(root: Path, points: int, hours: int, files_per_hour: int, series: int) -> Path:
    """The pristine table (cached): one flush per (hour, minute slot) gives one small file."""
    path = root / f"p{points}-h{hours}-f{files_per_hour}-s{series}"
    done = path / "READY"
    if done.exists():
        return path
    if path.exists():
        shutil.rmtree(path)
    store = TableStore(path)
    table = store.open("bench", "metrics")
    per_file = max(series, points // (hours * files_per_hour))
    slot_s = 3600 // files_per_hour
    started = time.perf_counter()
    seed = 0
    for h in range(hours):
        # files exactly as the flusher writes them (layout rules), one commit per hour
        adds = []
        for f in range(files_per_hour):
            seed += 1
            data = metrics_table(
                per_file,
                start_us=T0_US + h * HOUR_US + f * slot_s * 1_000_000,
                span_s=slot_s - 1,
                series=series,
                seed=seed,
            )
            for hour, piece in layout.split_by_hour(data, table.spec):
                rel = layout.hour_file_path(hour)
                (table.path / rel).parent.mkdir(parents=True, exist_ok=True)
                size = layout.write_parquet(piece, table.path / rel, table.spec)
                adds.append(NewFile(rel, size))
        table.commit(
            adds, [], operation="flush", read_version=table.snapshot().version, data_change=True
        )
        print(f"  generated hour {h + 1}/{hours} ({time.perf_counter() - started:.0f} s)")
    done.write_text("ok\n")
    return path


def table_dir(data_dir: Path) -> Path:
    return data_dir / "tenants" / "bench" / "metrics"


def query_times(data_dir: Path, repeats: int) -> dict[str, float]:
    """Median seconds per query, over the committed files registered natively."""
    from shoal.query.engine import new_session

    paths = [str(p) for p in DeltaTable(str(table_dir(data_dir))).file_uris()]
    times: dict[str, float] = {}
    ctx = new_session(2 * 1024**3)
    frames = [ctx.read_parquet(p, schema=METRICS_SCHEMA) for p in paths]
    union = frames[0]
    for frame in frames[1:]:
        union = union.union(frame)
    ctx.register_view("metrics", union)
    print(f"  {len(paths)} files registered", flush=True)
    for name, sql in QUERIES.items():
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            ctx.sql(sql).to_arrow_table()
            samples.append(time.perf_counter() - started)
        times[name] = statistics.median(samples)
        print(f"  {name}: {times[name]:.3f} s", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=10_000_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--files-per-hour", type=int, default=60)
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(".bench/pipeline"))
    args = parser.parse_args()

    print(
        f"generating {args.points:,} points, {args.hours} hours x {args.files_per_hour} files "
        f"(cached in {args.dir})"
    )
    pristine = generate(args.dir, args.points, args.hours, args.files_per_hour, args.series)
    work = args.dir / "work"
    if work.exists():
        shutil.rmtree(work)
    shoal_copy, delta_copy = work / "shoal", work / "deltars"
    shutil.copytree(pristine, shoal_copy)
    shutil.copytree(pristine, delta_copy)
    files_before = len(DeltaTable(str(table_dir(shoal_copy))).file_uris())
    bytes_before = sum(p.stat().st_size for p in table_dir(shoal_copy).glob("hour=*/*.parquet"))

    q_before = query_times(shoal_copy, args.repeats)

    from shoal.pipeline.compact import compact_table
    from shoal.pipeline.session import create_session

    cfg = config_mod.default().replace(
        data_dir=str(shoal_copy), compact_target_file_bytes=TARGET_BYTES
    )
    started = time.perf_counter()
    spark = create_session(cfg, args.master, app_name="shoal-bench")
    spark.range(1).count()
    spark_start = time.perf_counter() - started
    table = TableStore(shoal_copy).open("bench", "metrics")
    slots = spark.sparkContext.defaultParallelism
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    result = compact_table(spark, table, cfg)
    shoal_s = time.perf_counter() - started
    spark.stop()

    dt = DeltaTable(str(table_dir(delta_copy)))
    started = time.perf_counter()
    metrics = dt.optimize.compact(target_size=TARGET_BYTES)
    delta_s = time.perf_counter() - started
    load_after = os.getloadavg()[0]

    q_after = query_times(shoal_copy, args.repeats)
    q_delta = query_times(delta_copy, args.repeats)
    files_after = len(table.snapshot().files)
    delta_files = len(DeltaTable(str(table_dir(delta_copy))).file_uris())

    print()
    print(
        f"input: {args.points:,} points, {files_before} files, {bytes_before / 1e6:.1f} MB; "
        f"master {args.master} ({slots} task slots); 1-minute load average "
        f"{load_before:.2f} before compaction, {load_after:.2f} after"
    )
    print(f"{'compaction':<34}{'seconds':>10}{'files after':>14}")
    print(f"{'shoal (Spark), job':<34}{shoal_s:>10.1f}{files_after:>14}")
    print(f"{'shoal (Spark), session start':<34}{spark_start:>10.1f}{'':>14}")
    print(f"{'delta-rs optimize.compact()':<34}{delta_s:>10.1f}{delta_files:>14}")
    print(f"{'ratio shoal job / delta-rs':<34}{shoal_s / delta_s:>10.2f}")
    print(
        f"  (shoal: {result.hours} hours, {result.rows:,} rows; delta-rs: "
        f"{metrics.get('numFilesRemoved')} files removed)"
    )
    print()
    print(
        f"{'query (median of ' + str(args.repeats) + ')':<26}{'before s':>10}{'after s':>10}"
        f"{'speedup':>9}{'delta-rs s':>12}"
    )
    for name in QUERIES:
        b, a, d = q_before[name], q_after[name], q_delta[name]
        print(f"{name:<26}{b:>10.3f}{a:>10.3f}{b / a:>8.1f}x{d:>12.3f}")


if __name__ == "__main__":
    main()
