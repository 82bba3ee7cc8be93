"""Compaction benchmark: shoal's Spark compaction beside delta-rs's optimize, and query speed.

One day of metrics (``--hours`` hourly partitions of ``--files-per-hour``
small files, ``--points`` points in all, each file written with the flusher's
layout rules) is generated once into ``.bench/pipeline/``. Each of
``--rounds`` rounds copies it twice; on one copy shoal's compaction runs
(``compact_table`` in a process of its own, as ``shoal compact`` runs, whose
JVM and SparkSession start is reported separately), on the other delta-rs's
``DeltaTable.optimize.compact()`` with the same target size. The two
alternate which goes first, and the result is the median of the rounds'
ratios, so a busy moment on a shared machine does not decide it. The
aggregation queries run with DataFusion over the table's native file list
(one ``read_parquet`` per file, unioned, as the query layer does), after the
last round, on the compacted copies and on a copy of the uncompacted table.

    python -m loadtest.bench_pipeline                       # 10M points, 24 x 60 files
    python -m loadtest.bench_pipeline --points 1000000      # a smaller scale
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable

from loadtest.pipeline_data import metrics_table
from shoal import config as config_mod
from shoal.schema import METRICS_SCHEMA
from shoal.storage import layout
from shoal.storage.commit import Commit, NewFile
from shoal.storage.store import TableStore

if TYPE_CHECKING:
    from shoal.pipeline.compact import CompactResult

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
            Commit(
                "flush", tuple(adds), (), data_change=True, read_version=table.snapshot().version
            )
        )
        print(f"  generated hour {h + 1}/{hours} ({time.perf_counter() - started:.0f} s)")
    done.write_text("ok\n")
    return path


def table_dir(data_dir: Path) -> Path:
    return data_dir / "tenants" / "bench" / "metrics"


def query_times(data_dir: Path, repeats: int) -> dict[str, float]:
    """Median seconds per query, over the committed files registered natively."""
    from shoal.sql.sessions import new_session

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


@dataclasses.dataclass(frozen=True)
class Round:
    shoal_s: float
    session_s: float
    delta_s: float
    load: tuple[float, float]
    shoal_first: bool

    @property
    def ratio(self) -> float:
        return self.shoal_s / self.delta_s


def fresh_copies(pristine: Path, work: Path) -> tuple[Path, Path]:
    """Two identical copies of the pristine table, written back to disk before timing."""
    if work.exists():
        shutil.rmtree(work)
    shoal_copy, delta_copy = work / "shoal", work / "deltars"
    shutil.copytree(pristine, shoal_copy)
    shutil.copytree(pristine, delta_copy)
    os.sync()  # neither job pays for writing back the other's copy
    return shoal_copy, delta_copy


def compact_with_shoal(data_dir: Path, master: str) -> tuple[float, float, CompactResult]:
    """Session start and job seconds of one compaction in a new SparkSession."""
    from shoal.pipeline.compact import compact_table
    from shoal.pipeline.session import create_session

    cfg = config_mod.default().replace(
        data_dir=str(data_dir), compact_target_file_bytes=TARGET_BYTES
    )
    started = time.perf_counter()
    spark = create_session(cfg, master, app_name="shoal-bench")
    spark.range(1).count()
    session_s = time.perf_counter() - started
    table = TableStore(data_dir).open("bench", "metrics")
    try:
        started = time.perf_counter()
        result = compact_table(spark, table, cfg)
        return session_s, time.perf_counter() - started, result
    finally:
        spark.stop()


@dataclasses.dataclass(frozen=True)
class ShoalJob:
    session_s: float
    job_s: float
    hours: int
    rows: int


def compact_in_new_process(data_dir: Path, master: str) -> ShoalJob:
    """:func:`compact_with_shoal` in a process (and JVM) of its own, as ``shoal compact`` runs."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtest.bench_pipeline", "--shoal-job", str(data_dir),
         "--master", master],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"shoal compaction failed:\n{done.stderr[-4000:]}")
    return ShoalJob(**json.loads(done.stdout.strip().splitlines()[-1]))


def shoal_job_main(data_dir: Path, master: str) -> None:
    session_s, job_s, result = compact_with_shoal(data_dir, master)
    print(json.dumps(dataclasses.asdict(ShoalJob(session_s, job_s, result.hours, result.rows))))


def compact_with_delta_rs(data_dir: Path) -> tuple[float, dict[str, Any]]:
    dt = DeltaTable(str(table_dir(data_dir)))
    started = time.perf_counter()
    metrics = dt.optimize.compact(target_size=TARGET_BYTES)
    return time.perf_counter() - started, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--points", type=int, default=10_000_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--files-per-hour", type=int, default=60)
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each query (median)")
    parser.add_argument(
        "--rounds", type=int, default=3,
        help="compactions of each kind, alternating which goes first (median ratio)",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, default=Path(".bench/pipeline"))
    parser.add_argument("--shoal-job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.shoal_job is not None:
        shoal_job_main(args.shoal_job, args.master)
        return
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    print(
        f"generating {args.points:,} points, {args.hours} hours x {args.files_per_hour} files "
        f"(cached in {args.dir})"
    )
    pristine = generate(args.dir, args.points, args.hours, args.files_per_hour, args.series)
    work = args.dir / "work"
    shoal_copy, delta_copy = fresh_copies(pristine, work)
    files_before = len(DeltaTable(str(table_dir(shoal_copy))).file_uris())
    bytes_before = sum(p.stat().st_size for p in table_dir(shoal_copy).glob("hour=*/*.parquet"))

    rounds: list[Round] = []
    for number in range(args.rounds):
        if number:
            shoal_copy, delta_copy = fresh_copies(pristine, work)
        shoal_first = number % 2 == 0
        load_before = os.getloadavg()[0]
        if not shoal_first:
            delta_s, metrics = compact_with_delta_rs(delta_copy)
        job = compact_in_new_process(shoal_copy, args.master)
        session_s, shoal_s = job.session_s, job.job_s
        if shoal_first:
            delta_s, metrics = compact_with_delta_rs(delta_copy)
        rounds.append(
            Round(shoal_s, session_s, delta_s, (load_before, os.getloadavg()[0]), shoal_first)
        )
        r = rounds[-1]
        print(
            f"  round {number + 1}/{args.rounds} ({'shoal' if shoal_first else 'delta-rs'} first):"
            f" shoal job {shoal_s:.1f} s (session start {session_s:.1f} s), delta-rs"
            f" {delta_s:.1f} s, ratio {r.ratio:.2f}",
            flush=True,
        )

    q_after = query_times(shoal_copy, args.repeats)
    q_delta = query_times(delta_copy, args.repeats)
    # the uncompacted table's queries run last, on a copy of the pristine table: a
    # minute of queries over its 1440 files in this process, run first, was
    # followed by the slowest compaction of each run
    before = work / "before"
    shutil.copytree(pristine, before)
    q_before = query_times(before, args.repeats)
    files_after = len(TableStore(shoal_copy).open("bench", "metrics").snapshot().files)
    delta_files = len(DeltaTable(str(table_dir(delta_copy))).file_uris())

    print()
    print(
        f"input: {args.points:,} points, {files_before} files, {bytes_before / 1e6:.1f} MB; "
        f"master {args.master}; {args.rounds} rounds, each on fresh copies, shoal in a new "
        "process and SparkSession each time"
    )
    print(
        f"{'round':<7}{'first':>10}{'shoal job s':>13}{'session s':>11}{'delta-rs s':>12}"
        f"{'ratio':>8}{'load':>14}"
    )
    for number, r in enumerate(rounds, 1):
        first = "shoal" if r.shoal_first else "delta-rs"
        load = f"{r.load[0]:.2f}->{r.load[1]:.2f}"
        print(
            f"{number:<7}{first:>10}{r.shoal_s:>13.1f}{r.session_s:>11.1f}{r.delta_s:>12.1f}"
            f"{r.ratio:>8.2f}{load:>14}"
        )
    print(
        f"median ratio shoal job / delta-rs: {statistics.median(r.ratio for r in rounds):.2f}"
        f" (target <= 1.5); files after: shoal {files_after}, delta-rs {delta_files}"
    )
    print(
        f"  (shoal: {job.hours} hours, {job.rows:,} rows; delta-rs: "
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
