"""The latest sample of many series at once (model.latest_values) against one at a time."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql.model import Series, latest, latest_values


def _series(seed: int, n: int, far: bool) -> list[Series]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = int(rng.integers(0, 12))
        t = np.sort(rng.choice(np.arange(0, 4000, 7), size=m, replace=False)).astype(np.int64)
        if far and i == n - 1 and m:
            t = t + 2**61  # keys of all series at once would overflow: one at a time
        stale = rng.random(m) < 0.2 if rng.random() < 0.5 else None
        out.append(Series({"i": str(i)}, t, rng.random(m) * 100, stale))
    return out


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 8),
    far=st.booleans(),
    times=st.booleans(),
    lookback=st.sampled_from([1, 50, 300, 5000]),
)
def test_all_at_once_is_one_at_a_time(
    seed: int, n: int, far: bool, times: bool, lookback: int
) -> None:
    series = _series(seed, n, far)
    eff = np.arange(-100, 4200, 37, dtype=np.int64)
    found, values, present = latest_values(series, eff, lookback, times)
    expected = list(latest(series, eff, lookback))
    assert [s.labels for s in found] == [s.labels for s, _, _ in expected]
    for row, (s, idx, ok) in enumerate(expected):
        assert (present[row] == ok).all()
        want = s.t[idx] / 1000.0 if times else s.v[idx]
        assert (values[row][ok] == want[ok]).all()
