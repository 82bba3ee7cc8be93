"""The WAL payload codec round-trips tenant, table and rows exactly."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.errors import WalError
from shoal.server import records

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
