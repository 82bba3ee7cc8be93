"""The flusher's row order is exactly Arrow's stable multi-column sort."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.schema import TableSpec
from shoal.storage import layout

_HOUR = layout.HOUR_US
_texts = st.one_of(st.none(), st.sampled_from(["", "a", "b", "ab", "é", "z\u00ff", "Z"]))


def _arrow_order(table: pa.Table, keys: list[str], hours: Any) -> list[int]:
    sort_input = table.select(keys).append_column("__hour", pa.array(hours))
    order = pc.sort_indices(
        sort_input, sort_keys=[("__hour", "ascending"), *[(k, "ascending") for k in keys]]
    )
    return list(order.to_pylist())


@st.composite
def _tables(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(min_value=0, max_value=60))
    rows = st.lists(st.integers(min_value=0, max_value=n), min_size=n, max_size=n)
    times = [draw(st.integers(0, 3)) * _HOUR + t for t in draw(rows)]
    names = draw(st.lists(_texts, min_size=n, max_size=n))
    ids = draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))
    floats = draw(st.lists(st.one_of(st.none(), st.floats()), min_size=n, max_size=n))
    table = pa.table(
        {
            "timestamp": pa.array(times, pa.timestamp("us", tz="UTC")),
            "name": pa.array(names, pa.string()),
            "id": pa.array(ids, pa.int64()),
            "flag": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "x": pa.array(floats, pa.float64()),
        }
    )
    cut = draw(st.integers(0, n))
    return pa.concat_tables([table.slice(0, cut), table.slice(cut)])


@settings(max_examples=150, deadline=None)
@given(
    table=_tables(),
    keys=st.sampled_from(
        [["name", "id", "timestamp"], ["name", "timestamp"], ["flag", "id"], ["x", "timestamp"]]
    ),
)
def test_sort_order_matches_arrow(table: pa.Table, keys: list[str]) -> None:
    hours = layout.time_as_us(table.column("timestamp")) // _HOUR
    expected = _arrow_order(table, keys, hours)
    assert layout.sort_order(table, keys, hours).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(table=_tables())
def test_split_by_hour_equals_a_full_take(table: pa.Table) -> None:
    table = table.drop_columns(["x"])  # NaN != NaN would fail the comparison, not the split
    table = table.append_column("empty", pa.nulls(table.num_rows, pa.list_(pa.int64())))
    no_tags = pa.array([[]] * table.num_rows, pa.map_(pa.string(), pa.string()))
    table = table.append_column("no_tags", no_tags)
    table = table.append_column("no_text", pa.nulls(table.num_rows, pa.string()))
    spec = TableSpec("t", table.schema, sort_columns=("name", "id", "timestamp"))
    hours = layout.time_as_us(table.column("timestamp")) // _HOUR
    order = _arrow_order(table, list(spec.sort_columns), hours)
    expected = table.take(pa.array(order, pa.int64()))
    pieces = layout.split_by_hour(table, spec)
    if table.num_rows == 0:
        assert pieces == []
        return
    assert pa.concat_tables([p for _, p in pieces]).equals(expected)
    assert [h for h, _ in pieces] == sorted(set(np.asarray(hours).tolist()))
