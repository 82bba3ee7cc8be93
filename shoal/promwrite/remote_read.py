"""Prometheus remote read: the request and both response types, as bytes. Pure, no I/O.

A ``prometheus.ReadRequest`` (snappy block format, as remote write) holds queries, each
a time range in milliseconds (both ends included), label matchers and hints, and the
response types the client accepts in order of preference:

* ``SAMPLES`` (0, and what a request that names none gets): one ``ReadResponse``, a
  ``QueryResult`` per query, each a list of ``TimeSeries`` (sorted labels, samples in
  time order), snappy-compressed (``Content-Type: application/x-protobuf``,
  ``Content-Encoding: snappy``).
* ``STREAMED_XOR_CHUNKS`` (1): frames of ``ChunkedReadResponse`` (``Content-Type:
  application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse``), each the
  frame's length as an unsigned varint, its CRC-32 (Castagnoli) as a big-endian
  ``uint32``, then the message: one series per frame (a long series split over frames of
  about :data:`MAX_FRAME_BYTES`), its samples as XOR chunks (:mod:`xorchunk`), and the
  index of the query it answers.

The request is decoded with protobuf's own parser from ``prompb``'s descriptors, the
ones remote write 1.0 is decoded with (:data:`shoal.promwrite.proto.V1_FILE`); responses
are written by hand, samples column-wise with NumPy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import crc32c
import numpy as np
import numpy.typing as npt
from google.protobuf import descriptor_pool, message, message_factory

from shoal.errors import DecodeError
from shoal.promwrite import xorchunk
from shoal.promwrite.proto import V1_FILE, varint

SAMPLES = 0
STREAMED_XOR_CHUNKS = 1
RESPONSE_TYPES = {SAMPLES: "SAMPLES", STREAMED_XOR_CHUNKS: "STREAMED_XOR_CHUNKS"}

SAMPLES_CONTENT_TYPE = "application/x-protobuf"
STREAMED_CONTENT_TYPE = "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"

MAX_FRAME_BYTES = 1 << 20
"""Chunk bytes per frame before a series goes on in the next frame (Prometheus' default
``--storage.remote.read-max-bytes-in-frame``)."""

MATCH_TYPES = {0: "=", 1: "!=", 2: "=~", 3: "!~"}
"""``LabelMatcher.Type``: EQ, NEQ, RE, NRE."""

CHUNK_XOR = 1
"""``Chunk.Encoding.XOR``."""

_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(V1_FILE)


def message_class(name: str) -> Any:
    """The protobuf class of a message of ``prompb`` (``"ReadRequest"``, ...); the
    response messages are there for readers of what this module writes (the tests)."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"prometheus.{name}"))


_READ_REQUEST = message_class("ReadRequest")


@dataclasses.dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str


@dataclasses.dataclass(frozen=True)
class Query:
    start_ms: int
    end_ms: int
    matchers: tuple[Matcher, ...]


@dataclasses.dataclass(frozen=True)
class ReadRequest:
    queries: tuple[Query, ...]
    response_type: int
    """The first accepted type this server writes (``SAMPLES`` when none is named)."""


def decode_request(body: bytes) -> ReadRequest:
    """A decompressed ``ReadRequest``; :class:`DecodeError` says what is wrong with it.

    Hints are read and ignored: they describe the query the reader will evaluate, and
    every matching sample is returned whatever they say."""
    try:
        request = _READ_REQUEST.FromString(body)
    except message.DecodeError as exc:
        raise DecodeError(f"body is not a prometheus.ReadRequest: {exc}") from None
    accepted = list(request.accepted_response_types) or [SAMPLES]
    chosen = next((t for t in accepted if t in RESPONSE_TYPES), None)
    if chosen is None:
        raise DecodeError(
            f"none of the accepted response types {accepted} is served; "
            f"this server writes {', '.join(f'{k} ({v})' for k, v in RESPONSE_TYPES.items())}"
        )
    queries = []
    for i, q in enumerate(request.queries):
        matchers = []
        for m in q.matchers:
            op = MATCH_TYPES.get(m.type)
            if op is None:
                raise DecodeError(f"query {i}: unknown label matcher type {m.type}")
            matchers.append(Matcher(m.name, op, m.value))
        if q.end_timestamp_ms < q.start_timestamp_ms:
            raise DecodeError(
                f"query {i}: end_timestamp_ms {q.end_timestamp_ms} is before "
                f"start_timestamp_ms {q.start_timestamp_ms}"
            )
        queries.append(Query(q.start_timestamp_ms, q.end_timestamp_ms, tuple(matchers)))
    return ReadRequest(tuple(queries), chosen)


# -- writing ------------------------------------------------------------------------


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def _labels(labels: Sequence[tuple[str, str]]) -> bytes:
    return b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels)


def _varints(values: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The varint bytes of each value (a row of 10, the unused ones after its end) and
    each one's length."""
    groups = np.empty((len(values), 10), dtype=np.uint8)
    rest = values.copy()
    for j in range(10):
        groups[:, j] = (rest & np.uint64(0x7F)).astype(np.uint8)
        rest >>= np.uint64(7)
    used = np.ones(len(values), dtype=np.int64)
    high = values.copy()
    high >>= np.uint64(7)
    while high.any():
        used += high > 0
        high >>= np.uint64(7)
    more = np.arange(10)[None, :] < (used - 1)[:, None]
    groups[more] |= 0x80
    return groups, used


def samples_payload(times: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> bytes:
    """The ``samples`` fields (2) of a ``TimeSeries``: one ``Sample{value, timestamp}``
    each, written for all samples at once."""
    n = len(times)
    if n == 0:
        return b""
    stamps, used = _varints(np.asarray(times, dtype=np.int64).view(np.uint64))
    # field 2 (len) | size | 0x09 value(8) | 0x10 varint(timestamp)
    size = 1 + 8 + 1 + used  # < 128: the size is one byte
    rows = np.zeros((n, 2 + 10 + 10), dtype=np.uint8)
    rows[:, 0] = 0x12
    rows[:, 1] = size
    rows[:, 2] = 0x09
    value_bytes = np.ascontiguousarray(values, dtype="<f8").view(np.uint8).reshape(n, 8)
    rows[:, 3:11] = value_bytes
    rows[:, 11] = 0x10
    rows[:, 12:22] = stamps
    keep = np.arange(22)[None, :] < (12 + used)[:, None]
    return rows[keep].tobytes()


def samples_response(
    results: Sequence[Sequence[tuple[Sequence[tuple[str, str]], Any, Any]]],
) -> bytes:
    """The uncompressed ``ReadResponse``: for each query, its series as
    ``(sorted labels, times, values)``."""
    out = bytearray()
    for series in results:
        result = bytearray()
        for labels, times, values in series:
            result += _field(1, _labels(labels) + samples_payload(times, values))
        out += _field(1, bytes(result))
    return bytes(out)


def frame(payload: bytes) -> bytes:
    """One frame of a streamed response: length, CRC-32C (big-endian), the message."""
    return varint(len(payload)) + crc32c.crc32c(payload).to_bytes(4, "big") + payload


def chunked_frames(
    query_index: int,
    labels: Sequence[tuple[str, str]],
    times: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> Iterator[bytes]:
    """The frames of one series: its XOR chunks in time order, a new frame once the
    chunks of the current one pass ``max_frame_bytes`` (less its labels), as Prometheus
    splits a long series."""
    head = _labels(labels)
    index = b"\x10" + varint(query_index) if query_index else b""  # proto3: 0 is left out
    budget = max_frame_bytes - len(head)
    pending = bytearray()
    for first, last, data in xorchunk.chunks(times, values):
        chunk = (
            b"\x08" + varint(first) + b"\x10" + varint(last) + b"\x18" + varint(CHUNK_XOR)
        ) + _field(4, data)
        pending += _field(2, chunk)
        if len(pending) >= budget:
            yield frame(_field(1, head + bytes(pending)) + index)
            pending.clear()
    if pending:
        yield frame(_field(1, head + bytes(pending)) + index)
