"""The WAL's byte formats: segment headers and record frames (pure functions).

Nothing here touches files or threads; docs/wal-format.md describes the same
layout byte by byte.

Segment header (40 bytes, little-endian)::

    0  8  magic  b"SHOALWAL"
    8  2  format version (1)
    10 2  header size (40)
    12 4  flags (0)
    16 8  first LSN: the sequence number of the segment's first record
    24 8  previous LSN: the last LSN of the log when the segment was created
    32 4  reserved (0)
    36 4  CRC32C of bytes 0..36

Record frame (17-byte header, then the payload)::

    0  4  payload length
    4  4  CRC32C of bytes 8..17+length (LSN, type and payload)
    8  8  LSN
    16 1  record type (1..255; 0 is reserved and never valid)
    17 .. payload
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from crc32c import crc32c

from shoal.errors import WalCorruptionError

MAGIC = b"SHOALWAL"
FORMAT_VERSION = 1

_HEADER_BODY = struct.Struct("<8sHHIQQI")
_U32 = struct.Struct("<I")
SEGMENT_HEADER_SIZE = _HEADER_BODY.size + _U32.size  # 40

FRAME = struct.Struct("<IIQB")
FRAME_HEADER_SIZE = FRAME.size  # 17
_LSN_TYPE = struct.Struct("<QB")

MIN_RTYPE = 1
MAX_RTYPE = 255

# A frame as found in a buffer: (lsn, rtype, payload start, payload end).
FrameRef = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    first_lsn: int
    prev_lsn: int
    version: int = FORMAT_VERSION


def encode_segment_header(first_lsn: int, prev_lsn: int) -> bytes:
    """The 40-byte header of a segment whose first record will be ``first_lsn``."""
    if first_lsn < 1 or not 0 <= prev_lsn < first_lsn:
        raise ValueError(f"bad segment LSNs: first={first_lsn} prev={prev_lsn}")
    body = _HEADER_BODY.pack(MAGIC, FORMAT_VERSION, SEGMENT_HEADER_SIZE, 0, first_lsn, prev_lsn, 0)
    return body + _U32.pack(crc32c(body))


def decode_segment_header(buf: bytes | memoryview, name: str = "segment") -> SegmentHeader:
    """Parse a segment header; raise :class:`WalCorruptionError` if it is not valid."""
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise WalCorruptionError(name, 0, f"header too short ({len(buf)} bytes)")
    body = bytes(buf[: _HEADER_BODY.size])
    magic, version, size, _flags, first, prev, _reserved = _HEADER_BODY.unpack(body)
    if magic != MAGIC:
        raise WalCorruptionError(name, 0, "bad magic: not a shoal WAL segment")
    (stored_crc,) = _U32.unpack_from(buf, _HEADER_BODY.size)
    if crc32c(body) != stored_crc:
        raise WalCorruptionError(name, 0, "header checksum mismatch")
    if version != FORMAT_VERSION or size != SEGMENT_HEADER_SIZE:
        raise WalCorruptionError(name, 0, f"unsupported format version {version}")
    if first < 1 or prev >= first:
        raise WalCorruptionError(name, 0, f"bad header LSNs: first={first} prev={prev}")
    return SegmentHeader(first_lsn=first, prev_lsn=prev, version=version)


def encode_frame_header(lsn: int, rtype: int, payload: bytes | memoryview) -> bytes:
    """The 17-byte header that precedes ``payload`` on disk."""
    crc = crc32c(payload, crc32c(_LSN_TYPE.pack(lsn, rtype)))
    return FRAME.pack(len(payload), crc, lsn, rtype)


def encode_frame(lsn: int, rtype: int, payload: bytes) -> bytes:
    """Header and payload of one record, as one bytes object."""
    return encode_frame_header(lsn, rtype, payload) + payload


def frame_problem(
    buf: bytes | memoryview, offset: int, expected_lsn: int | None, max_record_bytes: int
) -> str | None:
    """Why the frame at ``offset`` is not valid, or None if it is.

    ``expected_lsn`` None accepts any LSN (used when searching for a frame).
    A length beyond ``max_record_bytes`` or beyond the data is reported, never
    allocated.
    """
    remaining = len(buf) - offset
    if remaining < FRAME_HEADER_SIZE:
        return f"{remaining} bytes left, too short for a frame header"
    length, crc, lsn, rtype = FRAME.unpack_from(buf, offset)
    if length == 0 and crc == 0 and lsn == 0 and rtype == 0:
        return "zero-filled frame header"
    if length > max_record_bytes:
        return f"length {length} exceeds the record limit of {max_record_bytes}"
    end = offset + FRAME_HEADER_SIZE + length
    if end > len(buf):
        return f"length {length} runs past the end of the data"
    if crc32c(memoryview(buf)[offset + 8 : end]) != crc:
        return "checksum mismatch"
    if rtype == 0:
        return "reserved record type 0"
    if expected_lsn is not None and lsn != expected_lsn:
        return f"sequence number {lsn}, expected {expected_lsn}"
    return None


@dataclass(eq=False)
class FrameScanner:
    """Walk the frames of ``buf`` from ``offset``, stopping at the first bad one.

    Iterate to get :data:`FrameRef` tuples. After the iteration ends,
    ``offset`` is where the valid frames end, ``next_lsn`` the LSN the next
    frame should have, and ``problem`` says why scanning stopped (None at a
    clean end of the data).
    """

    buf: bytes | memoryview
    offset: int
    next_lsn: int
    max_record_bytes: int
    problem: str | None = field(init=False, default=None)

    def __iter__(self) -> Iterator[FrameRef]:
        buf = self.buf
        view = memoryview(buf)
        size = len(buf)
        limit = self.max_record_bytes
        unpack = FRAME.unpack_from
        hsize = FRAME_HEADER_SIZE
        off = self.offset
        lsn = self.next_lsn
        problem: str | None = None
        try:
            while off < size:
                if size - off < hsize:
                    problem = frame_problem(buf, off, lsn, limit)
                    break
                length, crc, flsn, rtype = unpack(buf, off)
                end = off + hsize + length
                if (
                    length > limit
                    or end > size
                    or flsn != lsn
                    or rtype == 0
                    or crc32c(view[off + 8 : end]) != crc
                ):
                    problem = frame_problem(buf, off, lsn, limit)
                    break
                yield (lsn, rtype, off + hsize, end)
                off = end
                lsn += 1
        finally:
            self.offset = off
            self.next_lsn = lsn
            self.problem = problem


def find_next_frame(
    buf: bytes | memoryview, start: int, min_lsn: int, max_record_bytes: int
) -> tuple[int, int] | None:
    """Find the first valid frame beginning after byte ``start``.

    Used to tell mid-log corruption (valid records follow the damage) from a
    torn tail (nothing valid follows). Candidates are byte positions whose
    LSN field holds a value between ``min_lsn`` and the most frames the rest
    of the buffer could hold; each is checked in full (length, checksum).
    Returns ``(offset, lsn)`` or None.
    """
    size = len(buf)
    first = start + 1
    if size - first < FRAME_HEADER_SIZE:
        return None
    max_lsn = min_lsn + (size - first) // FRAME_HEADER_SIZE + 1
    candidates: list[np.ndarray] = []
    for shift in range(8):
        lsn_at = first + 8 + shift  # LSN field of a frame starting at first + shift
        count = (size - lsn_at - 9) // 8 + 1  # LSN (8) and type (1) must fit
        if count <= 0:
            continue
        values = np.frombuffer(buf, dtype="<u8", count=count, offset=lsn_at)
        hits = np.flatnonzero((values >= min_lsn) & (values < max_lsn))
        if hits.size:
            candidates.append(hits * 8 + (first + shift))
    if not candidates:
        return None
    for pos in np.sort(np.concatenate(candidates)).tolist():
        if frame_problem(buf, pos, None, max_record_bytes) is None:
            _length, _crc, lsn, _rtype = FRAME.unpack_from(buf, pos)
            return pos, lsn
    return None
