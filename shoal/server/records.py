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

import struct
from typing import NamedTuple

import pyarrow as pa

from shoal.errors import WalError

RTYPE_ROWS = 1
_VERSION = 1
_HEAD = struct.Struct("<BB")


class RecordHeader(NamedTuple):
    tenant: str
    table: str
    body_offset: int


def encode(tenant: str, table: str, data: pa.Table) -> bytes:
    """Header + Arrow IPC stream of ``data``."""
    t = tenant.encode("utf-8")
    n = table.encode("utf-8")
    if len(t) > 255 or len(n) > 255:
        raise ValueError("tenant and table names must be at most 255 bytes")
    sink = pa.BufferOutputStream()
    sink.write(bytes([_VERSION, len(t)]) + t + bytes([len(n)]) + n)
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    return bytes(sink.getvalue().to_pybytes())


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
