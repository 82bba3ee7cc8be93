"""The shortcuts that turn rows into series without per-series work agree with the long way."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql.histograms import Buckets
from shoal.promql.model import NAME, key, key_without_name, without_name
from shoal.promql.series import _name_codes

label_names = st.one_of(st.just(NAME), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(label_names, st.text(max_size=4), max_size=6))
def test_a_key_without_its_name_is_the_key_of_the_labels_without_it(
    labels: dict[str, str],
) -> None:
    # names in capitals sort before "__name__": the shortcut must not assume it comes first
    assert key_without_name(key(labels)) == key(without_name(labels))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=0, max_size=8),
        min_size=0,
        max_size=5,
    )
)
def test_name_codes_over_chunks_with_their_own_dictionaries(chunks: list[list[str]]) -> None:
    arrays = [pa.array(c, pa.string()).dictionary_encode() for c in chunks]
    column = pa.chunked_array(arrays, pa.dictionary(pa.int32(), pa.string()))
    names, codes = _name_codes(column)
    assert [names[c] for c in codes.tolist()] == [x for c in chunks for x in c]
    assert len(set(names)) == len(names)
    plain = _name_codes(pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string()))
    assert [plain[0][c] for c in plain[1].tolist()] == [x for c in chunks for x in c]


def _histogram_rows(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    bounds = [0.1, 0.5, 1.0]
    counts = rng.integers(0, 9, (rows, len(bounds) + 1)).tolist()
    return pa.table(
        {
            "explicit_bounds": pa.array([bounds] * rows, pa.list_(pa.float64())),
            "bucket_counts": pa.array(counts, pa.list_(pa.uint64())),
        }
    )


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 1000), rows=st.integers(1, 40), data=st.data())
def test_buckets_put_in_order_once_match_the_buckets_of_each_series(
    seed: int, rows: int, data: st.DataObject
) -> None:
    table = _histogram_rows(rows, seed)
    order = np.random.default_rng(seed).permutation(rows).astype(np.int64)
    a = data.draw(st.integers(0, rows - 1))
    b = data.draw(st.integers(a + 1, rows))
    fast = Buckets(table).in_order(order, a, b)
    assert fast is not None
    ((layout, sel, cumulative),) = Buckets(table).layouts(order[a:b])
    assert layout == (0.1, 0.5, 1.0) and len(sel) == b - a
    np.testing.assert_array_equal(fast, cumulative.T)


def test_buckets_with_a_row_without_lists_take_the_long_way() -> None:
    table = _histogram_rows(3, 1)
    gap = pa.table(
        {
            "explicit_bounds": pa.array([None], pa.list_(pa.float64())),
            "bucket_counts": pa.array([None], pa.list_(pa.uint64())),
        }
    )
    mixed = pa.concat_tables([table, gap])
    assert Buckets(mixed).in_order(np.arange(4, dtype=np.int64), 0, 3) is None
    assert Buckets(table).les((0.1, 0.5, 1.0)) == ["0.1", "0.5", "1", "+Inf"]
