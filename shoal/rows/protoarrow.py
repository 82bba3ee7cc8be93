"""Protobuf messages to Arrow record batches, by ptars (Rust, driven by descriptors)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2

from shoal.errors import DecodeError

FIELD = descriptor_pb2.FieldDescriptorProto
"""A field's descriptor type (``FIELD.TYPE_INT64``...)."""

_SCALARS = frozenset(
    "double float int32 int64 uint32 uint64 sint32 sint64 fixed32 fixed64 sfixed32 sfixed64 "
    "bool string bytes".split()
)
_MESSAGE = re.compile(r"\s*message\s+(\w+)\s*\{([^{}]*)\}\s*")
_FIELD = re.compile(r"\s*(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+)\s*;\s*")


def _all_matches(pattern: re.Pattern[str], text: str, what: str) -> Iterator[re.Match[str]]:
    """The matches of ``pattern`` that together make up the whole of ``text``."""
    pos = 0
    while text[pos:].strip():
        found = pattern.match(text, pos)
        if found is None:
            raise ValueError(f"{what}: cannot read {text[pos : pos + 40].strip()!r}")
        yield found
        pos = found.end()


def file_descriptor(package: str, source: str) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file of ``package`` with the messages of ``source``, written as in a
    ``.proto`` file: ``message Name { [repeated] type name = number; ... }``, each type a
    scalar or a message of the same package (no enums, options or nesting: an enum is
    described as ``int32``, the same wire form)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"shoal/{package.replace('.', '/')}.proto", package=package, syntax="proto3"
    )
    for found in _all_matches(_MESSAGE, source, package):
        message = proto.message_type.add(name=found[1])
        for field in _all_matches(_FIELD, found[2], found[1]):
            repeated, kind, name, number = field.groups()
            added = message.field.add(name=name, number=int(number))
            added.label = FIELD.LABEL_REPEATED if repeated else FIELD.LABEL_OPTIONAL
            if kind in _SCALARS:
                added.type = getattr(FIELD, f"TYPE_{kind.upper()}")
            else:
                added.type, added.type_name = FIELD.TYPE_MESSAGE, f".{package}.{kind}"
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
