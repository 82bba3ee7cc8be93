"""OTLP/HTTP answers as the OTLP specification asks, and the server keeps serving."""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.request
from pathlib import Path

from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess, WalFsyncs, parse_wal_fsyncs, scrape_wal_fsyncs
from tests.server.conftest import ServerFactory, delta_rows, metric_value, scrape

PB = "application/x-protobuf"


def post(
    server: ServerProcess, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        conn.request("POST", path, body, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def metrics_body(points: int = 100, offset: int = 0) -> bytes:
    request = payloads.metrics_request(points=points, series=10, start_ns=BASE_NS + offset)
    return request.SerializeToString()


def assert_still_serving(server: ServerProcess) -> None:
    status, _, _ = post(server, "/v1/metrics", metrics_body(10, 999), {"Content-Type": PB})
    assert status == 200


def test_bad_requests_get_otlp_statuses_and_the_server_keeps_serving(
    start_server: ServerFactory,
) -> None:
    server = start_server(env={"SHOAL_MAX_BODY_BYTES": "1MiB"})
    # oversized body
    status, headers, body = post(server, "/v1/metrics", b"\0" * (2 << 20), {"Content-Type": PB})
    assert status == 413, body
    assert "exceeds" in status_pb2.Status.FromString(body).message
    # gzip bomb: 200 MiB of zeros compress to ~200 KiB, under the raw limit
    bomb = gzip.compress(b"\0" * (200 << 20), 9)
    assert len(bomb) < (1 << 20)
    status, _, body = post(
        server, "/v1/metrics", bomb, {"Content-Type": PB, "Content-Encoding": "gzip"}
    )
    assert status == 413 and b"decompressed" in body
    # malformed protobuf and JSON, bad gzip
    status, headers, body = post(
        server, "/v1/metrics", b"\xff\xff\xff\x07junk", {"Content-Type": PB}
    )
    assert status == 400 and headers["content-type"] == PB
    assert status_pb2.Status.FromString(body).code == 3  # INVALID_ARGUMENT
    status, headers, body = post(
        server, "/v1/logs", b'{"resourceLogs": [', {"Content-Type": "application/json"}
    )
    assert status == 400 and headers["content-type"] == "application/json"
    assert json.loads(body)["code"] == 3
    status, _, _ = post(
        server, "/v1/metrics", b"not gzip", {"Content-Type": PB, "Content-Encoding": "gzip"}
    )
    assert status == 400
    # wrong content type and encoding
    status, _, _ = post(server, "/v1/traces", b"{}", {"Content-Type": "text/plain"})
    assert status == 415
    status, _, _ = post(server, "/v1/metrics", b"x", {"Content-Type": PB, "Content-Encoding": "br"})
    assert status == 415
    # empty requests succeed, in the request's content type
    for path in ("/v1/metrics", "/v1/logs", "/v1/traces"):
        status, headers, body = post(server, path, b"", {"Content-Type": PB})
        assert (status, headers["content-type"], body) == (200, PB, b"")
        status, headers, body = post(server, path, b"{}", {"Content-Type": "application/json"})
        assert (status, headers["content-type"], json.loads(body)) == (200, "application/json", {})
    assert_still_serving(server)
    text = scrape(server)
    for code in ("413", "400", "415", "200"):
        assert metric_value(text, "shoal_ingest_requests_total", status=code) >= 1, code


def test_partial_success_and_json_and_gzip(server: ServerProcess, tmp_path: Path) -> None:
    request = payloads.metrics_request(points=40, metrics=2, series=5, start_ns=BASE_NS)
    dp = request.resource_metrics[0].scope_metrics[0].metrics[1].gauge.data_points[0]
    dp.ClearField("as_double")  # a number data point with no value is invalid
    status, _, body = post(server, "/v1/metrics", request.SerializeToString(), {"Content-Type": PB})
    assert status == 200
    response = ExportMetricsServiceResponse.FromString(body)
    assert response.partial_success.rejected_data_points == 1
    assert "no value" in response.partial_success.error_message
    # JSON request, JSON answer with camelCase partialSuccess
    status, headers, body = post(
        server, "/v1/metrics", json_format.MessageToJson(request).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body)["partialSuccess"]["rejectedDataPoints"] in ("1", 1)
    # gzip
    status, _, _ = post(
        server, "/v1/metrics", gzip.compress(metrics_body(50, 7)),
        {"Content-Type": PB, "Content-Encoding": "gzip"},
    )  # fmt: skip
    assert status == 200
    assert server.terminate() == 0
    rows = delta_rows(server.data_dir, "default", "metrics")
    assert rows.num_rows == 39 + 39 + 50


def test_health_ready_and_metrics(server: ServerProcess) -> None:
    with urllib.request.urlopen(server.url + "/healthz") as resp:
        assert resp.status == 200
    with urllib.request.urlopen(server.url + "/readyz") as resp:
        assert resp.status == 200
    assert post(server, "/v1/metrics", metrics_body(100), {"Content-Type": PB})[0] == 200
    text = scrape(server)
    for family in (
        "shoal_ingest_accepted_total",
        "shoal_ingest_requests_total",
        "shoal_ingest_queue_requests",
        "shoal_ingest_queue_bytes",
        "shoal_wal_fsync_seconds_bucket",
        "shoal_wal_bytes",
        "shoal_wal_segments",
        "shoal_flush_duration_seconds_count",
        "shoal_snapshot_rows",
        "shoal_snapshot_bytes",
        "shoal_process_rss_bytes",
        "process_resident_memory_bytes",
        "python_gc_collections_total",
        "shoal_ready",
    ):
        assert f"\n{family}" in text, family
    assert (
        metric_value(text, "shoal_ingest_accepted_total", signal="metrics", tenant="default") == 100
    )
    assert metric_value(text, "shoal_snapshot_rows") == 100
    assert metric_value(text, "shoal_wal_fsync_seconds_count") >= 1
    assert metric_value(text, "shoal_wal_segments") >= 1
    assert metric_value(text, "shoal_ready") == 1
    assert metric_value(text, "shoal_process_rss_bytes") > 10e6
    # what the start-up made is left out of garbage collections (imports alone: 100k+)
    assert metric_value(text, "shoal_gc_frozen_objects") > 50_000


def test_load_report_counts_the_servers_slow_fsyncs(server: ServerProcess) -> None:
    before = scrape_wal_fsyncs(server.url)
    assert before is not None
    for i in range(3):
        assert post(server, "/v1/metrics", metrics_body(10, i), {"Content-Type": PB})[0] == 200
    after = scrape_wal_fsyncs(server.url)
    assert after is not None
    run = after.minus(before)
    assert run.total >= 3
    assert set(run.over) == {0.025, 0.05, 0.1}
    assert all(0 <= n <= run.total for n in run.over.values())
    # the buckets a real histogram exposes: 7 fsyncs, 2 above 25 ms, 1 above 50 and 100 ms
    text = "\n".join(
        f'shoal_wal_fsync_seconds_bucket{{le="{le}"}} {n}'
        for le, n in [("0.01", 4.0), ("0.025", 5.0), ("0.05", 6.0), ("0.1", 6.0), ("+Inf", 7.0)]
    )
    parsed = parse_wal_fsyncs(text + "\nshoal_wal_fsync_seconds_count 7.0\n")
    assert parsed == WalFsyncs(7, {0.025: 2, 0.05: 1, 0.1: 1})
    assert parse_wal_fsyncs("shoal_ready 1.0\n") is None


def test_tokens_decide_the_tenant(start_server: ServerFactory, tmp_path: Path) -> None:
    from shoal.auth import TokenStore

    data = tmp_path / "data"
    token, _ = TokenStore(data).create("acme", frozenset({"ingest"}))
    server = start_server(data)
    assert post(server, "/v1/metrics", metrics_body(10), {"Content-Type": PB})[0] == 401
    bad = {"Content-Type": PB, "Authorization": "Bearer shoal_deadbeef_" + "x" * 43}
    assert post(server, "/v1/metrics", metrics_body(10), bad)[0] == 401
    good = {"Content-Type": PB, "Authorization": f"Bearer {token}"}
    assert post(server, "/v1/metrics", metrics_body(10), good)[0] == 200
    assert server.terminate() == 0
    assert delta_rows(data, "acme", "metrics").num_rows == 10
    assert not (data / "tenants" / "default").exists()


def test_retry_info_status_helpers() -> None:
    from shoal.api.status import classify, http_error_body
    from shoal.errors import OverloadedError

    status = classify(OverloadedError("requests", 2))
    body, headers = http_error_body(status, "full", json=False)
    assert status.http == 429 and headers == {"Retry-After": "2"}
    rpc = status_pb2.Status.FromString(body)
    info = error_details_pb2.RetryInfo()
    assert rpc.details[0].Unpack(info) and info.retry_delay.seconds == 2
