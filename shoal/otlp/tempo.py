"""Tempo's response envelopes of a trace by id, described in code, and their encodings.

Tempo answers ``/api/traces/<id>`` with its ``tempopb.Trace`` (field 1, repeated
``ResourceSpans``: the same bytes as OTLP's ``TracesData``) and ``/api/v2/traces/<id>``
with ``tempopb.TraceByIDResponse`` (``trace`` 1, ``metrics`` 2, ``status`` 3 as the enum
``PartialStatus``, ``message`` 4). The descriptors below give those messages the field
numbers of Tempo's ``pkg/tempopb/tempo.proto``, over OTLP's own ``ResourceSpans``, so
that Grafana's backend (which unmarshals them with Tempo's generated types) reads them.

JSON is what Tempo's query frontend writes with gogo's ``jsonpb``: lowerCamelCase
names, 64-bit integers as strings, bytes (the ids) in base64, enums by name, default
values left out; v1 renames the first ``resourceSpans`` to ``batches``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

_F = descriptor_pb2.FieldDescriptorProto


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="shoal/tempopb/tempo.proto",
        package="tempopb",
        syntax="proto3",
        dependency=[trace_pb2.DESCRIPTOR.name],
    )
    status = proto.enum_type.add(name="PartialStatus")
    status.value.add(name="COMPLETE", number=0)
    status.value.add(name="PARTIAL", number=1)
    fields: dict[str, list[tuple[str, int, int, int, str]]] = {
        "Trace": [
            (
                "resourceSpans",
                1,
                _F.TYPE_MESSAGE,
                _F.LABEL_REPEATED,
                ".opentelemetry.proto.trace.v1.ResourceSpans",
            )
        ],
        "TraceByIDMetrics": [
            ("inspectedBytes", 1, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, ""),
        ],
        "TraceByIDResponse": [
            ("trace", 1, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tempopb.Trace"),
            ("metrics", 2, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, ".tempopb.TraceByIDMetrics"),
            ("status", 3, _F.TYPE_ENUM, _F.LABEL_OPTIONAL, ".tempopb.PartialStatus"),
            ("message", 4, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ],
    }
    for name, specs in fields.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, label, type_name in specs:
            field = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = type_name
    return proto


_POOL = descriptor_pool.Default()  # where OTLP's generated modules put their files
_POOL.Add(_file())

TempoTrace: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("tempopb.Trace")
)
TraceByIDResponse: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("tempopb.TraceByIDResponse")
)

PROTOBUF = "application/protobuf"
JSON = "application/json"


def v1_protobuf(trace: TracesData) -> bytes:
    """``tempopb.Trace``'s bytes (identical to ``TracesData``'s: field 1 in both)."""
    return trace.SerializeToString()


def v2_message(trace: TracesData, inspected_bytes: int) -> Message:
    """The ``TraceByIDResponse`` of a whole trace (status ``COMPLETE``)."""
    response = TraceByIDResponse()
    response.trace.MergeFromString(trace.SerializeToString())  # type: ignore[attr-defined]
    response.metrics.inspectedBytes = inspected_bytes  # type: ignore[attr-defined]
    return response


def v2_protobuf(trace: TracesData, inspected_bytes: int) -> bytes:
    return v2_message(trace, inspected_bytes).SerializeToString()


def _json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def v1_json(trace: TracesData) -> dict[str, Any]:
    """``{"batches": [...]}``, as Tempo's v1 endpoint writes a trace."""
    return {"batches": _json(trace).get("resourceSpans", [])}


def v2_json(trace: TracesData, inspected_bytes: int) -> dict[str, Any]:
    """``{"trace": {"resourceSpans": [...]}, "metrics": {...}}``, as Tempo's v2 writes it."""
    out = _json(v2_message(trace, inspected_bytes))
    out.setdefault("trace", {})
    return out
