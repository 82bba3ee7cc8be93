"""Logs and spans produced by the real OpenTelemetry SDK decode to exactly what was emitted."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from shoal.otlp import anyvalue, decode
from shoal.schema import LOGS_SCHEMA, SPANS_SCHEMA

from .json_helpers import to_otlp_json

RESOURCE = Resource.create({"service.name": "payments", "host.name": "node-b"})


def _attrs(kvs: Any) -> tuple[dict[str, str], dict[str, str]]:
    values: dict[str, str] = {}
    types: dict[str, str] = {}
    for kv in kvs:
        text, tag = anyvalue.encode(kv.value)
        values[kv.key] = text
        if tag is not None:
            types[kv.key] = tag
    return values, types


@pytest.fixture(scope="module")
def logs_pb() -> ExportLogsServiceRequest:
    exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(level=logging.DEBUG, logger_provider=provider)
    log = logging.getLogger("shoal.test.sdk")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    tracer = TracerProvider(resource=RESOURCE).get_tracer("t")
    try:
        log.info("user %s logged in", "ada", extra={"user.id": 42, "ratio": 0.5})
        log.warning({"order": 7, "items": ["a", "b"]})
        with tracer.start_as_current_span("checkout"):
            log.error("payment declined")
        log.debug("plain debug")
    finally:
        log.removeHandler(handler)
    request = encode_logs(exporter.get_finished_logs())
    provider.shutdown()
    return request


def test_sdk_logs_decode_field_by_field(logs_pb: ExportLogsServiceRequest) -> None:
    result = decode("logs", logs_pb.SerializeToString())
    assert result.table.schema == LOGS_SCHEMA
    records = [r for rl in logs_pb.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    assert result.accepted == len(records) == 4 and result.rejected == 0
    rows = result.table.to_pylist()
    for row, rec in zip(rows, records, strict=True):
        expected_time = rec.time_unix_nano or rec.observed_time_unix_nano
        assert row["time_unix_nano"] == rec.time_unix_nano
        assert row["observed_time_unix_nano"] == rec.observed_time_unix_nano
        assert int(row["timestamp"].timestamp() * 1_000_000) == pytest.approx(
            expected_time // 1000, abs=1
        )
        assert row["severity_number"] == rec.severity_number
        assert row["severity_text"] == (rec.severity_text or None)
        text, tag = anyvalue.encode(rec.body)
        assert (row["body"], row["body_type"]) == (text, tag)
        assert row["trace_id"] == (rec.trace_id.hex() or None)
        assert row["span_id"] == (rec.span_id.hex() or None)
        assert row["flags"] == rec.flags
        assert row["event_name"] == (rec.event_name or None)
        values, types = _attrs(rec.attributes)
        assert dict(row["attributes"]) == values
        assert dict(row["attributes_types"]) == types
        assert row["dropped_attributes_count"] == rec.dropped_attributes_count
        assert row["service_name"] == "payments"
        assert row["scope_name"] == "shoal.test.sdk"
    assert rows[0]["body"] == "user ada logged in" and rows[0]["body_type"] is None
    assert dict(rows[0]["attributes"])["user.id"] == "42"
    assert dict(rows[0]["attributes_types"])["user.id"] == "int"
    assert rows[1]["body_type"] == "kvlist"
    body = anyvalue.decode(rows[1]["body"], rows[1]["body_type"])
    assert body == records[1].body
    assert json.loads(rows[1]["body"])["values"][0] == {"key": "order", "value": {"intValue": "7"}}
    assert rows[2]["trace_id"] is not None and len(rows[2]["trace_id"]) == 32
    assert rows[2]["severity_text"] == "ERROR"


def test_sdk_logs_json_matches_protobuf(logs_pb: ExportLogsServiceRequest) -> None:
    from_pb = decode("logs", logs_pb.SerializeToString())
    from_json = decode("logs", to_otlp_json(logs_pb), json=True)
    assert from_json.table.equals(from_pb.table)


@pytest.fixture(scope="module")
def spans_pb() -> ExportTraceServiceRequest:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("shop.tracer", "0.9")
    with tracer.start_as_current_span("linked-from") as other:
        other_ctx = other.get_span_context()
    with tracer.start_as_current_span(
        "POST /pay", kind=SpanKind.SERVER, attributes={"http.method": "POST", "http.status": 502}
    ) as root:
        root.add_event("retry", {"attempt": 2, "backoff.s": 0.25})
        with tracer.start_as_current_span(
            "charge card",
            kind=SpanKind.CLIENT,
            links=[Link(other_ctx, {"link.reason": "batch"})],
        ) as child:
            child.set_attribute("amounts", [1, 2, 3])
            child.set_status(Status(StatusCode.ERROR, "card declined"))
            child.record_exception(ValueError("declined"))
    request = encode_spans(exporter.get_finished_spans())
    provider.shutdown()
    return request


def test_sdk_spans_decode_field_by_field(spans_pb: ExportTraceServiceRequest) -> None:
    result = decode("spans", spans_pb.SerializeToString())
    assert result.table.schema == SPANS_SCHEMA
    spans = [s for rs in spans_pb.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert result.accepted == len(spans) == 3 and result.rejected == 0
    rows = {r["name"]: r for r in result.table.to_pylist()}
    for span in spans:
        row = rows[span.name]
        assert row["trace_id"] == span.trace_id.hex()
        assert row["span_id"] == span.span_id.hex()
        assert row["parent_span_id"] == (span.parent_span_id.hex() or None)
        assert row["trace_state"] == (span.trace_state or None)
        assert row["flags"] == span.flags
        assert row["kind"] == span.kind
        assert row["start_time_unix_nano"] == span.start_time_unix_nano
        assert row["end_time_unix_nano"] == span.end_time_unix_nano
        assert row["duration_ns"] == span.end_time_unix_nano - span.start_time_unix_nano
        assert row["status_code"] == span.status.code
        assert row["status_message"] == (span.status.message or None)
        values, types = _attrs(span.attributes)
        assert dict(row["attributes"]) == values and dict(row["attributes_types"]) == types
        assert len(row["events"]) == len(span.events)
        for got, ev in zip(row["events"], span.events, strict=True):
            assert got["time_unix_nano"] == ev.time_unix_nano
            assert got["name"] == ev.name
            values, types = _attrs(ev.attributes)
            assert dict(got["attributes"]) == values and dict(got["attributes_types"]) == types
        assert len(row["links"]) == len(span.links)
        for got, link in zip(row["links"], span.links, strict=True):
            assert got["trace_id"] == link.trace_id.hex()
            assert got["span_id"] == link.span_id.hex()
            assert got["flags"] == link.flags
            assert dict(got["attributes"]) == _attrs(link.attributes)[0]
        assert row["service_name"] == "payments"
        assert row["scope_name"] == "shop.tracer" and row["scope_version"] == "0.9"
    child = rows["charge card"]
    assert child["status_code"] == 2 and child["status_message"] == "card declined"
    assert child["kind"] == 3
    assert dict(child["attributes_types"]) == {"amounts": "array"}
    assert [e["name"] for e in child["events"]] == ["exception"]
    assert child["links"][0]["trace_id"] == rows["linked-from"]["trace_id"]
    assert child["parent_span_id"] == rows["POST /pay"]["span_id"]
    root = rows["POST /pay"]
    assert root["events"][0]["name"] == "retry"
    assert dict(root["events"][0]["attributes_types"]) == {"attempt": "int", "backoff.s": "double"}


def test_sdk_spans_json_matches_protobuf(spans_pb: ExportTraceServiceRequest) -> None:
    from_pb = decode("spans", spans_pb.SerializeToString())
    from_json = decode("spans", to_otlp_json(spans_pb), json=True)
    assert from_json.table.equals(from_pb.table)
