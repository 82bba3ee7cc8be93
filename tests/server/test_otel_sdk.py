"""The real OpenTelemetry SDK exporters (HTTP and gRPC) deliver metrics, logs and spans."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from loadtest.ingest import ServerProcess
from tests.server.conftest import delta_rows


def _exporters(protocol: str, server: ServerProcess) -> tuple[object, object, object]:
    if protocol == "http":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return (
            OTLPMetricExporter(endpoint=server.url + "/v1/metrics"),
            OTLPLogExporter(endpoint=server.url + "/v1/logs"),
            OTLPSpanExporter(endpoint=server.url + "/v1/traces"),
        )
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GLog
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GMet
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GSpan

    target = server.grpc_target
    return (
        GMet(endpoint=target, insecure=True),
        GLog(endpoint=target, insecure=True),
        GSpan(endpoint=target, insecure=True),
    )


def export_everything(protocol: str, server: ServerProcess, service: str) -> None:
    metric_exporter, log_exporter, span_exporter = _exporters(protocol, server)
    resource = Resource.create({"service.name": service})

    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=3_600_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    counter = meter_provider.get_meter("test").create_counter("requests", unit="1")
    for route in ("/a", "/b", "/c"):
        counter.add(5, {"route": route})
    meter_provider.shutdown()  # collects and exports once

    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    handler = LoggingHandler(logger_provider=logger_provider)
    log = logging.getLogger(f"sdk-test-{protocol}")
    log.propagate = False
    log.addHandler(handler)
    for i in range(4):
        log.warning("hello %d", i)
    log.removeHandler(handler)
    logger_provider.shutdown()

    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    tracer = tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("parent"):
        with tracer.start_as_current_span("child"):
            pass
    tracer_provider.shutdown()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sdk_exporters_deliver_every_signal(server: ServerProcess, protocol: str) -> None:
    service = f"sdk-{protocol}"
    export_everything(protocol, server, service)
    assert server.terminate() == 0  # final flush
    metrics = delta_rows(server.data_dir, "default", "metrics").to_pylist()
    assert sorted(r["attributes"][0][1] for r in metrics if r["metric_name"] == "requests") == [
        "/a", "/b", "/c",
    ]  # fmt: skip
    assert {r["value_int"] for r in metrics if r["metric_name"] == "requests"} == {5}
    logs = delta_rows(server.data_dir, "default", "logs").to_pylist()
    assert sorted(r["body"] for r in logs) == [f"hello {i}" for i in range(4)]
    assert {r["service_name"] for r in logs} == {service}
    spans = delta_rows(server.data_dir, "default", "spans").to_pylist()
    assert sorted(r["name"] for r in spans) == ["child", "parent"]
    by_name = {r["name"]: r for r in spans}
    assert by_name["child"]["parent_span_id"] == by_name["parent"]["span_id"]
