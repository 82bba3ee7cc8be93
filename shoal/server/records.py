"""The WAL payload of one acknowledged request.

A payload is a small header naming the tenant and table, followed by the
Arrow IPC stream of the decoded, validated rows::

    u8  version (1)
    u8  tenant length    tenant (UTF-8)
    u8  table length     table (UTF-8)
    Arrow IPC stream (schema + record batches)

Rows of a signal table (``metrics``, ``logs``, ``spans``) in exactly its schema
leave out their all-null columns (version 2): a remote-written metrics row has a
dozen, and IPC writes a null number column's zeroed values in full (a fourth of
the payload). Their positions follow the header as a bitmap, one bit per column
of the table's schema, and reading the payload puts them back::

    u8  version (2)
    u8  tenant length    tenant (UTF-8)
    u8  table length     table (UTF-8)
    bitmap               ceil(columns / 8) bytes, bit i (LSB first): column i left out
    Arrow IPC stream of the other columns

Replay is then decode-free and restores exactly the rows that were
acknowledged, and the header alone says whether a record is still needed.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from shoal.errors import WalError
from shoal.schema import SIGNAL_TABLES

RTYPE_ROWS = 1
_VERSION = 1
_VERSION_SPARSE = 2
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


@functools.lru_cache(maxsize=256)
def _signal_schema_message(table: str, left_out: tuple[bool, ...]) -> bytes:
    """The IPC schema message of signal table ``table``'s schema less the columns
    ``left_out`` (hashing this key is cheaper than hashing a schema)."""
    schema = SIGNAL_TABLES[table].schema
    kept = pa.schema([f for f, out in zip(schema, left_out, strict=True) if not out])
    return bytes(kept.serialize().to_pybytes())


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
    batches = data.to_batches()
    left_out = _left_out(table, data)
    version, bitmap = _VERSION, b""
    schema: bytes | None
    if left_out is None:
        schema = _schema_message(data.schema)
    else:  # a signal table: its schema message is cached by the columns it keeps
        schema = _signal_schema_message(table, left_out)
        if any(left_out):
            version, bitmap = _VERSION_SPARSE, np.packbits(left_out, bitorder="little").tobytes()
            keep = [i for i, out in enumerate(left_out) if not out]
            batches = [b.select(keep) for b in batches]
    head = bytes([version, len(t)]) + t + bytes([len(n)]) + n + bitmap
    if schema is None:
        sink = pa.BufferOutputStream()
        sink.write(head)
        with pa.ipc.new_stream(sink, data.schema) as writer:
            writer.write_table(data)
        return bytes(sink.getvalue().to_pybytes())
    return b"".join([head, schema, *[b.serialize() for b in batches], _END_OF_STREAM])


def _left_out(table: str, data: pa.Table) -> tuple[bool, ...] | None:
    """Per column, whether it is all null, when ``data`` has rows and exactly the schema
    of signal table ``table``; else None (the payload keeps every column)."""
    spec = SIGNAL_TABLES.get(table)
    if spec is None or not data.num_rows or not data.schema.equals(spec.schema):
        return None
    rows = data.num_rows
    return tuple(column.null_count == rows for column in data.columns)


def decode_header(payload: bytes | memoryview) -> RecordHeader:
    return _header(payload)[0]


def _header(payload: bytes | memoryview) -> tuple[RecordHeader, list[bool] | None]:
    view = memoryview(payload)
    try:
        version, tlen = _HEAD.unpack_from(view, 0)
        if version not in (_VERSION, _VERSION_SPARSE):
            raise WalError(f"unknown WAL payload version {version}")
        tenant = bytes(view[2 : 2 + tlen]).decode("utf-8")
        nlen = view[2 + tlen]
        start = 3 + tlen
        table = bytes(view[start : start + nlen]).decode("utf-8")
        body = start + nlen
        left_out = None
        if version == _VERSION_SPARSE:
            spec = SIGNAL_TABLES.get(table)
            if spec is None:
                raise WalError(f"a sparse WAL payload of table {table!r}, which has no schema")
            columns = len(spec.schema)
            size = (columns + 7) // 8
            if len(view) < body + size:
                raise WalError("damaged WAL payload header: its column bitmap is cut short")
            bits = np.frombuffer(view[body : body + size], dtype=np.uint8)
            left_out = np.unpackbits(bits, bitorder="little")[:columns].astype(bool).tolist()
            body += size
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise WalError(f"damaged WAL payload header: {exc}") from None
    return RecordHeader(tenant, table, body), left_out


def decode(payload: bytes | memoryview) -> tuple[str, str, pa.Table]:
    """Tenant, table and rows of a payload written by :func:`encode`."""
    header, left_out = _header(payload)
    body = pa.py_buffer(memoryview(payload)[header.body_offset :])
    try:
        data = pa.ipc.open_stream(body).read_all()
    except (pa.ArrowException, OSError) as exc:  # any Arrow error: the stream is damaged
        raise WalError(f"damaged WAL payload body: {exc}") from None
    if left_out is not None:
        data = _restored(SIGNAL_TABLES[header.table].schema, left_out, data)
    return header.tenant, header.table, data


def _restored(schema: pa.Schema, left_out: list[bool], data: pa.Table) -> pa.Table:
    """``data`` with the columns a sparse payload left out put back, all null."""
    expected = pa.schema([f for f, out in zip(schema, left_out, strict=True) if not out])
    if not data.schema.equals(expected):
        raise WalError("damaged WAL payload: its columns are not those its bitmap leaves")
    kept = iter(data.columns)
    columns = [
        pa.chunked_array([pa.nulls(data.num_rows, field.type)]) if out else next(kept)
        for field, out in zip(schema, left_out, strict=True)
    ]
    try:
        return pa.Table.from_arrays(columns, schema=schema)
    except pa.ArrowException as exc:  # it validates what the stream's reading did not
        raise WalError(f"damaged WAL payload body: {exc}") from None
