"""The WAL payload codec round-trips tenant, table and rows exactly."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadtest import remote_write
from shoal.errors import DecodeError, WalError
from shoal.ingest import records
from shoal.ingest.decoding import OTLP, OTLP_JSON, REMOTE_WRITE, DecodeJob
from shoal.ingest.decoding import decode as decode_job
from shoal.promwrite.decode import V1, V2
from tests.otlp.json_helpers import identical
from tests.otlp.test_detached import STRATEGIES as OTLP_REQUESTS
from tests.promwrite.test_known import _body, requests

_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(
    tenant=_names,
    table=_names,
    values=st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), max_size=50),
    labels=st.lists(st.text(max_size=10), max_size=50),
)
def test_round_trip(tenant: str, table: str, values: list[float | None], labels: list[str]) -> None:
    n = min(len(values), len(labels))
    data = pa.table({"v": pa.array(values[:n], pa.float64()), "k": pa.array(labels[:n])})
    payload = records.encode(tenant, table, data)
    header = records.decode_header(payload)
    assert (header.tenant, header.table) == (tenant, table)
    got_tenant, got_table, got = records.decode(payload)
    assert (got_tenant, got_table) == (tenant, table)
    assert got.equals(data)
    assert got.schema == data.schema


@settings(max_examples=60, deadline=None)
@given(garbage=st.binary(max_size=64))
def test_damaged_payloads_raise_wal_error(garbage: bytes) -> None:
    try:
        records.decode(garbage)
    except WalError:
        return
    # Only a valid header followed by a valid empty stream could decode; random bytes do not.
    pytest.fail("random bytes decoded as a payload")


def test_truncated_body_is_reported() -> None:
    payload = records.encode("t", "metrics", pa.table({"x": [1, 2, 3]}))
    with pytest.raises(WalError):
        records.decode(payload[: len(payload) - 20])


@settings(max_examples=40, deadline=None)
@given(
    chunks=st.lists(
        st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=20), min_size=1, max_size=4
    )
)
def test_payload_is_the_ipc_stream_writer_output(chunks: list[list[str | None]]) -> None:
    data = pa.Table.from_batches([pa.record_batch({"k": pa.array(c, pa.string())}) for c in chunks])
    sink = pa.BufferOutputStream()
    sink.write(b"\x01\x01t\x07metrics")
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    assert records.encode("t", "metrics", data) == sink.getvalue().to_pybytes()


def test_dictionary_columns_round_trip() -> None:
    data = pa.table({"d": pa.array(["a", "b", "a", None]).dictionary_encode()})
    assert records.decode(records.encode("t", "x", data))[2].equals(data)


def _remote_written(count: int) -> pa.Table:
    from loadtest import remote_write
    from shoal.promwrite.decode import V1, decode

    body = remote_write.encode(
        ({"__name__": "m", "job": "j", "shard": str(i)}, [(1_000 + i, float(i))])
        for i in range(count)
    )
    return decode(body, V1, None).result.table


def test_a_signal_tables_null_columns_are_left_out_and_put_back() -> None:
    """Rows in a signal table's schema leave their all-null columns out of the payload
    (version 2, a bitmap says which) and get them back, typed, when it is read."""
    data = _remote_written(50)
    nulls = [f.name for f, c in zip(data.schema, data.columns, strict=True) if c.null_count == 50]
    assert "sum" in nulls and "bucket_counts" in nulls  # a gauge has no histogram fields
    payload = records.encode("acme", "metrics", data)
    assert payload[0] == 2
    assert len(payload) < len(records.encode("acme", "not-a-signal", data))
    tenant, table, got = records.decode(payload)
    assert (tenant, table) == ("acme", "metrics") and records.decode_header(payload).table == table
    assert got.schema == data.schema and got.equals(data)
    # a column with one value is kept whole
    with_one = data.set_column(
        data.schema.get_field_index("sum"),
        data.schema.field("sum"),
        pa.array([1.5] + [None] * 49, pa.float64()),
    )
    assert records.decode(records.encode("acme", "metrics", with_one))[2].equals(with_one)


def test_a_damaged_sparse_payload_raises_wal_error() -> None:
    payload = records.encode("acme", "metrics", _remote_written(5))
    bitmap_at = records.decode_header(payload).body_offset - 6  # 44 columns: 6 bytes
    for damaged in (
        payload[: bitmap_at + 3],  # the bitmap cut short
        payload[:bitmap_at] + b"\x00" * 6 + payload[bitmap_at + 6 :],  # nothing left out?
        payload[:bitmap_at] + b"\xff" * 6 + payload[bitmap_at + 6 :],  # everything?
    ):
        with pytest.raises(WalError):
            records.decode(damaged)


_METRICS_ROWS = _remote_written(20)
_NULLABLE = [
    i
    for i, field in enumerate(_METRICS_ROWS.schema)
    if field.nullable and _METRICS_ROWS.column(i).null_count < 20
]


@settings(max_examples=60, deadline=None)
@given(nulled=st.sets(st.sampled_from(_NULLABLE)), rows=st.integers(1, 20))
def test_any_columns_left_out_round_trip(nulled: set[int], rows: int) -> None:
    """Whatever columns are all null, the sparse payload gives back the same rows."""
    data = _METRICS_ROWS.slice(0, rows)
    for i in sorted(nulled):
        field = data.schema.field(i)
        data = data.set_column(i, field, pa.nulls(rows, field.type))
    got = records.decode(records.encode("acme", "metrics", data))[2]
    assert got.schema == data.schema and got.equals(data)


_RW_JOB = {
    v2: DecodeJob("metrics", REMOTE_WRITE, V2 if v2 else V1, 1 << 20) for v2 in (False, True)
}
_PAYLOADS = {
    "sparse": records.encode("acme", "metrics", _METRICS_ROWS),
    "full": records.encode("acme", "not-a-signal", _METRICS_ROWS),
    "request": records.encode_request(
        "acme", "metrics", _RW_JOB[False],
        remote_write.compress(_body([(0, [5, 6], 0), (3, [7], 0), (7, [8], 0)], False)),
    ),
}  # fmt: skip


@settings(max_examples=450, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(_PAYLOADS)), value=st.integers(0, 255))
def test_a_changed_byte_is_refused_or_harmless(data: st.DataObject, kind: str, value: int) -> None:
    """A byte changed anywhere in a payload (header, bitmap, schema, batch; a logged
    request's wire, message and compressed body) either raises WalError or still reads as
    rows in the table's schema: no other error escapes. (The WAL's frame checksum stops
    such a payload first; this is the second line.)"""
    payload = _PAYLOADS[kind]
    damaged = bytearray(payload)
    damaged[data.draw(st.integers(0, len(payload) - 1))] = value
    try:
        _, table, got = records.decode(bytes(damaged))
    except WalError:
        return
    if table == "metrics" and damaged[0] in (2, 3):
        assert got.schema == _METRICS_ROWS.schema


@settings(max_examples=80, deadline=None)
@given(series=requests, v2=st.booleans(), tenant=_names)
def test_a_remote_write_request_is_logged_as_itself_and_reads_back_as_its_rows(
    series: list[list[tuple[int, list[int], int]]], v2: bool, tenant: str
) -> None:
    """Version 3 logs the request's body as it came; reading it gives exactly the rows
    the request was decoded to when it was accepted, also when the decompression limit
    is lower by then. A request counts for the length its rows would have as rows."""
    job = _RW_JOB[v2]
    for part in series:
        body = remote_write.compress(_body(part, v2))
        try:
            decoded = decode_job(job, body)
        except DecodeError:
            continue  # a request that is refused is never logged
        rows = decoded.table
        # the decoder's word on which columns are all null, which the accounting takes
        assert decoded.all_null == tuple(c.null_count == rows.num_rows for c in rows.columns)
        payload = records.encode_request(tenant, "metrics", job, body)
        assert payload.endswith(body) and len(payload) < len(body) + 300
        header = records.decode_header(payload)
        assert (header.tenant, header.table, header.body_offset) == (
            tenant, "metrics", len(payload) - len(body),
        )  # fmt: skip
        got_tenant, got_table, got = records.decode(payload)
        assert (got_tenant, got_table) == (tenant, "metrics")
        assert got.schema == rows.schema
        assert got.to_pylist() == rows.to_pylist()
        if rows.num_rows:
            encoded = len(records.encode(tenant, "metrics", rows))
            assert records.rows_bytes(tenant, "metrics", got) == encoded
            assert records.rows_bytes(tenant, "metrics", rows, decoded.all_null) == encoded


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), signal=st.sampled_from(sorted(OTLP_REQUESTS)), tenant=_names)
def test_an_otlp_request_is_logged_as_itself_and_reads_back_as_its_rows(
    data: st.DataObject, signal: str, tenant: str
) -> None:
    """OTLP protobuf requests (HTTP and gRPC) are logged as they came too, points that
    were refused refused again, the rest read back as they were decoded."""
    body = data.draw(OTLP_REQUESTS[signal]()).SerializeToString()
    job = DecodeJob(signal, OTLP)
    try:
        rows = decode_job(job, body).table
    except DecodeError:
        return
    payload = records.encode_request(tenant, signal, job, body)
    assert payload.endswith(body)
    got_tenant, got_table, got = records.decode(payload)
    assert (got_tenant, got_table) == (tenant, signal)
    assert got.schema == rows.schema
    assert identical(got, rows)


def test_otlp_json_is_logged_as_its_rows() -> None:
    with pytest.raises(ValueError, match="logged as their rows"):
        records.encode_request("t", "metrics", DecodeJob("metrics", OTLP_JSON), b"{}")


@settings(max_examples=60, deadline=None)
@given(nulled=st.sets(st.sampled_from(_NULLABLE)), rows=st.integers(1, 20), tenant=_names)
def test_rows_bytes_is_the_length_of_the_encoded_rows(
    nulled: set[int], rows: int, tenant: str
) -> None:
    data = _METRICS_ROWS.slice(0, rows)
    for i in sorted(nulled):
        field = data.schema.field(i)
        data = data.set_column(i, field, pa.nulls(rows, field.type))
    for table in ("metrics", "not-a-signal"):
        assert records.rows_bytes(tenant, table, data) == len(records.encode(tenant, table, data))
    two = pa.Table.from_batches([*data.to_batches(), *data.to_batches()])
    assert records.rows_bytes(tenant, "metrics", two) == len(records.encode(tenant, "metrics", two))
    dictionary = pa.table({"d": pa.array(["a", "b", "a", None]).dictionary_encode()})
    assert records.rows_bytes(tenant, "x", dictionary) == len(
        records.encode(tenant, "x", dictionary)
    )
