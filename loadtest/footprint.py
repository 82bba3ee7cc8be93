"""Footprint of a server install: virtualenv size, idle RSS, RSS under ingest and queries.

    python -m loadtest.footprint --venv .venv --duration 60

Starts ``<venv>/bin/shoal serve`` on free ports with a temporary data dir and
samples its RSS once ready and idle; writes some metrics, logs and spans, restarts it
(tables on disk) and samples again, idle and after one query per table; then, while
``python -m loadtest ingest`` sends OTLP and ``--query-threads`` clients run an
aggregation over the metrics in a loop, samples the peak. Prints the virtualenv's
size and each figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess

QUERY = (
    "SELECT metric_name, service_name, count(*), avg(value), max(timestamp) "
    "FROM metrics GROUP BY 1, 2 ORDER BY 3 DESC"
)
MiB = 1024 * 1024


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            p = Path(root) / name
            if not p.is_symlink():
                total += p.stat().st_size
    return total


def _post(url: str, body: bytes) -> None:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        resp.read()


def _populate(url: str, requests: int = 20) -> None:
    """Some rows in each of the three tables."""
    for i in range(requests):
        start = BASE_NS + i
        _post(url + "/v1/metrics", payloads.metrics_request(
            points=1000, series=200, start_ns=start).SerializeToString())  # fmt: skip
        _post(url + "/v1/logs", payloads.logs_request(
            records=500, series=20, start_ns=start).SerializeToString())  # fmt: skip
        _post(url + "/v1/traces", payloads.traces_request(
            spans=500, series=20, start_ns=start).SerializeToString())  # fmt: skip


def _query_loop(url: str, stop: threading.Event, errors: list[str]) -> None:
    body = QUERY.encode()
    while not stop.is_set():
        try:
            req = urllib.request.Request(url + "/api/v1/sql", data=body, method="POST")
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
        except OSError as exc:
            errors.append(str(exc))
            time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--venv", default=".venv", help="virtualenv holding the shoal to measure")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    p.add_argument("--idle", type=float, default=10.0, help="seconds idle before sampling")
    p.add_argument("--workers", type=int, default=2, help="ingest worker processes")
    p.add_argument("--query-threads", type=int, default=4, help="concurrent query clients")
    args = p.parse_args(argv)

    venv = Path(args.venv).resolve()
    print(f"virtualenv {venv}: {dir_size(venv) / MiB:.0f} MiB")
    with tempfile.TemporaryDirectory(prefix="shoal-footprint-") as tmp:

        def start() -> ServerProcess:
            return ServerProcess(
                Path(tmp) / "data", env={"SHOAL_LOG_LEVEL": "warning"}, shoal=venv / "bin" / "shoal"
            ).start()

        server = start()
        try:
            time.sleep(args.idle)
            print(f"idle RSS after {args.idle:g} s, empty data dir: {server.rss() / MiB:.0f} MiB")
            _populate(server.url)
        finally:
            server.terminate()
        server = start()
        try:
            time.sleep(args.idle)
            print(f"idle RSS, tables on disk: {server.rss() / MiB:.0f} MiB")
            for table in ("metrics", "logs", "spans"):
                _post(server.url + "/api/v1/sql", f"SELECT count(*) FROM {table}".encode())
            time.sleep(args.idle)
            idle = server.rss()
            print(f"idle RSS after one query per table: {idle / MiB:.0f} MiB")
            load = subprocess.Popen(
                [sys.executable, "-m", "loadtest", "ingest", "--url", server.url,
                 "--duration", str(args.duration), "--workers", str(args.workers)],
                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            )  # fmt: skip
            stop = threading.Event()
            errors: list[str] = []
            time.sleep(min(5.0, args.duration / 4))  # some data to query first
            clients = [
                threading.Thread(target=_query_loop, args=(server.url, stop, errors), daemon=True)
                for _ in range(args.query_threads)
            ]
            for c in clients:
                c.start()
            peak = idle
            try:
                while load.poll() is None:
                    peak = max(peak, server.rss())
                    time.sleep(0.2)
            finally:
                stop.set()
                if load.poll() is None:
                    load.kill()
                for c in clients:
                    c.join(timeout=60)
            print(
                f"peak RSS under {args.workers} ingest workers and {args.query_threads} "
                f"query clients for {args.duration:g} s: {peak / MiB:.0f} MiB "
                f"({len(errors)} query errors{': ' + errors[0] if errors else ''})"
            )
        finally:
            server.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
