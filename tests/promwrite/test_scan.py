"""The remote-write scanner in C (``shoal/promwrite/_scan.c``) against ptars, its oracle.

For every body, the scanner either leaves the request to the decoder in Python (None) or
returns exactly what ptars and ``labels.raw_keys`` make of it: the same cache keys, the
same samples per series, the same values and timestamps. Bodies are written field by
field here, so that they hold what real senders rarely send: unknown fields, fields
repeated or out of order, negative timestamps, NaNs, labels that are not UTF-8."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest import remote_write
from shoal.errors import DecodeError
from shoal.promwrite import cached, proto
from shoal.promwrite import labels as series_labels
from tests import wire_fields

SCAN = cached.SCAN_V1


def test_the_scanner_is_built() -> None:
    """The install compiles it (setup.py): where a C compiler exists, as on every machine
    the tests run on, it must be there, or the tests below would test nothing."""
    assert SCAN is not None


def _scan(body: bytes) -> Any:
    assert SCAN is not None
    return SCAN(body)


# -- writing bodies field by field ------------------------------------------------------


_varint, _len, _label = remote_write.varint, remote_write.field, remote_write.label
_double, _int = wire_fields.double, wire_fields.varint_field
unknown_fields = wire_fields.unknown_fields()
timestamps = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**41))
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
values = st.one_of(st.floats(), st.just(STALE))


@st.composite
def samples(draw: st.DrawFn) -> bytes:
    parts = []
    if draw(st.booleans()):
        parts.append(_double(1, draw(values)))
    if draw(st.booleans()):
        parts.append(_int(2, draw(timestamps)))
    if draw(st.booleans()):  # a repeated scalar: the last one counts
        parts.append(_double(1, draw(values)))
    parts.extend(draw(unknown_fields))
    draw(st.randoms()).shuffle(parts)
    return b"".join(parts)


labels = st.one_of(
    st.builds(_label, st.text(max_size=6), st.text(max_size=6)),
    st.binary(max_size=12),  # the scanner keeps label bytes as they are
)


@st.composite
def series(draw: st.DrawFn) -> bytes:
    parts = [_len(1, label) for label in draw(st.lists(labels, max_size=4))]
    parts += [_len(2, sample) for sample in draw(st.lists(samples(), max_size=4))]
    parts += draw(unknown_fields)
    if draw(st.booleans()):
        draw(st.randoms()).shuffle(parts)  # fields in any order
    return b"".join(parts)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    parts = [_len(1, one) for one in draw(st.lists(series(), min_size=1, max_size=5))]
    parts += draw(unknown_fields)
    if draw(st.booleans()):
        draw(st.randoms()).shuffle(parts)
    return b"".join(parts)


# -- the oracle ----------------------------------------------------------------------------


def _ptars(body: bytes) -> tuple[list[bytes], list[int], np.ndarray, np.ndarray] | None:
    """What the decoder in Python reads of a body, or None where it leaves it to the full one."""
    try:
        batch = proto.DECODER.batch(proto.V1_RAW, body, "")
    except DecodeError:
        return None
    timeseries = batch.column("timeseries").flatten()
    if (
        not len(timeseries)
        or series_labels.has_entries(batch.column("metadata"))
        or series_labels.has_entries(timeseries.field("exemplars"))
        or series_labels.has_entries(timeseries.field("histograms"))
    ):
        return None
    keys = series_labels.raw_keys(timeseries.field("labels"), len(timeseries)).to_pylist()
    samples = series_labels.Samples.of(timeseries)
    return keys, samples.counts.tolist(), samples.values, samples.t_ms


def _scanned(body: bytes) -> tuple[list[bytes], list[int], np.ndarray, np.ndarray] | None:
    out = _scan(body)
    if out is None:
        return None
    keys, samples = cached.scanned_keys(out)
    return keys.to_pylist(), samples.counts.tolist(), samples.values, samples.t_ms


def _agree(body: bytes, *, must_scan: bool) -> None:
    expected, got = _ptars(body), _scanned(body)
    if got is None:
        assert not must_scan, "a plain request left to the decoder in Python"
        return
    assert expected is not None, "the scanner accepted a body the decoder refuses"
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    assert got[2].tobytes() == expected[2].tobytes()  # NaN payloads (stale markers) too
    assert got[3].tolist() == expected[3].tolist()


@pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")
@settings(max_examples=400, deadline=None)
@given(body=requests())
def test_a_request_is_read_as_ptars_reads_it(body: bytes) -> None:
    _agree(body, must_scan=True)


@pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")
@settings(max_examples=400, deadline=None)
@given(body=requests(), damage=wire_fields.damages)
def test_damaged_bodies_are_left_to_the_decoder_or_read_as_it_reads_them(
    body: bytes, damage: wire_fields.Damage
) -> None:
    """Cut short or with bytes changed, a body is never read otherwise than ptars reads
    it, and never crashes the scanner."""
    _agree(damage.to(body), must_scan=False)


@pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")
@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=64))
def test_any_bytes(body: bytes) -> None:
    _agree(body, must_scan=False)


_SERIES = _len(1, _len(1, b"__name__") + _len(2, b"up")) + _len(2, _double(1, 1.0) + _int(2, 5))


@pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="no series"),
        pytest.param(_len(5, b"x"), id="only an unknown field"),
        pytest.param(_len(1, _SERIES) + _len(3, b"\x08\x01"), id="metadata"),
        pytest.param(_len(1, _SERIES + _len(3, b"")), id="an exemplar"),
        pytest.param(_len(1, _SERIES + _len(4, b"")), id="a native histogram"),
        pytest.param(_len(1, _SERIES)[:-1], id="cut short"),
        pytest.param(_varint(1 << 3 | 0) + b"\x01", id="series as a varint"),
        pytest.param(_len(1, _int(2, 1)), id="a sample as a varint"),
        pytest.param(_len(1, _len(2, _int(1, 1))), id="a value as a varint"),
        pytest.param(_len(1, _len(2, _double(2, 1.0))), id="a timestamp as a double"),
        pytest.param(_len(1, _SERIES) + b"\x0b\x0c", id="a group"),
        pytest.param(b"\x00\x00", id="field number 0"),
        pytest.param(_len(1, _len(2, b"\x10" + b"\xff" * 9 + b"\x02")), id="a varint over 64 bits"),
    ],
)
def test_what_the_scanner_leaves_to_the_decoder_in_python(body: bytes) -> None:
    assert _scan(body) is None


@pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")
def test_a_request_read_whole() -> None:
    body = _len(1, _SERIES) + _len(
        1,
        _len(1, _len(1, b"a") + _len(2, b"bc"))
        + _len(2, _int(2, -1))  # no value: 0.0
        + _len(2, _double(1, math.inf)),  # no timestamp: 0
    )
    n, key_offsets, keys, sample_offsets, values, times = _scan(body)
    first = _len(1, b"__name__") + _len(2, b"up")
    second = _len(1, b"a") + _len(2, b"bc")
    assert n == 2
    assert keys == b"\xfc" + first + struct.pack("<I", len(first)) + b"\xfc" + second + struct.pack(
        "<I", len(second)
    )
    assert np.frombuffer(key_offsets, np.int32).tolist() == [0, 1 + len(first) + 4, len(keys)]
    assert np.frombuffer(sample_offsets, np.int32).tolist() == [0, 1, 3]
    assert np.frombuffer(values, np.float64).tolist() == [1.0, 0.0, math.inf]
    assert np.frombuffer(times, np.int64).tolist() == [5, -1, 0]


@pytest.mark.skipif(SCAN is None, reason="covered by test_the_scanner_is_built")
def test_only_bytes_are_scanned() -> None:
    """Both passes must read the same bytes: a mutable buffer could change in between."""
    with pytest.raises(TypeError):
        _scan(bytearray(_len(1, _SERIES)))  # type: ignore[arg-type]
