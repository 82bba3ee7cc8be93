"""The array helpers give what numpy's and Arrow's own functions give, whatever the input."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from shoal.arrays import unique
from shoal.rows.columns import distinct

INTS = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200)
SMALL = st.lists(st.integers(0, 5), max_size=60)


@given(values=INTS, dtype=st.sampled_from([np.int64, np.uint64, np.int32, np.bool_]))
def test_unique_is_numpys_unique(values: list[int], dtype: type) -> None:
    array = np.array(values, dtype=np.int64).astype(dtype)
    got = unique(array)
    np.testing.assert_array_equal(got, np.unique(array))
    assert got.dtype == array.dtype


def test_unique_leaves_its_argument_as_it_was() -> None:
    array = np.array([3, 1, 3, 2])
    assert unique(array).tolist() == [1, 2, 3]
    assert array.tolist() == [3, 1, 3, 2]


@given(
    columns=st.integers(1, 3).flatmap(
        lambda k: st.integers(0, 40).flatmap(
            lambda n: st.lists(
                st.lists(
                    st.one_of(st.none(), st.sampled_from(["a", "b", ""])), min_size=n, max_size=n
                ),
                min_size=k,
                max_size=k,
            )
        )
    )
)
def test_distinct_numbers_combinations_as_they_first_come(columns: list[list[str | None]]) -> None:
    rows = list(zip(*columns, strict=True))
    codes, first = distinct(*[pa.array(c, pa.string()) for c in columns])
    seen: dict[tuple[str | None, ...], int] = {}
    expected = [seen.setdefault(row, len(seen)) for row in rows]
    assert codes.tolist() == expected
    assert first.tolist() == [expected.index(i) for i in range(len(seen))]


@given(values=SMALL)
def test_distinct_of_integers(values: list[int]) -> None:
    codes, first = distinct(pa.array(values, pa.int64()))
    assert [values[i] for i in first] == list(dict.fromkeys(values))
    assert [values[first[c]] for c in codes] == values
