"""The fast OTLP/JSON path (msgspec + wire encoder) against the protobuf messages themselves.

Every generated request, rendered as OTLP/JSON with camelCase keys and again
with the original snake_case keys, must come back from
``jsonwire.to_protobuf`` as the same message (compared through its JSON
rendering, so that NaN equals NaN), without falling back to the slow walk.
Input the fast path refuses must raise ``NotFast``, and ``decode`` must then
still give the path-tracking walk's answer.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from hypothesis import given
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from loadtest.payloads import logs_request, metrics_request, traces_request
from shoal.errors import DecodeError
from shoal.otlp import decode, jsonwire, otlpjson

from .otlpjson_helpers import identical, to_otlp_json
from .test_fuzz import FUZZ, logs_requests, metrics_requests, traces_requests

_HEX_KEYS = frozenset({"trace_id", "span_id", "parent_span_id"})


def _snake_json(message: Message) -> bytes:
    """OTLP/JSON with the proto field names (snake_case), which receivers also accept."""
    as_dict = json_format.MessageToDict(
        message, use_integers_for_enums=True, preserving_proto_field_name=True
    )

    def hexify(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {
                k: (base64.b64decode(v).hex() if k in _HEX_KEYS else hexify(v))
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [hexify(v) for v in obj]
        return obj

    return json.dumps(hexify(as_dict)).encode()


def _same(a: Message, b: Message) -> bool:
    return json_format.MessageToDict(a) == json_format.MessageToDict(b)


def _round_trip(req: Message) -> None:
    cls = type(req)
    for body in (to_otlp_json(req), _snake_json(req)):
        wire = jsonwire.to_protobuf(cls.DESCRIPTOR, body)
        assert _same(cls.FromString(wire), req)


@FUZZ
@given(metrics_requests())
def test_metrics_requests_take_the_fast_path(req: ExportMetricsServiceRequest) -> None:
    _round_trip(req)


@FUZZ
@given(logs_requests())
def test_logs_requests_take_the_fast_path(req: ExportLogsServiceRequest) -> None:
    _round_trip(req)


@FUZZ
@given(traces_requests())
def test_traces_requests_take_the_fast_path(req: ExportTraceServiceRequest) -> None:
    _round_trip(req)


def test_benchmark_payloads_take_the_fast_path() -> None:
    start = 1_700_000_000_000_000_000
    for req in (
        metrics_request(200, start_ns=start),
        logs_request(200, start_ns=start),
        traces_request(200, start_ns=start),
    ):
        _round_trip(req)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"timeUnixNano": "x1"}]}]}]}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].timeUnixNano",
        ),
        (b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "zz"}]}]}]}', "traceId"),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"flags": 4294967296}]}]}]}',
            "out of range",
        ),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"intValue": "1",'
            b' "stringValue": "a"}}]}]}]}',
            "exactly one field",
        ),
        (
            b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"attributes": [{"key": "k",'
            b' "value": {"boolValue": 3}}]}]}]}]}',
            "attributes[0].value.boolValue",
        ),
    ],
)
def test_refused_input_gets_the_walks_error(body: bytes, needle: str) -> None:
    with pytest.raises(jsonwire.NotFast):
        jsonwire.to_protobuf(ExportLogsServiceRequest.DESCRIPTOR, body)
    with pytest.raises(DecodeError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        decode("logs", body, json=True)


def test_mixed_spellings_and_string_numbers() -> None:
    body = (
        b'{"resource_metrics": [{"scopeMetrics": [{"metrics": [{"name": "m", "sum": {'
        b'"aggregation_temporality": "AGGREGATION_TEMPORALITY_CUMULATIVE", "isMonotonic": true,'
        b' "dataPoints": [{"time_unix_nano": 5, "startTimeUnixNano": "4", "asInt": "-7",'
        b' "attributes": [{"key": "a", "value": {"intValue": 3}}]},'
        b' {"timeUnixNano": "6", "as_double": "NaN"}]}}]}]}]}'
    )
    wire = jsonwire.to_protobuf(ExportMetricsServiceRequest.DESCRIPTOR, body)
    req = ExportMetricsServiceRequest.FromString(wire)
    total = decode("metrics", body, json=True)
    assert identical(total.table, decode("metrics", wire).table)
    metric = req.resource_metrics[0].scope_metrics[0].metrics[0]
    assert metric.sum.aggregation_temporality == 2 and metric.sum.is_monotonic
    first, second = metric.sum.data_points
    assert (first.time_unix_nano, first.start_time_unix_nano, first.as_int) == (5, 4, -7)
    assert first.attributes[0].value.int_value == 3
    assert second.time_unix_nano == 6 and second.as_double != second.as_double


def _walk(body: bytes) -> bytes | None:
    """What the path-tracking walk makes of a metrics body (None when it refuses it)."""
    convert = otlpjson._converter(ExportMetricsServiceRequest.DESCRIPTOR)
    try:
        return ExportMetricsServiceRequest(**convert(json.loads(body), "")).SerializeToString()
    except DecodeError:
        return None


@pytest.mark.parametrize(
    "value", ['"true"', "1", "true", '"1.5"', '"1e3"', '" 7"', "7.0", '"18446744073709551615"']
)
@pytest.mark.parametrize("field", ["isMonotonic", "timeUnixNano", "asInt", "asDouble", "flags"])
def test_fast_path_is_no_more_lenient_than_the_walk(field: str, value: str) -> None:
    if field == "isMonotonic":
        metric = '{"name": "m", "sum": {"isMonotonic": ' + value + "}}"
    else:
        metric = '{"name": "m", "sum": {"dataPoints": [{"' + field + '": ' + value + "}]}}"
    body = ('{"resourceMetrics": [{"scopeMetrics": [{"metrics": [' + metric + "]}]}]}").encode()
    expected = _walk(body)
    try:
        fast = jsonwire.to_protobuf(ExportMetricsServiceRequest.DESCRIPTOR, body)
    except jsonwire.NotFast:
        return  # the walk decides; decode() then gives exactly its answer
    assert expected is not None, "the fast path accepted what the walk refuses"
    assert _same(
        ExportMetricsServiceRequest.FromString(fast),
        ExportMetricsServiceRequest.FromString(expected),
    )
