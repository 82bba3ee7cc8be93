"""The fast OTLP/JSON path (msgspec + wire encoder) against the protobuf messages themselves.

Every generated request, rendered as OTLP/JSON with camelCase keys and again
with the original snake_case keys, must come back from
``json_fast.to_protobuf`` as the same message (compared through its JSON
rendering, so that NaN equals NaN), without falling back to the slow walk.
Input the fast path refuses must raise ``NotFast``, and ``decode`` must then
still give the path-tracking walk's answer. Messages of every type in the
requests, with any subset of their fields set (zero values, -0.0, NaN,
extremes, oneof members), rendered with mixed spellings, enums as names or
numbers and 64-bit integers as strings or numbers, must come back from the
fast path as the walk's message bit for bit, with no default value written.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from loadtest.payloads import logs_request, metrics_request, traces_request
from shoal.errors import DecodeError
from shoal.otlp import decode, json_fast, json_walk

from .json_helpers import identical, to_otlp_json
from .test_anyvalue import any_values
from .test_fuzz import FUZZ, keyvalues, logs_requests, metrics_requests, traces_requests

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
        wire = json_fast.to_protobuf(cls.DESCRIPTOR, body)
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
    with pytest.raises(json_fast.NotFast):
        json_fast.to_protobuf(ExportLogsServiceRequest.DESCRIPTOR, body)
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
    wire = json_fast.to_protobuf(ExportMetricsServiceRequest.DESCRIPTOR, body)
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
    convert = json_walk._converter(ExportMetricsServiceRequest.DESCRIPTOR)
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
        fast = json_fast.to_protobuf(ExportMetricsServiceRequest.DESCRIPTOR, body)
    except json_fast.NotFast:
        return  # the walk decides; decode() then gives exactly its answer
    assert expected is not None, "the fast path accepted what the walk refuses"
    assert _same(
        ExportMetricsServiceRequest.FromString(fast),
        ExportMetricsServiceRequest.FromString(expected),
    )


# -- every field of every request message, against the walk, byte for byte ----------------

_FD = FieldDescriptor
_INTEGERS = {
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1),
    _FD.TYPE_FIXED64: (0, 2**64 - 1),
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    _FD.TYPE_UINT32: (0, 2**32 - 1),
    _FD.TYPE_FIXED32: (0, 2**32 - 1),
    _FD.TYPE_ENUM: (-(2**31), 2**31 - 1),
}
_STRING_INTEGERS = frozenset(
    {_FD.TYPE_INT64, _FD.TYPE_SINT64, _FD.TYPE_SFIXED64, _FD.TYPE_UINT64, _FD.TYPE_FIXED64}
)
_SKIPPED = frozenset({"entity_refs"})


def _scalars(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    """Values of a scalar field, zero (left out, unless in a oneof) and the extremes included."""
    if field.type in _INTEGERS:
        lo, hi = _INTEGERS[field.type]
        return st.one_of(st.sampled_from([0, 1, lo, hi]), st.integers(lo, hi))
    if field.type == _FD.TYPE_DOUBLE:
        return st.one_of(st.sampled_from([0.0, -0.0]), st.floats())
    if field.type == _FD.TYPE_BOOL:
        return st.booleans()
    if field.type == _FD.TYPE_STRING:
        return st.text(max_size=4)
    assert field.type == _FD.TYPE_BYTES, field.full_name
    return st.binary(max_size=17)


@st.composite
def _messages(draw: st.DrawFn, descriptor: Descriptor) -> Message:
    """A message with a random subset of its fields set, every nested message type included."""
    message = GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if field.name in _SKIPPED or not draw(st.booleans()):
            continue
        target = getattr(message, field.name)
        kind = field.message_type.full_name if field.message_type else None
        if kind == "opentelemetry.proto.common.v1.KeyValue":
            target.extend(draw(keyvalues))
        elif kind == "opentelemetry.proto.common.v1.AnyValue":
            target.CopyFrom(draw(any_values))
        elif field.message_type is not None and field.is_repeated:
            target.extend(draw(st.lists(_messages(field.message_type), max_size=2)))
        elif field.message_type is not None:
            target.CopyFrom(draw(_messages(field.message_type)))
        elif field.is_repeated:
            target.extend(draw(st.lists(_scalars(field), max_size=3)))
        else:  # a oneof member or proto3 optional set to zero is kept: setattr marks it present
            setattr(message, field.name, draw(_scalars(field)))
    return message


def _reachable() -> list[Descriptor]:
    """Every message type of the three requests, AnyValue's included."""
    found: dict[str, Descriptor] = {}
    stack = [cls.DESCRIPTOR for cls in json_walk.REQUESTS.values()] + [AnyValue.DESCRIPTOR]
    while stack:
        descriptor = stack.pop()
        if descriptor.full_name not in found:
            found[descriptor.full_name] = descriptor
            stack.extend(f.message_type for f in descriptor.fields if f.message_type is not None)
    return sorted(found.values(), key=lambda d: d.full_name)


# the message types the fast path encodes with its own code (attributes and values are cached
# or converted by the walk's code), each tried on its own as well as inside the requests
_ENCODED = [
    d
    for d in _reachable()
    if d.name not in ("AnyValue", "ArrayValue", "KeyValue", "KeyValueList", "EntityRef")
]
# fields that OTLP/JSON writes as strings but that may come as numbers too
_STRING_INTEGER_NAMES = frozenset(
    f.name for d in _reachable() for f in d.fields if f.type in _STRING_INTEGERS
)


def _camel(name: str) -> str:
    return re.sub("_([a-z])", lambda m: m.group(1).upper(), name)


def _render(message: Message, data: st.DataObject) -> bytes:
    """OTLP/JSON with each key in either spelling, enums as numbers or names, 64-bit
    integers as strings or numbers, zero values left out or written, as receivers get it."""
    as_dict = json_format.MessageToDict(
        message,
        use_integers_for_enums=data.draw(st.booleans()),
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=data.draw(st.booleans()),
    )

    def vary(obj: Any) -> Any:
        if isinstance(obj, list):
            return [vary(v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        out = {}
        for key, value in obj.items():
            if key in _HEX_KEYS:
                value = base64.b64decode(value).hex()
            elif key in _STRING_INTEGER_NAMES and data.draw(st.booleans()):
                value = [int(v) for v in value] if isinstance(value, list) else int(value)
            else:
                value = vary(value)
            out[_camel(key) if data.draw(st.booleans()) else key] = value
        return out

    return json.dumps(vary(as_dict)).encode()


@settings(FUZZ, max_examples=300)
@given(st.sampled_from(_ENCODED).flatmap(_messages), st.data())
def test_every_field_matches_the_walk_byte_for_byte(req: Message, data: st.DataObject) -> None:
    cls = type(req)
    body = _render(req, data)
    wire = json_fast.to_protobuf(cls.DESCRIPTOR, body)  # the fast path takes it
    decoded = cls.FromString(wire)
    assert _same(decoded, req)
    walked = cls(**json_walk._converter(cls.DESCRIPTOR)(json.loads(body), ""))
    canonical = decoded.SerializeToString(deterministic=True)
    # the same bits as the walk's message: -0.0, NaN, zero oneof members and all
    assert canonical == walked.SerializeToString(deterministic=True)
    # and as long as protobuf's own encoding: no field left at its default written out
    assert len(wire) == len(canonical)
