"""shoal's PromQL answers against a real Prometheus holding the same samples.

Prometheus (Debian's package) gets the samples by remote write; shoal gets them
by OTLP under the OTel names (the test writes the Prometheus names it expects,
so the OTLP -> Prometheus mapping is checked too). Every query runs as an
instant query at several times and as range queries; answers must agree in
result type, series and labels, and values within 1e-9 relative.
"""

from __future__ import annotations

import time

import pytest

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from tests.promql import dataset, otlp_data
from tests.promql.compare import compare as _compare
from tests.promql.conftest import Prometheus, get_json, post

MINUTE = 60_000

QUERIES = [
    # Grafana's health check and simple scalars
    "1+1",
    "vector(1)",
    "time()",
    "scalar(sum(queue_size))",
    # selectors with every matcher type
    "http_server_requests_total",
    'http_server_requests_total{code="200"}',
    'http_server_requests_total{code!="200"}',
    'http_server_requests_total{http_method=~"GET|POST"}',
    'http_server_requests_total{http_method!~"G.*",code="200"}',
    '{__name__=~"system_memory_usage_.*",state!="free"}',
    'http_server_requests_total{job="shop/api"}',
    "system_cpu_utilization_ratio",
    "queue_size offset 3m",
    "http_server_requests_total offset 90s",
    # counters with resets, gaps and sparse series
    "rate(http_server_requests_total[5m])",
    "rate(http_server_requests_total[1m])",
    "irate(http_server_requests_total[3m])",
    "increase(http_server_requests_total[10m])",
    "resets(http_server_requests_total[30m])",
    "changes(queue_size[10m])",
    "delta(queue_size[5m])",
    "idelta(queue_size[2m])",
    "deriv(system_memory_usage_bytes[10m])",
    "predict_linear(queue_size[10m], 600)",
    "rate(http_server_requests_total[5m] offset 5m)",
    # *_over_time
    "avg_over_time(queue_size[5m])",
    "sum_over_time(queue_size[3m])",
    "min_over_time(system_memory_usage_bytes[7m])",
    "max_over_time(system_memory_usage_bytes[7m])",
    "count_over_time(http_server_requests_total[4m])",
    "last_over_time(queue_size[10m])",
    "stddev_over_time(queue_size[10m])",
    "stdvar_over_time(queue_size[10m])",
    "quantile_over_time(0.9, queue_size[10m])",
    "present_over_time(http_server_requests_total[1m])",
    "absent_over_time(nonexistent_metric[5m])",
    # aggregations
    "sum(rate(http_server_requests_total[5m]))",
    "sum by (code) (rate(http_server_requests_total[5m]))",
    "sum without (instance) (rate(http_server_requests_total[5m]))",
    "avg by (job) (queue_size)",
    "max by (state) (system_memory_usage_bytes)",
    "min(system_cpu_utilization_ratio)",
    "count by (job) (http_server_requests_total)",
    "group by (job) (http_server_requests_total)",
    "stddev(system_cpu_utilization_ratio)",
    "stdvar by (job) (queue_size)",
    "topk(2, rate(http_server_requests_total[5m]))",
    "bottomk(1, system_memory_usage_bytes)",
    "quantile(0.75, system_cpu_utilization_ratio)",
    'count_values("value", floor(system_cpu_utilization_ratio * 10))',
    "sum by (le) (rate(http_server_duration_milliseconds_bucket[5m]))",
    # histograms
    "histogram_quantile(0.9, rate(http_server_duration_milliseconds_bucket[5m]))",
    "histogram_quantile(0.5, sum by (le) (rate(http_server_duration_milliseconds_bucket[10m])))",
    "histogram_quantile(0.99, sum by (le, http_route) "
    "(increase(http_server_duration_milliseconds_bucket[5m])))",
    "rate(http_server_duration_milliseconds_sum[5m]) "
    "/ rate(http_server_duration_milliseconds_count[5m])",
    # binary operators and vector matching
    "queue_size * 2",
    "2 - queue_size",
    "queue_size > 50",
    "queue_size > bool 50",
    "50 < queue_size",
    "system_memory_usage_bytes / on(job, instance) group_left "
    "sum by (job, instance) (system_memory_usage_bytes)",
    'system_memory_usage_bytes{state="used"} / ignoring(state) '
    'system_memory_usage_bytes{state="free"}',
    'sum by (job) (rate(http_server_requests_total{code="500"}[5m])) '
    "/ sum by (job) (rate(http_server_requests_total[5m]))",
    "rate(http_server_requests_total[5m]) * on(job) group_left(instance) group by (job, instance) "
    "(queue_size)",
    'http_server_requests_total and http_server_requests_total{code="200"}',
    'queue_size or http_server_requests_total{code="404"}',
    'http_server_requests_total unless http_server_requests_total{http_method="GET"}',
    "queue_size % 7",
    "queue_size ^ 0.5",
    "-queue_size",
    "queue_size == bool queue_size",
    # functions
    "abs(delta(queue_size[5m]))",
    "ceil(queue_size)",
    "floor(queue_size)",
    "round(queue_size, 5)",
    "clamp(queue_size, 45, 55)",
    "clamp_min(queue_size, 50)",
    "clamp_max(queue_size, 50)",
    "sqrt(queue_size)",
    "exp(system_cpu_utilization_ratio)",
    "ln(queue_size)",
    "log2(queue_size)",
    "log10(system_memory_usage_bytes)",
    "timestamp(queue_size)",
    'label_replace(queue_size, "q", "queue-$1", "queue", "(.*)")',
    'label_join(queue_size, "both", "/", "job", "queue")',
    'absent(nonexistent_metric{job="x"})',
    "absent(queue_size)",
    "sort(queue_size)",
    "sort_desc(queue_size)",
    "hour()",
    "minute(timestamp(queue_size))",
    "day_of_week()",
    "month()",
    "year()",
    "days_in_month()",
    # subqueries and @
    "max_over_time(rate(http_server_requests_total[2m])[10m:1m])",
    "avg_over_time(queue_size[5m:30s])",
    "min_over_time(sum(queue_size)[15m:2m] offset 1m)",
    "queue_size @ end()",
    "rate(http_server_requests_total[5m] @ start())",
    # more matching, grouping and edge cases
    "sum by (job) (queue_size) / on(job) group_right "
    "sum by (job, state) (system_memory_usage_bytes)",
    "queue_size or on(job) system_cpu_utilization_ratio",
    "queue_size and on(job) system_cpu_utilization_ratio",
    "queue_size unless on(job) system_cpu_utilization_ratio",
    "sum without (cpu) (system_cpu_utilization_ratio)",
    "avg without (state, cpu) (system_cpu_utilization_ratio)",
    "count(count by (job) (http_server_requests_total))",
    "topk(1, queue_size) by (job)",
    "sum(queue_size) by (queue)",
    "queue_size < bool on(queue) queue_size offset 1m",
    "increase(http_server_requests_total[1h])",
    "rate(http_server_requests_total[30s])",
    "irate(http_server_requests_total[5m] offset 10m)",
    "changes(http_server_requests_total[1h])",
    "sum_over_time(queue_size[1h] @ 0) or vector(0)",
    "max_over_time(deriv(queue_size[5m])[20m:])",
    "rate(http_server_duration_milliseconds_count[5m] @ end())",
    "histogram_quantile(0.25, sum without (instance) "
    "(rate(http_server_duration_milliseconds_bucket[5m])))",
    "histogram_quantile(1, rate(http_server_duration_milliseconds_bucket[5m]))",
    "histogram_quantile(0, rate(http_server_duration_milliseconds_bucket[5m]))",
    "quantile by (job) (0.5, rate(http_server_requests_total[5m]))",
    '1 - (sum(system_memory_usage_bytes{state="free"}) / sum(system_memory_usage_bytes))',
    "vector(time()) - on() group_right timestamp(queue_size)",
    'scalar(queue_size{queue="a"}) * queue_size',
    "(queue_size > 40) + 1",
    'last_over_time(http_server_requests_total{http_method="PUT"}[30m])',
    'http_server_requests_total{http_method="PUT"}',
    'count_over_time(http_server_requests_total{http_method="DELETE"}[10m])',
]

# a second round: edge cases of matching, functions and time modifiers
QUERIES += [
    "queue_size offset -2m",
    "queue_size @ start() offset 1m",
    "sum_over_time(queue_size[3m] @ end())",
    "rate(http_server_requests_total[7m:45s])",
    "avg_over_time(rate(http_server_requests_total[2m])[6m:1m] offset 2m)",
    "max_over_time(max_over_time(queue_size[2m:30s])[6m:1m])",
    "sum(queue_size) by (job) > bool 90",
    "queue_size != bool 50.5",
    "(queue_size > 45) and (queue_size < 55)",
    "queue_size >= on(queue) group_left queue_size offset 30s",
    'count_values by (job) ("bucket", floor(queue_size / 10))',
    "sort(sum by (queue) (queue_size))",
    "sort_desc(rate(http_server_requests_total[5m]))",
    "topk(1, sum by (code) (rate(http_server_requests_total[5m])))",
    "bottomk(2, rate(http_server_requests_total[5m])) by (job)",
    "quantile(0.1, queue_size)",
    "quantile_over_time(0.5, http_server_requests_total[10m])",
    "stddev by (state) (system_memory_usage_bytes)",
    "group(queue_size)",
    "count without (queue) (queue_size)",
    "max without () (queue_size)",
    "sum by () (queue_size)",
    'label_replace(rate(http_server_requests_total[5m]), "m", "$1-$2", "http_method", "(.)(.*)")',
    'label_replace(queue_size, "queue", "", "queue", "a")',
    'label_join(rate(http_server_requests_total[5m]), "key", ":", "code", "http_method")',
    "timestamp(http_server_requests_total offset 1m)",
    "vector(1) + on() group_left queue_size",
    "queue_size + on() group_left vector(1)",
    "scalar(vector(3)) * queue_size",
    "time() - queue_size",
    "clamp(queue_size, 60, 40)",
    "round(system_cpu_utilization_ratio, 0.01)",
    "round(queue_size)",
    "exp(-queue_size / 100)",
    "sgn(delta(queue_size[5m]))",
    "deriv(http_server_requests_total[5m])",
    "predict_linear(http_server_requests_total[15m], 3600)",
    "resets(http_server_duration_milliseconds_bucket[1h])",
    "increase(http_server_duration_milliseconds_count[15m])",
    "histogram_quantile(0.9, sum by (le) (increase(http_server_duration_milliseconds_bucket[1h])))",
    "histogram_quantile(1.5, rate(http_server_duration_milliseconds_bucket[5m]))",
    "histogram_quantile(-0.5, rate(http_server_duration_milliseconds_bucket[5m]))",
    'http_server_duration_milliseconds_bucket{le="25"} '
    "/ ignoring(le) http_server_duration_milliseconds_count",
    "sum by (job) (rate(http_server_requests_total[5m])) "
    "/ on(job) group_left sum by (job) (queue_size)",
    "absent_over_time(queue_size[1m])",
    'absent(nonexistent_metric{job="a", job=~"b"})',
    "minute()",
    "day_of_month(timestamp(queue_size))",
    "day_of_year()",
    "hour(vector(1700000000))",
    "-vector(2) ^ 2",
    "2 ^ 3 ^ 2",
    "1 / 0",
    "-1 / 0",
    "0 / 0",
    "queue_size % -7",
    "queue_size / 0",
    "changes(system_cpu_utilization_ratio[10m])",
    'last_over_time(http_server_requests_total{http_method="DELETE"}[3m])',
    'irate(http_server_requests_total{http_method="DELETE"}[10m])',
    'rate(http_server_requests_total{http_method="DELETE"}[3m])',
    '{__name__=~"queue_size|system_cpu_utilization_ratio"}',
    '{job="worker"}',
    'count({__name__=~".+"})',
    # errors: the same errorType as Prometheus
    "http_server_requests_total + on(job) http_server_requests_total",
    'label_replace(queue_size, "x y", "a", "queue", ".*")',
    'label_replace(queue_size, "x", "a", "queue", "(")',
    "rate(queue_size)",
    "sum(queue_size[5m])",
    "queue_size{}[5m] + 1",
    'label_join(queue_size, "job", "-", "queue") + queue_size',
    "topk(queue_size, queue_size)",
]


def _base_ms() -> int:
    now = int(time.time() * 1000)
    return (now - 65 * MINUTE) // MINUTE * MINUTE + 4321


@pytest.fixture(scope="module")
def loaded(prometheus: Prometheus, shoal_server: ServerProcess) -> int:
    base = _base_ms()
    resources = dataset.build(base)
    status, body = post(
        shoal_server.url + "/v1/metrics",
        otlp_data.request(resources),
        {"Content-Type": "application/x-protobuf"},
    )
    assert status == 200, body
    raw = remote_write.encode(otlp_data.prometheus_series(resources))
    status, body = post(
        prometheus.url + "/api/v1/write",
        remote_write.compress(raw),
        {
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    assert status in (200, 204), body
    return base


def _instant_times(base: int) -> list[float]:
    return [(base + 31 * MINUTE + 1234) / 1000, (base + 58 * MINUTE + 567) / 1000]


ERRORS = (
    "http_server_requests_total + on(job) http_server_requests_total",
    'label_replace(queue_size, "x y", "a", "queue", ".*")',
    'label_replace(queue_size, "x", "a", "queue", "(")',
    "rate(queue_size)",
    "sum(queue_size[5m])",
    "queue_size{}[5m] + 1",
    'label_join(queue_size, "job", "-", "queue") + queue_size',
    "topk(queue_size, queue_size)",
)
"""Queries both servers must refuse with the same errorType."""

NON_EMPTY = {
    "absent(queue_size)": 0,  # queue_size exists
    "queue_size and on(job) system_cpu_utilization_ratio": 0,  # no job has both
    'http_server_requests_total{http_method="PUT"}': 2,  # in its gap at the first instant
    "absent_over_time(queue_size[1m])": 1,  # only the range query starts before the data
    "(queue_size > 45) and (queue_size < 55)": 2,
    'rate(http_server_requests_total{http_method="DELETE"}[3m])': 2,  # sparse: 2-minute gaps
    "vector(1) + on() group_left queue_size": 0,  # both refuse: many on the "one" side
    "queue_size >= on(queue) group_left queue_size offset 30s": 2,
    **{q: 0 for q in ERRORS},
    "clamp(queue_size, 60, 40)": 0,  # min above max: empty
}
"""How many of the three answers hold data, where not all three do (in both servers)."""


def _check(query: str, base: int, prometheus: Prometheus, shoal: ServerProcess) -> int:
    """Compares the answers; returns how many of them were non-empty."""
    checked = 0
    for t in _instant_times(base):
        params = {"query": query, "time": t}
        ours = get_json(shoal.url, "/api/v1/query", params)
        theirs = get_json(prometheus.url, "/api/v1/query", params)
        _compare(ours, theirs, f"instant {query} @ {t}")
        checked += bool(theirs.get("data", {}).get("result"))
    params = {
        "query": query,
        "start": (base + 9 * MINUTE + 777) / 1000,
        "end": (base + 62 * MINUTE) / 1000,
        "step": "67s",
    }
    ours = get_json(shoal.url, "/api/v1/query_range", params)
    theirs = get_json(prometheus.url, "/api/v1/query_range", params)
    _compare(ours, theirs, f"range {query}")
    return checked + bool(theirs.get("data", {}).get("result"))


@pytest.mark.parametrize("query", QUERIES)
def test_query_matches_prometheus(
    query: str, loaded: int, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    expected = NON_EMPTY.get(query, 3)
    assert _check(query, loaded, prometheus, shoal_server) == expected
