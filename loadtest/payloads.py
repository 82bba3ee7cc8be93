"""Deterministic synthetic OTLP export requests for load generators and benchmarks.

Each builder returns an opentelemetry-proto request message; the same arguments
(including ``seed`` and ``start_ns``) always give the same message, byte for
byte. They are cheap enough to call once per request in a load generator:
attribute lists are built once per distinct series and copied into the points.

* :func:`metrics_request`: gauges and cumulative monotonic sums with realistic
  names, ``service.name``/``host.name`` resource attributes and per-point
  attributes drawn from ``series`` distinct combinations.
* :func:`logs_request`: log records with severities, string bodies, trace
  context on some records and bounded-cardinality attributes.
* :func:`traces_request`: spans grouped in traces (a root span and children),
  with kinds, status, an event on some spans and bounded-cardinality attributes.
"""

from __future__ import annotations

import base64
import json
import random
import time
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    NumberDataPoint,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

__all__ = ["logs_request", "metrics_request", "traces_request"]

# (name, unit, description, is_sum)
_METRIC_CATALOGUE: tuple[tuple[str, str, str, bool], ...] = (
    ("http.server.request.count", "{request}", "HTTP requests received", True),
    ("system.cpu.utilization", "1", "CPU utilization", False),
    ("process.runtime.memory.rss", "By", "Resident set size", False),
    ("http.server.response.size", "By", "HTTP response bytes sent", True),
    ("db.client.connections.usage", "{connection}", "Open database connections", False),
    ("messaging.consumer.messages", "{message}", "Messages consumed", True),
    ("system.network.io", "By", "Network bytes transferred", True),
    ("queue.depth", "{item}", "Items waiting in the work queue", False),
)

_ATTRIBUTE_VALUES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("http.method", ("GET", "POST", "PUT", "DELETE", "PATCH")),
    ("http.route", ("/", "/api/v1/items", "/api/v1/users", "/login", "/healthz", "/search")),
    ("http.status_code", ("200", "201", "204", "301", "400", "404", "500", "503")),
    ("region", ("eu-west-1", "us-east-1", "ap-south-1")),
    ("cpu", tuple(str(i) for i in range(8))),
    ("state", ("idle", "user", "system", "wait")),
    ("pool", ("primary", "replica")),
    ("topic", ("orders", "payments", "events", "audit")),
)

_SERVICES = ("checkout", "frontend", "payments", "inventory")
_HOSTS = ("node-a", "node-b", "node-c")
_LOG_LINES = (
    "request completed",
    "cache miss for key",
    "retrying upstream call",
    "user session refreshed",
    "slow query detected",
    "connection reset by peer",
)
_SEVERITIES = ((9, "INFO"), (5, "DEBUG"), (13, "WARN"), (17, "ERROR"))
_SPAN_NAMES = ("GET /api/v1/items", "SELECT items", "cache.get", "POST /checkout", "publish")
_INTERVAL_NS = 10_000_000_000


def _attr_name(index: int) -> tuple[str, tuple[str, ...]]:
    key, values = _ATTRIBUTE_VALUES[index % len(_ATTRIBUTE_VALUES)]
    if index >= len(_ATTRIBUTE_VALUES):
        key = f"{key}.{index // len(_ATTRIBUTE_VALUES)}"
    return key, values


def _series_attributes(
    message: type[NumberDataPoint | LogRecord | Span],
    series: int,
    attributes: int,
    rng: random.Random,
) -> list[bytes]:
    """``series`` distinct attribute lists of ``attributes`` string entries each.

    Each list comes serialized as the ``attributes`` field of ``message``, so
    a point gets its attributes with one ``MergeFromString`` (several times
    faster than copying ``KeyValue`` messages).
    """
    out: list[bytes] = []
    for s in range(series):
        kvs: list[KeyValue] = []
        for a in range(attributes):
            key, values = _attr_name(a)
            # the first attribute carries the series number so every list is distinct
            value = f"{values[s % len(values)]}-{s}" if a == 0 else rng.choice(values)
            kvs.append(KeyValue(key=key, value=AnyValue(string_value=value)))
        out.append(message(attributes=kvs).SerializeToString())
    return out


def _resource(seed: int) -> Resource:
    return Resource(
        attributes=[
            KeyValue(
                key="service.name", value=AnyValue(string_value=_SERVICES[seed % len(_SERVICES)])
            ),
            KeyValue(key="host.name", value=AnyValue(string_value=_HOSTS[seed % len(_HOSTS)])),
            KeyValue(key="service.version", value=AnyValue(string_value="1.4.2")),
        ]
    )


def _scope() -> InstrumentationScope:
    return InstrumentationScope(name="shoal.loadtest", version="1.0.0")


def _start(start_ns: int | None) -> int:
    return time.time_ns() if start_ns is None else start_ns


def metrics_request(
    points: int = 1000,
    metrics: int = 8,
    attributes: int = 4,
    series: int = 100,
    start_ns: int | None = None,
    seed: int = 0,
) -> ExportMetricsServiceRequest:
    """``points`` number data points spread over ``metrics`` metrics.

    Even-numbered catalogue entries are cumulative monotonic sums (int
    values), the others gauges (double values). Point ``i`` of a metric
    belongs to series ``i % series`` and is stamped ``start_ns + (i //
    series) * 10 s``; ``start_ns`` defaults to now.
    """
    if points < 0 or metrics <= 0 or attributes < 0 or series <= 0:
        raise ValueError("points >= 0, metrics > 0, attributes >= 0 and series > 0 required")
    rng = random.Random(seed)
    t0 = _start(start_ns)
    attr_sets = _series_attributes(NumberDataPoint, series, attributes, rng)
    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add(resource=_resource(seed))
    scope_metrics = resource_metrics.scope_metrics.add(scope=_scope())
    per_metric, extra = divmod(points, metrics)
    start_time = max(0, t0 - _INTERVAL_NS)
    for m in range(metrics):
        name, unit, description, is_sum = _METRIC_CATALOGUE[m % len(_METRIC_CATALOGUE)]
        if m >= len(_METRIC_CATALOGUE):
            name = f"{name}.{m // len(_METRIC_CATALOGUE)}"
        metric = scope_metrics.metrics.add(name=name, unit=unit, description=description)
        if is_sum:
            metric.sum.aggregation_temporality = (
                AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
            )
            metric.sum.is_monotonic = True
            dps = metric.sum.data_points
        else:
            dps = metric.gauge.data_points
        for i in range(per_metric + (1 if m < extra else 0)):
            s = i % series
            t = t0 + (i // series) * _INTERVAL_NS
            if is_sum:
                value = 1000 * (s + 1) + (i // series) * rng.randrange(1, 50)
                dp = dps.add(start_time_unix_nano=start_time, time_unix_nano=t, as_int=value)
            else:
                dp = dps.add(time_unix_nano=t, as_double=round(rng.uniform(0.0, 100.0), 3))
            dp.MergeFromString(attr_sets[s])
    return request


def _id_bytes(rng: random.Random, size: int) -> bytes:
    value = rng.getrandbits(8 * size) or 1
    return value.to_bytes(size, "big")


def logs_request(
    records: int = 1000,
    attributes: int = 4,
    series: int = 100,
    start_ns: int | None = None,
    seed: int = 0,
) -> ExportLogsServiceRequest:
    """``records`` log records, one millisecond apart from ``start_ns``.

    Every third record carries a trace and span id; attributes come from
    ``series`` distinct combinations.
    """
    if records < 0 or attributes < 0 or series <= 0:
        raise ValueError("records >= 0, attributes >= 0 and series > 0 required")
    rng = random.Random(seed)
    t0 = _start(start_ns)
    attr_sets = _series_attributes(LogRecord, series, attributes, rng)
    request = ExportLogsServiceRequest()
    scope_logs = request.resource_logs.add(resource=_resource(seed)).scope_logs.add(scope=_scope())
    out = scope_logs.log_records
    for i in range(records):
        number, text = _SEVERITIES[i % len(_SEVERITIES)]
        t = t0 + i * 1_000_000
        rec = out.add(
            time_unix_nano=t,
            observed_time_unix_nano=t + 250_000,
            severity_number=number,
            severity_text=text,
            body=AnyValue(string_value=f"{_LOG_LINES[i % len(_LOG_LINES)]} #{i}"),
        )
        if i % 3 == 0:
            rec.trace_id = _id_bytes(rng, 16)
            rec.span_id = _id_bytes(rng, 8)
            rec.flags = 1
        rec.MergeFromString(attr_sets[i % series])
    return request


def traces_request(
    spans: int = 1000,
    attributes: int = 4,
    series: int = 100,
    spans_per_trace: int = 5,
    start_ns: int | None = None,
    seed: int = 0,
) -> ExportTraceServiceRequest:
    """``spans`` spans in traces of ``spans_per_trace`` (one root, the rest its children).

    Every fourth span has an event; every tenth has an error status.
    """
    if spans < 0 or attributes < 0 or series <= 0 or spans_per_trace <= 0:
        raise ValueError("spans >= 0, attributes >= 0, series > 0, spans_per_trace > 0 required")
    rng = random.Random(seed)
    t0 = _start(start_ns)
    attr_sets = _series_attributes(Span, series, attributes, rng)
    request = ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add(resource=_resource(seed)).scope_spans.add(
        scope=_scope()
    )
    out = scope_spans.spans
    trace_id = b""
    root_id = b""
    for i in range(spans):
        position = i % spans_per_trace
        if position == 0:
            trace_id = _id_bytes(rng, 16)
        span_id = _id_bytes(rng, 8)
        start = t0 + i * 2_000_000
        span = out.add(
            trace_id=trace_id,
            span_id=span_id,
            name=_SPAN_NAMES[i % len(_SPAN_NAMES)],
            kind=2 if position == 0 else 3,
            start_time_unix_nano=start,
            end_time_unix_nano=start + rng.randrange(100_000, 50_000_000),
            flags=0x100,
        )
        if position == 0:
            root_id = span_id
        else:
            span.parent_span_id = root_id
        if i % 10 == 9:
            span.status.code = Status.STATUS_CODE_ERROR
            span.status.message = "upstream timeout"
        if i % 4 == 0:
            span.events.add(time_unix_nano=start + 1000, name="cache.miss")
        span.MergeFromString(attr_sets[i % series])
    return request


_HEX_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hexify(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: (base64.b64decode(v).hex() if k in _HEX_KEYS else _hexify(v)) for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_hexify(v) for v in obj]
    return obj


def to_otlp_json(message: Message) -> bytes:
    """The message as OTLP/JSON: lowerCamelCase keys, hex ids, int64 as strings, int enums."""
    as_dict = json_format.MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(_hexify(as_dict)).encode()
