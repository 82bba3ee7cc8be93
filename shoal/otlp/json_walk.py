"""OTLP/JSON request bodies to protobuf bytes, for the protobuf decoding path.

The JSON mapping of the OTLP specification: lowerCamelCase keys (the
original snake_case names are accepted too), trace and span ids as hex,
other bytes as base64, 64-bit integers as strings or numbers, enums as
integers (their names are accepted too), doubles as numbers or ``"NaN"``,
``"Infinity"``, ``"-Infinity"``. Unknown keys are ignored, as the
specification asks of receivers.

The walk is driven by the message descriptors: each JSON object becomes a
dict of constructor keywords (``KeyValue`` lists and ``AnyValue``s become
messages directly), the request message is built from it in one constructor
call and serialized. ``google.protobuf.json_format`` does the same job
several times slower.
"""

from __future__ import annotations

import binascii
import functools
import json
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from shoal.errors import DecodeError
from shoal.otlp import anyvalue, json_fast

REQUESTS: dict[str, type[Message]] = {
    "metrics": ExportMetricsServiceRequest,
    "logs": ExportLogsServiceRequest,
    "spans": ExportTraceServiceRequest,
}

_HEX_FIELDS = frozenset({"trace_id", "span_id", "parent_span_id"})
_INT_RANGES = {
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_ENUM: (-(2**31), 2**31 - 1),
}

# where: the JSON path for error messages, or None on the first, fast attempt
Convert = Callable[[object, Any], Any]


def to_protobuf(signal: str, body: bytes) -> bytes:
    """Serialized protobuf request equivalent to the OTLP/JSON ``body``."""
    cls = REQUESTS[signal]
    try:
        return json_fast.to_protobuf(cls.DESCRIPTOR, body)
    except json_fast.NotFast:
        pass  # the walk below decodes it, or says exactly what is wrong and where
    try:
        obj = json.loads(body)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a number of 4,300+ digits
        raise DecodeError(f"{signal} request is not valid JSON: {exc}") from None
    except RecursionError:
        raise DecodeError(f"{signal} request JSON is nested too deeply") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"{signal} request must be a JSON object, got {type(obj).__name__}")
    convert = _converter(cls.DESCRIPTOR)
    try:
        kwargs = convert(obj, None)
    except DecodeError:
        convert(obj, "")  # again, keeping track of the JSON path for the message
        raise
    try:
        return cls(**kwargs).SerializeToString()
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"{signal} request could not be built from JSON: {exc}") from None


def _show(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str | None, key: str) -> str | None:
    if path is None:
        return None
    return f"{path}.{key}" if path else key


def _scalar(field: FieldDescriptor) -> Convert:
    ftype = field.type
    if ftype in _INT_RANGES:
        lo, hi = _INT_RANGES[ftype]
        if ftype == FieldDescriptor.TYPE_ENUM:
            assert field.enum_type is not None
            names = {v.name: v.number for v in field.enum_type.values}

            def enum(raw: object, where: str) -> int:
                if isinstance(raw, str) and raw in names:
                    return names[raw]
                return anyvalue.parse_int(raw, where, lo, hi)

            return enum

        def integer(raw: object, where: str | None) -> int:
            # fast path for the common, well-formed case; anything else is checked in full
            if (type(raw) is str and raw.isascii() and raw.isdigit() and len(raw) < 30) or (
                type(raw) is int
            ):
                value = int(raw)
                if lo <= value <= hi:
                    return value
            return anyvalue.parse_int(raw, str(where), lo, hi)

        return integer
    if ftype in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return anyvalue.parse_double
    if ftype == FieldDescriptor.TYPE_BOOL:
        return anyvalue.parse_bool
    if ftype == FieldDescriptor.TYPE_STRING:
        return anyvalue.parse_string
    if ftype == FieldDescriptor.TYPE_BYTES:
        if field.name in _HEX_FIELDS:
            return _hex
        return anyvalue.parse_base64
    raise DecodeError(f"unsupported field type for {field.full_name}")  # pragma: no cover


def _hex(raw: object, where: str) -> bytes:
    if not isinstance(raw, str):
        raise DecodeError(f"{where}: expected a hex string, got {_show(raw)}")
    try:
        return bytes.fromhex(raw)
    except ValueError:
        raise DecodeError(f"{where}: invalid hex id {_show(raw)}") from None
    except binascii.Error:  # pragma: no cover
        raise DecodeError(f"{where}: invalid hex id {_show(raw)}") from None


def _field_converter(field: FieldDescriptor) -> Convert:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        name = field.message_type.full_name
        if name == "opentelemetry.proto.common.v1.AnyValue":
            one: Convert = anyvalue.value_kwargs
        elif name == "opentelemetry.proto.common.v1.KeyValue" and _is_repeated(field):
            return anyvalue.keyvalues_kwargs
        else:
            one = _lazy(field.message_type)
    else:
        one = _scalar(field)
    if not _is_repeated(field):
        return one

    def repeated(raw: object, where: str | None) -> list[Any]:
        if not isinstance(raw, list):
            raise DecodeError(f"{where}: expected a list, got {_show(raw)}")
        if where is None:
            return [one(item, None) for item in raw]
        return [one(item, f"{where}[{i}]") for i, item in enumerate(raw)]

    return repeated


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _lazy(descriptor: Descriptor) -> Convert:
    def convert(raw: object, where: str | None) -> dict[str, Any]:
        return _converter(descriptor)(raw, where)

    return convert


@functools.cache
def _converter(descriptor: Descriptor) -> Callable[[object, str | None], dict[str, Any]]:
    table: dict[str, tuple[str, Convert]] = {}
    for field in descriptor.fields:
        if field.name.endswith("_strindex") or field.name == "entity_refs":
            continue
        entry = (field.name, _field_converter(field))
        table[field.json_name] = entry
        table[field.name] = entry

    def convert(raw: object, where: str | None) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise DecodeError(f"{where or 'request'}: expected an object, got {_show(raw)}")
        out: dict[str, Any] = {}
        for key, value in raw.items():
            entry = table.get(key)
            if entry is None or value is None:
                continue
            name, conv = entry
            out[name] = conv(value, None if where is None else _join(where, key))
        return out

    return convert
