"""Rows put in series order for PromQL (fetch._series_order): fast path and full sort agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql.fetch import _series_order


def _runs(seed: int, runs: int, overlap: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows as files and snapshot batches give them: runs each sorted by (name, series,
    time), one after another in time; with ``overlap`` a late run revisits earlier times."""
    rng = np.random.default_rng(seed)
    parts = []
    for r in range(runs):
        n = int(rng.integers(1, 60))
        code = rng.integers(0, 3, n)
        sid = rng.integers(-5, 5, n)
        t = rng.integers(0, 1000, n) + (0 if overlap and r == runs - 1 else r * 1000)
        order = np.lexsort((t, sid, code))
        parts.append((code[order], sid[order], t[order]))
    return tuple(np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(3))  # type: ignore[return-value]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), runs=st.integers(1, 6), overlap=st.booleans())
def test_the_order_is_a_stable_sort_by_name_series_and_time(
    seed: int, runs: int, overlap: bool
) -> None:
    code, sid, t = _runs(seed, runs, overlap)
    expected = np.lexsort((t, sid, code))
    got = _series_order(code, sid, t, names=True)
    assert (got == expected).all()
    one = code == 0
    got = _series_order(code[one], sid[one], t[one], names=False)
    assert (got == np.lexsort((t[one], sid[one]))).all()
