"""``rate``, ``increase`` and ``delta`` (shoal/promql/ranges.py) do Prometheus 2.42's
floating-point operations in its order: the same bits as a one-window-at-a-time
reading of extrapolatedRate (tests/promql/exact.py), for every series and step."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql import ranges
from shoal.promql.model import Matrix, Series
from tests.promql import exact

FUNCTIONS = {"rate": (True, True), "increase": (True, False), "delta": (False, False)}


def _series(points: list[tuple[int, float]], name: str) -> Series:
    t = np.array([p[0] for p in points], dtype=np.int64)
    v = np.array([p[1] for p in points], dtype=np.float64)
    return Series({"__name__": "x", "s": name}, t, v)


def _expected(points: list[tuple[int, float]], step: int, range_ms: int, fn: str) -> float | None:
    window = [p for p in points if step - range_ms <= p[0] <= step]
    counter, rate = FUNCTIONS[fn]
    return exact.prometheus(window, step, range_ms, counter, rate)


def _check(all_points: list[list[tuple[int, float]]], steps: np.ndarray, range_ms: int) -> int:
    """Compares every series at every step; returns how many values were compared."""
    matrix = Matrix([_series(p, str(i)) for i, p in enumerate(all_points)], range_ms, 0, None)
    compared = 0
    for fn in FUNCTIONS:
        vec = ranges.apply(fn, matrix, steps, [])
        rows = {lab["s"]: i for i, lab in enumerate(vec.labels)}
        for i, points in enumerate(all_points):
            for j, step in enumerate(steps.tolist()):
                want = _expected(points, step, range_ms, fn)
                row = rows.get(str(i))
                if want is None:
                    assert row is None or not vec.present[row, j], (fn, i, step)
                    continue
                assert row is not None and vec.present[row, j], (fn, i, step)
                got = float(vec.values[row, j])
                assert got.hex() == want.hex() or (np.isnan(got) and np.isnan(want)), (
                    fn,
                    i,
                    step,
                    got,
                    want,
                )
                compared += 1
    return compared


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    series=st.integers(1, 5),
    range_ms=st.sampled_from([60_000, 90_500, 300_000, 1_001, 600_007]),
)
def test_the_same_bits_as_prometheus_order(seed: int, series: int, range_ms: int) -> None:
    rng = random.Random(seed)
    points = [
        exact.counter_points(rng, 1_000_000, rng.randrange(1, 60), rng.randrange(0, 6))
        for _ in range(series)
    ]
    last = max(p[-1][0] for p in points)
    steps = np.arange(1_000_000, last + 60_000, 37_000, dtype=np.int64)
    _check(points, steps, range_ms)


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(
        st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=2, max_size=30
    ),
    gaps=st.lists(st.integers(1, 40_000), min_size=29, max_size=29),
)
def test_any_values_the_same_bits(values: list[float], gaps: list[int]) -> None:
    times = np.cumsum([1_000_000, *gaps])[: len(values)].tolist()
    points = list(zip(times, values, strict=True))
    steps = np.arange(times[0], times[-1] + 30_000, 11_000, dtype=np.int64)
    _check([points], steps, 120_000)


def test_the_data_tells_the_two_orders_apart() -> None:
    # the check above would pass for the former order too if it never disagreed with
    # Prometheus' on data like this: it does, for rate (the factor) and with resets
    rng = random.Random(7)
    differ = {fn: 0 for fn in FUNCTIONS}
    for _ in range(300):
        points = exact.counter_points(rng, 0, 25, rng.randrange(0, 3))
        end = points[-1][0] + 5_000
        window = [p for p in points if p[0] >= end - 300_000]
        for fn, (counter, rate) in FUNCTIONS.items():
            ours = exact.prometheus(window, end, 300_000, counter, rate)
            before = exact.previous(window, end, 300_000, counter, rate)
            differ[fn] += ours != before
    assert differ["rate"] > 50 and differ["increase"] > 5, differ


@pytest.mark.parametrize(("ms", "seconds"), [(1_001, 1.001), (300_000, 300.0), (1, 0.001)])
def test_range_seconds_as_go_gives_them(ms: int, seconds: float) -> None:
    assert ranges.duration_seconds(ms) == exact.go_seconds(ms)
    assert abs(ranges.duration_seconds(ms) - seconds) < 1e-12


def test_many_drops_in_one_window() -> None:
    # a gauge read as a counter: a drop at every other sample, added in order
    points = [(1_000_000 + 1_000 * i, 0.1 * ((i * 7) % 13) + 1 / (i + 3)) for i in range(400)]
    steps = np.array([points[-1][0]], dtype=np.int64)
    assert _check([points], steps, 600_000) == 3
