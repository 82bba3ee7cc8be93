"""The lookup filters: no value added is ever missed, the bytes round-trip, damage is caught."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.storage.lookup import Bloom, value_words

hex_ids = st.binary(min_size=16, max_size=16).map(bytes.hex)
any_text = st.text(max_size=40)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(hex_ids, any_text), max_size=300))
def test_every_value_added_may_be_held(values: list[str]) -> None:
    bloom = Bloom.of(pa.array(values, pa.string()))
    again = Bloom.from_bytes(bloom.to_bytes())
    for value in values:
        assert again.may_hold(*value_words(value))


def test_few_values_not_added_are_admitted() -> None:
    added = [f"{i:032x}" for i in range(5000)]
    bloom = Bloom.of(pa.array(added))
    others = [f"{i:032x}" for i in range(10**9, 10**9 + 20000)]
    admitted = sum(bloom.may_hold(*value_words(v)) for v in others)
    assert admitted < 0.03 * len(others)


def test_upper_and_lower_case_hex_are_one_value() -> None:
    bloom = Bloom.of(pa.array(["0af7651916cd43dd8448eb211c80319c"]))
    assert bloom.may_hold(*value_words("0AF7651916CD43DD8448EB211C80319C"))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=64), st.integers(0, 200))
def test_damaged_bytes_are_refused(garbage: bytes, cut: int) -> None:
    good = Bloom.of(pa.array(["a", "b", "c"])).to_bytes()
    with pytest.raises(ValueError):
        Bloom.from_bytes(good[: min(cut, len(good) - 1)])
    flipped = bytearray(good)
    flipped[20 + cut % (len(good) - 24)] ^= 0x01
    with pytest.raises(ValueError):
        Bloom.from_bytes(bytes(flipped))
    try:
        Bloom.from_bytes(garbage)
    except ValueError:
        pass


def test_a_flushed_spans_file_is_in_row_groups_of_its_spec(tmp_path: Path) -> None:
    """A trace by id decodes the row groups that can hold the id: the flush writes the
    spans sorted by trace id in row groups of ``row_group_rows``, not the default size."""
    from loadtest import payloads
    from shoal.otlp.decode import decode
    from shoal.schema import SPANS
    from shoal.storage.store import TableStore

    assert SPANS.row_group_rows is not None and SPANS.row_group_rows < 10_000
    request = payloads.traces_request(spans=3 * SPANS.row_group_rows + 17, spans_per_trace=3)
    rows = decode("spans", request.SerializeToString()).table
    table = TableStore(tmp_path).open("acme", "spans", create=True)
    table.flush(rows.to_batches(), 1)
    (file,) = table.snapshot().files
    meta = pq.read_metadata(file.path)
    assert meta.num_rows == rows.num_rows and meta.num_row_groups == 4
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert max(sizes) == SPANS.row_group_rows
    ids = pq.read_table(file.path, columns=["trace_id"]).column("trace_id").to_pylist()
    assert ids == sorted(ids)
