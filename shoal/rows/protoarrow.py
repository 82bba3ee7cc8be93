"""Protobuf messages to Arrow record batches, by ptars (Rust, driven by descriptors)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2

from shoal.errors import DecodeError

FIELD = descriptor_pb2.FieldDescriptorProto
"""A field's descriptor type (``FIELD.TYPE_INT64``...)."""


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    repeated: bool = False,
    type_name: str = "",
) -> None:
    field = message.field.add(name=name, number=number, type=kind)
    field.label = FIELD.LABEL_REPEATED if repeated else FIELD.LABEL_OPTIONAL
    if type_name:
        field.type_name = type_name


def file_descriptor(
    package: str, build: dict[str, list[tuple[Any, ...]]]
) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file of ``package`` with the messages of ``build``: message name -> fields,
    each ``(name, number, type, repeated=False, type_name="")``."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"shoal/{package.replace('.', '/')}.proto", package=package, syntax="proto3"
    )
    for message_name, fields in build.items():
        message = proto.message_type.add(name=message_name)
        for spec in fields:
            _field(message, *spec)
    return proto


class ProtoArrow:
    """ptars decoders of some protobuf messages into Arrow record batches.

    Built lazily from serialized file descriptors (ptars is imported only then), one
    handler per message type, each created once under a lock: handlers are shared by
    the decoding threads.
    """

    def __init__(self, files: Callable[[], list[bytes]]) -> None:
        self._files = files
        self._lock = threading.Lock()
        self._registry: Any = None
        self._handlers: dict[str, Any] = {}

    def _handler(self, message: str) -> Any:
        with self._lock:
            handler = self._handlers.get(message)
            if handler is None:
                if self._registry is None:
                    from ptars._lib import ProtoRegistry

                    self._registry = ProtoRegistry(self._files())
                handler = self._registry.create_for_message(message, None)
                self._handlers[message] = handler
            return handler

    def batch(self, message: str, body: bytes, what: str) -> pa.RecordBatch:
        """One message's bytes as a one-row record batch; raises DecodeError saying
        ``body`` is not a valid ``what`` when the bytes are not that message."""
        handler = self._handler(message)
        try:
            batch: pa.RecordBatch = handler.list_to_record_batch([body])
        except Exception as exc:  # ptars raises plain runtime errors for bad wire data
            raise DecodeError(f"{what}: {exc}") from None
        return batch
