"""Native histograms sent by remote write answer PromQL as a real Prometheus answers.

Debian's Prometheus 2.42 (native histograms on) and ``shoal serve`` get the same
Remote-Write 1.0 requests (tests/promql/native_data.py: counter histograms with a
restart and a schema change, negative and zero observations, a gauge histogram, a float
histogram, a stale marker); every query runs as instant queries at several times and as
a range query, and the answers must agree in series, labels and values (1e-9 relative).

A series whose schema changes is brought to its smallest schema among the rows a query
reads (docs/rationale.md): its quantiles are compared at instants whose windows lie past
the change, its counts and sums everywhere. ``sum_over_time`` of a histogram is not
compared: Prometheus 2.42 answers nothing for it (Prometheus 3 does what shoal does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from loadtest.native_histograms import encode_v1
from tests.promql import native_data
from tests.promql.compare import compare
from tests.promql.conftest import Prometheus, get_json, post

MINUTE = 60_000

QUERIES = [
    "histogram_count(rpc_duration_seconds)",
    "histogram_sum(rpc_duration_seconds)",
    "histogram_count(rate(rpc_duration_seconds[5m]))",
    "histogram_sum(rate(rpc_duration_seconds[5m]))",
    "histogram_count(increase(rpc_duration_seconds[10m]))",
    "histogram_quantile(0.9, rate(rpc_duration_seconds[5m]))",
    "histogram_quantile(0.5, rate(rpc_duration_seconds[1m]))",
    "histogram_quantile(0.99, sum(rate(rpc_duration_seconds[5m])))",
    "histogram_quantile(0.5, sum by (route) (increase(rpc_duration_seconds[10m])))",
    "histogram_quantile(0.1, rpc_duration_seconds)",
    "histogram_quantile(0.01, rpc_duration_seconds)",
    'histogram_quantile(0.8, rpc_duration_seconds{route="/b"})',
    "histogram_sum(sum(rate(rpc_duration_seconds[5m])))",
    "histogram_count(rate(rpc_duration_seconds[5m])) * 60",
    "count(rpc_duration_seconds)",
    "histogram_count(queue_wait_seconds)",
    "histogram_sum(queue_wait_seconds)",
    "histogram_quantile(0.5, queue_wait_seconds)",
    "histogram_quantile(0.75, jobs_seconds)",
    "histogram_count(rate(jobs_seconds[5m]))",
    "histogram_sum(jobs_seconds)",
    "histogram_count(gone_seconds)",
    "histogram_quantile(0.5, rate(gone_seconds[5m]))",
    "histogram_count(resized_seconds)",
    "histogram_sum(rate(resized_seconds[5m]))",
    "histogram_count(increase(resized_seconds[20m]))",
]
AFTER_THE_CHANGE = [
    "histogram_quantile(0.9, resized_seconds)",
    "histogram_quantile(0.5, rate(resized_seconds[5m]))",
    "histogram_quantile(0.75, sum(rate(resized_seconds[10m])))",
]
"""Compared at instants 31 and 58 minutes in, past the schema change at 15 minutes."""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), features=("native-histograms",))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def loaded(prometheus: Prometheus, shoal_server: ServerProcess) -> int:
    now = int(time.time() * 1000)
    base = (now - 65 * MINUTE) // MINUTE * MINUTE + 4321
    headers = {
        "Content-Type": "application/x-protobuf",
        "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    for series in native_data.build(base):
        body = remote_write.compress(encode_v1([series]))
        for url in (prometheus.url, shoal_server.url):
            status, text = post(url + "/api/v1/write", body, headers)
            assert status in (200, 204), (url, text)
    return base


def _instants(query: str, base: int, prometheus: Prometheus, shoal: ServerProcess) -> int:
    """Compares the answers at two instants; returns how many held data."""
    held = 0
    for t in ((base + 31 * MINUTE + 1234) / 1000, (base + 58 * MINUTE + 567) / 1000):
        params = {"query": query, "time": t}
        theirs = get_json(prometheus.url, "/api/v1/query", params)
        compare(get_json(shoal.url, "/api/v1/query", params), theirs, f"{query} @ {t}")
        held += bool(theirs.get("data", {}).get("result"))
    return held


def _answers(query: str, base: int, prometheus: Prometheus, shoal: ServerProcess) -> int:
    """Compares the answers at two instants and of a range query; returns how many held
    data."""
    held = _instants(query, base, prometheus, shoal)
    params = {
        "query": query,
        "start": (base + 3 * MINUTE + 777) / 1000,
        "end": (base + 62 * MINUTE) / 1000,
        "step": "67s",
    }
    theirs = get_json(prometheus.url, "/api/v1/query_range", params)
    compare(get_json(shoal.url, "/api/v1/query_range", params), theirs, f"range {query}")
    return held + bool(theirs.get("data", {}).get("result"))


HELD = {"histogram_count(gone_seconds)": 1, "histogram_quantile(0.5, rate(gone_seconds[5m]))": 1}
"""Queries not every answer of which holds data (in both servers): ``gone_seconds``
ended (a stale marker) before both instants."""


@pytest.mark.parametrize("query", QUERIES)
def test_native_histograms_answer_as_in_prometheus(
    query: str, loaded: int, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    assert _answers(query, loaded, prometheus, shoal_server) == HELD.get(query, 3)


@pytest.mark.parametrize("query", AFTER_THE_CHANGE)
def test_past_a_schema_change_quantiles_answer_as_in_prometheus(
    query: str, loaded: int, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    assert _instants(query, loaded, prometheus, shoal_server) == 2
