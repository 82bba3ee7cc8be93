"""Prometheus' XOR chunk encoding (Gorilla-style), byte for byte as its TSDB writes it.

A chunk holds up to 65,535 samples of one series: a big-endian ``uint16`` sample count,
then a bit stream. The first sample is its time as a zigzag varint and its value's 64
bits; the second, the time delta as an unsigned varint and the value XORed with the
previous one; every later sample the delta of the time delta in one of five bit-width
classes (0, 14, 17, 20 or 64 bits after a 1-4 bit prefix) and the XORed value. A value
equal to the previous one is a single 0 bit; otherwise its significant bits are written
within the previous sample's window of leading and trailing zeros when they fit (``10``),
or with a new window (``11``, five bits of leading zeros, at most 31, and six of
significant bits, 64 written as 0).

Prometheus' bit stream keeps one quirk that a byte-exact encoder has to copy: a write
of a whole byte (a varint byte, or the last eight bits of a field whose width is a
multiple of eight) that ends on a byte boundary leaves an empty byte after it, which is
part of the chunk's bytes when nothing follows. Values are taken as their 64-bit
patterns, so every NaN (the stale marker ``0x7ff0000000000002`` among them) keeps its
bits.

Pure: no I/O. The remote-read endpoint cuts each series into chunks of at most
:data:`SAMPLES_PER_CHUNK` samples, as Prometheus' head does.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

SAMPLES_PER_CHUNK = 120
"""Samples per chunk, Prometheus' own target for the chunks of its head."""

MAX_SAMPLES = 0xFFFF
"""The most samples one chunk can count."""

_U64 = (1 << 64) - 1


class _Bits:
    """A bit stream: an integer holding the bits written so far, most significant first."""

    __slots__ = ("acc", "byte_last", "n")

    def __init__(self) -> None:
        self.acc = 0
        self.n = 0
        self.byte_last = False
        """Whether the last write ended with a whole byte (Prometheus then keeps an empty
        byte after it when the stream is on a byte boundary)."""

    def write(self, value: int, width: int) -> None:
        self.acc = (self.acc << width) | (value & ((1 << width) - 1))
        self.n += width
        self.byte_last = width >= 8 and width % 8 == 0

    def varint_bytes(self, value: int) -> None:
        """An unsigned varint of ``value`` (a 64-bit pattern), byte by byte."""
        while True:
            byte = value & 0x7F
            value >>= 7
            if value:
                self.write(byte | 0x80, 8)
            else:
                self.write(byte, 8)
                return

    def to_bytes(self) -> bytes:
        pad = -self.n % 8
        length = (self.n + pad) // 8
        out = (self.acc << pad).to_bytes(length, "big") if length else b""
        if pad == 0 and self.byte_last:
            out += b"\x00"
        return out


def _leading_zeros(x: int) -> int:
    return 64 - x.bit_length()


def _trailing_zeros(x: int) -> int:
    return (x & -x).bit_length() - 1


def _fits(dod: int, width: int) -> bool:
    """Whether a signed delta of deltas fits ``width`` bits as Prometheus' ``bitRange``
    decides it (one more on the positive side than on the negative)."""
    half = 1 << (width - 1)
    return -(half - 1) <= dod <= half


def encode(times: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> bytes:
    """One XOR chunk of the samples (times in milliseconds, in the order given; 1 to
    65,535 of them). Values are read as their bit patterns."""
    count = len(times)
    if not 0 < count <= MAX_SAMPLES or len(values) != count:
        raise ValueError(f"an XOR chunk holds 1 to {MAX_SAMPLES} samples, not {count}")
    ts = np.asarray(times, dtype=np.int64).tolist()
    vs = np.ascontiguousarray(values, dtype=np.float64).view(np.uint64).tolist()
    bits = _Bits()
    t0 = ts[0]
    bits.varint_bytes(((t0 << 1) ^ (t0 >> 63)) & _U64)  # zigzag, as Go's PutVarint
    bits.write(vs[0], 64)
    prev_t, prev_v, prev_delta = t0, vs[0], 0
    leading, trailing = 0xFF, 0  # no window yet
    for i in range(1, count):
        t, v = ts[i], vs[i]
        delta = (t - prev_t) & _U64
        if i == 1:
            bits.varint_bytes(delta)
        else:
            dod = (delta - prev_delta) & _U64
            if dod >= 1 << 63:
                dod -= 1 << 64
            if dod == 0:
                bits.write(0, 1)
            elif _fits(dod, 14):
                bits.write(0b10, 2)
                bits.write(dod, 14)
            elif _fits(dod, 17):
                bits.write(0b110, 3)
                bits.write(dod, 17)
            elif _fits(dod, 20):
                bits.write(0b1110, 4)
                bits.write(dod, 20)
            else:
                bits.write(0b1111, 4)
                bits.write(dod, 64)
        xor = v ^ prev_v
        if xor == 0:
            bits.write(0, 1)
        else:
            new_leading = min(_leading_zeros(xor), 31)
            new_trailing = _trailing_zeros(xor)
            if leading != 0xFF and new_leading >= leading and new_trailing >= trailing:
                bits.write(0b10, 2)
                bits.write(xor >> trailing, 64 - leading - trailing)
            else:
                leading, trailing = new_leading, new_trailing
                significant = 64 - leading - trailing
                bits.write(0b11, 2)
                bits.write(leading, 5)
                bits.write(significant, 6)  # 64 is written as 0
                bits.write(xor >> trailing, significant)
        prev_t, prev_v, prev_delta = t, v, delta
    return count.to_bytes(2, "big") + bits.to_bytes()


def chunks(
    times: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    per_chunk: int = SAMPLES_PER_CHUNK,
) -> Iterator[tuple[int, int, bytes]]:
    """The samples as consecutive XOR chunks of at most ``per_chunk`` samples each:
    ``(first time, last time, chunk bytes)``."""
    if not 0 < per_chunk <= MAX_SAMPLES:
        raise ValueError(f"per_chunk must be 1 to {MAX_SAMPLES}, not {per_chunk}")
    for start in range(0, len(times), per_chunk):
        t = times[start : start + per_chunk]
        yield int(t[0]), int(t[-1]), encode(t, values[start : start + per_chunk])
