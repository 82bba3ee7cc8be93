"""Prometheus' own paths on a real ``shoal serve`` with tokens: its OTLP receiver's
``/api/v1/otlp/v1/metrics`` (the real OpenTelemetry SDK exporter pointed at it, the rows
read back by SQL) and its health paths ``/-/healthy`` and ``/-/ready``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess
from shoal.api.app import AppServices, create_app, front_door
from shoal.auth import Authenticator, TokenStore
from shoal.ingest.handler import IngestHandler
from tests.server.conftest import ServerFactory

PATH = "/api/v1/otlp/v1/metrics"


@pytest.fixture
def secured(start_server: ServerFactory, tmp_path: Path) -> tuple[ServerProcess, dict[str, str]]:
    store = TokenStore(tmp_path / "data")
    tokens = {
        roles: store.create("acme", frozenset(roles.split(",")))[0]
        for roles in ("ingest,query", "query")
    }
    return start_server(tmp_path / "data"), tokens


def _sql(server: ServerProcess, token: str, query: str) -> list[list[object]]:
    answer = httpx.post(
        server.url + "/api/v1/sql",
        content=query,
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    rows: list[list[object]] = answer.json()["rows"]
    return rows


def test_the_sdk_exporter_pointed_at_prometheus_otlp_path_delivers(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = secured
    exporter = OTLPMetricExporter(
        endpoint=server.url + PATH,
        headers={"Authorization": f"Bearer {tokens['ingest,query']}"},
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(
        resource=Resource.create({"service.name": "prom-otlp"}), metric_readers=[reader]
    )
    counter = provider.get_meter("test").create_counter("checkouts", unit="1")
    for region, n in (("eu", 3), ("us", 4)):
        counter.add(n, {"region": region})
    provider.shutdown()  # collects and exports once
    rows = _sql(
        server,
        tokens["query"],
        "SELECT attributes['region'], value FROM metrics "
        "WHERE service_name = 'prom-otlp' AND metric_name = 'checkouts' ORDER BY 1",
    )
    assert rows == [["eu", 3.0], ["us", 4.0]]


def test_prometheus_otlp_path_has_the_same_auth_and_roles(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, tokens = secured
    body = payloads.metrics_request(points=6, series=2, start_ns=BASE_NS).SerializeToString()
    protobuf = {"Content-Type": "application/x-protobuf"}

    def post(token: str | None, headers: dict[str, str] = protobuf) -> httpx.Response:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(server.url + PATH, content=body, headers={**headers, **auth})

    assert post(None).status_code == 401
    assert post(tokens["query"]).status_code == 403
    refused = post(tokens["ingest,query"], {"Content-Type": "text/plain"})
    assert refused.status_code == 415
    stored = post(tokens["ingest,query"])
    assert stored.status_code == 200
    assert stored.headers["content-type"] == "application/x-protobuf"
    # the same request at both paths lands in the same table
    at_otlp_path = httpx.post(
        server.url + "/v1/metrics",
        content=body,
        headers={**protobuf, "Authorization": f"Bearer {tokens['ingest,query']}"},
    )
    assert at_otlp_path.status_code == 200
    count = _sql(server, tokens["query"], "SELECT count(*) FROM metrics")
    assert count == [[12]]


def test_prometheus_health_paths_answer_without_a_token(
    secured: tuple[ServerProcess, dict[str, str]],
) -> None:
    server, _ = secured
    for path, text in (("/-/healthy", "shoal is Healthy.\n"), ("/-/ready", "shoal is Ready.\n")):
        answer = httpx.get(server.url + path)
        assert (answer.status_code, answer.text) == (200, text), path
        head = httpx.head(server.url + path)
        assert (head.status_code, head.content) == (200, b""), path
        # a wrong token changes nothing: the paths do not look at it
        wrong = httpx.get(server.url + path, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 200, path
    # everything else still wants a token
    assert httpx.get(server.url + "/metrics").status_code == 401


class _NoIngest:
    """A sink no request here reaches."""

    backlog_wait_s = 0.0

    def backlogged(self) -> bool:
        return False

    def check_admission(self) -> None:
        raise AssertionError("a health check reached the ingest sink")

    def append(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a health check reached the ingest sink")


def test_prometheus_ready_path_says_not_ready_as_prometheus_does(tmp_path: Path) -> None:
    """Prometheus answers 503 "Service Unavailable" until it is ready; /readyz likewise."""
    ready = [False]
    app = front_door(
        create_app(
            AppServices(
                authenticator=Authenticator(TokenStore(tmp_path), allow_anonymous=False),
                ingest=IngestHandler(_NoIngest()),
                is_ready=lambda: ready[0],
                metrics_exposition=lambda: (b"", "text/plain"),
                max_body_bytes=1 << 20,
                retry_after_s=1.0,
            )
        )
    )

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers = [await client.get("/-/ready"), await client.get("/-/healthy")]
            ready[0] = True
            answers.append(await client.get("/-/ready"))
            return answers

    not_ready, healthy, now_ready = asyncio.run(run())
    assert (not_ready.status_code, not_ready.text) == (503, "Service Unavailable")
    assert healthy.status_code == 200
    assert (now_ready.status_code, now_ready.text) == (200, "shoal is Ready.\n")
