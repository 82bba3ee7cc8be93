"""The percentile every benchmark reports (``loadtest.stats``)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from loadtest.stats import percentile


def test_percentiles_of_one_to_a_hundred() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # any order
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.9) == 91.0
    assert percentile(values, 0.99) == 100.0


def test_no_values_have_no_percentile() -> None:
    assert math.isnan(percentile([], 0.99))


def test_one_value_is_every_percentile() -> None:
    assert [percentile([7.5], q) for q in (0.0, 0.5, 0.99)] == [7.5, 7.5, 7.5]


@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=300),
    st.floats(min_value=0.0, max_value=0.999),
)
def test_the_nearest_rank_splits_the_values_at_q(values: list[float], q: float) -> None:
    found = percentile(values, q)
    rank = math.floor(q * len(values))  # how many values lie before it, in order
    assert found in values
    assert sum(v < found for v in values) <= rank
    assert sum(v <= found for v in values) >= rank + 1
