"""Protobuf bytes of an OTLP export request to one nested Arrow record batch.

The decoding is done by ``ptars`` (Rust, driven by message descriptors). It is
given a *reshaped* copy of the OTLP descriptors that stays wire-compatible
with the real ones: every ``KeyValue``, ``ArrayValue``, ``KeyValueList``,
``Exemplar``, ``Resource`` and ``InstrumentationScope`` field is declared as
``bytes``, so those sub-messages come out as raw serialized slices instead of
deeply nested structs. Attribute lists have a small number of distinct entries
per request (bounded cardinality), and resources and scopes repeat from request
to request, so the caller decodes each distinct slice once and caches it (see
:mod:`shoal.otlp.attributes` and :mod:`shoal.otlp.common`); the nested-struct
schema that ptars would otherwise build costs more than the whole rest of the
decode. Fields only used by profiles (``*_strindex``) and
``Resource.entity_refs`` are left out and skipped as unknown fields.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FileDescriptor
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from shoal.errors import DecodeError

_AS_BYTES = frozenset(
    {"KeyValue", "ArrayValue", "KeyValueList", "Exemplar", "Resource", "InstrumentationScope"}
)
_DROPPED_FIELDS = frozenset({"entity_refs", "string_value_strindex", "key_strindex"})

REQUEST_TYPES: dict[str, str] = {
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest.DESCRIPTOR.full_name,
    "logs": logs_service_pb2.ExportLogsServiceRequest.DESCRIPTOR.full_name,
    "spans": trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR.full_name,
}

_lock = threading.Lock()


def _dependencies(fd: FileDescriptor, out: list[FileDescriptor]) -> list[FileDescriptor]:
    for dep in fd.dependencies:
        if dep not in out:
            _dependencies(dep, out)
    if fd not in out:
        out.append(fd)
    return out


def _reshaped(fd: FileDescriptor) -> bytes:
    proto = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(proto)
    stack = list(proto.message_type)
    while stack:
        msg = stack.pop()
        stack.extend(msg.nested_type)
        kept = []
        for field in msg.field:
            if field.name in _DROPPED_FIELDS:
                continue
            if field.type_name.rsplit(".", 1)[-1] in _AS_BYTES:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                field.ClearField("type_name")
            kept.append(field)
        del msg.field[:]
        msg.field.extend(kept)
    return proto.SerializeToString()


@functools.cache
def _registry() -> Any:
    from ptars._lib import ProtoRegistry

    files: list[FileDescriptor] = []
    for module in (metrics_service_pb2, logs_service_pb2, trace_service_pb2):
        _dependencies(module.DESCRIPTOR, files)
    return ProtoRegistry([_reshaped(fd) for fd in files])


@functools.cache
def _handler(signal: str) -> Any:
    return _registry().create_for_message(REQUEST_TYPES[signal], None)


def to_struct(signal: str, body: bytes) -> pa.StructArray:
    """The request as a length-1 struct array (one field per request field).

    Raises DecodeError when the bytes are not a valid protobuf message of the
    request type.
    """
    with _lock:
        handler = _handler(signal)
    try:
        batch: pa.RecordBatch = handler.list_to_record_batch([body])
    except Exception as exc:  # ptars raises plain runtime errors for bad wire data
        raise DecodeError(f"{signal} request is not valid OTLP protobuf: {exc}") from None
    return batch.to_struct_array()
