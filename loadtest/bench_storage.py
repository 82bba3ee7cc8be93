"""Object-storage benchmark: the same work on local disk and in a bucket, in one run.

``python -m loadtest.bench_storage`` (``make bench-storage``) starts the S3-compatible
server of the tests (moto's server mode, :mod:`loadtest.s3server`, on loopback) and
measures, on local disk and in the bucket alike:

* **flush**: the query benchmark's ``metrics`` data (:mod:`loadtest.bench_query`,
  24 hourly flushes of ``--sql-points`` points in all) written by ``Table.flush``,
  rows per second;
* **a day's append**: :mod:`loadtest.bench_append`'s day of trips imported
  (``import_files``) into a table, ``--days`` days one after the other;
* **queries**: two ``shoal serve`` processes (tables under the data directory, and
  in the bucket) over the same tables, the query benchmark's SQL panels and the
  PromQL benchmark's panels (its OTLP data ingested into both): *cold* (each server
  restarted, its read cache emptied, the panel's first answer) and *warm* (the median
  of ``--repeat`` answers, the servers taking turns).

Request counts per kind come from the S3 server after each phase, with what they
would cost at S3 Standard's list prices. A loopback server flatters latency: a real
store answers a GET in 10-30 ms, not well under one, so the cold figures here are a
floor, and the request counts are the part that carries over.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow.parquet as pq

from loadtest import bench_append, bench_promql, bench_query
from loadtest.ingest import ServerProcess, free_port
from loadtest.s3server import S3Server
from shoal.storage.importer import import_files, spec_for_file
from shoal.storage.location import StorageLocation
from shoal.storage.store import TableStore

TENANT = "default"
PRICE_PER_1000 = {"PUT": 0.005, "POST": 0.005, "LIST": 0.005, "GET": 0.0004, "HEAD": 0.0004}
"""S3 Standard (us-east-1) request prices in US dollars per 1,000 requests."""


def _cost(counts: dict[str, int]) -> float:
    return sum(PRICE_PER_1000.get(k, 0.0) * v / 1000 for k, v in counts.items())


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {
        k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)
    }


def _requests(s3: S3Server, before: dict[str, int]) -> str:
    counts = _delta(s3.stats(), before)
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
    return f"{kinds} (${_cost(counts):.4f})"


def flush_phase(
    s3: S3Server, local: TableStore, bucket: TableStore, points: int, flushes: int
) -> None:
    print(f"\n## Flush: {points:,} points in {flushes} flushes of an hour each\n")
    print("| where | seconds | rows/s | requests |\n|---|---|---|---|")
    per_hour = points // flushes
    hours = [
        bench_query.points(
            per_hour, bench_query.START_US + h * bench_query.HOUR_US, bench_query.HOUR_US, h
        )
        for h in range(flushes)
    ]
    for name, store in (("local disk", local), ("bucket", bucket)):
        before = s3.stats()
        table = store.open(TENANT, "metrics")
        started = time.perf_counter()
        for lsn, rows in enumerate(hours, 1):
            table.flush(rows, lsn)
        took = time.perf_counter() - started
        shown = _requests(s3, before) if name == "bucket" else "-"
        print(f"| {name} | {took:.2f} | {per_hour * flushes / took:,.0f} | {shown} |", flush=True)


def append_phase(s3: S3Server, local: TableStore, bucket: TableStore, days: int, rows: int) -> None:
    print(f"\n## A day's append: {days} days of {rows:,} trips, one import each\n")
    work = Path(tempfile.mkdtemp(prefix="shoal-append-"))
    files = []
    for day in range(days):
        path = work / f"day{day}.parquet"
        pq.write_table(bench_append.make_day(day, rows), path)
        files.append(path)
    spec = spec_for_file("trips", files[0], "pickup_at")
    print("| where | median s | max s | requests |\n|---|---|---|---|")
    for name, store in (("local disk", local), ("bucket", bucket)):
        before = s3.stats()
        table = store.open(TENANT, "trips", spec)
        took = []
        for path in files:
            started = time.perf_counter()
            import_files(table, [path])
            took.append(time.perf_counter() - started)
        shown = _requests(s3, before) if name == "bucket" else "-"
        print(f"| {name} | {statistics.median(took):.3f} | {max(took):.3f} | {shown} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)


def _sql(server: ServerProcess, text: str) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        answer = httpx.post(server.url + "/api/v1/sql", content=text, timeout=300)
        took = time.perf_counter() - started
        if answer.status_code != 200:
            raise RuntimeError(f"{text[:60]}: {answer.status_code} {answer.text[:300]}")
        return took

    return run


def _promql(server: ServerProcess, query: str, start: float, end: float) -> Callable[[], float]:
    params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "60"}

    def run() -> float:
        url = f"{server.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=300) as resp:
            resp.read()
        return time.perf_counter() - started

    return run


class Pair:
    """The two servers: tables on local disk, and tables in the bucket."""

    def __init__(self, work: Path, s3: S3Server, url: str) -> None:
        env = {"SHOAL_FLUSH_MAX_AGE_S": "1", "SHOAL_LOG_LEVEL": "warning"}
        self.local = ServerProcess(work / "local", env=env)
        self.bucket = ServerProcess(
            work / "bucket", env={**env, **s3.env(), "SHOAL_STORAGE_URL": url}
        )

    def start(self) -> None:
        self.local.start()
        self.bucket.start()

    def restart_cold(self) -> None:
        """Both restarted; the bucket's server with an empty read cache."""
        for server in (self.local, self.bucket):
            server.terminate()
        shutil.rmtree(self.bucket.data_dir / "cache", ignore_errors=True)
        self.start()

    def stop(self) -> None:
        for server in (self.local, self.bucket):
            if server.proc is not None and server.proc.poll() is None:
                server.terminate()


def query_phase(
    s3: S3Server,
    pair: Pair,
    panels: dict[str, Callable[[ServerProcess], Callable[[], float]]],
    repeat: int,
) -> None:
    print("\n## Queries: cold (restarted, empty cache) and warm (median), ms\n")
    print(
        "| panel | local cold | bucket cold | local warm | bucket warm | warm ratio | "
        "cold requests |\n|---|---|---|---|---|---|---|"
    )
    ratios = []
    cold_counts: dict[str, int] = {}
    for name, make in panels.items():
        pair.restart_cold()
        local, bucket = make(pair.local), make(pair.bucket)
        before = s3.stats()
        cold_local, cold_bucket = local(), bucket()
        counts = _delta(s3.stats(), before)
        for k, v in counts.items():
            cold_counts[k] = cold_counts.get(k, 0) + v
        warm_local, warm_bucket = [], []
        for _ in range(repeat):
            warm_local.append(local())
            warm_bucket.append(bucket())
        a, b = statistics.median(warm_local), statistics.median(warm_bucket)
        ratios.append(b / a)
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
        print(
            f"| {name} | {cold_local * 1000:.0f} | {cold_bucket * 1000:.0f} | {a * 1000:.0f} | "
            f"{b * 1000:.0f} | {b / a:.2f} | {kinds} |",
            flush=True,
        )
    print(
        f"\nwarm ratio (bucket / local disk): median {statistics.median(ratios):.2f}, "
        f"max {max(ratios):.2f} (target: within 1.2)"
    )
    print(f"requests of every cold panel: {cold_counts} (${_cost(cold_counts):.4f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sql-points", type=int, default=4_000_000)
    parser.add_argument("--promql-series", type=int, default=2_000)
    parser.add_argument("--promql-hours", type=float, default=2.0)
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--day-rows", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--flushes", type=int, default=24, help="the flush phase's flushes")
    parser.add_argument(
        "--phases", default="flush,append,queries", help="which of flush,append,queries to run"
    )
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="shoal-bench-storage-"))
    s3 = S3Server(free_port(), log=work / "s3.log").start()
    os.environ.update(s3.env())
    url = "s3://shoal/bench"
    pair = Pair(work, s3, url)
    try:
        local = TableStore(work / "local")
        bucket = TableStore(work / "bucket", location=StorageLocation.parse(url, work / "bucket"))
        phases = set(args.phases.split(","))
        if "flush" in phases or "queries" in phases:  # the queries read the flushed table
            flush_phase(s3, local, bucket, args.sql_points, args.flushes)
        if "append" in phases:
            append_phase(s3, local, bucket, args.days, args.day_rows)
        if "queries" not in phases:
            return 0
        # the PromQL benchmark's data, by OTLP, into both servers
        pair.start()
        end_ms = int(time.time() * 1000) // 60_000 * 60_000
        data = bench_promql.Data(args.promql_series, args.promql_hours, end_ms)
        before = s3.stats()
        started = time.perf_counter()
        window = min(bench_promql.WINDOW_POINTS, data.points)
        per = max(1, bench_promql.REQUEST_SAMPLES // (bench_promql.PER_HOST * window))
        for a in range(0, data.points, window):
            for h in range(0, data.hosts, per):
                body = data.otlp(
                    a, min(a + window, data.points), range(h, min(h + per, data.hosts))
                )
                for server in (pair.local, pair.bucket):
                    bench_promql._post(
                        server.url + "/v1/metrics", body, {"Content-Type": "application/x-protobuf"}
                    )
        took = time.perf_counter() - started
        pair.stop()  # a clean stop flushes everything
        print(
            f"\n## Ingest: {data.series:,} series x {data.points} points by OTLP into both "
            f"servers in {took:.1f} s; requests of the bucket's flushes: {_requests(s3, before)}"
        )
        start_s, end_s = data.start_ms / 1000, end_ms / 1000
        panels: dict[str, Callable[[ServerProcess], Callable[[], float]]] = {}
        for q in bench_query.queries():
            text = q.datafusion.replace("{t}", "metrics")
            panels[f"SQL {q.name}"] = lambda s, t=text: _sql(s, t)
        for name, query in bench_promql.PANELS.items():
            panels[f"PromQL {name}"] = lambda s, q=query: _promql(s, q, start_s, end_s)
        query_phase(s3, pair, panels, args.repeat)
        print(f"\nS3 requests in all: {s3.stats()}")
    finally:
        pair.stop()
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
