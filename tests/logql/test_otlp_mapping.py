"""Logs sent by the real OpenTelemetry SDK read back through LogQL as Loki 3 maps OTLP logs
by default: the default resource attributes as stream labels (named as Loki names them),
the rest, the record's attributes, trace and span ids, severity and detected_level as
structured metadata."""

from __future__ import annotations

import logging

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from tests.lokipush.conftest import Loki, get


def test_sdk_logs_read_back_with_lokis_labels(loki: Loki) -> None:
    resource = Resource.create({
        "service.name": "checkout", "service.namespace": "shop",
        "deployment.environment": "prod", "k8s.pod.name": "checkout-7d9", "host.name": "node-1",
    })  # fmt: skip
    exporter = OTLPLogExporter(
        endpoint=loki.url + "/v1/logs", headers={"Authorization": f"Bearer {loki.token}"}
    )
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    log = logging.getLogger("shop.checkout.otlp")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(LoggingHandler(logger_provider=provider))
    tracer = TracerProvider(resource=resource).get_tracer("t")
    try:
        with tracer.start_as_current_span("pay") as span:
            log.error("payment declined", extra={"http.method": "POST", "order.id": 42})
            trace_id = f"{span.get_span_context().trace_id:032x}"
        log.info("payment retried")
    finally:
        provider.shutdown()
    auth = loki.token
    status, found = get(
        loki.url, "/loki/api/v1/series", {"match[]": '{service_name="checkout"}'}, auth
    )
    assert status == 200
    [labels] = found["data"]
    # the SDK sets service.instance.id itself: a default stream label of Loki 3's too
    assert labels.pop("service_instance_id")
    assert [labels] == [{
        "deployment_environment": "prod", "k8s_pod_name": "checkout-7d9",
        "service_name": "checkout", "service_namespace": "shop",
    }]  # fmt: skip
    status, found = get(
        loki.url, "/loki/api/v1/query_range",
        {"query": '{service_name="checkout"} | detected_level="error"', "limit": "10"}, auth,
        {"X-Loki-Response-Encoding-Flags": "categorize-labels"},
    )  # fmt: skip
    assert status == 200, found
    [stream] = found["data"]["result"]
    [(_, line, categories)] = stream["values"]
    assert line == "payment declined"
    meta = categories["structuredMetadata"]
    assert meta["host_name"] == "node-1"
    assert meta["http_method"] == "POST" and meta["order_id"] == "42"
    assert meta["trace_id"] == trace_id and len(meta["span_id"]) == 16
    assert meta["severity_text"] == "ERROR" and meta["severity_number"] == "17"
    assert meta["detected_level"] == "error"
    assert meta["scope_name"] == "shop.checkout.otlp"
    status, found = get(
        loki.url, "/loki/api/v1/query",
        {"query": 'sum by (detected_level) (count_over_time({service_name="checkout"}[1h]))'},
        auth,
    )  # fmt: skip
    counts = {r["metric"]["detected_level"]: r["value"][1] for r in found["data"]["result"]}
    assert counts == {"error": "1", "info": "1"}
