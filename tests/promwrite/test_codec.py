"""The remote-write codec on its own: the bodies a hand encoder makes decode to the rows
they describe, and no input makes it fail any other way than with a clear DecodeError."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadtest import remote_write
from shoal.errors import DecodeError, PayloadTooLargeError, UnsupportedMediaTypeError
from shoal.promwrite import snappy
from shoal.promwrite.decode import V1, V2, decode, message_of
from shoal.schema import REMOTE_WRITE_SCOPE

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def test_content_type_chooses_the_message() -> None:
    assert message_of("application/x-protobuf") == V1
    assert message_of("application/x-protobuf;proto=prometheus.WriteRequest") == V1
    assert message_of("application/x-protobuf; proto=io.prometheus.write.v2.Request") == V2
    for bad in ("application/json", "", "application/x-protobuf;proto=foo.Bar"):
        with pytest.raises(UnsupportedMediaTypeError):
            message_of(bad)


def test_v1_rows_carry_name_labels_job_instance_metadata_and_staleness() -> None:
    body = remote_write.encode(
        [
            (
                {
                    "__name__": "http_requests_total",
                    "job": "shop/api",
                    "instance": "h1:9",
                    "code": "200",
                },
                [(1_000, 1.0), (2_000, 3.0), (3_000, STALE)],
            ),
            ({"__name__": "temp", "room": "lab"}, [(1_500, 21.5)]),
        ]
    ) + remote_write.metadata_v1("http_requests", 1, "Requests served.", "")
    written = decode(body, V1)
    table = written.result.table
    assert written.samples == 4 and written.result.rejected == 0
    rows = table.to_pylist()
    first = rows[0]
    scope = REMOTE_WRITE_SCOPE
    assert first["metric_name"] == "http_requests_total" and first["scope_name"] == scope
    assert dict(first["attributes"]) == {"code": "200"}
    assert dict(first["resource_attributes"]) == {
        "service.namespace": "shop",
        "service.name": "api",
        "service.instance.id": "h1:9",
    }
    assert first["metric_type"] == "sum" and first["is_monotonic"] is True
    assert first["aggregation_temporality"] == 2
    assert first["metric_description"] == "Requests served."
    assert dict(first["metric_metadata"])["prometheus.type"] == "counter"
    assert [r["time_unix_nano"] for r in rows[:3]] == [10**9, 2 * 10**9, 3 * 10**9]
    assert rows[2]["flags"] == 1 and math.isnan(rows[2]["value"])
    assert rows[3]["metric_type"] == "gauge" and rows[3]["service_name"] is None
    # one series, one id; another series, another
    assert len({r["series_id"] for r in rows[:3]}) == 1
    assert rows[3]["series_id"] != rows[0]["series_id"]


def test_v2_symbols_metadata_created_time_and_exemplars() -> None:
    body = remote_write.encode_v2(
        [
            (
                {"__name__": "rpc_seconds_total", "job": "api"},
                [(5_000, 2.5)],
                {
                    "type": 1,
                    "help": "Time in RPCs.",
                    "unit": "seconds",
                    "created": 1_000,
                    "exemplars": [({"trace_id": "ab" * 16}, 0.4, 5_000)],
                },
            ),
        ]
    )
    written = decode(body, V2)
    row = written.result.table.to_pylist()[0]
    assert written.samples == 1 and written.exemplars == 1
    assert row["metric_name"] == "rpc_seconds_total" and row["metric_unit"] == "seconds"
    assert row["start_time_unix_nano"] == 10**9 and row["metric_type"] == "sum"
    assert row["exemplars"][0]["trace_id"] == "ab" * 16
    assert row["exemplars"][0]["time_unix_nano"] == 5 * 10**9


@pytest.mark.parametrize(
    ("body", "message", "words"),
    [
        (b"\x0a\x05\x0a\x03\x0a\x01", V1, "not a valid"),
        (remote_write.encode([({"a": "b"}, [(1, 1.0)])]), V1, None),
        (b"\x22\x01x\x2a\x04\x0a\x02\x00\x00", V2, "empty string"),
    ],
)
def test_bad_bodies_are_one_clear_error(body: bytes, message: str, words: str | None) -> None:
    if words is None:  # a series without __name__: refused alone, counted
        written = decode(body, message)
        assert written.result.rejected == 1 and "__name__" in written.result.errors[0]
        return
    with pytest.raises(DecodeError, match=words):
        decode(body, message)


def test_snappy_length_is_checked_before_decompressing() -> None:
    block = remote_write.compress(b"x" * 5000)
    assert snappy.decompress(block, 5000) == b"x" * 5000
    with pytest.raises(PayloadTooLargeError):
        snappy.decompress(block, 4999)
    with pytest.raises(DecodeError):
        snappy.decompress(b"\xff\xff\xff\xff\xff\xff", 10)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), v2=st.booleans())
def test_any_bytes_decode_or_raise_decode_error(data: bytes, v2: bool) -> None:
    try:
        decode(data, V2 if v2 else V1)
    except DecodeError:
        pass


@settings(max_examples=200, deadline=None)
@given(cut=st.integers(min_value=0, max_value=200), flip=st.integers(min_value=0, max_value=255))
def test_truncated_and_corrupted_bodies_never_crash(cut: int, flip: int) -> None:
    body = bytearray(
        remote_write.encode_v2(
            [({"__name__": "m", "k": "v"}, [(1, 1.0), (2, 2.0)], {"type": 2, "help": "h"})]
        )
    )
    body = body[: min(cut, len(body))]
    if body:
        body[flip % len(body)] ^= 0x5A
    try:
        decode(bytes(body), V2)
    except DecodeError:
        pass
    try:
        snappy.decompress(bytes(body), 1 << 20)
    except (DecodeError, PayloadTooLargeError):
        pass
