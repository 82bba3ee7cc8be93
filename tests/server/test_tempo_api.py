"""Grafana's Tempo data source against a running ``shoal serve``: the requests its health
check, search editor, tag autocomplete, trace view (both API versions, protobuf and JSON,
with and without the time range Grafana adds) and an exemplar's link send, as Grafana's
source builds them, over spans and metrics that the real OpenTelemetry SDK exported.

Answers are decoded with OTLP's own classes, never with shoal's: v1's protobuf is
``TracesData``'s bytes; v2's envelope (``tempopb.TraceByIDResponse``: ``trace`` 1,
``metrics`` 2, as Tempo's ``tempo.proto`` numbers them) is taken apart field by field and
its ``trace`` read as ``TracesData``; the JSON is read by protobuf's JSON parser into
``TracesData`` (ids in base64, as Tempo writes them)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from google.protobuf import empty_pb2, json_format, unknown_fields
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from loadtest.ingest import ServerProcess
from shoal.auth import TokenStore
from shoal.otlp import tempo
from tests.server.conftest import ServerFactory, delta_rows


def _get(
    server: ServerProcess,
    path: str,
    token: str,
    accept: str = "",
    extra: dict[str, str] | None = None,
    **params: Any,
) -> tuple[int, bytes, str]:
    query = urllib.parse.urlencode(params)
    headers = {"Authorization": f"Bearer {token}", **(extra or {})}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(
        f"{server.url}{path}{'?' + query if query else ''}", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


def _v2_trace(body: bytes) -> tuple[TracesData, int]:
    """A v2 protobuf answer taken apart without shoal's descriptors: ``trace`` (field 1)
    as OTLP's ``TracesData``, and ``metrics.inspectedBytes`` (field 2, its field 1)."""
    fields = {
        f.field_number: f.data
        for f in unknown_fields.UnknownFieldSet(empty_pb2.Empty.FromString(body))
    }
    assert set(fields) <= {1, 2, 3, 4}, fields  # Tempo's four fields, nothing else
    metrics = unknown_fields.UnknownFieldSet(empty_pb2.Empty.FromString(fields.get(2, b"")))
    inspected = {f.field_number: f.data for f in metrics}.get(1, 0)
    return TracesData.FromString(fields[1]), int(inspected)  # type: ignore[arg-type]


def _spans(data: TracesData) -> list[Any]:
    return [s for rs in data.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _export(
    server: ServerProcess, token: str, service: str, parent: SpanContext | None
) -> SpanContext:
    headers = {"Authorization": f"Bearer {token}"}
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=server.url + "/v1/traces", headers=headers))
    )
    tracer = provider.get_tracer("checkout.http", "1.0")
    context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent else None
    with tracer.start_as_current_span(
        "GET /checkout", context=context, kind=SpanKind.SERVER
    ) as span:
        span.set_attribute("http.method", "GET")
        span.set_attribute("http.status_code", 500)
        span.add_event("exception", {"exception.message": "card declined"})
        span.set_status(Status(StatusCode.ERROR, "declined"))
        with tracer.start_as_current_span("charge", kind=SpanKind.CLIENT) as child:
            child.set_attribute("peer.service", "payments")
        made = span.get_span_context()
    provider.shutdown()
    return made


def _record_with_exemplar(server: ServerProcess, token: str, context: SpanContext) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    exporter = OTLPMetricExporter(endpoint=server.url + "/v1/metrics", headers=headers)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    meter = MeterProvider(
        resource=Resource.create({"service.name": "checkout"}), metric_readers=[reader]
    )
    histogram = meter.get_meter("checkout").create_histogram(
        "http.server.request.duration", unit="s"
    )
    span_context = SpanContext(
        context.trace_id, context.span_id, False, TraceFlags(TraceFlags.SAMPLED)
    )
    with trace.use_span(NonRecordingSpan(span_context)):
        histogram.record(0.42, {"http.route": "/checkout"})
    meter.shutdown()


def _exemplar_queries() -> list[str]:
    """The expressions of deploy/grafana's HTTP server dashboard that show exemplars."""
    path = Path(__file__).resolve().parents[2] / "deploy/grafana/dashboards/http-server.json"
    panels = json.loads(path.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", []) if t.get("exemplar")]


def test_grafanas_tempo_requests_against_a_running_server(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    store = TokenStore(data_dir)
    token, _ = store.create("acme", frozenset({"ingest", "query"}))
    other, _ = store.create("globex", frozenset({"query"}))
    server = start_server(data_dir, env={"SHOAL_FLUSH_MAX_AGE_S": "2"})
    root = _export(server, token, "frontend", None)
    deadline = time.monotonic() + 30
    while delta_rows(data_dir, "acme", "spans").num_rows == 0:  # the first part is flushed
        assert time.monotonic() < deadline, "no flush"
        time.sleep(0.2)
    _export(server, token, "checkout", root)  # the second part, most likely not yet flushed
    trace_id = f"{root.trace_id:032x}"

    # health check (testDatasource) and buildinfo (init)
    assert _get(server, "/api/echo", token)[:2] == (200, b"echo\n")
    status, body, _ = _get(server, "/api/status/buildinfo", token)
    assert status == 200 and json.loads(body)["version"]

    # trace view: Grafana's backend asks v2 first, with Accept: application/protobuf, and
    # with the query's time range as start and end when it has one (createRequest)
    now = int(time.time())
    for params in ({}, {"start": now - 1800, "end": now + 1800}):
        status, body, kind = _get(
            server, f"/api/v2/traces/{trace_id}", token, tempo.PROTOBUF, **params
        )
        assert (status, kind) == (200, tempo.PROTOBUF), params
        data, inspected = _v2_trace(body)
        spans = _spans(data)
        assert len(spans) == 4 and inspected > 0
        assert {s.name for s in spans} == {"GET /checkout", "charge"}
        assert {s.trace_id.hex() for s in spans} == {trace_id}
        services = {
            kv.value.string_value
            for rs in data.resource_spans
            for kv in rs.resource.attributes
            if kv.key == "service.name"
        }
        assert services == {"frontend", "checkout"}
        # and v1 (Grafana's fallback when v2 answers 404): TracesData's own bytes
        status, body, _ = _get(server, f"/api/traces/{trace_id}", token, tempo.PROTOBUF, **params)
        assert status == 200 and TracesData.FromString(body) == data
    # a range the trace is not in: 404 on both, as Tempo answers
    away = {"start": now - 10 * 86400, "end": now - 9 * 86400}
    assert _get(server, f"/api/v2/traces/{trace_id}", token, tempo.PROTOBUF, **away)[0] == 404
    assert _get(server, f"/api/traces/{trace_id}", token, tempo.PROTOBUF, **away)[0] == 404
    assert _get(server, "/api/v2/traces/" + "f" * 32, token, tempo.PROTOBUF)[0] == 404
    assert _get(server, "/api/v2/traces/not-hex", token, tempo.PROTOBUF)[0] == 400
    # the JSON encodings (Tempo's CLI, Grafana's trace upload): the same spans
    status, body, kind = _get(server, f"/api/v2/traces/{trace_id}", token, tempo.JSON)
    assert (status, kind) == (200, tempo.JSON)
    from_json = json_format.ParseDict(json.loads(body)["trace"], TracesData())
    assert from_json == data
    status, body, _ = _get(server, f"/api/traces/{trace_id}", token)
    batches = json.loads(body)["batches"]
    assert json_format.ParseDict({"resourceSpans": batches}, TracesData()) == data

    # the search editor: its filters become a TraceQL query, sent with limit, spss, start, end
    query = '{resource.service.name="checkout" && name="GET /checkout" && status=error}'
    status, body, _ = _get(
        server, "/api/search", token, q=query, limit=20, spss=3, start=now - 3600, end=now + 60
    )
    assert status == 200
    (found,) = json.loads(body)["traces"]
    assert found["traceID"] == trace_id.lstrip("0")
    assert found["rootServiceName"] == "frontend"
    assert found["spanSets"][0]["matched"] == 1

    # autocomplete: tag names by scope, then values narrowed by the query so far
    status, body, _ = _get(server, "/api/v2/search/tags", token, limit=5000)
    scopes = {s["name"]: s["tags"] for s in json.loads(body)["scopes"]}
    assert "http.method" in scopes["span"] and "service.name" in scopes["resource"]
    status, body, _ = _get(
        server,
        "/api/v2/search/tag/resource.service.name/values",
        token,
        q='{span.http.method="GET"}',
        limit=5000,
    )
    assert json.loads(body)["tagValues"] == [
        {"type": "string", "value": "checkout"},
        {"type": "string", "value": "frontend"},
    ]

    # an exemplar on the HTTP server dashboard's latency panel (the five-minute path of
    # docs/grafana.md) links to its trace (exemplarTraceIdDestinations)
    _record_with_exemplar(server, token, root)
    (expr,) = _exemplar_queries()
    expr = expr.replace("$job", ".+").replace("$__rate_interval", "1m")
    status, body, _ = _get(
        server, "/api/v1/query_exemplars", token, query=expr, start=now - 3600, end=now + 60
    )
    exemplars = [e for s in json.loads(body)["data"] for e in s["exemplars"]]
    linked = {e["labels"]["trace_id"] for e in exemplars}
    assert trace_id in linked
    assert _get(server, f"/api/v2/traces/{trace_id}", token, tempo.PROTOBUF)[0] == 200

    # another tenant's token, and a header naming this tenant, find nothing
    for extra in ({}, {"X-Scope-OrgID": "acme"}):
        path = f"/api/v2/traces/{trace_id}"
        assert _get(server, path, other, tempo.PROTOBUF, extra)[0] == 404
        window = {"start": now - 3600, "end": now + 60}
        status, body, _ = _get(server, "/api/search", other, "", extra, q="{}", **window)
        assert (status, json.loads(body)["traces"]) == (200, [])
        status, body, _ = _get(server, "/api/v2/search/tags", other, "", extra)
        assert "http.method" not in body.decode()
    assert server.terminate() == 0
