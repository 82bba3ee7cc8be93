"""The Prometheus HTTP API on the real app: shapes, errors, roles, tenancy, exemplars.

Data goes in as OTLP protobuf through shoal's own decoder into the query
harness (WAL snapshot and, for part of it, committed Parquet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mpb

from shoal.otlp.decode import decode
from shoal.promql import meta
from tests.sql.api_app import SyncClient, Tokens, client
from tests.sql.helpers import Harness

from .otlp_data import GaugeSeries, HistSeries, Metric, Resource, kv, request

BASE = 1_767_225_600_000 + 123  # 2026-01-01T00:00:00.123Z
T = (BASE + 10 * 60_000) / 1000


def _ingest(harness: Harness, tenant: str, body: bytes, flush: bool = False) -> None:
    result = decode("metrics", body)
    assert result.rejected == 0, result.errors
    harness.ingest(tenant, "metrics", result.table)
    if flush:
        harness.flush(tenant, "metrics")


def _dataset(service: str, metric: str) -> list[Resource]:
    points = [(BASE + i * 15_000, float(i * 2)) for i in range(60)]
    gauge = [(BASE + i * 15_000 + 7, 10.0 + i % 5) for i in range(60)]
    hist = [(BASE + i * 15_000, [i, i, 1], i * 3.5) for i in range(60)]
    return [
        Resource(
            {"service.name": service, "service.instance.id": f"{service}-1"},
            service,
            f"{service}-1",
            [
                Metric(
                    metric,
                    "{request}",
                    "counter",
                    f"{metric}_total",
                    [GaugeSeries({"code": "200"}, points), GaugeSeries({"code": "500"}, points)],
                ),
                Metric("queue.depth", "", "gauge", "queue_depth", [GaugeSeries({}, gauge)]),
                Metric(
                    "rpc.duration",
                    "s",
                    "histogram",
                    "rpc_duration_seconds",
                    [HistSeries({"rpc.method": "Get"}, [0.1, 1.0], hist)],
                ),
            ],
        )
    ]


def _exemplar_request() -> bytes:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend(kv({"service.name": "acme-api"}))
    m = rm.scope_metrics.add().metrics.add()
    m.name = "rpc.latency"
    m.unit = "s"
    m.histogram.aggregation_temporality = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE
    p = m.histogram.data_points.add()
    p.time_unix_nano = (BASE + 60_000) * 1_000_000
    p.count = 3
    p.sum = 1.7
    p.explicit_bounds.extend([0.5, 1.0])
    p.bucket_counts.extend([1, 1, 1])
    ex = p.exemplars.add()
    ex.time_unix_nano = (BASE + 59_000) * 1_000_000
    ex.as_double = 0.7
    ex.trace_id = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    ex.span_id = bytes.fromhex("b7ad6b7169203331")
    return req.SerializeToString()


@pytest.fixture(scope="module")
def api(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SyncClient, dict[str, str], Harness]]:
    harness = Harness(tmp_path_factory.mktemp("promql") / "data")
    _ingest(harness, "acme", request(_dataset("checkout", "http.requests")), flush=True)
    _ingest(harness, "acme", _exemplar_request())
    _ingest(harness, "other", request(_dataset("secret", "hidden.calls")))
    headers = Tokens(harness).create("acme", "query")
    service = harness.service()
    with client(harness, service) as tc:
        yield tc, headers, harness
    service.shutdown()


def test_instant_query_vector_and_scalar_shapes(
    api: tuple[SyncClient, dict[str, str], Harness],
) -> None:
    tc, headers, _ = api
    r = tc.get("/api/v1/query", params={"query": "1+1", "time": T}, headers=headers)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {
        "status": "success",
        "data": {"resultType": "scalar", "result": [T, "2"]},
    }
    r = tc.get(
        "/api/v1/query",
        params={"query": 'http_requests_total{code="500"}', "time": T},
        headers=headers,
    )
    assert r.json() == {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {
                        "__name__": "http_requests_total",
                        "code": "500",
                        "instance": "checkout-1",
                        "job": "checkout",
                    },
                    # the last sample at or before T: i = 40 (BASE + 600 s), value 80
                    "value": [T, "80"],
                }
            ],
        },
    }


def test_range_query_by_get_and_form_post_agree(
    api: tuple[SyncClient, dict[str, str], Harness],
) -> None:
    tc, headers, _ = api
    params = {
        "query": "sum(rate(http_requests_total[1m]))",
        "start": str(T - 120),
        "end": str(T),
        "step": "60s",
    }
    got = tc.get("/api/v1/query_range", params=params, headers=headers).json()
    posted = tc.post(
        "/api/v1/query_range",
        data=params,
        headers={**headers, "Content-Type": "application/x-www-form-urlencoded"},
    ).json()
    assert got == posted
    assert got["data"]["resultType"] == "matrix"
    (series,) = got["data"]["result"]
    assert series["metric"] == {}
    # two counters rising 2 per 15 s each: 4/15 per second together, exactly on the grid
    assert [p[0] for p in series["values"]] == [T - 120, T - 60, T]
    for _, value in series["values"]:
        assert float(value) == pytest.approx(4 / 15, rel=1e-12)


def test_histogram_buckets_sum_and_count(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, headers, _ = api
    r = tc.get(
        "/api/v1/query", params={"query": "rpc_duration_seconds_bucket", "time": T}, headers=headers
    ).json()
    buckets = {s["metric"]["le"]: s["value"][1] for s in r["data"]["result"]}
    # i = 40: bucket counts [40, 40, 1] -> cumulative 40, 80, 81
    assert buckets == {"0.1": "40", "1": "80", "+Inf": "81"}
    for name, value in (("rpc_duration_seconds_sum", "140"), ("rpc_duration_seconds_count", "81")):
        r = tc.get("/api/v1/query", params={"query": name, "time": T}, headers=headers).json()
        assert [s["value"][1] for s in r["data"]["result"]] == [value]


def test_errors_are_prometheus_json(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, headers, _ = api
    cases = [
        ("/api/v1/query", {"query": "sum(", "time": T}, 400, "bad_data"),
        ("/api/v1/query", {"time": T}, 400, "bad_data"),
        ("/api/v1/query", {"query": "up", "time": "yesterday"}, 400, "bad_data"),
        ("/api/v1/query", {"query": "mad_over_time(up[5m])", "time": T}, 400, "bad_data"),
        (
            "/api/v1/query_range",
            {"query": "up", "start": T, "end": T - 1, "step": 1},
            400,
            "bad_data",
        ),
        ("/api/v1/query_range", {"query": "up", "start": T, "end": T, "step": 0}, 400, "bad_data"),
        ("/api/v1/query_range", {"query": "up", "start": 0, "end": T, "step": 1}, 400, "bad_data"),
        (
            "/api/v1/query_range",
            {"query": "up[5m]", "start": T, "end": T, "step": 1},
            400,
            "bad_data",
        ),
        ("/api/v1/query", {"query": "up @ -5", "time": T}, 400, "bad_data"),
        (
            "/api/v1/query_range",
            {"query": "rate(up[5m] @ -1)", "start": T - 60, "end": T, "step": 15},
            400,
            "bad_data",
        ),
        ("/api/v1/series", {}, 400, "bad_data"),
        ("/api/v1/series", {"match[]": '{code=~".*"}'}, 400, "bad_data"),
        (
            "/api/v1/query",
            {"query": "http_requests_total + on(job) http_requests_total", "time": T},
            422,
            "execution",
        ),
    ]
    for path, params, status, error_type in cases:
        r = tc.get(path, params=params, headers=headers)
        assert r.status_code == status, (path, params, r.text)
        body = r.json()
        assert body["status"] == "error"
        assert body["errorType"] == error_type, (params, body)
        assert body["error"]
    r = tc.get("/api/v1/query", params={"query": "mad_over_time(up[5m])"}, headers=headers)
    assert "mad_over_time" in r.json()["error"]


def test_roles_and_tokens(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, _, harness = api
    r = tc.get("/api/v1/query", params={"query": "1"})
    assert r.status_code == 401
    assert r.json()["status"] == "error"
    ingest_only = Tokens(harness).create("acme", "ingest")
    for path in ("/api/v1/query", "/api/v1/labels", "/api/v1/status/buildinfo"):
        r = tc.get(path, params={"query": "1"}, headers=ingest_only)
        assert r.status_code == 403, path


def test_one_tenant_never_sees_another(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, headers, harness = api
    names = tc.get("/api/v1/label/__name__/values", headers=headers).json()["data"]
    assert "http_requests_total" in names
    assert "hidden_calls_total" not in names
    jobs = tc.get("/api/v1/label/job/values", headers=headers).json()["data"]
    assert jobs == ["acme-api", "checkout"]
    r = tc.get("/api/v1/query", params={"query": "hidden_calls_total", "time": T}, headers=headers)
    assert r.json()["data"]["result"] == []
    other = Tokens(harness).create("other", "query")
    names = tc.get("/api/v1/label/__name__/values", headers=other).json()["data"]
    assert "hidden_calls_total" in names
    assert "http_requests_total" not in names


def test_metric_browser_calls(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, headers, _ = api
    labels = tc.get("/api/v1/labels", headers=headers).json()
    assert labels == {
        "status": "success",
        "data": ["__name__", "code", "instance", "job", "le", "rpc_method"],
    }
    series = tc.get(
        "/api/v1/series",
        params=[("match[]", "http_requests_total"), ("match[]", "queue_depth")],
        headers=headers,
    ).json()["data"]
    assert series == [
        {
            "__name__": "http_requests_total",
            "code": "200",
            "instance": "checkout-1",
            "job": "checkout",
        },
        {
            "__name__": "http_requests_total",
            "code": "500",
            "instance": "checkout-1",
            "job": "checkout",
        },
        {"__name__": "queue_depth", "instance": "checkout-1", "job": "checkout"},
    ]
    values = tc.get(
        "/api/v1/label/code/values", params={"match[]": "http_requests_total"}, headers=headers
    ).json()["data"]
    assert values == ["200", "500"]
    limited = tc.get("/api/v1/label/__name__/values?limit=2", headers=headers).json()["data"]
    assert len(limited) == 2
    meta = tc.get("/api/v1/metadata", headers=headers).json()["data"]
    assert meta["http_requests_total"] == [{"type": "counter", "help": "", "unit": ""}]
    assert meta["rpc_duration_seconds"] == [{"type": "histogram", "help": "", "unit": "seconds"}]
    assert meta["queue_depth"] == [{"type": "gauge", "help": "", "unit": ""}]


def test_static_endpoints(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, headers, _ = api
    info = tc.get("/api/v1/status/buildinfo", headers=headers).json()
    assert info["status"] == "success"
    assert info["data"]["version"].count(".") == 2
    assert tc.get("/api/v1/rules", headers=headers).json() == {
        "status": "success",
        "data": {"groups": []},
    }
    assert tc.get("/api/v1/alerts", headers=headers).json() == {
        "status": "success",
        "data": {"alerts": []},
    }


def test_exemplars_carry_trace_ids(api: tuple[SyncClient, dict[str, str], Harness]) -> None:
    tc, headers, _ = api
    r = tc.get(
        "/api/v1/query_exemplars",
        params={
            "query": "histogram_quantile(0.9, rate(rpc_latency_seconds_bucket[5m]))",
            "start": (BASE) / 1000,
            "end": (BASE + 120_000) / 1000,
        },
        headers=headers,
    )
    assert r.json() == {
        "status": "success",
        "data": [
            {
                "seriesLabels": {
                    "__name__": "rpc_latency_seconds_bucket",
                    "job": "acme-api",
                    "le": "1",
                },
                "exemplars": [
                    {
                        "labels": {
                            "trace_id": "0af7651916cd43dd8448eb211c80319c",
                            "span_id": "b7ad6b7169203331",
                        },
                        "value": "0.7",
                        "timestamp": (BASE + 59_000) / 1000,
                    }
                ],
            }
        ],
    }


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.sampled_from(
            [
                *"abcxyz_(){}[]\"'=~!,:+-*/^%@ 015mhs.<>",
                "sum",
                "rate",
                "by",
                "offset",
                "queue_depth",
            ]
        ),
        max_size=30,
    ).map("".join)
)
@example(text="queue_depth @ -5")
def test_any_query_text_gets_a_prometheus_answer(
    api: tuple[SyncClient, dict[str, str], Harness], text: str
) -> None:
    tc, headers, _ = api
    r = tc.get("/api/v1/query", params={"query": text, "time": T}, headers=headers)
    assert r.status_code in (200, 400, 422), (text, r.text)
    body = r.json()
    assert body["status"] in ("success", "error")
    if body["status"] == "error":
        assert body["errorType"] in ("bad_data", "execution")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=25),
        st.integers(int(T) - 7200, int(T)).map(str),
    ),
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(max_size=25),
        st.integers(int(T), int(T) + 3600).map(str),
    ),
    st.one_of(st.integers(-5, 10**9).map(str), st.text(max_size=8), st.just("1m30s")),
)
# a window ending at the last second a nanosecond timestamp holds (the service graph's
# span reads once overflowed on it)
@example(start="9222381948.0", end="9223372037.0", step="1m30s")
def test_any_range_parameters_get_a_prometheus_answer(
    api: tuple[SyncClient, dict[str, str], Harness], start: str, end: str, step: str
) -> None:
    tc, headers, _ = api
    r = tc.get(
        "/api/v1/query_range",
        params={"query": "sum(queue_depth)", "start": start, "end": end, "step": step},
        headers=headers,
    )
    assert r.status_code in (200, 400, 422), (start, end, step, r.text)
    body = r.json()
    if r.status_code == 200:
        assert body["data"]["resultType"] == "matrix"
    else:
        assert body["status"] == "error"
        assert body["errorType"] in ("bad_data", "execution")


def test_limits_fail_the_query_alone(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "data")
    _ingest(harness, "acme", request(_dataset("checkout", "http.requests")))
    headers = Tokens(harness).create("acme", "query")
    params = {"query": "sum(rate(http_requests_total[10m]))", "time": T}  # 82 samples
    small = harness.service(max_samples=50)
    with client(harness, small) as tc:
        r = tc.get("/api/v1/query", params=params, headers=headers)
        assert r.status_code == 422
        assert r.json()["errorType"] == "execution"
        assert "promql_max_samples" in r.json()["error"]
        # a query within the cap still answers
        r = tc.get("/api/v1/query", params={"query": "1+1", "time": T}, headers=headers)
        assert r.json()["data"]["result"] == [T, "2"]
    small.shutdown()
    hurried = harness.service(timeout_s=0.000001)
    with client(harness, hurried) as tc:
        r = tc.get("/api/v1/query", params=params, headers=headers)
        assert r.status_code == 503
        assert r.json()["errorType"] == "timeout"
    hurried.shutdown()


def test_label_names_and_values_are_worked_out_off_the_event_loop(
    api: tuple[SyncClient, dict[str, str], Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    # column-wise over every series: tens of milliseconds at a million series, which the
    # event loop (every other request) must not wait for
    tc, _, harness = api
    _ingest(harness, "offloop", request(_dataset("offloop", "offloop.calls")))
    headers = Tokens(harness).create("offloop", "query")
    where: list[str] = []

    def spy(real: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
                where.append("event loop")
            except RuntimeError:
                where.append("worker")
            return real(*args, **kwargs)

        return run

    monkeypatch.setattr(meta, "_all_label_names", spy(meta._all_label_names))
    monkeypatch.setattr(meta, "_all_label_values", spy(meta._all_label_values))
    names = tc.get("/api/v1/labels", headers=headers).json()["data"]
    values = tc.get("/api/v1/label/code/values", headers=headers).json()["data"]
    assert "code" in names and values == ["200", "500"]
    assert where == ["worker", "worker"]
    # remembered: asked again, nothing is worked out
    assert tc.get("/api/v1/labels", headers=headers).json()["data"] == names
    assert where == ["worker", "worker"]
