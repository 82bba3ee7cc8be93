"""An independent answer to TraceQL searches: the sent spans as plain Python objects, and a
plain-Python reading of Tempo's documented semantics, span by span."""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable
from typing import Any

from shoal.traceql import plan

Typed = tuple[str, Any]  # (kind, value): string, int, float, bool, duration, status, span_kind


@dataclasses.dataclass
class OSpan:
    trace: str
    span_id: str
    parent: str | None
    name: str
    service: str | None
    kind: int
    status: int
    message: str
    start: int
    end: int
    attrs: dict[str, Typed]
    resource: dict[str, Typed]
    scope_name: str
    events: list[tuple[str, int, dict[str, Typed]]]
    links: list[tuple[str, str, dict[str, Typed]]]


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
NUMERIC = {"int", "float"}


def compare(op: str, left: Typed | None, right: Typed | None) -> bool:
    nil_right = right is not None and right[0] == "nil"
    nil_left = left is not None and left[0] == "nil"
    if nil_right or nil_left:
        other = left if nil_right else right
        if op == "=":
            return other is None
        if op == "!=":
            return other is not None
        return False
    if left is None or right is None:  # a missing value matches no comparison
        return False
    (lk, lv), (rk, rv) = left, right
    if lk == "array":  # an array matches when one of its elements does
        return any(compare(op, element, right) for element in lv)
    if rk == "array":
        return any(compare(op, left, element) for element in rv)
    if op in ("=~", "!~"):
        if lk != "string" or rk != "string":
            return False
        hit = re.fullmatch(rv, lv) is not None
        return hit if op == "=~" else not hit
    same = lk == rk or (lk in NUMERIC and rk in NUMERIC)
    if not same:
        return False
    if lk in ("status", "span_kind", "bool") and op not in ("=", "!="):
        return False
    return _OPS[op](lv, rv)


class Trace:
    def __init__(self, spans: list[OSpan]) -> None:
        self.spans = spans
        self.by_id = {s.span_id: s for s in spans}
        roots = sorted((s for s in spans if s.parent is None), key=lambda s: s.start)
        self.root = roots[0] if roots else None
        self.start = min(s.start for s in spans)
        self.end = max(s.end for s in spans)
        self.kids: dict[str, list[OSpan]] = {}
        for s in spans:
            if s.parent is not None:
                self.kids.setdefault(s.parent, []).append(s)

    def parent_of(self, span: OSpan) -> OSpan | None:
        return self.by_id.get(span.parent) if span.parent else None

    def children(self, span: OSpan) -> list[OSpan]:
        return self.kids.get(span.span_id, [])


def value(trace: Trace, span: OSpan, leaf: plan.Field) -> Typed | None:
    if isinstance(leaf, plan.Literal):
        return (leaf.kind, leaf.value)
    if isinstance(leaf, plan.Attribute):
        if leaf.scope == "span":
            return span.attrs.get(leaf.name)
        if leaf.scope == "resource":
            return span.resource.get(leaf.name)
        if leaf.scope is None:
            return span.attrs.get(leaf.name, span.resource.get(leaf.name))
        raise AssertionError(leaf)
    assert isinstance(leaf, plan.Intrinsic), leaf
    name = leaf.name
    root = trace.root
    if name == "span:name":
        return ("string", span.name)
    if name == "span:status":
        return ("status", span.status)
    if name == "span:statusMessage":
        return ("string", span.message)
    if name == "span:kind":
        return ("span_kind", span.kind)
    if name == "span:duration":
        return ("duration", span.end - span.start)
    if name == "span:childCount":
        return ("int", len(trace.children(span)))
    if name == "span:id":
        return ("string", span.span_id)
    if name == "span:parentID":
        return ("string", span.parent) if span.parent else None
    if name == "trace:id":
        return ("string", span.trace)
    if name == "trace:duration":
        return ("duration", trace.end - trace.start)
    if name == "trace:rootName":
        return ("string", root.name) if root else None
    if name == "trace:rootService":
        return ("string", root.service) if root and root.service else None
    if name == "instrumentation:name":
        return ("string", span.scope_name) if span.scope_name else None
    raise AssertionError(name)


def _nested_level(leaf: plan.Field) -> str | None:
    if isinstance(leaf, plan.Attribute) and leaf.scope in ("event", "link"):
        return leaf.scope
    if isinstance(leaf, plan.Intrinsic) and leaf.name.split(":")[0] in ("event", "link"):
        return leaf.name.split(":")[0]
    return None


def _nested_value(span: OSpan, item: Any, level: str, leaf: plan.Field) -> Typed | None:
    if isinstance(leaf, plan.Literal):
        return (leaf.kind, leaf.value)
    if isinstance(leaf, plan.Attribute):
        return item[2].get(leaf.name)  # type: ignore[no-any-return]
    assert isinstance(leaf, plan.Intrinsic)
    if leaf.name == "event:name":
        return ("string", item[0])
    if leaf.name == "event:timeSinceStart":
        return ("duration", item[1] - span.start)
    if leaf.name == "link:traceID":
        return ("string", item[0])
    if leaf.name == "link:spanID":
        return ("string", item[1])
    raise AssertionError(leaf)


def holds(trace: Trace, span: OSpan, node: plan.Field | None) -> bool:
    if node is None:
        return True
    if isinstance(node, plan.Logic):
        left = holds(trace, span, node.left)
        right = holds(trace, span, node.right)
        return (left and right) if node.op == "&&" else (left or right)
    if isinstance(node, plan.Not):
        return not holds(trace, span, node.operand)
    if isinstance(node, plan.Literal):
        return bool(node.value)
    if isinstance(node, plan.Compare):
        level = _nested_level(node.left) or _nested_level(node.right)
        if level is None:
            return compare(node.op, value(trace, span, node.left), value(trace, span, node.right))
        items = span.events if level == "event" else span.links
        if node.op == "=" and isinstance(node.right, plan.Literal) and node.right.kind == "nil":
            return not any(_nested_value(span, i, level, node.left) is not None for i in items)
        return any(
            compare(
                node.op,
                _nested_value(span, i, level, node.left),
                _nested_value(span, i, level, node.right),
            )
            for i in items
        )
    found = value(trace, span, node)
    return found is not None and found[0] == "bool" and bool(found[1])


# -- spansets -------------------------------------------------------------------

Sets = list[tuple[frozenset[str], tuple[Any, ...]]]
"""A trace's spansets: (span ids, by() labels)."""


def _related(trace: Trace, op: str, left: set[str], span: OSpan) -> bool:
    if op == ">":
        parent = trace.parent_of(span)
        return parent is not None and parent.span_id in left
    if op == "<":
        return any(c.span_id in left for c in trace.children(span))
    if op == ">>":
        parent = trace.parent_of(span)
        seen = set()
        while parent is not None and parent.span_id not in seen:
            if parent.span_id in left:
                return True
            seen.add(parent.span_id)
            parent = trace.parent_of(parent)
        return False
    if op == "<<":
        stack = list(trace.children(span))
        while stack:
            child = stack.pop()
            if child.span_id in left:
                return True
            stack.extend(trace.children(child))
        return False
    if op == "~":
        if trace.parent_of(span) is None:  # siblings share a parent that arrived
            return False
        return any(
            s.span_id in left and s.span_id != span.span_id and s.parent == span.parent
            for s in trace.spans
        )
    raise AssertionError(op)


_INVERSE = {">": "<", "<": ">", ">>": "<<", "<<": ">>", "~": "~"}


def _span_ids(sets: Sets) -> set[str]:
    return {i for ids, _ in sets for i in ids}


def spansets(trace: Trace, node: plan.Spanset) -> Sets:
    if isinstance(node, plan.SpansetFilter):
        ids = frozenset(s.span_id for s in trace.spans if holds(trace, s, node.condition))
        return [(ids, ())] if ids else []
    if isinstance(node, plan.SpansetOp):
        a = _span_ids(spansets(trace, node.left))
        b = _span_ids(spansets(trace, node.right))
        op = node.op
        if op == "||":
            out = a | b
        elif op == "&&":
            out = (a | b) if a and b else set()
        elif op.startswith("!"):
            out = {s for s in b if not _related(trace, op[1:], a, trace.by_id[s])}
        elif op.startswith("&"):
            mb = {s for s in b if _related(trace, op[1:], a, trace.by_id[s])}
            ma = {s for s in a if _related(trace, _INVERSE[op[1:]], mb, trace.by_id[s])}
            out = ma | mb
        else:
            out = {s for s in b if _related(trace, op, a, trace.by_id[s])}
        return [(frozenset(out), ())] if out else []
    sets: Sets | None = None
    for stage in node.stages:
        if isinstance(stage, plan.SpansetFilter | plan.SpansetOp | plan.Pipeline):
            keep = _span_ids(spansets(trace, stage))
            base = sets if sets is not None else [(frozenset(s.span_id for s in trace.spans), ())]
            sets = [(ids & keep, labels) for ids, labels in base if ids & keep]
            continue
        if sets is None:
            sets = [(frozenset(s.span_id for s in trace.spans), ())]
        if isinstance(stage, plan.ScalarFilter):
            sets = [(ids, lb) for ids, lb in sets if _aggregate_holds(trace, ids, stage)]
        elif isinstance(stage, plan.By):
            split: Sets = []
            for ids, labels in sets:
                groups: dict[Any, set[str]] = {}
                for i in ids:
                    groups.setdefault(value(trace, trace.by_id[i], stage.field), set()).add(i)
                split.extend((frozenset(g), (*labels, k)) for k, g in groups.items())
            sets = split
        elif isinstance(stage, plan.Coalesce):
            merged = _span_ids(sets)
            sets = [(frozenset(merged), ())] if merged else []
    return sets or []


def _aggregate_holds(trace: Trace, ids: frozenset[str], stage: plan.ScalarFilter) -> bool:
    agg = stage.aggregate
    if agg.fn == "count":
        result: float | None = float(len(ids))
    else:
        assert agg.field is not None
        numbers = []
        for i in ids:
            found = value(trace, trace.by_id[i], agg.field)
            if found is not None and found[0] in ("int", "float", "duration"):
                numbers.append(float(found[1]))
        if not numbers:
            return False
        result = {
            "sum": sum,
            "avg": lambda xs: sum(xs) / len(xs),
            "min": min,
            "max": max,
        }[agg.fn](numbers)
    return _OPS[stage.op](result, float(stage.literal.value))  # type: ignore[arg-type]


def answer(traces: dict[str, Trace], node: plan.Spanset) -> dict[str, set[frozenset[str]]]:
    """Per trace id found: its spansets as sets of span ids."""
    out = {}
    for trace_id, trace in traces.items():
        found = spansets(trace, node)
        if found:
            out[trace_id] = {ids for ids, _ in found}
    return out
