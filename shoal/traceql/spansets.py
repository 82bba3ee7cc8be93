"""Spanset expressions and pipelines over a frame: masks of spans, grouped into spansets.

A :class:`SpanSets` is a mask over the frame's spans and, for each selected span, the
spanset it belongs to (at first, its trace: one spanset per trace). Tempo's semantics:

* ``A && B``: the traces with spans in both; their spans of A and of B.
* ``A || B``: the spans of A and of B, in any trace.
* ``A > B`` / ``A < B``: the spans of B whose parent is (whose child is) in A;
  ``>>`` / ``<<`` descendants and ancestors; ``~`` siblings (same parent, another span);
  ``!>``... the spans of B for which that does not hold; ``&>``... the spans of B for
  which it holds together with the spans of A they are related to.
* ``| { cond }`` keeps the spans of each spanset that match; ``| count() > n`` and
  ``avg|min|max|sum(field) op v`` keep the spansets whose aggregate compares;
  ``| by(field)`` splits spansets by the field's value; ``| coalesce()`` merges a
  trace's spansets again; ``| select(...)`` names fields to answer with.

Relations are worked out with the frame's parent rows, one vectorised step per tree
level (ancestors, descendants), never span by span.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import TraceQLError
from shoal.traceql import plan
from shoal.traceql.evaluate import SpanFields, condition
from shoal.traceql.frame import BOOL, I64, Frame
from shoal.traceql.values import Values, compare


@dataclasses.dataclass
class SpanSets:
    mask: BOOL
    group: I64
    """Each span's spanset id (meaningful where ``mask``)."""
    labels: dict[int, list[tuple[str, Values, int]]] = dataclasses.field(default_factory=dict)
    """Per spanset id, the ``by(...)`` attributes: (name, values over the spans, a row)."""
    grouped: bool = False
    selected: tuple[plan.Field, ...] = ()


def _children_of(frame: Frame, marked: BOOL) -> BOOL:
    """Spans whose parent is marked."""
    parent = frame.parent
    ok = parent >= 0
    out = np.zeros(frame.n, dtype=np.bool_)
    out[ok] = marked[parent[ok]]
    return out


def _parents_of(frame: Frame, marked: BOOL) -> BOOL:
    """Spans with a marked child."""
    out = np.zeros(frame.n, dtype=np.bool_)
    parent = frame.parent
    rows = marked & (parent >= 0)
    out[parent[rows]] = True
    return out


def _closure(frame: Frame, marked: BOOL, step: object) -> BOOL:
    out = np.zeros(frame.n, dtype=np.bool_)
    frontier = marked
    for _ in range(frame.n + 1):
        nxt = step(frame, frontier) & ~out  # type: ignore[operator]
        if not nxt.any():
            break
        out |= nxt
        frontier = nxt
    return out


def _siblings_of(frame: Frame, marked: BOOL) -> BOOL:
    """Spans with a sibling (same parent, another span) that is marked."""
    parent = frame.parent
    has = parent >= 0
    counts = np.bincount(parent[marked & has], minlength=frame.n)
    mine = np.zeros(frame.n, dtype=np.int64)
    mine[has] = counts[parent[has]]
    return has & (mine - (marked & has).astype(np.int64) > 0)


def related(frame: Frame, op: str, left: BOOL) -> BOOL:
    """Spans that stand in ``op``'s relation to a span of ``left`` (``>``: children...)."""
    if op == ">":
        return _children_of(frame, left)
    if op == "<":
        return _parents_of(frame, left)
    if op == ">>":
        return _closure(frame, left, _children_of)
    if op == "<<":
        return _closure(frame, left, _parents_of)
    if op == "~":
        return _siblings_of(frame, left)
    raise TraceQLError(f"unknown operator {op}")


_INVERSE = {">": "<", "<": ">", ">>": "<<", "<<": ">>", "~": "~"}


def _ungrouped(frame: Frame, mask: BOOL) -> SpanSets:
    return SpanSets(mask, frame.trace.copy())


def combine(frame: Frame, op: str, left: SpanSets, right: SpanSets) -> SpanSets:
    if left.grouped or right.grouped:
        raise TraceQLError(f"{op} between grouped spansets (after by()) is not implemented")
    a, b = left.mask, right.mask
    if op == "||":
        return _ungrouped(frame, a | b)
    if op == "&&":
        in_a = np.bincount(frame.trace[a], minlength=frame.traces) > 0
        in_b = np.bincount(frame.trace[b], minlength=frame.traces) > 0
        both = in_a & in_b
        return _ungrouped(frame, (a | b) & frame.per_trace(both))
    if op.startswith("!"):
        return _ungrouped(frame, b & ~related(frame, op[1:], a))
    if op.startswith("&"):
        base = op[1:]
        matched_b = b & related(frame, base, a)
        matched_a = a & related(frame, _INVERSE[base], matched_b)
        return _ungrouped(frame, matched_a | matched_b)
    return _ungrouped(frame, b & related(frame, op, a))


def _aggregate(
    frame: Frame, sets: SpanSets, aggregate: plan.Aggregate
) -> tuple[I64, np.ndarray[Any, Any]]:
    """Per spanset id present: (ids, the aggregate's value as float or int)."""
    rows = np.flatnonzero(sets.mask)
    ids, inverse = np.unique(sets.group[rows], return_inverse=True)
    if aggregate.fn == "count":
        return ids, np.bincount(inverse, minlength=len(ids)).astype(np.int64)
    assert aggregate.field is not None
    values = SpanFields(frame).field(aggregate.field)
    numbers = np.full(frame.n, np.nan)
    kind = None
    for k in ("duration", "int", "float"):
        if k in values.typed:
            data, have = values.typed[k]
            numbers[have] = np.asarray(data, dtype=np.float64)[have]
            kind = kind or k
    sub = numbers[rows]
    valid = ~np.isnan(sub)
    out = np.full(len(ids), np.nan)
    if aggregate.fn in ("sum", "avg"):
        sums = np.bincount(inverse[valid], weights=sub[valid], minlength=len(ids))
        counts = np.bincount(inverse[valid], minlength=len(ids))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = sums if aggregate.fn == "sum" else sums / counts
        out = np.where(counts > 0, out, np.nan)
    elif aggregate.fn == "min":
        np.fmin.at(out, inverse[valid], sub[valid])
    else:
        np.fmax.at(out, inverse[valid], sub[valid])
    return ids, out


def scalar_filter(frame: Frame, sets: SpanSets, stage: plan.ScalarFilter) -> SpanSets:
    ids, values = _aggregate(frame, sets, stage.aggregate)
    literal = stage.literal
    if literal.kind not in ("int", "float", "duration"):
        raise TraceQLError(f"{stage.aggregate.text()} compares with numbers, not {literal.text()}")
    with np.errstate(invalid="ignore"):
        ok = {
            "=": np.equal, "!=": np.not_equal, ">": np.greater, ">=": np.greater_equal,
            "<": np.less, "<=": np.less_equal,
        }[stage.op](values.astype(np.float64), float(literal.value))  # type: ignore[arg-type]  # fmt: skip
    keep = np.zeros(int(sets.group.max(initial=0)) + 1, dtype=np.bool_)
    keep[ids[ok & ~np.isnan(values.astype(np.float64))]] = True
    mask = sets.mask & keep[np.where(sets.mask, sets.group, 0)]
    return dataclasses.replace(sets, mask=mask)


def group_by(frame: Frame, sets: SpanSets, stage: plan.By) -> SpanSets:
    values = SpanFields(frame).field(stage.field)
    codes = np.full(frame.n, -1, dtype=np.int64)  # -1: nil
    offset = 0
    for data, have in values.typed.values():
        if isinstance(data, pa.Scalar):  # by() of a literal: one value for every span
            data = pa.array([data.as_py()] * frame.n, data.type)
        array = data if isinstance(data, pa.Array) else pa.array(data)
        encoded = pc.dictionary_encode(array)
        index = np.asarray(encoded.indices.fill_null(0).to_numpy(False), dtype=np.int64)
        codes[have] = offset + index[have]
        offset += len(encoded.dictionary)
    rows = np.flatnonzero(sets.mask)
    pairs = np.stack([sets.group[rows], codes[rows]], axis=1)
    unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
    group = sets.group.copy()
    base = int(sets.group.max(initial=0)) + 1
    group[rows] = base + inverse.reshape(-1)
    labels = {}
    name = f"by({plan.field_text(stage.field)})"
    for i, (old, _) in enumerate(unique):
        first_row = rows[np.argmax(inverse.reshape(-1) == i)]
        labels[base + i] = [*sets.labels.get(int(old), []), (name, values, int(first_row))]
    return SpanSets(sets.mask, group, labels, True, sets.selected)


def evaluate(frame: Frame, node: plan.Spanset) -> SpanSets:
    """The spansets of ``node`` over ``frame``."""
    if isinstance(node, plan.SpansetFilter):
        return _ungrouped(frame, condition(frame, node.condition))
    if isinstance(node, plan.SpansetOp):
        return combine(frame, node.op, evaluate(frame, node.left), evaluate(frame, node.right))
    sets: SpanSets | None = None
    for stage in node.stages:
        if isinstance(stage, plan.SpansetFilter | plan.SpansetOp | plan.Pipeline):
            found = evaluate(frame, stage)
            sets = found if sets is None else dataclasses.replace(sets, mask=sets.mask & found.mask)
            continue
        if sets is None:
            sets = _ungrouped(frame, np.ones(frame.n, dtype=np.bool_))
        if isinstance(stage, plan.ScalarFilter):
            sets = scalar_filter(frame, sets, stage)
        elif isinstance(stage, plan.By):
            sets = group_by(frame, sets, stage)
        elif isinstance(stage, plan.Coalesce):
            sets = SpanSets(sets.mask, frame.trace.copy(), {}, False, sets.selected)
        elif isinstance(stage, plan.Select):
            sets = dataclasses.replace(sets, selected=sets.selected + stage.fields)
    assert sets is not None
    return sets


__all__ = ["SpanSets", "compare", "evaluate", "related"]
