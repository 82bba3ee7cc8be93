"""Freshness benchmark: how soon after an acknowledged export a SQL query has its rows.

``python -m loadtest.bench_freshness`` (``make bench-freshness``) starts ``shoal
serve`` on a fresh data dir and sends ``--exports`` log records, one export at a
time, through the OpenTelemetry SDK's OTLP/HTTP log exporter. As soon as an
export returns (the server acknowledged it), one SQL query counts the rows of the
test's service, and must count every record acknowledged so far: a count short of
that is an error, not a slow figure. The time from the acknowledgement to the
query's answer is what a user sees between "sent" and "on the panel". The first
``--warm-up`` exports create the ``logs`` table and its first views and are not
counted. Printed: median, p90, p99 and the largest delay, and whether the median
is under the 10 ms target. A benchmark, not a test: the test suite checks the
counts (``tests/sql/test_freshness.py``), never the time.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from loadtest.ingest import ServerProcess
from loadtest.stats import percentile

SERVICE = "fresh"
QUERY = f"SELECT count(*) AS n FROM logs WHERE service_name = '{SERVICE}'"
TARGET_MS = 10.0


class NotVisibleError(AssertionError):
    """A query right after an acknowledged export did not count every record so far."""


def ack_to_visible(url: str, exports: int, warm_up: int = 5) -> list[float]:
    """Export ``warm_up + exports`` records one by one; after each, query the count.

    Returns the seconds from each counted export's acknowledgement to its query's
    answer. Raises :class:`NotVisibleError` when a query misses an acknowledged record.
    """
    provider = LoggerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=url + "/v1/logs"))
    )
    log = logging.getLogger("shoal-freshness")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = LoggingHandler(logger_provider=provider)
    log.addHandler(handler)
    delays: list[float] = []
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            client.post("/api/v1/sql", content="SELECT 1")  # connection and first session warm
            for i in range(warm_up + exports):
                log.info("fresh %d", i)  # returns once the server acknowledged the export
                acked = time.perf_counter()
                r = client.post("/api/v1/sql", content=QUERY)
                visible = time.perf_counter()
                if r.status_code != 200:
                    raise NotVisibleError(f"query after export {i}: {r.status_code} {r.text}")
                if r.json()["rows"] != [[i + 1]]:
                    raise NotVisibleError(f"after {i + 1} acknowledged exports: {r.text}")
                if i >= warm_up:
                    delays.append(visible - acked)
    finally:
        log.removeHandler(handler)
        provider.shutdown()
    return delays


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="shoal-fresh-") as tmp:
        server = ServerProcess(Path(tmp) / "data", env={"SHOAL_LOG_LEVEL": "warning"})
        server.start()
        try:
            print(f"{args.exports} exports, one at a time, each followed by its query", flush=True)
            delays = ack_to_visible(server.url, args.exports, args.warm_up)
        finally:
            server.terminate()
    ms = sorted(d * 1000 for d in delays)
    median = statistics.median(ms)
    print(f"\nack to visible over {len(ms)} exports (ms)")
    print(f"{'median':>8} {'p90':>8} {'p99':>8} {'max':>8}")
    p90, p99 = percentile(ms, 0.9), percentile(ms, 0.99)
    print(f"{median:>8.2f} {p90:>8.2f} {p99:>8.2f} {ms[-1]:>8.2f}")
    met = "met" if median < TARGET_MS else "NOT met"
    print(f"target: median under {TARGET_MS:.0f} ms, {met}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exports", type=int, default=200)
    parser.add_argument("--warm-up", type=int, default=5)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
