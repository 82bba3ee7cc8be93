"""Vector aggregations and binary operators over series, step by step, as Prometheus'
(and so Loki's) semantics define them: grouping with ``by``/``without``, one-to-one and
many-to-one vector matching (``on``, ``ignoring``, ``group_left``, ``group_right``),
comparisons that filter (or give 0/1 with ``bool``), and the set operators."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from shoal.errors import LogQLError
from shoal.logql import model as m
from shoal.logql.series import F64, Scalar, Series, Value, sort_key


def _group_labels(labels: dict[str, str], grouping: m.Grouping | None) -> dict[str, str]:
    if grouping is None:
        return {}
    if grouping.without:
        return {k: v for k, v in labels.items() if k not in grouping.labels}
    return {k: v for k, v in labels.items() if k in grouping.labels}


def aggregate(node: m.VectorAggregation, series: list[Series], k: F64 | None) -> list[Series]:
    op = node.op
    if not series:
        return []
    if op in ("sort", "sort_desc"):
        return sorted(series, key=lambda s: sort_key(s.labels))
    if op in ("topk", "bottomk"):
        assert k is not None
        return _top(series, node.grouping, k, op == "topk")
    groups: dict[tuple[tuple[str, str], ...], list[Series]] = {}
    for s in series:
        labels = _group_labels(s.labels, node.grouping)
        groups.setdefault(tuple(sorted(labels.items())), []).append(s)
    out: list[Series] = []
    for key, members in groups.items():
        values = np.stack([s.values for s in members])
        present = np.stack([s.present for s in members])
        any_present: np.ndarray = np.asarray(present.any(axis=0), dtype=np.bool_)
        count = present.sum(axis=0).astype(np.float64)
        masked = np.where(present, values, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            if op == "sum":
                result = masked.sum(axis=0)
            elif op == "count":
                result = count
            elif op == "avg":
                result = masked.sum(axis=0) / count
            elif op == "min":
                result = np.where(present, values, np.inf).min(axis=0)
            elif op == "max":
                result = np.where(present, values, -np.inf).max(axis=0)
            elif op in ("stddev", "stdvar"):
                mean = masked.sum(axis=0) / count
                var = np.where(present, (values - mean) ** 2, 0.0).sum(axis=0) / count
                result = np.sqrt(var) if op == "stddev" else var
            else:
                raise LogQLError(f"the aggregation {op} is not supported")
        out.append(Series(dict(key), np.where(any_present, result, 0.0), any_present))
    return out


def _top(series: list[Series], grouping: m.Grouping | None, k: F64, top: bool) -> list[Series]:
    groups: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for i, s in enumerate(series):
        groups.setdefault(tuple(sorted(_group_labels(s.labels, grouping).items())), []).append(i)
    kept = [np.zeros_like(s.present) for s in series]
    steps = len(series[0].values)
    for members in groups.values():
        for step in range(steps):
            count = int(k[step]) if not math.isnan(k[step]) else 0
            if count < 1:
                continue
            candidates = [i for i in members if series[i].present[step]]
            candidates.sort(key=lambda i: series[i].values[step], reverse=top)
            for i in candidates[:count]:
                kept[i][step] = True
    return [
        Series(s.labels, s.values, s.present & keep)
        for s, keep in zip(series, kept, strict=True)
        if (s.present & keep).any()
    ]


_ARITHMETIC: dict[str, Callable[[F64, F64], F64]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide,
    "%": np.fmod, "^": np.power,
}  # fmt: skip
_COMPARISON: dict[str, Callable[[F64, F64], np.ndarray]] = {
    "==": np.equal, "!=": np.not_equal, ">": np.greater, ">=": np.greater_equal,
    "<": np.less, "<=": np.less_equal,
}  # fmt: skip


def _apply(op: str, left: F64, right: F64) -> tuple[F64, np.ndarray | None]:
    """The values and, for a comparison, where it holds."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if op in _ARITHMETIC:
            return _ARITHMETIC[op](left, right), None
        holds = _COMPARISON[op](left, right)
        return left, holds


def binary(node: m.Binary, left: Value, right: Value) -> Value:
    op = node.op
    if op in ("and", "or", "unless"):
        if isinstance(left, Scalar) or isinstance(right, Scalar):
            raise LogQLError(f"set operator {op} not allowed in binary scalar expression")
        return _set_operation(op, left, right, node.matching)
    if isinstance(left, Scalar) and isinstance(right, Scalar):
        values, holds = _apply(op, left.values, right.values)
        if holds is not None:
            if not node.bool_modifier:
                raise LogQLError("comparisons between scalars must use the bool modifier")
            values = holds.astype(np.float64)
        return Scalar(values)
    if isinstance(left, Scalar) or isinstance(right, Scalar):
        return _with_scalar(node, left, right)
    return _vector_vector(node, left, right)


def _result(node: m.Binary, values: F64, holds: np.ndarray | None, present: np.ndarray,
            keep_side: F64) -> tuple[F64, np.ndarray]:  # fmt: skip
    if holds is None:
        return values, present
    if node.bool_modifier:
        return holds.astype(np.float64), present
    return keep_side, present & holds


def _with_scalar(node: m.Binary, left: Value, right: Value) -> list[Series]:
    out = []
    series = left if isinstance(left, list) else right
    assert isinstance(series, list)
    for s in series:
        a = s.values if isinstance(left, list) else left.values
        b = s.values if isinstance(right, list) else right.values
        values, holds = _apply(node.op, a, b)
        values, present = _result(node, values, holds, s.present, s.values)
        if present.any():
            out.append(Series(dict(s.labels), values, present))
    return out


def _match_key(labels: dict[str, str], matching: m.Matching | None) -> tuple[tuple[str, str], ...]:
    if matching is None:
        return tuple(sorted(labels.items()))
    if matching.on:
        return tuple(sorted((k, v) for k, v in labels.items() if k in matching.labels))
    return tuple(sorted((k, v) for k, v in labels.items() if k not in matching.labels))


def _vector_vector(node: m.Binary, left: list[Series], right: list[Series]) -> list[Series]:
    matching = node.matching
    group = matching.group if matching is not None else ""
    one, many = (right, left) if group != "right" else (left, right)
    index: dict[tuple[tuple[str, str], ...], Series] = {}
    for s in one:
        key = _match_key(s.labels, matching)
        if key in index:
            raise LogQLError(
                "found duplicate series for the match group "
                f"{dict(key)} on the {'right' if group != 'right' else 'left'} hand-side of the "
                "operation; many-to-many matching not allowed: matching labels must be unique "
                "on one side"
            )
        index[key] = s
    if not group:
        seen: set[tuple[tuple[str, str], ...]] = set()
        for s in many:
            key = _match_key(s.labels, matching)
            if key in seen and key in index:
                raise LogQLError(
                    f"found duplicate series for the match group {dict(key)} on the left "
                    "hand-side of the operation; many-to-many matching not allowed"
                )
            seen.add(key)
    comparison = node.op in _COMPARISON
    out: list[Series] = []
    for s in many:
        partner = index.get(_match_key(s.labels, matching))
        if partner is None:
            continue
        a, b = (s, partner) if group != "right" else (partner, s)
        values, holds = _apply(node.op, a.values, b.values)
        present = a.present & b.present
        values, present = _result(node, values, holds, present, a.values)
        if not present.any():
            continue
        out.append(Series(_result_labels(node, s, partner, comparison), values, present))
    return out


def _result_labels(node: m.Binary, s: Series, partner: Series, comparison: bool) -> dict[str, str]:
    matching = node.matching
    if matching is not None and matching.group:
        labels = dict(s.labels)
        for name in matching.include:
            if name in partner.labels:
                labels[name] = partner.labels[name]
            else:
                labels.pop(name, None)
        return labels
    if (comparison and not node.bool_modifier) or matching is None:
        return dict(s.labels)
    return dict(_match_key(s.labels, matching))


def _set_operation(op: str, left: list[Series], right: list[Series],
                   matching: m.Matching | None) -> list[Series]:  # fmt: skip
    if not left and not right:
        return []
    steps = len((left or right)[0].values)
    on_right: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
    for s in right:
        key = _match_key(s.labels, matching)
        on_right[key] = on_right.get(key, np.zeros(steps, bool)) | s.present
    out: list[Series] = []
    if op == "and":
        for s in left:
            mask = s.present & on_right.get(_match_key(s.labels, matching), np.zeros(steps, bool))
            if mask.any():
                out.append(Series(s.labels, s.values, mask))
        return out
    if op == "unless":
        for s in left:
            mask = s.present & ~on_right.get(_match_key(s.labels, matching), np.zeros(steps, bool))
            if mask.any():
                out.append(Series(s.labels, s.values, mask))
        return out
    on_left: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
    for s in left:
        key = _match_key(s.labels, matching)
        on_left[key] = on_left.get(key, np.zeros(steps, bool)) | s.present
        out.append(s)
    for s in right:
        mask = s.present & ~on_left.get(_match_key(s.labels, matching), np.zeros(steps, bool))
        if mask.any():
            out.append(Series(s.labels, s.values, mask))
    return out


def negate(value: Value) -> Value:
    if isinstance(value, Scalar):
        return Scalar(-value.values)
    return [Series(s.labels, -s.values, s.present) for s in value]


def label_replace(series: Sequence[Series], node: m.LabelReplace) -> list[Series]:
    from shoal.regex import compile_pattern

    pattern = compile_pattern(node.regex, standalone=False)
    out = []
    for s in series:
        found = pattern.replace(s.labels.get(node.source, ""), node.replacement)
        labels = dict(s.labels)
        if found is not None:
            if found:
                labels[node.destination] = found
            else:
                labels.pop(node.destination, None)
        out.append(Series(labels, s.values, s.present))
    return out
