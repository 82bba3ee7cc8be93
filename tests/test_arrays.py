"""The array helpers give what numpy's and Arrow's own functions give, whatever the input."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal import arrays
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


@pytest.mark.parametrize("path", ["binary search", "buckets or sorted needles"])
@given(
    keys=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=300),
    spread=st.booleans(),
    picks=st.lists(st.integers(0, 10**6), max_size=400),
    strangers=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50),
)
def test_find_gives_the_first_equal_key_or_tells_there_is_none(
    path: str, keys: list[int], spread: bool, picks: list[int], strangers: list[int]
) -> None:
    """Keys spread like hashes (buckets), or crowded into a narrow range (the fallback
    that sorts the needles), with repeats; needles among them and not."""
    if not spread:
        keys = [k % 50 for k in keys]  # every key in one bucket: too crowded for the table
    ordered = np.sort(np.array(keys, dtype=np.int64))
    needles = np.array([ordered[p % len(ordered)] for p in picks] + strangers, dtype=np.int64)
    few = 1 << 30 if path == "binary search" else 0
    with mock.patch.object(arrays, "_FEW", few):
        found = arrays.find(ordered, needles)
    assert found.shape == needles.shape
    assert ((found >= 0) & (found < len(ordered))).all()
    present = np.isin(needles, ordered)
    assert ((ordered[found] == needles) == present).all()
    first = np.searchsorted(ordered, needles)  # the leftmost of equal keys
    assert (found[present] == first[present]).all()


def test_a_million_hashes_are_found_through_the_buckets() -> None:
    rng = np.random.default_rng(7)
    keys = np.unique(rng.integers(-(2**63), 2**63 - 1, 1_000_000, dtype=np.int64))
    needles = np.concatenate([keys[rng.integers(0, len(keys), 600_000)], keys[:3] + 1])
    by_buckets = arrays._find_by_buckets(keys, needles)
    assert by_buckets is not None  # spread as hashes are: no bucket too crowded
    np.testing.assert_array_equal(by_buckets, arrays.find(keys, needles))
    assert (keys[by_buckets[:-3]] == needles[:-3]).all()
    assert not (keys[by_buckets[-3:]] == needles[-3:]).any()
