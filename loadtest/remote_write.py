"""Prometheus remote-write bodies, encoded by hand (independently of shoal's decoder).

1.0: ``WriteRequest{timeseries=1, metadata=3}``, ``TimeSeries{labels=1, samples=2}``,
``Label{name=1, value=2}``, ``Sample{value=1 (double), timestamp=2 (int64)}``,
``MetricMetadata{type=1, metric_family_name=2, help=4, unit=5}``.
2.0: ``Request{symbols=4, timeseries=5}``, ``TimeSeries{labels_refs=1 (packed), samples=2,
exemplars=4, metadata=5, created_timestamp=6}``, ``Exemplar{labels_refs=1, value=2,
timestamp=3}``, ``Metadata{type=1, help_ref=3, unit_ref=4}``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence

import cramjam


def varint(n: int) -> bytes:
    """A protobuf varint (a negative int64 as its 64-bit two's complement)."""
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


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a message, bytes or a string)."""
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def label(name: str, value: str) -> bytes:
    """A ``Label`` message's contents."""
    return field(1, name.encode()) + field(2, value.encode())


def sample(t_ms: int, value: float) -> bytes:
    """A ``Sample`` message's contents."""
    return b"\x09" + struct.pack("<d", value) + b"\x10" + varint(t_ms)


def encode(series: Iterable[tuple[Mapping[str, str], Sequence[tuple[int, float]]]]) -> bytes:
    """The uncompressed WriteRequest for ``(labels, [(t_ms, value), ...])`` pairs."""
    body = bytearray()
    for labels, samples in series:
        ts = b"".join(field(1, label(k, v)) for k, v in sorted(labels.items()))
        ts += b"".join(field(2, sample(t, v)) for t, v in samples)
        body += field(1, ts)
    return bytes(body)


def compress(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def metadata_v1(family: str, kind: int, help_text: str = "", unit: str = "") -> bytes:
    """A ``MetricMetadata`` field of a 1.0 WriteRequest (append it to :func:`encode`'s output)."""
    body = b"\x08" + varint(kind) + field(2, family.encode())
    if help_text:
        body += field(4, help_text.encode())
    if unit:
        body += field(5, unit.encode())
    return field(3, body)


class Symbols:
    """A 2.0 symbols table being built (it starts with the empty string)."""

    def __init__(self) -> None:
        self.table: dict[str, int] = {"": 0}

    def ref(self, text: str) -> int:
        return self.table.setdefault(text, len(self.table))

    def refs(self, labels: Mapping[str, str]) -> bytes:
        packed = b"".join(
            varint(self.ref(k)) + varint(self.ref(v)) for k, v in sorted(labels.items())
        )
        return field(1, packed)

    def encode(self) -> bytes:
        return b"".join(field(4, s.encode()) for s in self.table)


def encode_v2(
    series: Iterable[tuple[Mapping[str, str], Sequence[tuple[int, float]], Mapping[str, object]]],
) -> bytes:
    """The uncompressed 2.0 Request for ``(labels, samples, extra)``; ``extra`` may hold
    ``type`` (int), ``help``, ``unit``, ``created`` (ms) and ``exemplars``
    (``[(labels, value, t_ms)]``)."""
    symbols = Symbols()
    timeseries = bytearray()
    for labels, samples, extra in series:
        ts = symbols.refs(labels)
        ts += b"".join(field(2, sample(t, v)) for t, v in samples)
        for ex_labels, value, t in extra.get("exemplars", ()):  # type: ignore[attr-defined]
            ex = symbols.refs(ex_labels) + b"\x11" + struct.pack("<d", value) + b"\x18"
            ts += field(4, ex + varint(t))
        meta = b"\x08" + varint(int(extra.get("type", 0)))  # type: ignore[call-overload]
        meta += b"\x18" + varint(symbols.ref(str(extra.get("help", ""))))
        meta += b"\x20" + varint(symbols.ref(str(extra.get("unit", ""))))
        ts += field(5, meta)
        if extra.get("created"):
            ts += b"\x30" + varint(int(extra["created"]))  # type: ignore[call-overload]
        timeseries += field(5, ts)
    return symbols.encode() + bytes(timeseries)
