"""PostgreSQL protocol benchmark: the same queries through psycopg and through HTTP + Arrow.

``python -m loadtest.bench_pg`` (``make bench-pg``) writes (once, with
:func:`loadtest.bench_query.ensure_data`) a ``metrics`` table of ``--points``
gauge points, starts ``shoal serve`` on it, and times:

* three small queries (aggregations of ``bench_query``: one hour by metric,
  24 hours by metric and host, one series in 1-minute buckets), each through
  psycopg (extended protocol, text and binary results) and through
  ``POST /api/v1/sql?format=arrow``; the median of ``--repeat`` runs after a
  warm-up, the clients taking turns run by run;
* one large result of ``--large-rows`` rows (four columns), read to the end
  through each path: rows per second, and the server's peak RSS sampled every
  20 ms while it streams (so a result held whole in memory would show).

Both clients run in this process, the server in its own; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg
import pyarrow as pa

from loadtest.bench_query import START_US, TENANT, _iso, ensure_data, queries
from loadtest.ingest import ServerProcess
from shoal.auth import TokenStore


class PeakRss:
    """Samples a process's RSS in a thread; ``peak`` is the largest seen since ``reset``."""

    def __init__(self, server: ServerProcess) -> None:
        self._server = server
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._server.rss())

    def reset(self) -> int:
        self.peak = self._server.rss()
        return self.peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _median_ms(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        rows = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), rows


def run(args: argparse.Namespace) -> int:
    data_dir = ensure_data(Path(args.cache_dir), args.points)
    token, _ = TokenStore(data_dir).create(TENANT, frozenset({"query"}), "bench-pg")
    server = ServerProcess(
        data_dir,
        env={
            "SHOAL_QUERY_MAX_ROWS": str(args.large_rows + 1),
            "SHOAL_LOG_LEVEL": "warning",
            "SHOAL_QUERY_TIMEOUT_S": "300",
            # the server runs this checkout's code
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        },
        log_path=Path(args.cache_dir) / "bench-pg-server.log",
    ).start()
    http = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
    )
    dsn = f"host=127.0.0.1 port={server.pg_port} dbname=shoal user=bench password={token}"
    pg = psycopg.connect(dsn, autocommit=True)
    rss = PeakRss(server)
    try:

        def via_http(sql: str) -> int:
            response = http.post("/api/v1/sql", params={"format": "arrow"}, content=sql)
            response.raise_for_status()
            return pa.ipc.open_stream(response.content).read_all().num_rows

        def via_pg(sql: str, binary: bool) -> int:
            with pg.cursor(binary=binary) as cur:
                cur.execute(sql, prepare=False)
                return len(cur.fetchall())

        header = ("query", "http+arrow ms", "pg text ms", "pg binary ms", "rows")
        print("{:<24} {:>14} {:>11} {:>13} {:>7}".format(*header))
        for q in queries()[:3]:
            sql = q.datafusion.replace("{t}", "metrics")
            paths: list[Callable[[], int]] = [
                lambda sql=sql: via_http(sql),
                lambda sql=sql: via_pg(sql, False),
                lambda sql=sql: via_pg(sql, True),
            ]
            for fn in paths:
                fn()  # warm-up
            figures: list[list[float]] = [[], [], []]
            rows = 0
            for _ in range(args.repeat):
                for i, fn in enumerate(paths):
                    ms, rows = _median_ms(fn, 1)
                    figures[i].append(ms)
            http_ms, text_ms, bin_ms = (statistics.median(f) for f in figures)
            print(f"{q.name:<24} {http_ms:>14.1f} {text_ms:>11.1f} {bin_ms:>13.1f} {rows:>7}")

        end = _iso(START_US + 24 * 3_600_000_000)
        large = (
            "SELECT timestamp, metric_name, series_id, value FROM metrics "
            f"WHERE timestamp < TIMESTAMP '{end}Z' LIMIT {args.large_rows}"
        )
        print(f"\nlarge result: {args.large_rows:,} rows of 4 columns")
        header = ("path", "seconds", "rows/s", "server CPU s", "peak RSS MiB", "idle RSS MiB")
        print("{:<22} {:>8} {:>10} {:>13} {:>13} {:>13}".format(*header))

        def stream_http() -> int:
            rows = 0
            with http.stream(
                "POST", "/api/v1/sql", params={"format": "arrow"}, content=large
            ) as response:
                response.raise_for_status()
                reader = pa.ipc.open_stream(response.read())
                for batch in reader:
                    rows += batch.num_rows
            return rows

        def stream_pg(binary: bool) -> int:
            rows = 0
            with pg.cursor(binary=binary) as cur:
                for _ in cur.stream(large):
                    rows += 1
            return rows

        for name, fn in (
            ("http+arrow", stream_http),
            ("pg text (stream)", lambda: stream_pg(False)),
            ("pg binary (stream)", lambda: stream_pg(True)),
        ):
            idle = rss.reset()
            cpu = server.cpu_seconds()
            t0 = time.perf_counter()
            rows = fn()
            seconds = time.perf_counter() - t0
            cpu = server.cpu_seconds() - cpu
            print(
                f"{name:<22} {seconds:>8.2f} {rows / seconds:>10,.0f} {cpu:>13.2f} "
                f"{rss.peak / 2**20:>13.0f} {idle / 2**20:>13.0f}"
            )
    finally:
        rss.stop()
        pg.close()
        http.close()
        server.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=1_200_000)
    parser.add_argument("--large-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--cache-dir", default=".bench/query")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
