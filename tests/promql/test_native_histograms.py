"""OTLP exponential histograms through PromQL, as native histograms.

The points are built here bucket by bucket, sent over OTLP/HTTP to a real
``shoal serve``, and every expected value is computed here from those buckets,
independently of shoal's code: the count, sum and average of a histogram; the
quantile as Prometheus 2.42 defines it (the bucket holding rank ``q * count``,
linear interpolation inside it, the zero bucket's lower bound 0 when no bucket
is negative); the quantile of a sum of rates, which is the quantile of the
summed increases over the window (the extrapolation factor is the same for
every bucket and cancels); series whose scale changes, brought to the smaller
scale before they are added up; delta temporality; negative buckets.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mpb
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from loadtest.ingest import ServerProcess
from tests.promql.conftest import get_json, post
from tests.promql.otlp_data import kv

STEP_MS = 15_000
POINTS = 40
NAME = "http_server_request_duration_seconds"


class Point:
    """One cumulative (or delta) exponential histogram point: buckets by OTLP index."""

    def __init__(self, scale: int, positive: dict[int, int], negative: dict[int, int], zero: int):
        self.scale = scale
        self.positive = positive
        self.negative = negative
        self.zero = zero

    @property
    def count(self) -> int:
        return sum(self.positive.values()) + sum(self.negative.values()) + self.zero

    def downscaled(self, scale: int) -> Point:
        shift = self.scale - scale

        def merge(buckets: dict[int, int]) -> dict[int, int]:
            out: dict[int, int] = {}
            for index, count in buckets.items():
                out[index >> shift] = out.get(index >> shift, 0) + count
            return out

        return Point(scale, merge(self.positive), merge(self.negative), self.zero)

    def minus(self, other: Point) -> Point:
        assert self.scale == other.scale

        def sub(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
            return {i: a.get(i, 0) - b.get(i, 0) for i in set(a) | set(b)}

        return Point(
            self.scale,
            sub(self.positive, other.positive),
            sub(self.negative, other.negative),
            self.zero - other.zero,
        )

    def plus(self, other: Point) -> Point:
        assert self.scale == other.scale

        def add(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
            return {i: a.get(i, 0) + b.get(i, 0) for i in set(a) | set(b)}

        return Point(
            self.scale,
            add(self.positive, other.positive),
            add(self.negative, other.negative),
            self.zero + other.zero,
        )


def expected_quantile(q: float, p: Point, threshold: float) -> float:
    """Prometheus 2.42's histogram quantile over OTLP buckets: ``(base^i, base^(i+1)]``."""
    base = 2.0 ** (2.0**-p.scale)
    buckets = [(-(base ** (i + 1)), -(base**i), c) for i, c in p.negative.items()]
    buckets.append((-threshold, threshold, p.zero))
    buckets += [(base**i, base ** (i + 1), c) for i, c in p.positive.items()]
    buckets.sort()
    rank, seen = q * p.count, 0.0
    for bucket in buckets:
        seen += bucket[2]
        if seen >= rank:
            break
    lower, upper, count = bucket
    if lower < 0 < upper and not any(p.negative.values()) and any(p.positive.values()):
        lower = 0.0
    return lower + (upper - lower) * ((rank - (seen - count)) / count)


def _series(seed: int, scale_change_at: int | None, negatives: bool) -> list[Point]:
    """Cumulative points: each step adds observations to a few buckets."""
    points, positive, negative, zero = [], {}, {}, 0
    scale = 3
    for k in range(POINTS):
        if scale_change_at is not None and k == scale_change_at:
            # the SDK lowers the scale when its range grows: buckets merge
            positive = Point(scale, positive, negative, zero).downscaled(scale - 1).positive
            negative = Point(scale, {}, negative, zero).downscaled(scale - 1).negative
            scale -= 1
        for j in range(3):
            index = (seed * 7 + k * 3 + j * 5) % 11 - 2
            positive[index] = positive.get(index, 0) + 1 + (k + j + seed) % 4
        if negatives:
            index = (k + seed) % 5
            negative[index] = negative.get(index, 0) + 2
        zero += k % 3
        points.append(Point(scale, dict(positive), dict(negative), zero))
    return points


def _sum(p: Point) -> float:
    """A sum consistent with the buckets: each observation at its bucket's middle."""
    base = 2.0 ** (2.0**-p.scale)
    total = sum(c * (base**i + base ** (i + 1)) / 2 for i, c in p.positive.items())
    return total - sum(c * (base**i + base ** (i + 1)) / 2 for i, c in p.negative.items())


SERIES = {
    "/a": _series(1, None, False),
    "/b": _series(2, 20, False),  # scale 3, then 2 from the 21st point on
    "/c": _series(3, None, True),  # negative observations too
}
THRESHOLD = 1e-3


def _request(base_ms: int) -> bytes:
    metric = mpb.Metric(name="http.server.request.duration", unit="s")
    metric.exponential_histogram.aggregation_temporality = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE
    delta = mpb.Metric(name="queue.wait", unit="s")
    delta.exponential_histogram.aggregation_temporality = mpb.AGGREGATION_TEMPORALITY_DELTA
    start_ns = (base_ms - 1000) * 1_000_000
    for route, points in SERIES.items():
        for k, p in enumerate(points):
            dp = metric.exponential_histogram.data_points.add()
            _fill(dp, p, start_ns, (base_ms + k * STEP_MS) * 1_000_000, {"http.route": route})
    previous = Point(3, {}, {}, 0)
    for k, p in enumerate(SERIES["/a"]):
        dp = delta.exponential_histogram.data_points.add()
        t_ns = (base_ms + k * STEP_MS) * 1_000_000
        _fill(dp, p.minus(previous), t_ns - STEP_MS * 1_000_000, t_ns, {"queue": "q1"})
        previous = p
    scope = mpb.ScopeMetrics(metrics=[metric, delta])
    resource = Resource(attributes=kv({"service.name": "api", "service.instance.id": "i-1"}))
    req = ExportMetricsServiceRequest(
        resource_metrics=[mpb.ResourceMetrics(resource=resource, scope_metrics=[scope])]
    )
    return req.SerializeToString()


def _fill(
    dp: mpb.ExponentialHistogramDataPoint,
    p: Point,
    start_ns: int,
    t_ns: int,
    attrs: dict[str, str],
) -> None:
    dp.attributes.extend(kv(attrs))
    dp.start_time_unix_nano = start_ns
    dp.time_unix_nano = t_ns
    dp.scale = p.scale
    dp.count = p.count
    dp.sum = _sum(p)
    dp.zero_count = p.zero
    dp.zero_threshold = THRESHOLD
    for buckets, target in ((p.positive, dp.positive), (p.negative, dp.negative)):
        if buckets:
            lo, hi = min(buckets), max(buckets)
            target.offset = lo
            target.bucket_counts.extend(buckets.get(i, 0) for i in range(lo, hi + 1))


@pytest.fixture(scope="module")
def loaded(shoal_server: ServerProcess) -> int:
    base = (int(time.time() * 1000) - 30 * 60_000) // 60_000 * 60_000 + 2_345
    status, body = post(
        shoal_server.url + "/v1/metrics", _request(base), {"Content-Type": "application/x-protobuf"}
    )
    assert status == 200, body
    return base


def _instant(server: ServerProcess, query: str, t_ms: int) -> dict[str, Any]:
    answer = get_json(server.url, "/api/v1/query", {"query": query, "time": t_ms / 1000})
    assert answer["status"] == "success", (query, answer)
    return {
        item["metric"].get("http_route", ""): float(item["value"][1])
        for item in answer["data"]["result"]
    }


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("k", [5, 19, 20, 39])
def test_count_sum_avg_and_quantile_of_each_histogram(
    loaded: int, shoal_server: ServerProcess, k: int
) -> None:
    t = loaded + k * STEP_MS + 1_000
    counts = _instant(shoal_server, f"histogram_count({NAME})", t)
    sums = _instant(shoal_server, f"histogram_sum({NAME})", t)
    avgs = _instant(shoal_server, f"histogram_avg({NAME})", t)
    assert set(counts) == set(sums) == set(avgs) == {"/a", "/b", "/c"}
    for route, points in SERIES.items():
        p = points[k]
        assert counts[route] == p.count
        assert _close(sums[route], _sum(p))
        assert _close(avgs[route], _sum(p) / p.count)
    for q in (0.01, 0.25, 0.5, 0.9, 0.99):
        found = _instant(shoal_server, f"histogram_quantile({q}, {NAME})", t)
        for route in ("/a", "/c"):  # one scale over the whole range fetched
            want = expected_quantile(q, SERIES[route][k], THRESHOLD)
            assert _close(found[route], want), (route, q, found[route], want)
        # /b lowers its scale at point 20: a query whose range holds such a point
        # reads the series at the smaller scale throughout
        b = SERIES["/b"][k].downscaled(2 if k >= 20 else 3)
        want = expected_quantile(q, b, THRESHOLD)
        assert _close(found["/b"], want), ("/b", q, found["/b"], want)


def test_quantile_of_summed_rates_across_scales(loaded: int, shoal_server: ServerProcess) -> None:
    k = 35
    t = loaded + k * STEP_MS + 1_000
    found = _instant(shoal_server, f"histogram_quantile(0.9, sum(rate({NAME}[5m])))", t)
    first = next(i for i in range(POINTS) if loaded + i * STEP_MS >= t - 300_000)
    total = Point(2, {}, {}, 0)
    for points in SERIES.values():
        increase = points[k].downscaled(2).minus(points[first].downscaled(2))
        total = total.plus(increase)
    assert _close(found[""], expected_quantile(0.9, total, THRESHOLD))
    avg = _instant(shoal_server, f"histogram_avg(sum(rate({NAME}[5m])))", t)
    sums = sum(_sum(p[k]) - _sum(p[first]) for p in SERIES.values())
    counts = sum(p[k].count - p[first].count for p in SERIES.values())
    assert _close(avg[""], sums / counts)


def test_delta_temporality_is_a_running_total(loaded: int, shoal_server: ServerProcess) -> None:
    k = 30
    t = loaded + k * STEP_MS + 1_000
    found = _instant(shoal_server, "histogram_quantile(0.5, rate(queue_wait_seconds[3m]))", t)
    first = next(i for i in range(POINTS) if loaded + i * STEP_MS >= t - 180_000)
    increase = SERIES["/a"][k].minus(SERIES["/a"][first])
    assert _close(found[""], expected_quantile(0.5, increase, THRESHOLD))


def test_a_histogram_is_not_a_number(loaded: int, shoal_server: ServerProcess) -> None:
    t = (loaded + 30 * STEP_MS) / 1000
    answer = get_json(shoal_server.url, "/api/v1/query", {"query": NAME, "time": t})
    assert answer["status"] == "error" and answer["errorType"] == "bad_data"
    assert "native histogram" in answer["error"] and NAME in answer["error"]
    for query, want in (
        (f"{NAME} + 1", 0),  # operators that have no meaning for a histogram ignore it
        (f"abs({NAME})", 0),
        (f"max({NAME})", 0),
        (f"count({NAME})", 1),  # one sample per histogram
    ):
        answer = get_json(shoal_server.url, "/api/v1/query", {"query": query, "time": t})
        assert answer["status"] == "success", (query, answer)
        assert len(answer["data"]["result"]) == want, (query, answer)
    count = get_json(shoal_server.url, "/api/v1/query", {"query": f"count({NAME})", "time": t})
    assert count["data"]["result"][0]["value"][1] == "3"
    fraction = get_json(
        shoal_server.url, "/api/v1/query", {"query": f"histogram_fraction(0, 1, {NAME})", "time": t}
    )
    assert fraction["status"] == "error" and "histogram_fraction" in fraction["error"]


def test_the_metric_browser_lists_them(loaded: int, shoal_server: ServerProcess) -> None:
    series = get_json(shoal_server.url, "/api/v1/series", {"match[]": NAME})
    assert sorted(s["http_route"] for s in series["data"]) == ["/a", "/b", "/c"]
    metadata = get_json(shoal_server.url, "/api/v1/metadata", {"metric": NAME})
    assert metadata["data"][NAME][0]["type"] == "histogram"
