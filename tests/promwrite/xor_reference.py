"""A reader of Prometheus' XOR chunks and remote-read frames, written from the format's
description (Prometheus' tsdb/chunkenc/xor.go and storage/remote/chunked.go) and kept
apart from shoal's encoder: a bit cursor over the bytes, one field at a time."""

from __future__ import annotations

import struct

import crc32c


class BitReader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0  # in bits

    def bit(self) -> int:
        byte = self.data[self.pos >> 3]  # IndexError past the end
        value = (byte >> (7 - (self.pos & 7))) & 1
        self.pos += 1
        return value

    def bits(self, n: int) -> int:
        end = self.pos + n
        first, last = self.pos >> 3, (end + 7) >> 3
        if last > len(self.data):
            raise IndexError("read past the end of the chunk")
        window = int.from_bytes(self.data[first:last], "big")
        value = (window >> (last * 8 - end)) & ((1 << n) - 1)
        self.pos = end
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.bits(8)
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value


def _signed(value: int, width: int) -> int:
    return value - (1 << width) if value >= 1 << (width - 1) else value


def decode_xor(chunk: bytes) -> list[tuple[int, int]]:
    """``(time, value bits)`` of every sample of an XOR chunk."""
    count = struct.unpack(">H", chunk[:2])[0]
    reader = BitReader(chunk[2:])
    out: list[tuple[int, int]] = []
    t = delta = v = 0
    leading = trailing = 0
    for i in range(count):
        if i == 0:
            z = reader.uvarint()
            t = (z >> 1) ^ -(z & 1)
            v = reader.bits(64)
            out.append((t, v))
            continue
        if i == 1:
            delta = _signed(reader.uvarint(), 64)
        else:
            prefix = 0
            for _ in range(4):
                b = reader.bit()
                prefix = (prefix << 1) | b
                if not b:
                    break
            width = {0b0: 0, 0b10: 14, 0b110: 17, 0b1110: 20, 0b1111: 64}[prefix]
            dod = 0
            if width == 64:
                dod = _signed(reader.bits(64), 64)
            elif width:
                raw = reader.bits(width)
                dod = raw - (1 << width) if raw > 1 << (width - 1) else raw
            delta = _signed((delta + dod) & ((1 << 64) - 1), 64)
        t = _signed((t + delta) & ((1 << 64) - 1), 64)
        if reader.bit():
            if reader.bit():
                leading = reader.bits(5)
                significant = reader.bits(6) or 64
                trailing = 64 - leading - significant
            else:
                significant = 64 - leading - trailing
            v ^= reader.bits(significant) << trailing
        out.append((t, v))
    return out


def read_frames(stream: bytes) -> list[bytes]:
    """The messages of a streamed remote-read response, their CRCs checked."""
    out = []
    pos = 0
    while pos < len(stream):
        size = shift = 0
        while True:
            byte = stream[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        crc = struct.unpack(">I", stream[pos : pos + 4])[0]
        payload = stream[pos + 4 : pos + 4 + size]
        assert len(payload) == size, "short frame"
        assert crc32c.crc32c(payload) == crc, "frame checksum mismatch"
        out.append(payload)
        pos += 4 + size
    return out
