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

Such a payload replays without decoding and restores exactly the rows that were
acknowledged; the header alone says whether a record is still needed.

A request that came as protobuf (remote write, OTLP over HTTP or gRPC) is logged
as the request itself instead (version 3): its body as it came, and how to read
it::

    u8  version (3)
    u8  tenant length    tenant (UTF-8)
    u8  table length     table (UTF-8)
    u8  wire length      wire (UTF-8: ``remote-write``, ``otlp`` or ``loki-push``)
    u8  message length   message (UTF-8: remote write's protobuf message, or empty)
    body                 as the decoder took it (remote write and Loki push
                         snappy-compressed, OTLP with any gzip undone)

Senders repeat each series' labels or attributes in every request, and the rows
repeat them again per sample, in several map columns: the rows' IPC stream is
about 25 times a remote-write body (274 KB against 11 KB for the benchmark's
1,000 samples) and about 3 times an OTLP one (419 KB against 128 KB). Reading
the record decodes the body again, with the decoder that accepted it: a pure
function of the body and the job (docs/rationale.md, "Protobuf requests are
logged as they came"). :func:`rows_bytes` gives what the rows count for in the
queue and the snapshot, the same whichever way they are logged.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from shoal.errors import ShoalError, WalError
from shoal.ingest.decoding import LOKI_PUSH, OTLP, REMOTE_WRITE, DecodeJob
from shoal.ingest.decoding import decode as decode_request
from shoal.schema import SIGNAL_TABLES

RTYPE_ROWS = 1
_VERSION = 1
_VERSION_SPARSE = 2
_VERSION_REQUEST = 3
LOGGED_AS_REQUESTS = frozenset({REMOTE_WRITE, OTLP, LOKI_PUSH})
"""The wire formats whose requests are logged as they came (version 3): OTLP/JSON and
Loki's JSON push are logged as rows (their bodies are larger, and slower to read back)."""
_REPLAY_MAX_BYTES = 1 << 62
"""Decompression bound when a logged request is read back: it was accepted once, under
the limit of its day, and must be read back whatever the limit is now."""
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
    version, bitmap, schema, batches = _stream_parts(table, data)
    head = _head(version, tenant, table) + bitmap
    if schema is None:
        sink = pa.BufferOutputStream()
        sink.write(head)
        with pa.ipc.new_stream(sink, data.schema) as writer:
            writer.write_table(data)
        return bytes(sink.getvalue().to_pybytes())
    return b"".join([head, schema, *[b.serialize() for b in batches], _END_OF_STREAM])


def _head(version: int, *names: str) -> bytes:
    """The version byte, then each name as a length byte and its UTF-8."""
    out = bytearray([version])
    for name in names:
        raw = name.encode("utf-8")
        if len(raw) > 255:
            raise ValueError("tenant, table and wire names must be at most 255 bytes")
        out.append(len(raw))
        out += raw
    return bytes(out)


def _stream_parts(
    table: str, data: pa.Table, all_null: tuple[bool, ...] | None = None
) -> tuple[int, bytes, bytes | None, list[pa.RecordBatch]]:
    """Version, column bitmap, cached schema message (None: write the stream whole) and
    the batches to write, for ``data`` of ``table`` (``all_null``: see :func:`_left_out`)."""
    batches = data.to_batches()
    left_out = _left_out(table, data, all_null)
    if left_out is None:
        return _VERSION, b"", _schema_message(data.schema), batches
    # a signal table: its schema message is cached by the columns it keeps
    schema = _signal_schema_message(table, left_out)
    if not any(left_out):
        return _VERSION, b"", schema, batches
    bitmap = np.packbits(left_out, bitorder="little").tobytes()
    keep = [i for i, out in enumerate(left_out) if not out]
    return _VERSION_SPARSE, bitmap, schema, [b.select(keep) for b in batches]


def encode_request(tenant: str, table: str, job: DecodeJob, body: bytes) -> bytes:
    """Header + the request itself (version 3), for a job whose wire is logged as its
    requests (:data:`LOGGED_AS_REQUESTS`)."""
    if job.wire not in LOGGED_AS_REQUESTS:
        raise ValueError(f"requests of wire {job.wire!r} are logged as their rows")
    return _head(_VERSION_REQUEST, tenant, table, job.wire, job.message) + body


def rows_bytes(
    tenant: str, table: str, data: pa.Table, all_null: tuple[bool, ...] | None = None
) -> int:
    """``len(encode(tenant, table, data))``, without encoding: what a request's rows
    count for in the ingest queue and the snapshot, whichever way they are logged.

    ``all_null``, when the decoder gave it, says per column whether every row is null,
    which then is not asked of each column again (``DecodeResult.all_null``)."""
    version, bitmap, schema, batches = _stream_parts(table, data, all_null)
    if schema is None:
        return len(encode(tenant, table, data))
    head = len(_head(version, tenant, table)) + len(bitmap)
    body: int = sum(pa.ipc.get_record_batch_size(b) for b in batches)
    return head + len(schema) + body + len(_END_OF_STREAM)


def _left_out(
    table: str, data: pa.Table, all_null: tuple[bool, ...] | None = None
) -> tuple[bool, ...] | None:
    """Per column, whether it is all null, when ``data`` has rows and exactly the schema
    of signal table ``table``; else None (the payload keeps every column). ``all_null``
    is the answer when the decoder knew it: asking each of a table's columns makes a
    wrapper per column (37 against 2 µs for a remote-write request's 44 columns)."""
    spec = SIGNAL_TABLES.get(table)
    if spec is None or not data.num_rows or not data.schema.equals(spec.schema):
        return None
    if all_null is not None and len(all_null) == data.num_columns:
        return all_null
    rows = data.num_rows
    return tuple(column.null_count == rows for column in data.columns)


def decode_header(payload: bytes | memoryview) -> RecordHeader:
    return _header(payload).header


class _Parsed(NamedTuple):
    header: RecordHeader
    left_out: list[bool] | None
    """Version 2: the columns left out."""
    job: DecodeJob | None
    """Version 3: how to read the logged request."""


def _header(payload: bytes | memoryview) -> _Parsed:
    view = memoryview(payload)
    try:
        version, tlen = _HEAD.unpack_from(view, 0)
        if version not in (_VERSION, _VERSION_SPARSE, _VERSION_REQUEST):
            raise WalError(f"unknown WAL payload version {version}")
        tenant = bytes(view[2 : 2 + tlen]).decode("utf-8")
        nlen = view[2 + tlen]
        start = 3 + tlen
        table = bytes(view[start : start + nlen]).decode("utf-8")
        body = start + nlen
        left_out = None
        job = None
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
        elif version == _VERSION_REQUEST:
            wlen = view[body]
            wire = bytes(view[body + 1 : body + 1 + wlen]).decode("utf-8")
            body += 1 + wlen
            mlen = view[body]
            message = bytes(view[body + 1 : body + 1 + mlen]).decode("utf-8")
            body += 1 + mlen
            if wire not in LOGGED_AS_REQUESTS:
                raise WalError(f"a logged request of wire {wire!r}, which is not logged so")
            job = DecodeJob(table, wire, message, _REPLAY_MAX_BYTES)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise WalError(f"damaged WAL payload header: {exc}") from None
    return _Parsed(RecordHeader(tenant, table, body), left_out, job)


def decode(payload: bytes | memoryview) -> tuple[str, str, pa.Table]:
    """Tenant, table and rows of a payload written by :func:`encode` or
    :func:`encode_request`."""
    header, left_out, job = _header(payload)
    if job is not None:
        try:
            decoded = decode_request(job, bytes(memoryview(payload)[header.body_offset :]))
        except (ShoalError, ValueError, pa.ArrowException) as exc:
            # it was decoded once before it was logged: what fails now is damage
            raise WalError(f"damaged WAL payload body: {exc}") from None
        return header.tenant, header.table, decoded.table
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
