"""Rows put in series order for PromQL (series._series_order): fast path and full sort agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql import series
from shoal.promql.series import _series_order


def _runs(
    seed: int, runs: int, overlap: bool, shuffle: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows as files and snapshot batches give them: runs each sorted by (name, series,
    time), one after another in time; with ``overlap`` a late run revisits earlier times,
    with ``shuffle`` the runs come in any order."""
    rng = np.random.default_rng(seed)
    parts = []
    for r in range(runs):
        n = int(rng.integers(1, 60))
        code = rng.integers(0, 3, n)
        sid = rng.integers(-5, 5, n)
        t = rng.integers(0, 1000, n) + (0 if overlap and r == runs - 1 else r * 1000)
        order = np.lexsort((t, sid, code))
        parts.append((code[order], sid[order], t[order]))
    if shuffle:
        parts = [parts[i] for i in rng.permutation(len(parts))]
    return tuple(np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(3))  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    runs=st.integers(1, 6),
    overlap=st.booleans(),
    shuffle=st.booleans(),
)
def test_the_order_is_a_stable_sort_by_name_series_and_time(
    seed: int, runs: int, overlap: bool, shuffle: bool
) -> None:
    code, sid, t = _runs(seed, runs, overlap, shuffle)
    expected = np.lexsort((t, sid, code))
    got, c, s, tt = _series_order(code, sid, t, names=True)
    assert (got == expected).all()
    assert (c == code[got]).all() and (s == sid[got]).all() and (tt == t[got]).all()
    one = code == 0
    got = _series_order(code[one], sid[one], t[one], names=False)[0]
    assert (got == np.lexsort((t[one], sid[one]))).all()


def test_runs_in_any_order_are_put_in_order_without_sorting_every_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # files listed newest first, each with every series once per minute: no row sort
    per_run = [
        (
            np.zeros(40, dtype=np.int64),
            np.repeat(np.arange(4), 10),
            np.tile(np.arange(10), 4) + h * 100,
        )
        for h in (3, 1, 2, 0)
    ]
    code, sid, t = (np.concatenate([p[i] for p in per_run]) for i in range(3))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("every row was sorted")

    monkeypatch.setattr(series.pc, "sort_indices", refuse)
    got = _series_order(code, sid, t, names=True)[0]
    assert (got == np.lexsort((t, sid, code))).all()


def test_a_tie_where_two_runs_meet_keeps_the_rows_in_their_first_order() -> None:
    # one series: the second run starts at the time the first ends; the row that came
    # first in the input goes first among the two rows of that time, as in a stable sort
    code = np.zeros(4, dtype=np.int64)
    sid = np.zeros(4, dtype=np.int64)
    t = np.array([5, 6, 3, 5], dtype=np.int64)
    got = _series_order(code, sid, t, names=False)[0]
    assert got.tolist() == np.lexsort((t, sid)).tolist() == [2, 0, 3, 1]
