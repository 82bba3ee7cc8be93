"""Blank columns: slices of shared zeroed buffers equal the columns they stand in for."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shoal.schema import SIGNAL_TABLES
from shoal.storage import blank, layout

_FIELDS = [(name, f) for name, spec in SIGNAL_TABLES.items() for f in spec.schema]
_NESTED = [(name, f) for name, f in _FIELDS if pa.types.is_list(f.type) or pa.types.is_map(f.type)]


def _expected(typ: pa.DataType, rows: int, null: bool) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array([None if null else []] * rows, typ)], typ)


@pytest.mark.parametrize(("table", "field"), _FIELDS, ids=[f"{t}.{f.name}" for t, f in _FIELDS])
def test_every_column_type_of_the_tables_has_an_all_null_blank(table: str, field: pa.Field) -> None:
    for rows in (0, 1, 1000, blank.ROWS, blank.ROWS + 1):
        col = blank.column(field.type, rows, null=True)
        assert col is not None
        for chunk in col.chunks:
            chunk.validate(full=True)
        assert col.type == field.type
        assert col.null_count == rows
        assert col.equals(_expected(field.type, rows, null=True))
        assert col.num_chunks == -(-rows // blank.ROWS)  # one chunk per ROWS rows


@pytest.mark.parametrize(("table", "field"), _NESTED, ids=[f"{t}.{f.name}" for t, f in _NESTED])
def test_lists_and_maps_have_an_all_empty_blank(table: str, field: pa.Field) -> None:
    for rows in (0, 1, 1000, blank.ROWS + 1):
        col = blank.column(field.type, rows, null=False)
        assert col is not None
        for chunk in col.chunks:
            chunk.validate(full=True)
        assert col.null_count == 0
        assert col.equals(_expected(field.type, rows, null=False))


def test_flat_types_have_no_empty_blank() -> None:
    assert blank.column(pa.string(), 3, null=False) is None
    assert blank.column(pa.int64(), 3, null=False) is None


def test_a_file_of_blanks_reads_back_as_the_columns_they_stand_in_for() -> None:
    schema = SIGNAL_TABLES["metrics"].schema
    rows = 5000
    nullable = [f for f in schema if f.nullable or pa.types.is_map(f.type)]
    columns = []
    expected = []
    for f in nullable:
        null = f.nullable
        made = blank.column(f.type, rows, null)
        assert made is not None
        columns.append(made)
        expected.append(_expected(f.type, rows, null))
    fields = [f.with_nullable(True) if not f.nullable else f for f in nullable]
    made_table = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    expected_table = pa.Table.from_arrays(expected, schema=pa.schema(fields))
    buffers = []
    for table in (made_table, expected_table):
        buf = io.BytesIO()
        pq.write_table(table, buf, **layout.writer_options(table.schema))
        buffers.append(buf.getvalue())
    assert pq.read_table(io.BytesIO(buffers[0])).equals(expected_table)
    assert buffers[0] == buffers[1]


def test_reorder_hands_back_blanks_for_columns_equal_in_every_row() -> None:
    chunks = [
        pa.record_batch(
            {
                "id": pa.array([3, 1, 2], pa.int64()),
                "tags": pa.array([[], [], []], pa.map_(pa.string(), pa.string())),
                "note": pa.nulls(3, pa.string()),
                "kept": pa.array([[1], [], None], pa.list_(pa.int64())),
            }
        )
        for _ in range(4)
    ]
    table = pa.Table.from_batches(chunks)
    order = layout.sort_order(table, ["id"], np.zeros(table.num_rows, np.int64))
    out = layout.reorder(table, order)
    assert out.equals(table.take(pa.array(order)))
    assert out.column("tags").num_chunks == 1  # one chunk: a blank
    assert out.column("note").num_chunks == 1
    assert out.column("kept").equals(table.column("kept").take(pa.array(order)))


def test_a_column_is_the_same_in_every_row_only_when_every_chunk_is_empty() -> None:
    for kind, value in (
        (pa.list_(pa.int64()), [7]),
        (pa.map_(pa.string(), pa.string()), [("k", "v")]),
    ):
        empty = pa.array([[], []], kind)
        one = pa.array([[], value, []], kind)
        assert layout._same_in_every_row(pa.chunked_array([empty] * 50))
        assert not layout._same_in_every_row(pa.chunked_array([empty] * 50 + [one]))
        # a slice leaves the entry of its chunk outside: its rows are all empty
        assert layout._same_in_every_row(pa.chunked_array([empty, one.slice(2), one.slice(0, 1)]))
        assert not layout._same_in_every_row(pa.chunked_array([one.slice(1, 1)]))
        assert not layout._same_in_every_row(pa.chunked_array([pa.array([[], None], kind)]))
        assert layout._same_in_every_row(pa.chunked_array([pa.array([None, None], kind)]))
