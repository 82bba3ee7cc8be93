"""The WAL payload of one acknowledged request.

A payload is a small header naming the tenant and table, followed by the
Arrow IPC stream of the decoded, validated rows::

    u8  version (1)
    u8  tenant length    tenant (UTF-8)
    u8  table length     table (UTF-8)
    Arrow IPC stream (schema + record batches)

Replay is then decode-free and restores exactly the rows that were
acknowledged, and the header alone says whether a record is still needed.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

import pyarrow as pa

from shoal.errors import WalError

RTYPE_ROWS = 1
_VERSION = 1
_HEAD = struct.Struct("<BB")
_END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"


class RecordHeader(NamedTuple):
    tenant: str
    table: str
    body_offset: int


@functools.lru_cache(maxsize=64)
def _schema_message(schema: pa.Schema) -> bytes | None:
    """The IPC schema message of ``schema``; None when it needs dictionary batches."""
    if any(pa.types.is_dictionary(f.type) for f in schema):
        return None
    return bytes(schema.serialize().to_pybytes())


def encode(tenant: str, table: str, data: pa.Table) -> bytes:
    """Header + Arrow IPC stream of ``data``.

    The stream is assembled from the cached schema message, each batch's own
    message and the end-of-stream marker, byte for byte what
    ``pa.ipc.new_stream`` writes, without growing an output stream per request.
    """
    t = tenant.encode("utf-8")
    n = table.encode("utf-8")
    if len(t) > 255 or len(n) > 255:
        raise ValueError("tenant and table names must be at most 255 bytes")
    head = bytes([_VERSION, len(t)]) + t + bytes([len(n)]) + n
    schema = _schema_message(data.schema)
    if schema is None:
        sink = pa.BufferOutputStream()
        sink.write(head)
        with pa.ipc.new_stream(sink, data.schema) as writer:
            writer.write_table(data)
        return bytes(sink.getvalue().to_pybytes())
    return b"".join([head, schema, *[b.serialize() for b in data.to_batches()], _END_OF_STREAM])


def decode_header(payload: bytes | memoryview) -> RecordHeader:
    view = memoryview(payload)
    try:
        version, tlen = _HEAD.unpack_from(view, 0)
        if version != _VERSION:
            raise WalError(f"unknown WAL payload version {version}")
        tenant = bytes(view[2 : 2 + tlen]).decode("utf-8")
        nlen = view[2 + tlen]
        start = 3 + tlen
        table = bytes(view[start : start + nlen]).decode("utf-8")
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise WalError(f"damaged WAL payload header: {exc}") from None
    return RecordHeader(tenant, table, start + nlen)


def decode(payload: bytes | memoryview) -> tuple[str, str, pa.Table]:
    """Tenant, table and rows of a payload written by :func:`encode`."""
    header = decode_header(payload)
    body = pa.py_buffer(memoryview(payload)[header.body_offset :])
    try:
        data = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise WalError(f"damaged WAL payload body: {exc}") from None
    return header.tenant, header.table, data
