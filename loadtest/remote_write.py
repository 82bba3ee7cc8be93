"""A Prometheus remote-write 1.0 body, encoded by hand: WriteRequest protobuf + snappy block.

Only what the PromQL comparison test and benchmark send: labels and float samples.
``WriteRequest{timeseries=1}``, ``TimeSeries{labels=1, samples=2}``,
``Label{name=1, value=2}``, ``Sample{value=1 (double), timestamp=2 (int64)}``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import cramjam


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(t_ms: int, value: float) -> bytes:
    return b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(t_ms)


def encode(series: Iterable[tuple[Mapping[str, str], Sequence[tuple[int, float]]]]) -> bytes:
    """The uncompressed WriteRequest for ``(labels, [(t_ms, value), ...])`` pairs."""
    body = bytearray()
    for labels, samples in series:
        ts = b"".join(_field(1, _label(k, v)) for k, v in sorted(labels.items()))
        ts += b"".join(_field(2, _sample(t, v)) for t, v in samples)
        body += _field(1, ts)
    return bytes(body)


def compress(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))
