"""Functions over range vectors (``rate``, ``*_over_time``, ...), column-wise.

Series are laid end to end, a few hundred per call (:class:`Flat`), and the
window of every series at every step is a pair of indices found with one
``searchsorted``; counts, firsts, lasts and counter corrections come from those
indices and prefix sums, and the remaining reductions from ``ufunc.reduceat``
over the gathered windows. Windows are closed at both ends (``[t - range, t]``),
as in the Prometheus 2.x releases the project is compared against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from shoal.errors import PromQLError
from shoal.promql.model import (
    F64,
    HIST,
    I64,
    LabelKey,
    Mask,
    Matrix,
    Series,
    Vec,
    evaluation_times,
    key_without_name,
    merge_rows,
    without_name,
)


@dataclasses.dataclass
class Flat:
    """Several series of a range vector laid end to end: times, values, where each
    series starts (``first``) and which samples belong to a native histogram's
    component (``hist``). A window is an index range into these arrays; it never
    crosses from one series into the next."""

    t: I64
    v: F64
    first: Mask
    hist: Mask


RangeFn = Callable[[Flat, I64, I64, I64, int, I64, list[float]], tuple[F64, Mask]]
WINDOWS_PER_CALL = 20_000
"""Windows computed by one call of a function: enough to spread numpy's cost per call
over many series, few enough that the temporaries stay in the CPU's caches."""


def _windows(t: I64, eff: I64, range_ms: int) -> tuple[I64, I64]:
    lo = np.searchsorted(t, eff - range_ms, side="left").astype(np.int64)
    hi = np.searchsorted(t, eff, side="right").astype(np.int64)
    return lo, hi


def _gather(lo: I64, hi: I64) -> tuple[I64, I64, Mask]:
    """Flat indices of every non-empty window and where each window starts in them."""
    cnt = hi - lo
    ok = cnt > 0
    lens = cnt[ok]
    starts = (np.cumsum(lens) - lens).astype(np.int64)
    total = int(lens.sum())
    flat = np.arange(total, dtype=np.int64) - np.repeat(starts, lens) + np.repeat(lo[ok], lens)
    return flat, starts, ok


def _extrapolated(counter: bool, rate: bool) -> RangeFn:
    def fn(
        s: Flat, lo: I64, hi: I64, eff: I64, range_ms: int, ts: I64, args: list[float]
    ) -> tuple[F64, Mask]:
        ok = (hi - lo) >= 2
        out = np.full(len(lo), np.nan)
        if ok.any():
            with np.errstate(all="ignore"):  # infinities and NaN as Go's float64 has them
                out[ok] = _extrapolate(s, lo[ok], hi[ok] - 1, eff[ok], range_ms, counter, rate)
        return out, ok

    return fn


def _extrapolate(
    s: Flat, a: I64, b: I64, eff: I64, range_ms: int, counter: bool, rate: bool
) -> F64:
    """``rate``, ``increase`` or ``delta`` of the windows from sample ``a`` to sample ``b``
    (inclusive), ending at ``eff``, with Prometheus 2.42's floating-point operations in
    its order: the last value minus the first, each counter reset's value added one
    after another, the extrapolation factor (divided by the range in seconds for
    ``rate``), and the result times that factor. Rounding happens at the same places,
    so the answers are Prometheus' to the bit."""
    t, v = s.t, s.v
    first, last = v[a], v[b]
    result = last - first
    if counter:
        result = _add_resets(s, a, b, result)
    to_start = (t[a] - (eff - range_ms).astype(np.float64)) / 1000.0
    to_end = (eff.astype(np.float64) - t[b]) / 1000.0
    sampled = (t[b] - t[a]) / 1000.0
    avg_gap = sampled / (b - a)
    if counter:
        to_zero = sampled * (first / result)
        # Prometheus: for floats only, not for histograms
        use = (result > 0) & (first >= 0) & (to_zero < to_start) & ~s.hist[a]
        to_start = np.where(use, to_zero, to_start)
    threshold = avg_gap * 1.1
    interval = sampled.copy()
    interval += np.where(to_start < threshold, to_start, avg_gap / 2)
    interval += np.where(to_end < threshold, to_end, avg_gap / 2)
    factor = interval / sampled
    if rate:
        factor = factor / duration_seconds(range_ms)
    out: F64 = result * factor
    return out


def duration_seconds(ms: int) -> float:
    """A duration in seconds as Go's ``Duration.Seconds`` gives it: whole seconds plus the
    remaining nanoseconds over 1e9 (for 1001 ms not quite ``1001 / 1000``)."""
    whole, rest = divmod(ms, 1000)
    return float(whole) + float(rest * 1_000_000) / 1e9


def _add_resets(s: Flat, a: I64, b: I64, result: F64) -> F64:
    """``result`` plus, for each window ``a..b``, the value before every drop in it, added
    one drop at a time in the window's order (a sum of the drops first, or a difference
    of running sums, would round differently). Column-wise in rounds: round ``k`` adds
    the k-th drop of every window that has that many, so the loop runs as many times as
    the most drops in one window, never once per sample. The windows are sorted by
    their number of drops, so those still adding are always the first ones."""
    v = s.v
    drop = np.zeros(len(v), dtype=bool)
    drop[1:] = v[1:] < v[:-1]
    drop[s.first] = False  # no drop across the start of a series
    at = np.flatnonzero(drop)
    if not len(at):
        return result
    before = v[at - 1]
    start = np.searchsorted(at, a + 1, side="left")
    count = np.searchsorted(at, b, side="right") - start
    rows = np.flatnonzero(count)
    if not len(rows):
        return result
    rows = rows[np.argsort(-count[rows], kind="stable")]
    most, first_drop, sums = count[rows], start[rows], result[rows]
    still = np.searchsorted(-most, -np.arange(int(most[0])), side="left")
    for k, n in enumerate(still.tolist()):
        sums[:n] += before[first_drop[:n] + k]
    result = result.copy()
    result[rows] = sums
    return result


def _instant(rate: bool) -> RangeFn:
    def fn(
        s: Flat, lo: I64, hi: I64, eff: I64, range_ms: int, ts: I64, args: list[float]
    ) -> tuple[F64, Mask]:
        ok = (hi - lo) >= 2
        out = np.full(len(lo), np.nan)
        b = hi[ok] - 1
        last, prev = s.v[b], s.v[b - 1]
        gap = (s.t[b] - s.t[b - 1]).astype(np.float64)
        value = last - prev
        if rate:
            value = np.where(last < prev, last, value)
            with np.errstate(divide="ignore", invalid="ignore"):
                value = value / (gap / 1000.0)
        good = gap != 0
        out[ok] = value
        ok[ok] = good
        return out, ok

    return fn


def _steps_count(kind: str) -> RangeFn:
    def fn(
        s: Flat, lo: I64, hi: I64, eff: I64, range_ms: int, ts: I64, args: list[float]
    ) -> tuple[F64, Mask]:
        v = s.v
        if kind == "changes":
            hit = (v[1:] != v[:-1]) & ~(np.isnan(v[1:]) & np.isnan(v[:-1]))
        else:
            hit = v[1:] < v[:-1]
        pref = np.concatenate([[0], np.cumsum(hit)]).astype(np.float64)
        ok = (hi - lo) >= 1
        top = len(pref) - 1
        out = pref[np.clip(hi - 1, 0, top)] - pref[np.clip(lo, 0, top)]
        return np.where(ok, out, 0.0), ok

    return fn


def _over_time(kind: str) -> RangeFn:
    def fn(
        s: Flat, lo: I64, hi: I64, eff: I64, range_ms: int, ts: I64, args: list[float]
    ) -> tuple[F64, Mask]:
        out = np.full(len(lo), np.nan)
        flat, starts, ok = _gather(lo, hi)
        if not ok.any():
            return out, ok
        x = s.v[flat]
        cnt = (hi - lo)[ok].astype(np.float64)
        if kind == "count":
            res = cnt
        elif kind == "present":
            res = np.ones(len(cnt))
        elif kind == "last":
            res = s.v[hi[ok] - 1]
        elif kind == "sum":
            res = np.add.reduceat(x, starts)
        elif kind == "avg":
            res = _mean(x, starts, cnt, (hi - lo)[ok])
        elif kind == "min":
            res = np.fmin.reduceat(x, starts)
        elif kind == "max":
            res = np.fmax.reduceat(x, starts)
        elif kind in ("stddev", "stdvar"):
            mean = np.add.reduceat(x, starts) / cnt
            dev = x - np.repeat(mean, (hi - lo)[ok])
            res = np.add.reduceat(dev * dev, starts) / cnt
            # equal values vary by exactly 0 (a rounded mean would leave a residue)
            res = np.where(np.fmin.reduceat(x, starts) == np.fmax.reduceat(x, starts), 0.0, res)
            if kind == "stddev":
                res = np.sqrt(res)
        elif kind == "quantile":
            q = args[0]
            res = np.array(
                [_quantile(q, x[a : a + int(n)]) for a, n in zip(starts, cnt, strict=True)]
            )
        else:
            raise PromQLError(f"unknown function {kind}_over_time")
        out[ok] = res
        return out, ok

    return fn


def _mean(x: F64, starts: I64, cnt: F64, lens: I64) -> F64:
    """Each window's mean; where the sum overflows and no value is infinite, the sum of
    each value over the count (Prometheus' incremental mean gives the same)."""
    with np.errstate(over="ignore", invalid="ignore"):
        res = np.add.reduceat(x, starts) / cnt
        over = np.isinf(res)
        if over.any():
            has_inf = np.add.reduceat(np.isinf(x).astype(np.int64), starts) > 0
            scaled = np.add.reduceat(x / np.repeat(cnt, lens), starts)
            res = np.where(over & ~has_inf, scaled, res)
    return res


def quantile_outside(q: float) -> float | None:
    """What a quantile outside [0, 1] (or NaN) answers, as Prometheus defines it; None inside."""
    if np.isnan(q):
        return float("nan")
    if q < 0:
        return float("-inf")
    if q > 1:
        return float("inf")
    return None


def _quantile(q: float, values: F64) -> float:
    outside = quantile_outside(q)
    if outside is not None:
        return outside
    ordered = np.sort(values)
    rank = q * (len(ordered) - 1)
    low = int(np.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return float(ordered[low] * (1 - weight) + ordered[high] * weight)


def _regression(predict: bool) -> RangeFn:
    def fn(
        s: Flat, lo: I64, hi: I64, eff: I64, range_ms: int, ts: I64, args: list[float]
    ) -> tuple[F64, Mask]:
        out = np.full(len(lo), np.nan)
        ok0 = (hi - lo) >= 2
        flat, starts, ok = _gather(np.where(ok0, lo, hi), hi)
        if not ok.any():
            return out, ok
        lens = (hi - lo)[ok]
        intercept_t = ts[ok] if predict else s.t[lo[ok]]
        x = (s.t[flat] - np.repeat(intercept_t, lens)) / 1000.0
        y = s.v[flat]
        n = lens.astype(np.float64)
        sx = np.add.reduceat(x, starts)
        sy = np.add.reduceat(y, starts)
        sxy = np.add.reduceat(x * y, starts)
        sxx = np.add.reduceat(x * x, starts)
        with np.errstate(divide="ignore", invalid="ignore"):
            cov = sxy - sx * sy / n
            var = sxx - sx * sx / n
            slope = cov / var
            intercept = sy / n - slope * sx / n
        const = np.fmin.reduceat(y, starts) == np.fmax.reduceat(y, starts)
        slope = np.where(const, 0.0, slope)
        intercept = np.where(const, y[starts], intercept)
        out[ok] = intercept + slope * args[0] if predict else slope
        return out, ok

    return fn


def _holt_winters(
    s: Flat, lo: I64, hi: I64, eff: I64, range_ms: int, ts: I64, args: list[float]
) -> tuple[F64, Mask]:
    """Double exponential smoothing of each window: the level after its last sample.

    Level and trend start from the first two samples; each later sample moves the
    level by the smoothing factor and the trend by the trend factor. A loop per
    window: the recurrence has no closed column-wise form.
    """
    sf, tf = args
    ok = (hi - lo) >= 2
    out = np.full(len(lo), np.nan)
    for j in np.flatnonzero(ok):
        v = s.v[lo[j] : hi[j]].tolist()
        level, trend = v[0], v[1] - v[0]
        previous = 0.0
        for i in range(1, len(v)):
            if i > 1:
                trend = tf * (level - previous) + (1 - tf) * trend
            previous, level = level, sf * v[i] + (1 - sf) * (level + trend)
        out[j] = level
    return out, ok


RANGE_FUNCTIONS: dict[str, RangeFn] = {
    "rate": _extrapolated(counter=True, rate=True),
    "increase": _extrapolated(counter=True, rate=False),
    "delta": _extrapolated(counter=False, rate=False),
    "irate": _instant(rate=True),
    "idelta": _instant(rate=False),
    "changes": _steps_count("changes"),
    "resets": _steps_count("resets"),
    "deriv": _regression(predict=False),
    "predict_linear": _regression(predict=True),
    **{
        f"{k}_over_time": _over_time(k)
        for k in ("avg", "sum", "count", "min", "max", "last", "present", "stddev", "stdvar")
    },
    "quantile_over_time": _over_time("quantile"),
    "holt_winters": _holt_winters,
}
KEEPS_NAME = frozenset({"last_over_time"})


def apply(name: str, matrix: Matrix, ts: I64, args: list[float]) -> Vec:
    """``name`` over ``matrix`` at the evaluation times ``ts``, many series per call."""
    fn = RANGE_FUNCTIONS[name]
    eff = evaluation_times(ts, matrix.at_ms, matrix.offset_ms)
    eff = eff.astype(np.int64)
    lives = [s for s in (series.live() for series in matrix.series) if len(s.t)]
    if not lives:
        return Vec.empty(len(ts))
    steps = len(ts)
    per_call = max(1, WINDOWS_PER_CALL // steps)
    # predict_linear predicts from the evaluation time, even under ``@``
    pred_ts = ts.astype(np.int64)
    outs, oks = [], []
    for c in range(0, len(lives), per_call):
        part = lives[c : c + per_call]
        flat, lo, hi = _flat_windows(part, eff, matrix.range_ms)
        n = len(part)
        out, ok = fn(
            flat,
            lo.ravel(),
            hi.ravel(),
            np.tile(eff, n),
            matrix.range_ms,
            np.tile(pred_ts, n),
            args,
        )
        outs.append(out.reshape(n, steps))
        oks.append(ok.reshape(n, steps))
    values, present = np.vstack(outs), np.vstack(oks)
    rows = np.flatnonzero(present.any(axis=1))
    if not len(rows):
        return Vec.empty(steps)
    picked = [lives[i] for i in rows.tolist()]
    keep = name in KEEPS_NAME
    labels = [dict(s.labels) if keep else without_name(s.labels) for s in picked]
    known = [s.key for s in picked if s.key is not None]
    keys: list[LabelKey] | None = None
    if len(known) == len(picked):  # the keys the series were made with, less the name
        keys = known if keep else [key_without_name(k) for k in known]
    return merge_rows(labels, values[rows], present[rows], keys)


def _flat_windows(lives: list[Series], eff: I64, range_ms: int) -> tuple[Flat, I64, I64]:
    """``lives`` end to end, and each one's window at every step as indices.

    One ``searchsorted`` finds every window: a sample's key is its series' number
    times a span longer than any series, plus its time from the earliest sample.
    """
    lengths = np.array([len(s.t) for s in lives], dtype=np.int64)
    t = np.concatenate([s.t for s in lives]).astype(np.int64)
    v = np.concatenate([s.v for s in lives]).astype(np.float64)
    first = np.zeros(len(t), dtype=bool)
    first[np.cumsum(lengths) - lengths] = True
    hist = np.repeat(np.array([HIST in s.labels for s in lives]), lengths)
    base = int(t.min())
    span = int(t.max()) - base + 2
    keys = np.repeat(np.arange(len(lives), dtype=np.int64) * span, lengths) + (t - base)
    row = (np.arange(len(lives), dtype=np.int64) * span)[:, None]
    low = np.clip(eff - range_ms - base, 0, span - 1)[None, :]
    high = np.clip(eff - base, -1, span - 2)[None, :]
    lo = np.searchsorted(keys, row + low, side="left").astype(np.int64)
    hi = np.searchsorted(keys, row + high, side="right").astype(np.int64)
    return Flat(t, v, first, hist), lo, hi


def window_samples(matrix: Matrix, t_ms: int) -> list[Series]:
    """The raw samples of each series in the window at ``t_ms`` (an instant query of ``x[5m]``)."""
    eff = (matrix.at_ms if matrix.at_ms is not None else t_ms) - matrix.offset_ms
    out = []
    for series in matrix.series:
        live = series.live()
        keep = (live.t >= eff - matrix.range_ms) & (live.t <= eff)
        if keep.any():
            out.append(Series(live.labels, live.t[keep], live.v[keep]))
    return out


def absent_over_time(matrix: Matrix, ts: I64) -> Mask:
    """Steps at which no series of ``matrix`` has a sample in its window."""
    eff = evaluation_times(ts, matrix.at_ms, matrix.offset_ms)
    seen = np.zeros(len(ts), dtype=bool)
    for series in matrix.series:
        lo, hi = _windows(series.live().t, eff.astype(np.int64), matrix.range_ms)
        seen |= hi > lo
    return ~seen
