"""PromQL evaluation: every step of a query at once, a Vec per expression node.

:func:`evaluate` parses the expression, works out the time range each selector
needs (lookback, ranges, offsets, ``@``, subqueries), fetches those samples
through a :class:`~shoal.promql.source.QuerySource`, then evaluates the tree in
a worker thread. Instant queries are range queries with one step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterator

import numpy as np

from shoal.errors import PromQLError
from shoal.promql import aggregate, binary, functions, mapping, matchers, native, ranges, tree
from shoal.promql.model import (
    F64,
    I64,
    LOOKBACK_MS,
    NAME,
    Matrix,
    Series,
    Value,
    Vec,
    evaluation_times,
    key,
    latest_values,
)
from shoal.promql.source import QuerySource
from shoal.promql.tree import Aggregate, Binary, Call, Neg, Node, Num, Selector, Str, Subquery

logger = logging.getLogger(__name__)

DEFAULT_SUBQUERY_STEP_MS = 60_000
MAX_STEPS = 11_000


@dataclasses.dataclass
class Result:
    """An evaluated expression: ``kind`` is Prometheus' ``resultType``."""

    kind: str
    steps: I64
    vec: Vec | None = None
    scalar: F64 | None = None
    string: str | None = None
    samples: list[Series] | None = None


def _needs(node: Node, lo: int, hi: int) -> Iterator[tuple[Selector, int, int]]:
    """Each selector with the sample time range it reads when ``node`` runs in ``[lo, hi]``."""
    if isinstance(node, Selector):
        if node.at_ms is not None:
            lo = hi = node.at_ms
        window = node.range_ms if node.range_ms is not None else LOOKBACK_MS
        yield node, lo - node.offset_ms - window, hi - node.offset_ms
    elif isinstance(node, Subquery):
        if node.at_ms is not None:
            lo = hi = node.at_ms
        yield from _needs(node.expr, lo - node.offset_ms - node.range_ms, hi - node.offset_ms)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from _needs(arg, lo, hi)
    elif isinstance(node, Aggregate):
        yield from _needs(node.expr, lo, hi)
        if node.param is not None:
            yield from _needs(node.param, lo, hi)
    elif isinstance(node, Binary):
        yield from _needs(node.lhs, lo, hi)
        yield from _needs(node.rhs, lo, hi)
    elif isinstance(node, Neg):
        yield from _needs(node.expr, lo, hi)


def selectors(root: Node, start_ms: int, end_ms: int) -> list[Selector]:
    """The selectors of an expression (for exemplar lookups)."""
    return [sel for sel, _, _ in _needs(root, start_ms, end_ms)]


async def load_targets(
    source: QuerySource, root: Node, start_ms: int, end_ms: int
) -> dict[int, list[Series]]:
    """The ``target_info`` series of each selector in ``root`` that may read it, keyed by
    the selector's ``id``; resources come through SQL, which is asynchronous."""
    needs = [n for n in _needs(root, start_ms, end_ms) if _may_read_target_info(n[0])]
    found = await asyncio.gather(*(source.targets(a, b) for _, a, b in needs))
    return {id(sel): mapping.target_series(f) for (sel, _, _), f in zip(needs, found, strict=True)}


def load(
    source: QuerySource,
    root: Node,
    start_ms: int,
    end_ms: int,
    targets: dict[int, list[Series]],
) -> dict[int, list[Series]]:
    """The samples of every selector in ``root``, keyed by the selector's ``id``, read in
    the calling thread; ``targets`` from :func:`load_targets`. Selectors of the same
    metrics over the same range share one read."""
    needs = list(_needs(root, start_ms, end_ms))
    if not needs:
        return {}
    infos = source.metrics_now(min(n[1] for n in needs), max(n[2] for n in needs))
    reads: dict[tuple[tuple[str, ...], int, int], list[Series]] = {}
    out: dict[int, list[Series]] = {}
    for sel, a, b in needs:
        found = list(targets.get(id(sel), ()))
        names = tuple(sorted(matchers.select_metrics(infos, sel.matchers)))
        if names:
            if (names, a, b) not in reads:
                reads[names, a, b] = source.samples_now(names, a, b, *_kinds(infos, names))
            found += reads[names, a, b]
        out[id(sel)] = [s for s in found if matchers.matches_all(s.labels, sel.matchers)]
    return out


def _kinds(infos: list[mapping.MetricInfo], names: tuple[str, ...]) -> tuple[set[str], list[str]]:
    """The metric types among ``names`` and the Prometheus names they expose."""
    chosen = [info for info in infos if info.otlp_name in names]
    return {info.metric_type for info in chosen}, sorted({n for i in chosen for n in i.names})


def _may_read_target_info(sel: Selector) -> bool:
    return all(m.matches(mapping.TARGET_INFO) for m in sel.matchers if m.name == NAME)


class Evaluator:
    def __init__(self, data: dict[int, list[Series]], start_ms: int, end_ms: int) -> None:
        self.data = data
        self.start_ms = start_ms
        self.end_ms = end_ms

    def eval(self, node: Node, ts: I64) -> Value:
        n = len(ts)
        if isinstance(node, Num):
            return np.full(n, node.value)
        if isinstance(node, Str):
            return node.value
        if isinstance(node, Selector):
            if node.range_ms is not None:
                return Matrix(self.series(node, ts), node.range_ms, node.offset_ms, node.at_ms)
            return self.instant(node, ts)
        if isinstance(node, Subquery):
            return self.subquery(node, ts)
        if isinstance(node, Neg):
            inner = self.eval(node.expr, ts)
            if isinstance(inner, Vec):
                return binary.vector_scalar(
                    Binary("*", node.expr, Num(-1.0)), inner, np.full(n, -1.0), True
                )
            if isinstance(inner, np.ndarray):
                return -inner
            raise PromQLError("unary minus needs a scalar or an instant vector")
        if isinstance(node, Aggregate):
            return self.aggregate(node, ts)
        if isinstance(node, Binary):
            return self.binary(node, ts)
        if isinstance(node, Call):
            return functions.call(self, node, ts)
        raise PromQLError(f"unsupported expression {type(node).__name__}")

    def vector(self, node: Node, ts: I64) -> Vec:
        value = self.eval(node, ts)
        if not isinstance(value, Vec):
            raise PromQLError(f"expected an instant vector, got {_type_name(value)}")
        return value

    def scalar(self, node: Node, ts: I64) -> F64:
        value = self.eval(node, ts)
        if not isinstance(value, np.ndarray):
            raise PromQLError(f"expected a scalar, got {_type_name(value)}")
        return value

    def instant(self, sel: Selector, ts: I64, times: bool = False) -> Vec:
        """The selector's latest samples at each step (``times``: their times in seconds
        instead of their values)."""
        eff = evaluation_times(ts, sel.at_ms, sel.offset_ms)
        found, values, present = latest_values(self.series(sel, ts), eff, LOOKBACK_MS, times)
        if not found:
            return Vec.empty(len(ts))
        return Vec([s.labels for s in found], values, present)

    def series(self, sel: Selector, ts: I64) -> list[Series]:
        """The selector's series; at a single step in the order of their labels, the order
        in which Prometheus' storage hands series to an instant query. Every operation
        keeps its input's order (or that of the groups' first rows), so an instant
        answer lists its series, and ``topk``/``bottomk`` their groups, as Prometheus
        does; a range answer is sorted at the end anyway."""
        found = self.data.get(id(sel), [])
        if len(ts) != 1:
            return found
        return sorted(found, key=lambda s: key(s.labels))

    def subquery(self, node: Subquery, ts: I64) -> Matrix:
        step = node.step_ms or DEFAULT_SUBQUERY_STEP_MS
        eff = evaluation_times(ts, node.at_ms, node.offset_ms)
        lo = int(eff.min()) - node.range_ms
        first = -(-lo // step) * step
        grid = np.arange(first, int(eff.max()) + 1, step, dtype=np.int64)
        if len(grid) > MAX_STEPS * 10:
            raise PromQLError("subquery has too many steps; use a larger resolution")
        if not len(grid):
            return Matrix([], node.range_ms, node.offset_ms, node.at_ms)
        inner = self.eval(node.expr, grid)
        if isinstance(inner, np.ndarray):
            series = [Series({}, grid, inner)]
        elif isinstance(inner, Vec):
            series = [
                Series(inner.labels[i], grid[inner.present[i]], inner.values[i][inner.present[i]])
                for i in range(len(inner.labels))
                if inner.present[i].any()
            ]
        else:
            raise PromQLError("subquery is only allowed on instant vector or scalar expressions")
        return Matrix(series, node.range_ms, node.offset_ms, node.at_ms)

    def aggregate(self, node: Aggregate, ts: I64) -> Vec:
        vec = self.vector(node.expr, ts)
        param: F64 | str | None = None
        if node.op in ("topk", "bottomk", "quantile"):
            assert node.param is not None
            param = self.scalar(node.param, ts)
        elif node.op == "count_values":
            assert node.param is not None
            text = self.eval(node.param, ts)
            if not isinstance(text, str):
                raise PromQLError("count_values needs a string label name")
            param = text
        return aggregate.aggregate(node.op, vec, node.labels, node.without, param)

    def binary(self, node: Binary, ts: I64) -> Value:
        lhs = self.eval(node.lhs, ts)
        rhs = self.eval(node.rhs, ts)
        # a histogram may be scaled by a number; other operators ignore histograms
        if isinstance(lhs, Vec) and not (isinstance(rhs, np.ndarray) and node.op in ("*", "/")):
            lhs = native.floats_only(lhs)
        if isinstance(rhs, Vec) and not (isinstance(lhs, np.ndarray) and node.op == "*"):
            rhs = native.floats_only(rhs)
        if isinstance(lhs, np.ndarray) and isinstance(rhs, np.ndarray):
            return binary.scalar_scalar(node, lhs, rhs)
        if node.op in binary.SET_OPS and not (isinstance(lhs, Vec) and isinstance(rhs, Vec)):
            raise PromQLError(f"set operator {node.op!r} not allowed in binary scalar expression")
        if isinstance(lhs, Vec) and isinstance(rhs, np.ndarray):
            return binary.vector_scalar(node, lhs, rhs, True)
        if isinstance(lhs, np.ndarray) and isinstance(rhs, Vec):
            return binary.vector_scalar(node, rhs, lhs, False)
        if isinstance(lhs, Vec) and isinstance(rhs, Vec):
            return binary.vector_vector(node, lhs, rhs)
        raise PromQLError(
            f"binary expression must contain only scalar and instant vector types, "
            f"got {_type_name(lhs)} and {_type_name(rhs)}"
        )


def _type_name(value: Value) -> str:
    if isinstance(value, Vec):
        return "instant vector"
    if isinstance(value, Matrix):
        return "range vector"
    if isinstance(value, str):
        return "string"
    return "scalar"


def _labels_only(samples: list[Series]) -> Vec:
    n = len(samples)
    return Vec([s.labels for s in samples], np.zeros((n, 1)), np.ones((n, 1), dtype=bool))


def steps(start_ms: int, end_ms: int, step_ms: int) -> I64:
    return np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64)


async def evaluate(
    source: QuerySource,
    text: str,
    start_ms: int,
    end_ms: int,
    step_ms: int,
    instant: bool,
) -> Result:
    """Parse, fetch and evaluate ``text`` over the steps of ``[start_ms, end_ms]``."""
    root = tree.parse(text, start_ms, end_ms)
    if not instant and isinstance(root, Selector) and root.range_ms is not None:
        raise PromQLError(
            'invalid expression type "range vector" for range query, '
            "must be Scalar or instant Vector"
        )
    if not instant and isinstance(root, Str):
        raise PromQLError(
            'invalid expression type "string" for range query, must be Scalar or instant Vector'
        )
    ts = steps(start_ms, end_ms, step_ms)

    def run(data: dict[int, list[Series]]) -> Result:
        value = Evaluator(data, start_ms, end_ms).eval(root, ts)
        if isinstance(value, Matrix):
            if not instant:
                raise PromQLError(
                    'invalid expression type "range vector" for range query, '
                    "must be Scalar or instant Vector"
                )
            samples = ranges.window_samples(value, start_ms)
            native.refuse_components(Vec.empty(1) if not samples else _labels_only(samples))
            return Result("matrix", ts, samples=samples)
        if isinstance(value, str):
            return Result("string", ts, string=value)
        if isinstance(value, Vec):
            native.refuse_components(value)
            return Result("vector" if instant else "matrix", ts, vec=value.compact())
        return Result("scalar" if instant else "matrix", ts, scalar=value)

    targets = await load_targets(source, root, start_ms, end_ms)
    # Reading and evaluating in one worker thread: each hand-off between the event loop
    # and a worker cost about a millisecond, as much as a small panel's work.
    return await asyncio.get_running_loop().run_in_executor(
        None, lambda: run(load(source, root, start_ms, end_ms, targets))
    )
