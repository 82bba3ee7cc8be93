"""The OTLP -> Prometheus view: names, labels, target_info, summaries, delta temporality,
restarts by start time and stale markers, checked through the real API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mpb

from shoal.api.app import AppServices, create_app
from shoal.auth import Authenticator, TokenStore
from shoal.otlp.decode import decode
from shoal.promql import mapping
from shoal.promql.service import PromQLService
from tests.sql.api_app import SyncClient, Tokens, client
from tests.sql.helpers import Harness

from .otlp_data import kv

BASE = 1_767_225_600_000 + 321
DELTA = mpb.AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE


@pytest.mark.parametrize(
    ("name", "unit", "kind", "monotonic", "expected"),
    [
        (
            "http.server.request.duration",
            "s",
            "histogram",
            None,
            "http_server_request_duration_seconds",
        ),
        ("system.memory.usage", "By", "sum", False, "system_memory_usage_bytes"),
        ("http.server.requests", "{request}", "sum", True, "http_server_requests_total"),
        ("requests_total", "1", "sum", True, "requests_total"),
        ("system.cpu.utilization", "1", "gauge", None, "system_cpu_utilization_ratio"),
        ("network.io", "By/s", "gauge", None, "network_io_bytes_per_second"),
        ("2xx.count", "", "gauge", None, "_2xx_count"),
        ("disk.time", "ms", "sum", True, "disk_time_milliseconds_total"),
        ("wait_seconds", "s", "gauge", None, "wait_seconds"),
        ("temp", "Cel", "gauge", None, "temp_celsius"),
        ("odd.unit", "widgets", "gauge", None, "odd_unit_widgets"),
        ("rpc.latency", "ms", "summary", None, "rpc_latency_milliseconds"),
    ],
)
def test_metric_names(
    name: str, unit: str, kind: str, monotonic: bool | None, expected: str
) -> None:
    assert mapping.metric_name(name, unit, kind, monotonic) == expected


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("http.method", "http_method"),
        ("0abc", "key_0abc"),
        ("_private", "key_private"),
        ("__reserved", "__reserved"),
        ("a-b/c", "a_b_c"),
        ("ünï", "key_n_"),
    ],
)
def test_label_names(key: str, label: str) -> None:
    assert mapping.label_name(key) == label


def test_colliding_keys_join_values_and_identity_labels() -> None:
    labels = mapping.series_labels(
        "m",
        {"a.b": "1", "a_b": "2", "empty": ""},
        {"service.name": "cart", "service.namespace": "shop", "service.instance.id": "c-1"},
    )
    assert labels == {"a_b": "1;2", "job": "shop/cart", "instance": "c-1", "__name__": "m"}
    assert mapping.job_instance({"service.name": "cart"}) == {"job": "cart"}
    assert mapping.target_labels({"service.name": "cart"}) is None
    assert mapping.target_labels({"service.name": "cart", "host.name": "h1"}) == {
        "host_name": "h1",
        "job": "cart",
        "__name__": "target_info",
    }


def _point(points: object, t_ms: int, start_ms: int = 0) -> object:
    p = points.add()  # type: ignore[attr-defined]
    p.time_unix_nano = t_ms * 1_000_000
    p.start_time_unix_nano = start_ms * 1_000_000
    return p


def _request() -> bytes:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend(
        kv({"service.name": "cart", "service.instance.id": "c-1", "host.name": "h1"})
    )
    sm = rm.scope_metrics.add()
    # a summary
    m = sm.metrics.add()
    m.name = "rpc.latency"
    m.unit = "ms"
    for i in range(4):
        p = _point(m.summary.data_points, BASE + i * 10_000)
        p.count = 10 * (i + 1)  # type: ignore[attr-defined]
        p.sum = 100.0 * (i + 1)  # type: ignore[attr-defined]
        for q, v in ((0.5, 5.0 + i), (0.99, 50.0 + i)):
            qv = p.quantile_values.add()  # type: ignore[attr-defined]
            qv.quantile = q
            qv.value = v
    # a delta counter: 3 per point
    m = sm.metrics.add()
    m.name = "jobs.done"
    m.sum.aggregation_temporality = DELTA
    m.sum.is_monotonic = True
    for i in range(7):
        _point(m.sum.data_points, BASE + i * 10_000).as_double = 3.0  # type: ignore[attr-defined]
    # a delta histogram: one observation in the first bucket per point
    m = sm.metrics.add()
    m.name = "job.duration"
    m.unit = "s"
    m.histogram.aggregation_temporality = DELTA
    for i in range(7):
        p = _point(m.histogram.data_points, BASE + i * 10_000)
        p.count = 1  # type: ignore[attr-defined]
        p.sum = 0.5  # type: ignore[attr-defined]
        p.explicit_bounds.extend([1.0])  # type: ignore[attr-defined]
        p.bucket_counts.extend([1, 0])  # type: ignore[attr-defined]
    # a cumulative counter restarted (new start time) at a count above the old one
    m = sm.metrics.add()
    m.name = "restarts"
    m.sum.aggregation_temporality = CUMULATIVE
    m.sum.is_monotonic = True
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    for i, v in enumerate(values):
        start = BASE - 60_000 if i < 3 else BASE + 25_000
        _point(m.sum.data_points, BASE + i * 10_000, start).as_double = v  # type: ignore[attr-defined]
    # a histogram whose bucket layout changes between points
    m = sm.metrics.add()
    m.name = "layout"
    m.histogram.aggregation_temporality = CUMULATIVE
    for i, (bounds, counts) in enumerate((([1.0], [2, 3]), ([1.0, 2.0], [4, 1, 5]))):
        p = _point(m.histogram.data_points, BASE + i * 10_000)
        p.count = sum(counts)  # type: ignore[attr-defined]
        p.explicit_bounds.extend(bounds)  # type: ignore[attr-defined]
        p.bucket_counts.extend(counts)  # type: ignore[attr-defined]
    # a gauge that ends with a stale marker (no recorded value)
    m = sm.metrics.add()
    m.name = "gone"
    for i in range(3):
        _point(m.gauge.data_points, BASE + i * 10_000).as_double = 1.0  # type: ignore[attr-defined]
    stale = _point(m.gauge.data_points, BASE + 30_000)
    stale.as_double = 0.0  # type: ignore[attr-defined]
    stale.flags = 1  # type: ignore[attr-defined]
    return req.SerializeToString()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyncClient, dict[str, str]]]:
    harness = Harness(tmp_path_factory.mktemp("mapping") / "data")
    result = decode("metrics", _request())
    assert result.rejected == 0, result.errors
    harness.ingest("acme", "metrics", result.table)
    headers = Tokens(harness).create("acme", "query")
    service = harness.service()
    with client(harness, service) as tc:
        yield tc, headers
    service.shutdown()


def _query(api: tuple[SyncClient, dict[str, str]], q: str, t_ms: int) -> dict[str, str]:
    tc, headers = api
    body = tc.get("/api/v1/query", params={"query": q, "time": t_ms / 1000}, headers=headers).json()
    assert body["status"] == "success", body
    return {
        ",".join(
            f"{k}={v}" for k, v in sorted(item["metric"].items()) if k not in ("job", "instance")
        ): item["value"][1]
        for item in body["data"]["result"]
    }


def test_summary_series(api: tuple[SyncClient, dict[str, str]]) -> None:
    t = BASE + 30_000
    assert _query(api, "rpc_latency_milliseconds", t) == {
        "__name__=rpc_latency_milliseconds,quantile=0.5": "8",
        "__name__=rpc_latency_milliseconds,quantile=0.99": "53",
    }
    assert _query(api, "rpc_latency_milliseconds_count", t) == {
        "__name__=rpc_latency_milliseconds_count": "40"
    }
    assert _query(api, "rpc_latency_milliseconds_sum", t) == {
        "__name__=rpc_latency_milliseconds_sum": "400"
    }


def test_delta_sums_and_histograms_answer_increase(api: tuple[SyncClient, dict[str, str]]) -> None:
    t = BASE + 60_000
    # 7 points of 3: the running total is 21 at the last point
    assert _query(api, "jobs_done_total", t) == {"__name__=jobs_done_total": "21"}
    # over [t-60s, t] the running total went 3 -> 21 across 60 s: no extrapolation needed
    assert float(_query(api, "increase(jobs_done_total[60s])", t)[""]) == pytest.approx(18.0)
    assert _query(api, "job_duration_seconds_bucket", t) == {
        "__name__=job_duration_seconds_bucket,le=1": "7",
        "__name__=job_duration_seconds_bucket,le=+Inf": "7",
    }
    assert _query(api, "job_duration_seconds_count", t) == {
        "__name__=job_duration_seconds_count": "7"
    }


def test_a_new_start_time_is_a_counter_reset(api: tuple[SyncClient, dict[str, str]]) -> None:
    t = BASE + 40_000
    # samples 10, 20, 30, (restart at +25 s: 0), 40, 50: the increase over the whole
    # window is 20 (10 -> 30) + 50 (0 -> 50) = 70, extrapolation aside
    raw = float(_query(api, "increase(restarts_total[40s])", t)[""])
    sampled = 40.0  # first to last sample, seconds
    assert raw == pytest.approx(70.0 * 40.0 / sampled)
    assert _query(api, "resets(restarts_total[40s])", t) == {"": "1"}


def test_bucket_layout_change_within_a_series(api: tuple[SyncClient, dict[str, str]]) -> None:
    assert _query(api, "layout_bucket", BASE + 5_000) == {
        "__name__=layout_bucket,le=1": "2",
        "__name__=layout_bucket,le=+Inf": "5",
    }
    assert _query(api, "layout_bucket", BASE + 10_000) == {
        "__name__=layout_bucket,le=1": "4",
        "__name__=layout_bucket,le=2": "5",
        "__name__=layout_bucket,le=+Inf": "10",
    }


def test_stale_marker_ends_the_series(api: tuple[SyncClient, dict[str, str]]) -> None:
    assert _query(api, "gone", BASE + 25_000) == {"__name__=gone": "1"}
    assert _query(api, "gone", BASE + 35_000) == {}
    assert _query(api, "count_over_time(gone[1m])", BASE + 35_000) == {"": "3"}


def test_target_info_carries_other_resource_attributes(
    api: tuple[SyncClient, dict[str, str]],
) -> None:
    tc, headers = api
    body = tc.get(
        "/api/v1/query",
        params={"query": "target_info", "time": (BASE + 30_000) / 1000},
        headers=headers,
    ).json()
    assert [item["metric"] for item in body["data"]["result"]] == [
        {"__name__": "target_info", "host_name": "h1", "instance": "c-1", "job": "cart"}
    ]
    names = tc.get("/api/v1/label/__name__/values", headers=headers).json()["data"]
    assert "target_info" in names
    joined = _query(
        api,
        "gone * on(job, instance) group_left(host_name) target_info",
        BASE + 20_000,
    )
    assert joined == {"host_name=h1": "1"}


def test_promoted_resource_attributes_become_labels(tmp_path: Path) -> None:
    harness = Harness(tmp_path / "data")
    result = decode("metrics", _request())
    harness.ingest("acme", "metrics", result.table)
    headers = Tokens(harness).create("acme", "query")
    service = harness.service()
    app = create_app(
        AppServices(
            authenticator=Authenticator(TokenStore(harness.data_dir), allow_anonymous=False),
            ingest=None,  # type: ignore[arg-type]
            is_ready=lambda: True,
            metrics_exposition=lambda: (b"", "text/plain"),
            max_body_bytes=1 << 20,
            retry_after_s=1.0,
            query_service=service,
        )
    )
    app.state.promql = PromQLService(
        service.reader, service, mapping.promoted(" host.name, service.name ,absent.key")
    )
    tc = SyncClient(app)
    try:
        got = _query((tc, headers), "gone", BASE + 20_000)
        series = tc.get("/api/v1/series", params={"match[]": "gone"}, headers=headers).json()[
            "data"
        ]
    finally:
        tc.close()
        service.shutdown()
    # service.name stays job (identifying attributes are never promoted twice)
    assert got == {"__name__=gone,host_name=h1": "1"}
    assert series == [{"__name__": "gone", "host_name": "h1", "instance": "c-1", "job": "cart"}]
