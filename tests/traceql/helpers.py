"""Traces for the TraceQL tests: OTLP requests built span by span, and an app around them."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from shoal.otlp import decode
from shoal.sql.service import QueryService
from tests.sql.api_app import SyncClient, query_client
from tests.sql.helpers import Harness

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in nanoseconds


def any_value(value: object) -> AnyValue:
    """An OTLP value of a Python one (a list is an array)."""
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    return kv("", value).value


def kv(key: str, value: object) -> KeyValue:
    if isinstance(value, list):
        return KeyValue(key=key, value=any_value(value))
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    if isinstance(value, bytes):
        return KeyValue(key=key, value=AnyValue(bytes_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def rich_trace(trace_id: bytes) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    """One trace in two requests: two resources, two scopes, every kind of field."""
    first = ExportTraceServiceRequest()
    rs = first.resource_spans.add(schema_url="https://opentelemetry.io/schemas/1.21.0")
    rs.resource.attributes.extend([kv("service.name", "frontend"), kv("host.cores", 8)])
    rs.resource.dropped_attributes_count = 2
    ss = rs.scope_spans.add(schema_url="https://scope")
    ss.scope.name, ss.scope.version = "http", "1.2.3"
    ss.scope.attributes.append(kv("lib", "flask"))
    ss.scope.dropped_attributes_count = 1
    root = ss.spans.add(
        trace_id=trace_id,
        span_id=bytes.fromhex("00000000000000a1"),
        name="GET /cart",
        kind=2,
        start_time_unix_nano=T0 + 1_000_000_123,
        end_time_unix_nano=T0 + 1_500_000_456,
        trace_state="vendor=a",
        flags=0x301,
        dropped_attributes_count=3,
        dropped_events_count=4,
        dropped_links_count=5,
    )
    root.attributes.extend(
        [
            kv("http.method", "GET"),
            kv("http.status_code", 500),
            kv("ratio", 0.25),
            kv("cached", False),
            kv("blob", b"\x00\xff"),
            KeyValue(
                key="tags",
                value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a")])),
            ),
            KeyValue(
                key="nested",
                value=AnyValue(kvlist_value=KeyValueList(values=[kv("k", 1)])),
            ),
            KeyValue(key="empty", value=AnyValue()),  # OTLP's empty value
        ]
    )
    event = root.events.add(time_unix_nano=T0 + 1_200_000_000, name="exception")
    event.attributes.extend([kv("exception.message", "boom"), kv("attempt", 2)])
    event.dropped_attributes_count = 1
    link = root.links.add(
        trace_id=bytes.fromhex("ab" * 16),
        span_id=bytes.fromhex("cd" * 8),
        trace_state="x=y",
        flags=1,
        dropped_attributes_count=2,
    )
    link.attributes.append(kv("link.kind", "follows"))
    root.status.code = 2  # type: ignore[assignment]
    root.status.message = "internal error"
    second_scope = rs.scope_spans.add()
    second_scope.scope.name = "db"
    child = second_scope.spans.add(
        trace_id=trace_id,
        span_id=bytes.fromhex("00000000000000b2"),
        parent_span_id=root.span_id,
        name="SELECT carts",
        kind=3,
        start_time_unix_nano=T0 + 1_100_000_000,
        end_time_unix_nano=T0 + 1_300_000_000,
    )
    child.attributes.append(kv("db.system", "postgresql"))
    child.status.code = 1  # type: ignore[assignment]

    second = ExportTraceServiceRequest()
    rs2 = second.resource_spans.add()
    rs2.resource.attributes.append(kv("service.name", "cart"))
    ss2 = rs2.scope_spans.add()
    ss2.scope.name = "grpc"
    server = ss2.spans.add(
        trace_id=trace_id,
        span_id=bytes.fromhex("00000000000000c3"),
        parent_span_id=child.span_id,
        name="Cart/Get",
        kind=2,
        start_time_unix_nano=T0 + 1_150_000_000,
        end_time_unix_nano=T0 + 1_250_000_000,
    )
    server.attributes.append(kv("rpc.system", "grpc"))
    return first, second


def ingest(harness: Harness, tenant: str, request: ExportTraceServiceRequest) -> None:
    result = decode("spans", request.SerializeToString())
    assert result.rejected == 0, result.errors
    harness.ingest(tenant, "spans", result.table)


def app_client(
    data_dir: Path, service: QueryService, anonymous: bool = False
) -> AbstractContextManager[SyncClient]:
    """The app's query routes (Tempo's among them) over ``service``."""
    return query_client(data_dir, service, anonymous)


def search_all(client: SyncClient, query: str) -> Any:
    """Tempo's search answer to ``query`` over the tests' two hours, unlimited."""
    start = T0 // 10**9 - 60
    response = client.get(
        "/api/search",
        params={"q": query, "limit": 100_000, "spss": 100_000, "start": start, "end": start + 7200},
    )
    assert response.status_code == 200, (query, response.text)
    return response.json()
