"""The PromQL cache at work in a real server: flushed files decoded once, shown in /metrics."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

from loadtest.ingest import ServerProcess
from tests.promql import dataset, otlp_data
from tests.promql.conftest import post

from .conftest import ServerFactory, metric_value, scrape


def _query(server: ServerProcess, expr: str, start: float, end: float) -> object:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": 60})
    with urllib.request.urlopen(f"{server.url}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def test_flushed_rows_are_decoded_once_and_counted(start_server: ServerFactory) -> None:
    server = start_server()
    base = (int(time.time() * 1000) - 65 * 60_000) // 60_000 * 60_000 + 4321
    status, body = post(
        server.url + "/v1/metrics",
        otlp_data.request(dataset.build(base)),
        {"Content-Type": "application/x-protobuf"},
    )
    assert status == 200, body
    assert server.terminate() == 0  # a clean stop flushes everything to Parquet
    server = start_server(data_dir=server.data_dir)
    start, end = base / 1000 + 600, base / 1000 + 3600
    expr = "sum by (job) (rate(http_server_requests_total[5m]))"
    first = _query(server, expr, start, end)
    text = scrape(server)
    misses = metric_value(text, "shoal_promql_cache_reads", result="miss")
    assert misses >= 1 and metric_value(text, "shoal_promql_cache_reads", result="hit") == 0
    assert metric_value(text, "shoal_promql_cache_bytes") > 0
    assert _query(server, expr, start, end) == first
    text = scrape(server)
    assert metric_value(text, "shoal_promql_cache_reads", result="miss") == misses
    assert metric_value(text, "shoal_promql_cache_reads", result="hit") == misses
