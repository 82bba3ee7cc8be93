"""histogram_quantile over many steps at once gives, step for step, the one-step answer."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.promql.functions import _bucket_quantile, _whole_quantiles

BOUNDS = st.lists(
    st.sampled_from([-1.0, 0.0, 0.005, 0.1, 0.25, 1.0, 2.5, 10.0]),
    min_size=1,
    max_size=6,
    unique=True,
)
COUNT = st.one_of(
    st.floats(0, 1000, allow_nan=False), st.just(0.0), st.just(float("nan")), st.just(np.inf)
)


@settings(max_examples=300, deadline=None)
@given(
    bounds=BOUNDS,
    inf=st.booleans(),
    steps=st.integers(1, 6),
    data=st.data(),
)
def test_each_step_is_the_one_step_answer(
    bounds: list[float], inf: bool, steps: int, data: st.DataObject
) -> None:
    les = np.array(bounds + ([np.inf] if inf else []))
    n = len(les)
    v = np.array(data.draw(st.lists(COUNT, min_size=n * steps, max_size=n * steps))).reshape(
        n, steps
    )
    v = np.cumsum(np.nan_to_num(v, posinf=0), axis=0) * (1 - np.isnan(v)) + np.where(
        np.isnan(v), np.nan, 0
    )
    p = np.array(data.draw(st.lists(st.booleans(), min_size=n * steps, max_size=n * steps)))
    p = p.reshape(n, steps) | data.draw(st.booleans())
    q = np.array(
        data.draw(
            st.lists(
                st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0, -0.5, 1.5, float("nan")]),
                min_size=steps,
                max_size=steps,
            )
        )
    )
    out = np.full(steps, -12345.0)
    done = _whole_quantiles(q, les, v, p, out)
    for j in np.flatnonzero(done):
        col = p[:, j]
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 is NaN, as in Prometheus
            expected = _bucket_quantile(float(q[j]), les[col], v[col, j])
        assert np.isnan(expected) == np.isnan(out[j]), (j, expected, out[j])
        if not np.isnan(expected):
            assert out[j] == expected, (j, expected, out[j])
    assert (out[~done] == -12345.0).all()
    if p.all() and inf and len(set(bounds)) == len(bounds) and n > 1:
        finite_q = (q >= 0) & (q <= 1)
        assert done[finite_q & np.isfinite(np.nan_to_num(v, nan=-np.inf).max(axis=0))].all()
