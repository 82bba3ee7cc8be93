"""The remote-read codec on its own: requests decode to what protobuf's encoder wrote,
any other bytes give a DecodeError, and both answers read back (protobuf's classes, the
reference frame and chunk reader) to exactly the series written."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.errors import DecodeError
from shoal.promwrite import remote_read
from tests.promwrite.xor_reference import decode_xor, read_frames

names = st.text(min_size=0, max_size=12)
matcher = st.tuples(st.integers(0, 3), names, names)
query = st.tuples(  # start + length stays within int64
    st.integers(-(2**62), 2**62), st.integers(0, 2**62 - 1), st.lists(matcher, max_size=4)
)


@settings(max_examples=100, deadline=None)
@given(st.lists(query, max_size=4), st.lists(st.integers(0, 1), max_size=3))
def test_requests_decode_to_what_was_written(
    queries: list[tuple[int, int, list[tuple[int, str, str]]]], accepted: list[int]
) -> None:
    request = remote_read.message_class("ReadRequest")()
    for start, length, matchers in queries:
        q = request.queries.add(start_timestamp_ms=start, end_timestamp_ms=start + length)
        q.hints.step_ms = 15_000  # hints are read and ignored
        for kind, name, value in matchers:
            q.matchers.add(type=kind, name=name, value=value)
    request.accepted_response_types.extend(accepted)
    decoded = remote_read.decode_request(request.SerializeToString())
    assert decoded.response_type == (accepted[0] if accepted else remote_read.SAMPLES)
    assert [(q.start_ms, q.end_ms) for q in decoded.queries] == [(s, s + n) for s, n, _ in queries]
    ops = remote_read.MATCH_TYPES
    assert [[(m.op, m.name, m.value) for m in q.matchers] for q in decoded.queries] == [
        [(ops[k], n, v) for k, n, v in ms] for _, _, ms in queries
    ]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_say_why(body: bytes) -> None:
    try:
        remote_read.decode_request(body)
    except DecodeError as exc:
        assert str(exc)


def test_what_is_refused() -> None:
    cls = remote_read.message_class("ReadRequest")
    request = cls()
    request.accepted_response_types.extend([2, 3])
    with pytest.raises(DecodeError, match="response types"):
        remote_read.decode_request(request.SerializeToString())
    request = cls()
    request.queries.add().matchers.add(type=4, name="a", value="b")
    with pytest.raises(DecodeError, match="matcher type 4"):
        remote_read.decode_request(request.SerializeToString())
    request = cls()
    request.queries.add(start_timestamp_ms=10, end_timestamp_ms=9)
    with pytest.raises(DecodeError, match="before"):
        remote_read.decode_request(request.SerializeToString())
    # an accepted type that is not served is skipped for one that is
    request = cls()
    request.accepted_response_types.extend([7, 1, 0])
    assert remote_read.decode_request(request.SerializeToString()).response_type == 1


label_sets = st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=8)), max_size=4)
bits = st.integers(0, 2**64 - 1)
series = st.tuples(
    label_sets,
    st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), bits), min_size=1, max_size=300),
)


def _arrays(samples: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([s[0] for s in samples], dtype=np.int64)
    v = np.array([s[1] for s in samples], dtype=np.uint64).view(np.float64)
    return t, v


def _bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(series, max_size=3), max_size=3))
def test_samples_answer_reads_back(
    results: list[list[tuple[list[tuple[str, str]], list[tuple[int, int]]]]],
) -> None:
    body = remote_read.samples_response(
        [[(labels, *_arrays(samples)) for labels, samples in query] for query in results]
    )
    decoded = remote_read.message_class("ReadResponse").FromString(body)
    assert [
        [
            (
                [(label.name, label.value) for label in ts.labels],
                [(s.timestamp, _bits(s.value)) for s in ts.samples],
            )
            for ts in result.timeseries
        ]
        for result in decoded.results
    ] == results


@settings(max_examples=100, deadline=None)
@given(series, st.integers(0, 5), st.sampled_from([64, 300, 1 << 20]))
def test_streamed_frames_read_back(
    one: tuple[list[tuple[str, str]], list[tuple[int, int]]], index: int, frame_bytes: int
) -> None:
    labels, samples = one
    t, v = _arrays(samples)
    frames = list(remote_read.chunked_frames(index, labels, t, v, frame_bytes))
    chunked = remote_read.message_class("ChunkedReadResponse")
    got: list[tuple[int, int]] = []
    for payload in read_frames(b"".join(frames)):
        message = chunked.FromString(payload)
        assert message.query_index == index
        (part,) = message.chunked_series
        assert [(label.name, label.value) for label in part.labels] == labels
        for chunk in part.chunks:
            assert chunk.type == remote_read.CHUNK_XOR
            found = decode_xor(chunk.data)
            assert len(found) <= 120
            assert (chunk.min_time_ms, chunk.max_time_ms) == (found[0][0], found[-1][0])
            got += found
    assert got == samples
    if frame_bytes == 1 << 20:
        assert len(frames) == 1  # one frame per series unless it is long
