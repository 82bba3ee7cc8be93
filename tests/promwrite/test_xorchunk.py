"""The XOR chunk encoder: byte for byte what Prometheus' own TSDB writes for the same
samples (Debian's Prometheus 2.42 holds them and streams its chunks by remote read),
and every sample back with its exact bits through an independent reader (Hypothesis)."""

from __future__ import annotations

import math
import random
import struct
import time
import urllib.request
from pathlib import Path

import cramjam
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest import remote_write
from loadtest.prometheus import Prometheus
from shoal.promwrite import remote_read, xorchunk
from tests.promwrite.xor_reference import decode_xor, read_frames

STALE = 0x7FF0000000000002
SPECIAL = [
    STALE,
    0x7FF8000000000000,  # the usual NaN
    0x7FF8000000000001,  # NaN payloads
    0xFFF8000000000000,
    0x7FF0000000000001,  # signalling
    0x7FF0000000000000,  # +Inf
    0xFFF0000000000000,  # -Inf
    0x8000000000000000,  # -0
    0,
    1,  # the smallest subnormal
    0x7FEFFFFFFFFFFFFF,  # the largest double
]


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


def _round_trip(times: list[int], bits: list[int]) -> None:
    t = np.array(times, dtype=np.int64)
    v = np.array(bits, dtype=np.uint64).view(np.float64)
    chunk = xorchunk.encode(t, v)
    assert decode_xor(chunk) == list(zip(times, bits, strict=True))


value_bits = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(0, 2**64 - 1),
    st.floats(allow_nan=False).map(lambda x: struct.unpack("<Q", struct.pack("<d", x))[0]),
    st.integers(-1000, 1000).map(lambda i: struct.unpack("<Q", struct.pack("<d", float(i)))[0]),
)


steps = st.one_of(
    st.sampled_from([15_000, 15_000, 1, 0, 8_192, 8_193, 65_536, 524_288]),
    st.integers(0, 2**20),
    st.integers(0, 2**40),
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-(2**62), 2**62),
    st.lists(st.tuples(steps, value_bits), min_size=1, max_size=300),
    st.booleans(),
)
def test_every_sample_round_trips(start: int, samples: list[tuple[int, int]], repeat: bool) -> None:
    times = [start]
    for step, _ in samples[1:]:
        times.append(min(times[-1] + step, 2**63 - 1))
    bits = [b for _, b in samples]
    if repeat:  # runs of equal values
        bits = [bits[i // 5] for i in range(len(bits))]
    _round_trip(times, bits)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=40),
    st.data(),
)
def test_any_times_round_trip(times: list[int], data: st.DataObject) -> None:
    """Times in any order and of any size: the deltas wrap as Prometheus' uint64 ones."""
    bits = data.draw(st.lists(value_bits, min_size=len(times), max_size=len(times)))
    _round_trip(times, bits)


def test_delta_of_deltas_at_each_class_edge() -> None:
    for width in (14, 17, 20):
        for dod in (
            2 ** (width - 1),
            -(2 ** (width - 1)) + 1,
            2 ** (width - 1) + 1,
            -(2 ** (width - 1)),
        ):
            times = [0, 10**6, 2 * 10**6 + dod, 3 * 10**6 + dod]
            _round_trip(times, [0, 0, 0, 0])


@pytest.mark.parametrize("per_chunk", [1, 7, 120])
def test_chunks_cut_a_series_in_order(per_chunk: int) -> None:
    t = np.arange(1_000, 1_000 + 15_000 * 257, 15_000, dtype=np.int64)
    v = np.sin(np.arange(257.0))
    found = list(xorchunk.chunks(t, v, per_chunk))
    assert [len(decode_xor(c)) for _, _, c in found] == [
        min(per_chunk, 257 - i) for i in range(0, 257, per_chunk)
    ]
    samples = [s for _, _, c in found for s in decode_xor(c)]
    assert samples == list(zip(t.tolist(), v.view(np.uint64).tolist(), strict=True))
    assert [(a, b) for a, b, _ in found] == [
        (int(t[i]), int(t[min(i + per_chunk, 257) - 1])) for i in range(0, 257, per_chunk)
    ]


def test_refuses_what_a_chunk_cannot_count() -> None:
    empty = np.array([], dtype=np.int64)
    with pytest.raises(ValueError):
        xorchunk.encode(empty, empty.astype(np.float64))
    many = np.arange(70_000, dtype=np.int64)
    with pytest.raises(ValueError):
        xorchunk.encode(many, many.astype(np.float64))


def test_prometheus_writes_the_same_bytes(tmp_path: Path) -> None:
    """Prometheus' head keeps the samples of a remote-write request as XOR chunks and
    streams them by remote read: each chunk holds exactly the samples written, and
    shoal's encoder makes the same bytes from them."""
    prometheus = Prometheus(tmp_path).start()
    try:
        rnd = random.Random(7)
        base = int(time.time() * 1000) - 3_600_000
        series = []
        for k in range(8):
            t, v, samples = base, 0.0, []
            for i in range(400):
                t += rnd.choice([15_000, 15_000, 14_999, 15_001, 30_000, 1, 200_000, 8_193])
                v = rnd.choice(
                    [v, v + 1, v * 1.5 + 0.1, rnd.random(), -v, math.inf, 1e300, 0.0, 5e-324]
                )
                samples.append((t, _float(STALE) if i % 50 == 7 and k % 2 else v))
            series.append(({"__name__": "xor_test", "k": str(k)}, samples))
        body = remote_write.compress(remote_write.encode(series))
        request = urllib.request.Request(
            prometheus.url + "/api/v1/write",
            data=body,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"},
        )
        with urllib.request.urlopen(request) as resp:
            assert resp.status == 204
        read = remote_read.message_class("ReadRequest")()
        query = read.queries.add(start_timestamp_ms=0, end_timestamp_ms=base + 10**9)
        query.matchers.add(type=0, name="__name__", value="xor_test")
        read.accepted_response_types.append(remote_read.STREAMED_XOR_CHUNKS)
        request = urllib.request.Request(
            prometheus.url + "/api/v1/read",
            data=bytes(cramjam.snappy.compress_raw(read.SerializeToString())),
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"},
        )
        with urllib.request.urlopen(request) as resp:
            assert resp.headers["Content-Type"] == remote_read.STREAMED_CONTENT_TYPE
            stream = resp.read()
        chunked = remote_read.message_class("ChunkedReadResponse")
        written = {
            labels["k"]: [(t, struct.unpack("<Q", struct.pack("<d", v))[0]) for t, v in samples]
            for labels, samples in series
        }
        got: dict[str, list[tuple[int, int]]] = {}
        compared = 0
        for payload in read_frames(stream):
            for one in chunked.FromString(payload).chunked_series:
                k = {label.name: label.value for label in one.labels}["k"]
                for chunk in one.chunks:
                    assert chunk.type == remote_read.CHUNK_XOR
                    samples = decode_xor(chunk.data)
                    t = np.array([s[0] for s in samples], dtype=np.int64)
                    v = np.array([s[1] for s in samples], dtype=np.uint64).view(np.float64)
                    assert xorchunk.encode(t, v) == chunk.data
                    compared += 1
                    got.setdefault(k, []).extend(samples)
        assert got == written
        assert compared >= 16
    finally:
        prometheus.stop()
