"""PromQL function calls: math, clamping, label functions, time, histograms, absent."""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from typing import Protocol

import numpy as np

from shoal.errors import PatternError, PromQLError
from shoal.promql import native, ranges
from shoal.promql.model import (
    F64,
    I64,
    NAME,
    LabelKey,
    Labels,
    Matrix,
    Value,
    Vec,
    key,
    merge_rows,
    stack_rows,
    without_name,
)
from shoal.promql.tree import Call, Node, Selector
from shoal.regex import compile_pattern


class Evaluator(Protocol):
    """What a function call needs of the evaluation around it
    (:class:`shoal.promql.engine.Evaluator`)."""

    def eval(self, node: Node, ts: I64) -> Value: ...

    def vector(self, node: Node, ts: I64) -> Vec: ...

    def scalar(self, node: Node, ts: I64) -> F64: ...

    def instant(self, sel: Selector, ts: I64, times: bool = False) -> Vec: ...


MATH: dict[str, Callable[[F64], F64]] = {
    "abs": np.abs,
    "ceil": np.ceil,
    "floor": np.floor,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "ln": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "sgn": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "deg": np.degrees,
    "rad": np.radians,
}
DATES = (
    "day_of_month",
    "day_of_week",
    "day_of_year",
    "days_in_month",
    "hour",
    "minute",
    "month",
    "year",
)


def _map_values(vec: Vec, fn: Callable[[F64], F64]) -> Vec:
    vec = native.floats_only(vec)  # a histogram has no single value to map
    with np.errstate(all="ignore"):
        values = fn(vec.values)
    labels = [without_name(lab) for lab in vec.labels]
    return merge_rows(labels, values, vec.present)


def _date(name: str, seconds: F64) -> F64:
    out = np.full(seconds.shape, np.nan)
    ok = np.isfinite(seconds)
    when = seconds[ok].astype(np.int64).astype("datetime64[s]")
    days = when.astype("datetime64[D]")
    months = when.astype("datetime64[M]")
    years = when.astype("datetime64[Y]")
    if name == "minute":
        res = (when - when.astype("datetime64[h]")).astype(np.int64) // 60
    elif name == "hour":
        res = (when - days).astype(np.int64) // 3600
    elif name == "day_of_month":
        res = (days - months).astype(np.int64) + 1
    elif name == "day_of_week":
        res = (days.astype(np.int64) + 4) % 7
    elif name == "day_of_year":
        res = (days - years).astype(np.int64) + 1
    elif name == "month":
        res = (months - years).astype(np.int64) + 1
    elif name == "year":
        res = years.astype(np.int64) + 1970
    else:  # days_in_month
        y = years.astype(np.int64) + 1970
        m = (months - years).astype(np.int64) + 1
        res = np.array([calendar.monthrange(int(a), int(b))[1] for a, b in zip(y, m, strict=True)])
    out[ok] = res
    return out


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _label_replace(vec: Vec, dst: str, repl: str, src: str, regex: str) -> Vec:
    try:
        pattern = compile_pattern(regex, standalone=False)
    except PatternError as exc:
        raise PromQLError(
            f"invalid regular expression in label_replace(): {regex} ({exc.reason})",
            error_type="execution",
        ) from None
    if not _LABEL_NAME.fullmatch(dst):
        raise PromQLError(
            f"invalid destination label name in label_replace(): {dst}", error_type="execution"
        )
    labels = []
    for lab in vec.labels:
        value = pattern.replace(lab.get(src, ""), repl)
        if value is None:
            labels.append(dict(lab))
            continue
        labels.append(_with_label(lab, dst, value))
    return merge_rows(labels, vec.values, vec.present)


def _with_label(labels: Labels, name: str, value: str) -> Labels:
    """``labels`` with ``name`` set to ``value``; an empty value removes the label."""
    out = dict(labels)
    if value:
        out[name] = value
    else:
        out.pop(name, None)
    return out


def _label_join(vec: Vec, dst: str, sep: str, srcs: list[str]) -> Vec:
    if not _LABEL_NAME.fullmatch(dst):
        raise PromQLError(
            f"invalid destination label name in label_join(): {dst}", error_type="execution"
        )
    labels = []
    for lab in vec.labels:
        labels.append(_with_label(lab, dst, sep.join(lab.get(s, "") for s in srcs)))
    return merge_rows(labels, vec.values, vec.present)


def _bucket_quantile(q: float, les: F64, counts: F64) -> float:
    outside = ranges.quantile_outside(q)
    if outside is not None:
        return outside
    order = np.argsort(les, kind="stable")
    les, counts = les[order], counts[order]
    if not np.isinf(les[-1]) or les[-1] < 0:
        return float("nan")
    # buckets with the same upper bound are added up
    uniq, inverse = np.unique(les, return_inverse=True)
    if len(uniq) != len(les):
        counts = np.bincount(inverse, weights=counts).astype(np.float64)
        les = uniq.astype(np.float64)
    counts = np.maximum.accumulate(np.nan_to_num(counts, nan=-np.inf))
    if len(les) < 2:
        return float("nan")
    total = counts[-1]
    if total == 0 or np.isnan(total):
        return float("nan")
    rank = q * total
    b = int(np.searchsorted(counts[:-1], rank, side="left"))
    if b == len(les) - 1:
        return float(les[-2])
    if b == 0 and les[0] <= 0:
        return float(les[0])
    start = 0.0
    end = float(les[b])
    count = float(counts[b])
    if b > 0:
        start = float(les[b - 1])
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return float(start + (end - start) * (rank / count))


def _whole_quantiles(q: F64, les: F64, v: F64, p: np.ndarray, out: F64) -> np.ndarray:
    """:func:`_bucket_quantile` at once for the steps where every bucket is present and
    ``q`` is within [0, 1] (the usual case), written into ``out``; which steps it did.
    The same operations, column by column, so the answers are the same numbers."""
    done = p.all(axis=0) & (q >= 0) & (q <= 1)
    n = len(les)
    order = np.argsort(les, kind="stable")
    les = les[order]
    if n < 2 or not np.isinf(les[-1]) or les[-1] < 0 or len(np.unique(les)) != n:
        return np.zeros(len(q), dtype=bool)  # the step by step path handles these
    cols = np.flatnonzero(done)
    if not len(cols):
        return done
    counts = np.maximum.accumulate(np.nan_to_num(v[order][:, cols], nan=-np.inf), axis=0)
    finite = np.isfinite(counts[-1])  # else the step by step path (NaN and infinite ranks)
    done[cols[~finite]] = False
    cols, counts = cols[finite], counts[:, finite]
    total = counts[-1]
    rank = q[cols] * total
    b = np.sum(counts[:-1] < rank[None, :], axis=0)
    at = np.arange(len(cols))
    below = np.where(b > 0, counts[np.maximum(b - 1, 0), at], 0.0)
    start = np.where(b > 0, les[np.maximum(b - 1, 0)], 0.0)
    end = les[b]
    with np.errstate(divide="ignore", invalid="ignore"):
        value = start + (end - start) * ((rank - below) / (counts[b, at] - below))
    value = np.where(b == n - 1, les[-2], value)
    value = np.where((b == 0) & (les[0] <= 0), les[0], value)
    out[cols] = np.where(total == 0, np.nan, value)
    return done


def _histogram_quantile(q: F64, vec: Vec) -> Vec:
    groups: dict[LabelKey, tuple[Labels, list[int], list[float]]] = {}
    for i, lab in enumerate(vec.labels):
        le = lab.get("le")
        if le is None:
            continue
        try:
            bound = float(le.replace("+Inf", "inf").replace("-Inf", "-inf"))
        except ValueError:
            continue
        base = {k: v for k, v in lab.items() if k not in ("le", NAME)}
        # one histogram per name and labels; two names with equal labels collide below
        k = key({name: value for name, value in lab.items() if name != "le"})
        if k not in groups:
            groups[k] = (base, [], [])
        groups[k][1].append(i)
        groups[k][2].append(bound)
    labels, values, present = [], [], []
    steps = vec.steps
    for base, rows, bounds in groups.values():
        les = np.asarray(bounds)
        v = vec.values[rows]
        p = vec.present[rows]
        out = np.full(steps, np.nan)
        ok = p.any(axis=0)
        whole = _whole_quantiles(q, les, v, p, out)
        for j in np.flatnonzero(ok & ~whole):
            col = p[:, j]
            out[j] = _bucket_quantile(float(q[j]), les[col], v[col, j])
        labels.append(base)
        values.append(out)
        present.append(ok)
    return stack_rows(labels, values, present, steps, merge=True)


def _absent_labels(node: Call) -> Labels:
    arg = node.args[0] if node.args else None
    if not isinstance(arg, Selector):
        return {}
    out: Labels = {}
    seen: set[str] = set()
    for m in arg.matchers:
        if m.name == NAME:
            continue
        if m.op == "=" and m.name not in seen:
            out[m.name] = m.value
        elif m.name in out:
            del out[m.name]
        seen.add(m.name)
    return out


def _string(ev: Evaluator, node: Call, i: int, ts: I64) -> str:
    value = ev.eval(node.args[i], ts) if i < len(node.args) else None
    if not isinstance(value, str):
        raise PromQLError(f"expected a string as argument {i + 1} of {node.name}()")
    return value


UNSUPPORTED = frozenset(
    {
        "double_exponential_smoothing",
        "histogram_fraction",
        "histogram_stddev",
        "histogram_stdvar",
        "mad_over_time",
        "sort_by_label",
        "sort_by_label_desc",
        "info",
        "limitk",
        "limit_ratio",
    }
)


def call(ev: Evaluator, node: Call, ts: I64) -> Value:
    name = node.name
    n = len(ts)
    if name in ranges.RANGE_FUNCTIONS:
        matrix = ev.eval(node.args[1] if name == "quantile_over_time" else node.args[0], ts)
        if not isinstance(matrix, Matrix):
            raise PromQLError(f"expected a range vector as argument of {name}()")
        if name not in native.RANGE_FUNCTIONS:
            matrix = native.floats_only_matrix(matrix)
        args: list[float] = []
        if name == "quantile_over_time":
            args = [float(ev.scalar(node.args[0], ts)[0])]
        elif name == "predict_linear":
            args = [float(ev.scalar(node.args[1], ts)[0])]
        elif name == "holt_winters":
            args = [float(ev.scalar(node.args[i], ts)[0]) for i in (1, 2)]
            for what, value in zip(("smoothing", "trend"), args, strict=True):
                if not 0 < value < 1:
                    raise PromQLError(
                        f"invalid {what} factor. Expected: 0 < {what[0]}f < 1, got: {value:f}",
                        error_type="execution",
                    )
        return ranges.apply(name, matrix, ts, args)
    if name in MATH:
        return _map_values(ev.vector(node.args[0], ts), MATH[name])
    if name == "round":
        nearest = ev.scalar(node.args[1], ts) if len(node.args) > 1 else np.ones(n)
        inv = 1.0 / nearest
        return _map_values(ev.vector(node.args[0], ts), lambda v: np.floor(v * inv + 0.5) / inv)
    if name in ("clamp", "clamp_min", "clamp_max"):
        vec = ev.vector(node.args[0], ts)
        lo = ev.scalar(node.args[1], ts) if name != "clamp_max" else np.full(n, -np.inf)
        if name == "clamp":
            hi = ev.scalar(node.args[2], ts)
        elif name == "clamp_max":
            hi = ev.scalar(node.args[1], ts)
        else:
            hi = np.full(n, np.inf)
        # NaN bounds or values give NaN, as Go's math.Max and math.Min do
        out = _map_values(vec, lambda v: np.maximum(lo, np.minimum(hi, v)))
        if name == "clamp":
            out.present &= ~(hi < lo)[None, :]
            out = out.compact()
        return out
    if name == "time":
        return ts / 1000.0
    if name == "vector":
        return Vec([{}], ev.scalar(node.args[0], ts)[None, :].copy(), np.ones((1, n), bool))
    if name == "scalar":
        vec = native.floats_only(ev.vector(node.args[0], ts))
        count = vec.present.sum(axis=0)
        value = np.where(vec.present, vec.values, 0.0).sum(axis=0)
        return np.where(count == 1, value, np.nan)
    if name == "timestamp":
        arg = node.args[0]
        if isinstance(arg, Selector) and arg.range_ms is None:
            vec = ev.instant(arg, ts, times=True)
            return merge_rows(map(without_name, vec.labels), vec.values, vec.present)
        vec = ev.vector(arg, ts)
        return _map_values(vec, lambda v: np.broadcast_to(ts / 1000.0, v.shape).copy())
    if name in ("sort", "sort_desc"):
        vec = ev.vector(node.args[0], ts)
        if n != 1 or not vec.labels:
            return vec
        col = vec.values[:, 0]
        col = -col if name == "sort_desc" else col
        order = np.argsort(np.where(np.isnan(col), np.inf, col), kind="stable")
        return vec.select(order)
    if name == "absent":
        vec = ev.vector(node.args[0], ts)
        missing = np.logical_not(vec.present.any(axis=0))
        return Vec([_absent_labels(node)], np.ones((1, n)), missing[None, :]).compact()
    if name == "absent_over_time":
        matrix = ev.eval(node.args[0], ts)
        if not isinstance(matrix, Matrix):
            raise PromQLError("expected a range vector as argument of absent_over_time()")
        missing = ranges.absent_over_time(matrix, ts)
        return Vec([_absent_labels(node)], np.ones((1, n)), missing[None, :]).compact()
    if name == "label_replace":
        vec = ev.vector(node.args[0], ts)
        dst, repl, src, regex = (_string(ev, node, i, ts) for i in range(1, 5))
        return _label_replace(vec, dst, repl, src, regex)
    if name == "label_join":
        vec = ev.vector(node.args[0], ts)
        dst = _string(ev, node, 1, ts)
        sep = _string(ev, node, 2, ts)
        srcs = [_string(ev, node, i, ts) for i in range(3, len(node.args))]
        return _label_join(vec, dst, sep, srcs)
    if name == "histogram_quantile":
        q, vec = ev.scalar(node.args[0], ts), ev.vector(node.args[1], ts)
        classic = _histogram_quantile(q, native.floats_only(vec))
        if not native.has_components(vec):
            return classic
        both = native.quantile(q, vec), classic
        return merge_rows(
            [lab for v in both for lab in v.labels],
            np.vstack([v.values for v in both]),
            np.vstack([v.present for v in both]),
        )
    if name in ("histogram_count", "histogram_sum"):
        return native.component(ev.vector(node.args[0], ts), name.removeprefix("histogram_"))
    if name == "histogram_avg":
        return native.average(ev.vector(node.args[0], ts))
    if name in DATES:
        if not node.args:
            return Vec([{}], _date(name, ts / 1000.0)[None, :], np.ones((1, n), bool))
        return _map_values(ev.vector(node.args[0], ts), lambda v: _date(name, v))
    if name == "pi":
        return np.full(n, np.pi)
    if name in UNSUPPORTED:
        raise PromQLError(f"function {name!r} is not supported by shoal")
    raise PromQLError(f"function {name!r} is not supported")
