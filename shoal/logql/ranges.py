"""Range aggregations: a frame of entries (and unwrapped values) to series over the steps.

Each series' entries are sorted by time once; each step's window ``(t - range - offset,
t - offset]`` is then two binary searches, and counts, sums and byte sums come from
cumulative sums: no loop over entries. Minimum, maximum, quantiles and the first and
last values loop over the steps of a series, each a NumPy reduction over its window.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow.compute as pc

from shoal.errors import LogQLError
from shoal.logql import model as m
from shoal.logql.frame import Frame, group
from shoal.logql.series import F64, I64, Series, Steps

UNWRAPPED = frozenset({
    "sum_over_time", "avg_over_time", "min_over_time", "max_over_time", "first_over_time",
    "last_over_time", "stdvar_over_time", "stddev_over_time", "quantile_over_time",
    "rate_counter",
})  # fmt: skip
"""The range functions that need ``| unwrap`` (``rate`` takes either)."""


def _grouped(frame: Frame, node: m.RangeAggregation) -> tuple[I64, list[dict[str, str]]]:
    names = list(frame.labels)
    if node.grouping is not None:
        wanted = set(node.grouping.labels)
        names = [n for n in names if (n not in wanted) == node.grouping.without]
    return group(frame, names)


def evaluate(
    node: m.RangeAggregation, frame: Frame, values: F64 | None, steps: Steps
) -> list[Series]:
    """The series of ``node`` at each step, from the entries of ``frame``."""
    function = node.function
    if function in UNWRAPPED and values is None:
        raise LogQLError(f"invalid aggregation {function} without unwrap")
    plain = ("count_over_time", "bytes_over_time", "bytes_rate", "absent_over_time")
    if function in plain and values is not None:
        raise LogQLError(f"invalid aggregation {function} with unwrap")
    times = steps.times
    upper = times - node.offset_ns
    lower = upper - node.range_ns
    if function == "absent_over_time":
        return _absent(node, frame, lower, upper)
    if frame.rows == 0:
        return []
    ids, label_sets = _grouped(frame, node)
    order = np.lexsort((frame.ts, ids))
    ids, ts = ids[order], frame.ts[order]
    sizes = None
    if function in ("bytes_over_time", "bytes_rate"):
        sizes = np.asarray(
            pc.binary_length(frame.line.take(order)).to_numpy(zero_copy_only=False), np.float64
        )
    vals = values[order] if values is not None else None
    bounds = np.searchsorted(ids, np.arange(len(label_sets) + 1))
    seconds = node.range_ns / 1e9
    out: list[Series] = []
    for index, labels in enumerate(label_sets):
        a, b = int(bounds[index]), int(bounds[index + 1])
        if a == b:
            continue
        t = ts[a:b]
        lo = np.searchsorted(t, lower, side="right")
        hi = np.searchsorted(t, upper, side="right")
        counts = hi - lo
        present = counts > 0
        if not present.any():
            continue
        if function == "count_over_time":
            result = counts.astype(np.float64)
        elif function == "rate" and vals is None:
            result = counts / seconds
        elif sizes is not None:
            cumulative = np.concatenate([[0.0], np.cumsum(sizes[a:b])])
            result = cumulative[hi] - cumulative[lo]
            if function == "bytes_rate":
                result = result / seconds
        else:
            assert vals is not None
            result = _unwrapped(function, vals[a:b], t, lo, hi, seconds, node.parameter)
            present = present & ~np.isnan(result) if function != "rate" else present
        out.append(Series(labels, np.where(present, result, 0.0), present))
    return out


def _unwrapped(
    function: str, v: F64, t: I64, lo: I64, hi: I64, seconds: float, q: float | None
) -> F64:
    cumulative = np.concatenate([[0.0], np.cumsum(v)])
    sums: F64 = cumulative[hi] - cumulative[lo]
    counts = (hi - lo).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        if function == "sum_over_time":
            return sums
        if function == "rate":
            rates: F64 = sums / seconds
            return rates
        if function == "avg_over_time":
            means: F64 = sums / counts
            return means
        if function in ("stdvar_over_time", "stddev_over_time"):
            var = _per_window(v, lo, hi, lambda w: float(np.var(w)))
            return np.sqrt(var) if function == "stddev_over_time" else var
    reducers: dict[str, Callable[[F64], float]] = {
        "min_over_time": lambda w: float(np.min(w)),
        "max_over_time": lambda w: float(np.max(w)),
        "first_over_time": lambda w: float(w[0]),
        "last_over_time": lambda w: float(w[-1]),
        "quantile_over_time": lambda w: _quantile(q if q is not None else math.nan, w),
        "rate_counter": lambda w: _counter_rate(w, seconds),
    }
    reducer = reducers.get(function)
    if reducer is None:
        raise LogQLError(f"the range aggregation {function} is not supported")
    return _per_window(v, lo, hi, reducer)


def _per_window(v: F64, lo: I64, hi: I64, reduce: Callable[[F64], float]) -> F64:
    out = np.full(len(lo), math.nan)
    for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        if b > a:
            out[i] = reduce(v[a:b])
    return out


def _quantile(q: float, window: F64) -> float:
    """Prometheus' quantile (linear interpolation between the closest ranks)."""
    if math.isnan(q) or q < 0:
        return -math.inf if q < 0 else math.nan
    if q > 1:
        return math.inf
    ordered = np.sort(window)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return float(ordered[low] * (1 - weight) + ordered[high] * weight)


def _counter_rate(window: F64, seconds: float) -> float:
    """The per-second increase of a counter over the window, resets counted as in
    Prometheus (no extrapolation)."""
    if len(window) < 2:
        return math.nan
    drops = np.diff(window)
    resets = window[:-1][drops < 0]
    increase = float(window[-1] - window[0] + resets.sum())
    return increase / seconds


def _absent(node: m.RangeAggregation, frame: Frame, lower: I64, upper: I64) -> list[Series]:
    ts = np.sort(frame.ts)
    counts = np.searchsorted(ts, upper, side="right") - np.searchsorted(ts, lower, side="right")
    absent = counts == 0
    if not absent.any():
        return []
    labels = {x.name: x.value for x in node.query.matchers if x.op == "="}
    return [Series(labels, np.where(absent, 1.0, 0.0), absent)]
