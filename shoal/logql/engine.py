"""LogQL's evaluation: a log query to its newest (or oldest) entries, a metric query to
series over the steps."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from shoal.errors import LogQLError
from shoal.logql import counts, pipeline, ranges, vectors
from shoal.logql import model as m
from shoal.logql.frame import Frame
from shoal.logql.series import Scalar, Series, Steps, Value
from shoal.logql.source import LogSource

MAX_STEPS = 11_000
ERROR = pipeline.ERROR


async def entries(
    source: LogSource, query: m.LogQuery, start_ns: int, end_ns: int, limit: int, forward: bool
) -> Frame:
    """``/query_range`` of a log query: at most ``limit`` entries in ``[start, end)``."""
    if any(isinstance(s, m.Unwrap) for s in query.stages):
        raise LogQLError("unwrap is only allowed in a range aggregation")
    return await source.newest(query, start_ns, end_ns, limit, forward)


SUMMED = frozenset({"count_over_time", "rate", "bytes_over_time", "bytes_rate"})
"""The range functions whose value is a count or byte sum of the window's entries (per
second, for the rates), when they unwrap nothing: a sum of unwrapped values may be NaN in
one series, which leaves that series out of the step rather than the whole group."""


def _summed_early(expr: m.VectorAggregation) -> m.RangeAggregation | None:
    """``sum by (L) (f(X))`` (or ``sum(f(X))``) of a range function ``f`` that sums its
    window's entries, as ``f(X)`` grouped by ``L`` (and ``__error__``, so that a pipeline
    error still stops it): the same sums, taken before the entries' other labels split them
    into a series per label set (after a ``json`` parse, one per distinct set of fields);
    None otherwise."""
    inner = expr.expr
    if (
        expr.op == "sum" and expr.parameter is None
        and (expr.grouping is None or not expr.grouping.without)
        and isinstance(inner, m.RangeAggregation) and inner.grouping is None
        and inner.function in SUMMED
        and not any(isinstance(stage, m.Unwrap) for stage in inner.query.stages)
    ):  # fmt: skip
        by = () if expr.grouping is None else expr.grouping.labels
        labels = tuple(dict.fromkeys((*by, ERROR)))
        return dataclasses.replace(inner, grouping=m.Grouping(without=False, labels=labels))
    return None


async def _range(source: LogSource, node: m.RangeAggregation, steps: Steps) -> list[Series]:
    first = steps.start - node.offset_ns - node.range_ns + 1
    last = steps.end - node.offset_ns
    frame = await source.entries(node.query, first, last)
    stages = node.query.stages
    cut = next((i for i, s in enumerate(stages) if isinstance(s, m.Unwrap)), None)
    values = None
    if cut is not None:
        unwrap = stages[cut]
        assert isinstance(unwrap, m.Unwrap)
        frame, values = pipeline.unwrap(frame, unwrap)
        for stage in stages[cut + 1 :]:
            if not isinstance(stage, m.LabelFilterStage):
                raise LogQLError("only label filters may follow unwrap")
            keep = pipeline.label_filter_mask(frame, stage)
            mask = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=np.bool_)
            frame, values = frame.filter(keep), values[mask]
    elif node.function in ranges.UNWRAPPED:
        raise LogQLError(f"invalid aggregation {node.function} without unwrap")
    result = ranges.evaluate(node, frame, values, steps)
    for series in result:
        if ERROR in series.labels:
            if node.grouping is not None and ERROR in node.grouping.labels:
                # grouped early (_summed_early): Loki names the whole label set
                whole = dataclasses.replace(node, grouping=None)
                series = next(
                    s for s in ranges.evaluate(whole, frame, values, steps) if ERROR in s.labels
                )
            raise LogQLError(
                f"pipeline error: '{series.labels[ERROR]}' for series: "
                f"'{_text(series.labels)}'. Use a label filter to intentionally skip this "
                f'error (e.g | __error__!="{series.labels[ERROR]}"); to skip all potential '
                'errors match empty errors (e.g | __error__=""), also after unwrap'
            )
    return result


def _text(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


async def evaluate(source: LogSource, expr: m.Expr, steps: Steps) -> Value:
    """The value of a metric expression at every step."""
    if steps.count > MAX_STEPS:
        raise LogQLError(
            "exceeded maximum resolution of 11,000 points per time series. Try increasing "
            "the value of the step parameter"
        )
    return await _eval(source, expr, steps)


async def _eval(source: LogSource, expr: m.Expr, steps: Steps) -> Value:
    if isinstance(expr, m.VectorAggregation | m.RangeAggregation):
        counted = await counts.answer(source, expr, steps)
        if counted is not None:
            return counted
    if isinstance(expr, m.Literal):
        return Scalar(np.full(steps.count, expr.value))
    if isinstance(expr, m.VectorLiteral):
        return [Series({}, np.full(steps.count, expr.value), np.ones(steps.count, bool))]
    if isinstance(expr, m.RangeAggregation):
        return await _range(source, expr, steps)
    if isinstance(expr, m.Negate):
        return vectors.negate(await _eval(source, expr.expr, steps))
    if isinstance(expr, m.VectorAggregation):
        early = _summed_early(expr)
        if early is not None:
            return vectors.aggregate(expr, await _range(source, early, steps), None)
        inner = await _eval(source, expr.expr, steps)
        if isinstance(inner, Scalar):
            raise LogQLError(f"{expr.op} expects a vector, got a scalar")
        k = None
        if expr.parameter is not None:
            parameter = await _eval(source, expr.parameter, steps)
            if not isinstance(parameter, Scalar):
                raise LogQLError(f"{expr.op}'s parameter must be a number")
            if any(math.isnan(v) or v < 1 for v in parameter.values):
                raise LogQLError(f"invalid parameter for {expr.op}: it must be a number >= 1")
            k = parameter.values
        return vectors.aggregate(expr, inner, k)
    if isinstance(expr, m.Binary):
        left = await _eval(source, expr.left, steps)
        right = await _eval(source, expr.right, steps)
        return vectors.binary(expr, left, right)
    if isinstance(expr, m.LabelReplace):
        inner = await _eval(source, expr.expr, steps)
        if isinstance(inner, Scalar):
            raise LogQLError("label_replace expects a vector")
        return vectors.label_replace(inner, expr)
    raise LogQLError(f"{type(expr).__name__} is not supported")
