"""Hypothesis-generated requests, valid and broken: decoding never crashes.

Generated requests mix every metric type and value kind, ids of wrong
lengths, zero times, missing values and attributes of every type. Every
request decodes to the exact schema with ``accepted + rejected`` equal to the
number of points sent, identically from protobuf and from OTLP/JSON. Broken
bytes and broken JSON raise DecodeError or decode to a valid result.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from shoal.errors import DecodeError
from shoal.otlp import decode
from shoal.rows.result import DecodeResult
from shoal.schema import LOGS_SCHEMA, METRICS_SCHEMA, SPANS_SCHEMA

from .json_helpers import identical, to_otlp_json
from .test_anyvalue import any_values

SCHEMAS = {"metrics": METRICS_SCHEMA, "logs": LOGS_SCHEMA, "spans": SPANS_SCHEMA}
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

times = st.one_of(st.just(0), st.integers(1, 2**63 - 1), st.integers(2**63, 2**64 - 1))
u64s = st.one_of(st.integers(0, 1000), st.integers(2**63 - 2, 2**64 - 1))
ids16 = st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20))
ids8 = st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=10))
doubles = st.floats(allow_nan=True, allow_infinity=True)
keyvalues = st.lists(
    st.builds(lambda k, v: KeyValue(key=k, value=v), st.text(max_size=6), any_values), max_size=3
)


@st.composite
def metrics(draw: st.DrawFn) -> Metric:
    m = Metric(name=draw(st.sampled_from(["", "m", "http.requests", "é"])))
    kinds = ["gauge", "sum", "histogram", "exponential_histogram", "summary", None]
    kind = draw(st.sampled_from(kinds))
    if kind is None:
        return m
    container = getattr(m, kind)
    if kind in ("sum", "histogram", "exponential_histogram"):
        container.aggregation_temporality = draw(st.integers(0, 2))
    if kind == "sum":
        container.is_monotonic = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        dp = container.data_points.add()
        dp.time_unix_nano = draw(times)
        dp.start_time_unix_nano = draw(times)
        dp.attributes.extend(draw(keyvalues))
        dp.flags = draw(st.integers(0, 2**32 - 1))
        if kind in ("gauge", "sum"):
            value = draw(st.one_of(st.none(), doubles, st.integers(-(2**63), 2**63 - 1)))
            if isinstance(value, float):
                dp.as_double = value
            elif isinstance(value, int):
                dp.as_int = value
        else:
            dp.count = draw(u64s)
            if draw(st.booleans()):
                dp.sum = draw(doubles)
        if kind == "histogram":
            dp.bucket_counts.extend(draw(st.lists(u64s, max_size=4)))
            dp.explicit_bounds.extend(draw(st.lists(doubles, max_size=3)))
        if kind == "exponential_histogram":
            dp.scale = draw(st.integers(-10, 20))
            dp.zero_count = draw(u64s)
            dp.positive.offset = draw(st.integers(-(2**31), 2**31 - 1))
            dp.positive.bucket_counts.extend(draw(st.lists(u64s, max_size=3)))
        if kind == "summary":
            for _ in range(draw(st.integers(0, 2))):
                dp.quantile_values.add(quantile=draw(doubles), value=draw(doubles))
        if kind != "summary" and draw(st.booleans()):
            ex = dp.exemplars.add(time_unix_nano=draw(st.integers(0, 2**62)), as_int=5)
            ex.trace_id = draw(st.sampled_from([b"", b"\x01" * 16]))
            ex.filtered_attributes.extend(draw(keyvalues))
    return m


@st.composite
def metrics_requests(draw: st.DrawFn) -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        rm = req.resource_metrics.add(schema_url=draw(st.sampled_from(["", "https://x"])))
        rm.resource.attributes.extend(draw(keyvalues))
        for _ in range(draw(st.integers(0, 2))):
            sm = rm.scope_metrics.add()
            sm.scope.name = draw(st.text(max_size=4))
            sm.scope.attributes.extend(draw(keyvalues))
            sm.metrics.extend(draw(st.lists(metrics(), max_size=3)))
    return req


@st.composite
def logs_requests(draw: st.DrawFn) -> ExportLogsServiceRequest:
    req = ExportLogsServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        sl = req.resource_logs.add().scope_logs.add()
        for _ in range(draw(st.integers(0, 3))):
            rec = LogRecord(
                time_unix_nano=draw(times),
                observed_time_unix_nano=draw(times),
                severity_number=draw(st.integers(0, 24)),  # type: ignore[arg-type]
                severity_text=draw(st.text(max_size=5)),
                trace_id=draw(ids16),
                span_id=draw(ids8),
                flags=draw(st.integers(0, 2**32 - 1)),
                event_name=draw(st.text(max_size=4)),
            )
            if draw(st.booleans()):
                rec.body.CopyFrom(draw(any_values))
            rec.attributes.extend(draw(keyvalues))
            sl.log_records.append(rec)
    return req


@st.composite
def traces_requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        ss = req.resource_spans.add().scope_spans.add()
        for _ in range(draw(st.integers(0, 3))):
            span = Span(
                trace_id=draw(ids16),
                span_id=draw(ids8),
                parent_span_id=draw(ids8),
                name=draw(st.text(max_size=5)),
                kind=draw(st.integers(0, 5)),  # type: ignore[arg-type]
                start_time_unix_nano=draw(times),
                end_time_unix_nano=draw(times),
                trace_state=draw(st.sampled_from(["", "a=b"])),
            )
            span.attributes.extend(draw(keyvalues))
            for _ in range(draw(st.integers(0, 2))):
                ev = span.events.add(time_unix_nano=draw(times), name=draw(st.text(max_size=3)))
                ev.attributes.extend(draw(keyvalues))
            for _ in range(draw(st.integers(0, 1))):
                span.links.add(trace_id=draw(ids16), span_id=draw(ids8))
            if draw(st.booleans()):
                span.status.code = draw(st.integers(0, 2))  # type: ignore[assignment]
                span.status.message = draw(st.text(max_size=4))
            ss.spans.append(span)
    return req


def _count(req: Any, signal: str) -> int:
    if signal == "metrics":
        return sum(
            len(getattr(m, m.WhichOneof("data")).data_points)
            for rm in req.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.WhichOneof("data")
        )
    if signal == "logs":
        return sum(len(sl.log_records) for rl in req.resource_logs for sl in rl.scope_logs)
    return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


def _check(req: Any, signal: str) -> DecodeResult:
    result = decode(signal, req.SerializeToString())
    assert result.table.schema == SCHEMAS[signal]
    result.table.validate(full=True)
    assert result.accepted == result.table.num_rows
    assert result.accepted + result.rejected == _count(req, signal)
    assert (result.rejected > 0) <= bool(result.errors)
    for field in SCHEMAS[signal]:
        if not field.nullable:
            assert result.table.column(field.name).null_count == 0, field.name
    from_json = decode(signal, to_otlp_json(req), json=True)
    assert identical(from_json.table, result.table)
    assert (from_json.rejected, from_json.errors) == (result.rejected, result.errors)
    return result


@FUZZ
@given(metrics_requests())
def test_generated_metrics_requests(req: ExportMetricsServiceRequest) -> None:
    _check(req, "metrics")


@FUZZ
@given(logs_requests())
def test_generated_logs_requests(req: ExportLogsServiceRequest) -> None:
    _check(req, "logs")


@FUZZ
@given(traces_requests())
def test_generated_traces_requests(req: ExportTraceServiceRequest) -> None:
    _check(req, "spans")


def _decode_or_error(signal: str, body: bytes, as_json: bool) -> None:
    try:
        result = decode(signal, body, json=as_json)
    except DecodeError as exc:
        assert str(exc)
        return
    assert result.table.schema == SCHEMAS[signal]
    result.table.validate(full=True)


@FUZZ
@given(
    st.sampled_from(["metrics", "logs", "spans"]),
    st.data(),
)
def test_broken_protobuf_never_crashes(signal: str, data: st.DataObject) -> None:
    strategy = {"metrics": metrics_requests, "logs": logs_requests, "spans": traces_requests}
    body = bytearray(data.draw(strategy[signal]()).SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        if not body:
            break
        at = data.draw(st.integers(0, len(body) - 1))
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip":
            body[at] ^= data.draw(st.integers(1, 255))
        elif op == "cut":
            del body[at:]
        else:
            body[at:at] = data.draw(st.binary(min_size=1, max_size=4))
    _decode_or_error(signal, bytes(body), False)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=12), children, max_size=3)
    ),
    max_leaves=10,
)


@FUZZ
@given(st.sampled_from(["metrics", "logs", "spans"]), st.data())
def test_broken_json_never_crashes(signal: str, data: st.DataObject) -> None:
    strategy = {"metrics": metrics_requests, "logs": logs_requests, "spans": traces_requests}
    obj = json.loads(to_otlp_json(data.draw(strategy[signal]())))
    # replace one node somewhere in the document with an arbitrary JSON value
    path: list[Any] = []
    node: Any = obj
    while isinstance(node, dict | list) and node and data.draw(st.booleans()):
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        key = data.draw(st.sampled_from(keys))
        path.append(key)
        node = node[key]
    replacement = data.draw(json_values)
    if path:
        parent: Any = obj
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = replacement
    else:
        obj = replacement
    _decode_or_error(signal, json.dumps(obj).encode(), True)


@FUZZ
@given(st.sampled_from(["metrics", "logs", "spans"]), st.binary(max_size=64), st.booleans())
def test_arbitrary_bytes_never_crash(signal: str, body: bytes, as_json: bool) -> None:
    _decode_or_error(signal, body, as_json)
