"""The frame and segment-header codec: round trips and every kind of bad input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.errors import WalCorruptionError
from shoal.wal.codec import (
    FRAME,
    FRAME_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    FrameScanner,
    decode_segment_header,
    encode_frame,
    encode_segment_header,
    find_next_frame,
    frame_problem,
)

LIMIT = 1 << 20
records = st.lists(st.tuples(st.integers(1, 255), st.binary(max_size=600)), min_size=0, max_size=30)


def _log(first_lsn: int, recs: list[tuple[int, bytes]]) -> bytes:
    return b"".join(encode_frame(first_lsn + i, t, p) for i, (t, p) in enumerate(recs))


@given(first=st.integers(1, 2**63), recs=records)
def test_frames_round_trip(first: int, recs: list[tuple[int, bytes]]) -> None:
    buf = _log(first, recs)
    scanner = FrameScanner(buf, 0, first, LIMIT)
    got = [(lsn, rtype, buf[a:b]) for lsn, rtype, a, b in scanner]
    assert got == [(first + i, t, p) for i, (t, p) in enumerate(recs)]
    assert scanner.problem is None
    assert scanner.offset == len(buf)
    assert scanner.next_lsn == first + len(recs)


@given(first=st.integers(1, 2**62), prev_gap=st.integers(1, 2**62))
def test_segment_header_round_trip(first: int, prev_gap: int) -> None:
    prev = max(0, first - prev_gap)
    raw = encode_segment_header(first, prev)
    assert len(raw) == SEGMENT_HEADER_SIZE
    header = decode_segment_header(raw)
    assert (header.first_lsn, header.prev_lsn) == (first, prev)


@given(raw=st.binary(min_size=0, max_size=80))
def test_random_header_bytes_fail_cleanly(raw: bytes) -> None:
    try:
        decode_segment_header(raw)
    except WalCorruptionError:
        pass


@given(st.integers(0, SEGMENT_HEADER_SIZE - 1), st.integers(0, 7))
def test_header_bit_flip_is_detected(byte: int, bit: int) -> None:
    raw = bytearray(encode_segment_header(5, 4))
    raw[byte] ^= 1 << bit
    with pytest.raises(WalCorruptionError):
        decode_segment_header(bytes(raw))


@given(recs=records.filter(bool), data=st.data())
def test_random_corruption_keeps_the_valid_prefix(
    recs: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    """Mutate a random byte range: scanning never raises, never invents a record,
    and returns every frame that ends before the first mutated byte."""
    buf = bytearray(_log(1, recs))
    start = data.draw(st.integers(0, len(buf) - 1))
    length = data.draw(st.integers(1, 32))
    junk = data.draw(st.binary(min_size=length, max_size=length))
    buf[start : start + length] = junk
    buf = buf[: data.draw(st.integers(start, len(buf)))]
    scanner = FrameScanner(bytes(buf), 0, 1, LIMIT)
    got = [(lsn, rtype, bytes(buf[a:b])) for lsn, rtype, a, b in scanner]
    ends = []
    pos = 0
    for _t, p in recs:
        pos += FRAME_HEADER_SIZE + len(p)
        ends.append(pos)
    intact = sum(1 for end in ends if end <= start)
    assert len(got) >= intact
    for lsn, rtype, payload in got:  # everything returned is an original record
        assert (rtype, payload) == recs[lsn - 1]
    # a clean stop means every byte was consumed by valid frames
    assert scanner.problem is not None or scanner.offset == len(buf)
    assert scanner.offset == sum(FRAME_HEADER_SIZE + len(recs[lsn - 1][1]) for lsn, *_ in got)


def test_length_of_2_pow_31_is_corruption_not_allocation() -> None:
    buf = bytearray(encode_frame(1, 1, b"hello"))
    struct.pack_into("<I", buf, 0, 2**31)
    assert "exceeds the record limit" in (frame_problem(bytes(buf), 0, 1, LIMIT) or "")
    # with a limit above 2^31 it is still corruption: it runs past the data
    problem = frame_problem(bytes(buf), 0, 1, 2**32 - 1)
    assert problem is not None and "runs past the end" in problem
    scanner = FrameScanner(bytes(buf), 0, 1, LIMIT)
    assert list(scanner) == []
    assert scanner.offset == 0


def test_each_kind_of_bad_frame_is_named() -> None:
    good = encode_frame(7, 3, b"payload")
    assert frame_problem(good, 0, 7, LIMIT) is None
    assert "expected 8" in (frame_problem(good, 0, 8, LIMIT) or "")
    assert "zero-filled" in (frame_problem(bytes(40), 0, 1, LIMIT) or "")
    assert "too short" in (frame_problem(good[:10], 0, 7, LIMIT) or "")
    assert "runs past" in (frame_problem(good[:-1], 0, 7, LIMIT) or "")
    flipped = bytearray(good)
    flipped[-1] ^= 0x10
    assert frame_problem(bytes(flipped), 0, 7, LIMIT) == "checksum mismatch"


def test_record_type_zero_is_reserved_even_with_a_valid_checksum() -> None:
    frame = encode_frame(1, 0, b"abc")
    assert frame_problem(frame, 0, 1, LIMIT) == "reserved record type 0"
    assert list(FrameScanner(frame, 0, 1, LIMIT)) == []


def test_unknown_nonzero_record_types_are_returned_untouched() -> None:
    buf = encode_frame(1, 1, b"a") + encode_frame(2, 0xEE, b"b") + encode_frame(3, 255, b"c")
    assert [(lsn, t) for lsn, t, _a, _b in FrameScanner(buf, 0, 1, LIMIT)] == [
        (1, 1),
        (2, 0xEE),
        (3, 255),
    ]


@given(recs=records.filter(lambda r: len(r) >= 3), data=st.data())
def test_find_next_frame_resynchronises_after_damage(
    recs: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    frames = [encode_frame(1 + i, t, p) for i, (t, p) in enumerate(recs)]
    victim = data.draw(st.integers(0, len(frames) - 2))
    damaged = bytearray(frames[victim])
    damaged[data.draw(st.integers(0, len(damaged) - 1))] ^= 0xFF
    start = sum(len(f) for f in frames[:victim])
    buf = b"".join(frames[:victim]) + bytes(damaged) + b"".join(frames[victim + 1 :])
    found = find_next_frame(buf, start, victim + 1, LIMIT)
    assert found is not None
    offset, lsn = found
    assert lsn >= victim + 1
    assert FRAME.unpack_from(buf, offset)[2] == lsn
    # it is the first intact frame after the damaged one
    assert offset <= start + len(damaged)


def test_find_next_frame_finds_nothing_in_zeros_or_junk() -> None:
    assert find_next_frame(bytes(4096), 0, 1, LIMIT) is None
    junk = bytes(range(256)) * 16
    assert find_next_frame(junk, 0, 1, LIMIT) is None
