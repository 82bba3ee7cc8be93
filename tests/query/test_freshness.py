"""Freshness: once an OpenTelemetry SDK export returns, the very next SQL query sees its rows."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from loadtest.ingest import ServerProcess


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "data", env={"SHOAL_LOG_LEVEL": "warning"}, log_path=tmp_path / "server.log"
    )
    proc.start()
    yield proc
    if proc.proc is not None and proc.proc.poll() is None:
        proc.kill()


WARM_UP = 5


def test_ack_to_visible_median_under_10ms(server: ServerProcess) -> None:
    provider = LoggerProvider(resource=Resource.create({"service.name": "fresh"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=server.url + "/v1/logs"))
    )
    log = logging.getLogger("shoal-freshness-test")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = LoggingHandler(logger_provider=provider)
    log.addHandler(handler)
    delays: list[float] = []
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            client.post("/api/v1/sql", content="SELECT 1")  # connection and first session warm
            # the first exports create the logs table and its first views: not counted
            for i in range(WARM_UP + 40):
                log.info("fresh %d", i)  # returns once the server acknowledged the export
                acked = time.perf_counter()
                r = client.post(
                    "/api/v1/sql",
                    content="SELECT count(*) AS n FROM logs WHERE service_name = 'fresh'",
                )
                visible = time.perf_counter()
                assert r.status_code == 200, r.text
                assert r.json()["rows"] == [[i + 1]], (i, r.text)
                if i >= WARM_UP:
                    delays.append(visible - acked)
    finally:
        log.removeHandler(handler)
        provider.shutdown()
    median_ms = statistics.median(delays) * 1000
    print(f"ack-to-visible median {median_ms:.2f} ms, max {max(delays) * 1000:.2f} ms")
    assert median_ms < 10, f"median ack-to-visible {median_ms:.2f} ms"
