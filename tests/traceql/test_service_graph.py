"""The service graph from spans: Tempo's series, computed when PromQL asks, exact against
the edges sent, and the requests Grafana's service map makes through the Prometheus API."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from shoal.auth import TokenStore
from shoal.sql.service import QueryService
from shoal.traceql.servicegraph import ServiceGraph, grid_step
from tests.sql.api_app import SyncClient
from tests.sql.helpers import Harness

from .helpers import T0, app_client, ingest, kv

HOUR = 3600 * 10**9


def _pair(
    request: ExportTraceServiceRequest,
    trace: int,
    client: str,
    server: str,
    at: int,
    took_ms: int,
    error: bool = False,
    messaging: bool = False,
) -> None:
    trace_id = trace.to_bytes(16, "big")
    for service, kind, span_id, parent in (
        (client, 4 if messaging else 3, trace * 2 + 1, 0),
        (server, 5 if messaging else 2, trace * 2 + 2, trace * 2 + 1),
    ):
        rs = request.resource_spans.add()
        rs.resource.attributes.append(kv("service.name", service))
        span = rs.scope_spans.add().spans.add(
            trace_id=trace_id,
            span_id=span_id.to_bytes(8, "big"),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
            name="call",
            kind=kind,  # type: ignore[arg-type]
            start_time_unix_nano=at,
            end_time_unix_nano=at + took_ms * 1_000_000,
        )
        if error and kind in (2, 5):
            span.status.code = 2  # type: ignore[assignment]


def _traffic() -> tuple[list[ExportTraceServiceRequest], Counter[tuple[str, str]], Counter[Any]]:
    sent: Counter[tuple[str, str]] = Counter()
    failed: Counter[tuple[str, str]] = Counter()
    requests = [ExportTraceServiceRequest(), ExportTraceServiceRequest()]
    trace = 1
    for minute in range(50):
        at = T0 + minute * 60 * 10**9
        for client, server, n, errors in (
            ("frontend", "cart", 3, 1),
            ("cart", "db", 2, 0),
            ("frontend", "auth", 1, 1),
        ):
            for i in range(n):
                _pair(requests[minute % 2], trace, client, server, at + i, 50 + 400 * i, i < errors)
                sent[client, server] += 1
                failed[client, server] += i < errors
                trace += 1
    _pair(requests[1], trace, "orders", "mailer", T0 + 10 * 60 * 10**9, 5, messaging=True)
    sent["orders", "mailer"] += 1
    return requests, sent, failed


@pytest.fixture
def loaded(tmp_path: Path) -> Iterator[tuple[Harness, SyncClient, dict[str, dict[str, str]]]]:
    harness = Harness(tmp_path / "data")
    requests, _, _ = _traffic()
    ingest(harness, "acme", requests[0])
    harness.flush("acme", "spans")
    ingest(harness, "acme", requests[1])  # half of the edges' spans unflushed
    store = TokenStore(harness.data_dir)
    tokens = {}
    for tenant in ("acme", "other"):
        token, _ = store.create(tenant, frozenset({"query"}))
        tokens[tenant] = {"Authorization": f"Bearer {token}"}
    service: QueryService = harness.service()
    with app_client(harness.data_dir, service) as tc:
        yield harness, tc, tokens
    service.shutdown()


def test_counters_are_the_edges_sent(
    loaded: tuple[Harness, SyncClient, dict[str, dict[str, str]]],
) -> None:
    harness, _, _ = loaded
    _, sent, failed = _traffic()
    graph = ServiceGraph(harness.service().reader)
    rows = graph.metric_rows("acme", T0, T0 + HOUR)
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for row in rows.select(["metric_name", "attributes", "time_unix_nano", "value"]).to_pylist():
        key = (row["metric_name"], tuple(sorted(row["attributes"])))
        last[key] = row["value"]  # rows of a series are in time order
    total = {
        (dict(k[1])["client"], dict(k[1])["server"]): v
        for k, v in last.items()
        if k[0] == "traces_service_graph_request_total"
    }
    assert total == {k: float(v) for k, v in sent.items()}
    fails = {
        (dict(k[1])["client"], dict(k[1])["server"]): v
        for k, v in last.items()
        if k[0] == "traces_service_graph_request_failed_total"
    }
    assert fails == {k: float(failed[k]) for k in sent}
    bucket = dict(
        ((dict(k[1])["client"], dict(k[1])["server"], dict(k[1])["le"]), v)
        for k, v in last.items()
        if k[0] == "traces_service_graph_request_server_seconds_bucket"
    )
    # frontend -> cart: 50 of 50 ms, 50 of 450 ms, 50 of 850 ms
    assert bucket["frontend", "cart", "0.1"] == 50
    assert bucket["frontend", "cart", "0.8"] == 100
    assert bucket["frontend", "cart", "1.6"] == 150
    assert bucket["frontend", "cart", "+Inf"] == 150
    queue = [k for k in last if dict(k[1]).get("connection_type") == "messaging_system"]
    assert queue and all(dict(k[1])["client"] == "orders" for k in queue)
    assert grid_step(T0, T0 + HOUR) == 15 * 10**9
    assert grid_step(T0, T0 + 30 * 24 * HOUR) > 15 * 10**9


def _prom(client: SyncClient, headers: dict[str, str], query: str, at_s: int) -> Any:
    answer = client.post(
        "/api/v1/query",
        data={"query": query, "time": str(at_s)},
        headers={**headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    body = answer.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_grafanas_service_map_queries(
    loaded: tuple[Harness, SyncClient, dict[str, dict[str, str]]],
) -> None:
    _, client, tokens = loaded
    _, sent, _ = _traffic()
    at = T0 // 10**9 + 3600
    # what the Tempo data source's service map sends (makePromServiceMapRequest), $__range = 1h
    rates = _prom(
        client,
        tokens["acme"],
        "sum by (client, server) (rate(traces_service_graph_request_total[3600s]))",
        at,
    )
    got = {(r["metric"]["client"], r["metric"]["server"]): float(r["value"][1]) for r in rates}
    assert set(got) == set(sent)
    for edge, count in sent.items():
        assert got[edge] * 3600 == pytest.approx(count, rel=0.05), edge
    labels = _prom(
        client,
        tokens["acme"],
        "group by (client, connection_type, server) (traces_service_graph_request_total)",
        at,
    )
    edges = {(r["metric"]["client"], r["metric"]["server"]) for r in labels}
    # the queue's one request was 50 minutes before: its series is gone, as a generator's is
    assert edges == set(sent) - {("orders", "mailer")}
    soon = _prom(
        client,
        tokens["acme"],
        "group by (client, connection_type, server) (traces_service_graph_request_total)",
        T0 // 10**9 + 20 * 60,
    )
    kinds = {(r["metric"]["client"], r["metric"].get("connection_type")) for r in soon}
    assert ("orders", "messaging_system") in kinds and ("frontend", None) in kinds
    for metric in (
        "traces_service_graph_request_server_seconds_sum",
        "traces_service_graph_request_failed_total",
        "traces_service_graph_request_server_seconds_bucket",
    ):
        assert _prom(client, tokens["acme"], f"sum by (client, server) (rate({metric}[1h]))", at)
    p90 = _prom(
        client,
        tokens["acme"],
        "histogram_quantile(0.9, sum(rate(traces_service_graph_request_server_seconds_bucket"
        '{client="frontend",server="cart"}[1h])) by (le, client, server))',
        at,
    )
    assert 0.8 <= float(p90[0]["value"][1]) <= 1.6
    names = client.get(
        "/api/v1/label/__name__/values",
        params={"start": str(at - 3600), "end": str(at)},
        headers=tokens["acme"],
    ).json()["data"]
    assert "traces_service_graph_request_total" in names


def test_another_tenant_has_no_service_graph(
    loaded: tuple[Harness, SyncClient, dict[str, dict[str, str]]],
) -> None:
    _, client, tokens = loaded
    at = T0 // 10**9 + 3600
    query = "sum by (client, server) (rate(traces_service_graph_request_total[3600s]))"
    assert _prom(client, tokens["other"], query, at) == []
    widened = {**tokens["other"], "X-Scope-OrgID": "acme"}
    assert _prom(client, widened, query, at) == []
