"""Field expressions (the inside of ``{ }``) evaluated over a frame's spans, column-wise.

Every leaf becomes a :class:`~shoal.traceql.values.Values` over the spans (attributes
from the map lookups the source projected; intrinsics from the span columns; trace-level
intrinsics worked out per trace and broadcast), every comparison a boolean mask, and
``&&``, ``||``, ``!`` combine masks. A comparison on an event's or a link's field is
evaluated over the flattened events (links) and holds for a span when it holds for one
of its events (links); ``= nil`` holds when none of them has the field. An unscoped
attribute ``.x`` is the span's attribute where the span has one, else the resource's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import TraceQLError
from shoal.traceql import plan
from shoal.traceql.frame import BOOL, Frame, ints
from shoal.traceql.values import Values, compare, truth

ATTRIBUTE_COLUMNS = {
    "span": ("attributes", "attributes_types"),
    "resource": ("resource_attributes", "resource_attributes_types"),
    "instrumentation": ("scope_attributes", "scope_attributes_types"),
}
"""Where each span-level scope's attributes are (events and links hold their own)."""


def alias(scope: str, name: str) -> str:
    """The column a source projects an attribute lookup into (text; types add ``#t``)."""
    return f"{scope}:{name}"


def level(field: plan.Field) -> str:
    """``span``, ``event`` or ``link``: the rows a leaf's values are over."""
    if isinstance(field, plan.Attribute) and field.scope in ("event", "link"):
        return field.scope
    if isinstance(field, plan.Intrinsic) and field.name.split(":")[0] in ("event", "link"):
        return field.name.split(":")[0]
    if isinstance(field, plan.Compare | plan.Logic):
        levels = {level(field.left), level(field.right)} - {"span"}
        if len(levels) > 1:
            raise TraceQLError("a comparison cannot mix event and link fields")
        return levels.pop() if levels else "span"
    if isinstance(field, plan.Not):
        return level(field.operand)
    return "span"


def _status(codes: pa.Array, n: int) -> Values:
    return Values(n, {"status": (np.asarray(ints(codes)), np.ones(n, dtype=np.bool_))})


def _strings(column: pa.Array) -> Values:
    rows = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    return Values(len(column), {"string": (column, rows)} if rows.any() else {})


def _numbers(kind: str, data: np.ndarray[Any, Any], rows: BOOL | None = None) -> Values:
    n = len(data)
    return Values(n, {kind: (data, np.ones(n, dtype=np.bool_) if rows is None else rows)})


def _prefer(first: Values, second: Values) -> Values:
    """``first``'s value where it has one, else ``second``'s."""
    taken = first.present
    typed = dict(first.typed)
    for kind, (data, rows) in second.typed.items():
        extra = rows & ~taken
        if not extra.any():
            continue
        if kind in typed:
            mine, mine_rows = typed[kind]
            if kind == "string":
                merged = pc.if_else(pa.array(mine_rows), mine, data)
            else:
                merged = np.where(mine_rows, mine, data)
            typed[kind] = (merged, mine_rows | extra)
        else:
            typed[kind] = (data, extra)
    other = first.other if first.other is not None else np.zeros(first.n, dtype=np.bool_)
    if second.other is not None:
        other = other | (second.other & ~taken)
    elements = list(first.elements)
    for values, parent in second.elements:
        keep = np.flatnonzero(~taken[parent])
        elements.append((values.take(keep), parent[keep]))
    return Values(first.n, typed, other, elements)


class SpanFields:
    """Field values over the frame's spans."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame

    def attribute(self, scope: str, name: str) -> Values:
        key = alias(scope, name)
        table = self.frame.table
        if key not in table.column_names:
            raise TraceQLError(f"internal: {key} was not read")  # a planning bug, loudly
        return Values.attribute(self.frame.column(key), self.frame.column(key + "#t"))

    def field(self, leaf: plan.Field) -> Values:
        f = self.frame
        if isinstance(leaf, plan.Literal):
            return Values.constant(f.n, leaf)
        if isinstance(leaf, plan.Attribute):
            if leaf.scope is None:
                return _prefer(
                    self.attribute("span", leaf.name), self.attribute("resource", leaf.name)
                )
            return self.attribute(leaf.scope, leaf.name)
        if not isinstance(leaf, plan.Intrinsic):
            raise TraceQLError("a condition cannot be compared as a value")
        name = leaf.name
        if name == "span:name":
            return _strings(f.column("name"))
        if name == "span:status":
            return _status(f.column("status_code"), f.n)
        if name == "span:statusMessage":
            return _strings(f.column("status_message").fill_null(""))
        if name == "span:kind":
            return Values(f.n, {"span_kind": (ints(f.column("kind")), np.ones(f.n, np.bool_))})
        if name == "span:duration":
            return _numbers("duration", f.end - f.start)
        if name == "span:childCount":
            return _numbers("int", f.child_count)
        if name == "span:id":
            return _strings(f.column("span_id"))
        if name == "span:parentID":
            return _strings(f.column("parent_span_id"))
        if name == "trace:id":
            return _strings(f.column("trace_id"))
        if name == "trace:duration":
            return _numbers("duration", f.per_trace(f.trace_end - f.trace_start))
        if name in ("trace:rootName", "trace:rootService"):
            source = f.column("name" if name == "trace:rootName" else "service_name")
            root = f.per_trace(f.root_row)
            taken = pc.take(source, pa.array(np.where(root >= 0, root, 0)))
            return _strings(pc.if_else(pa.array(root >= 0), taken, pa.nulls(f.n, pa.string())))
        if name == "instrumentation:name":
            return _strings(f.column("scope_name"))
        if name == "instrumentation:version":
            return _strings(f.column("scope_version"))
        raise TraceQLError(f"{name} is not implemented")


class NestedFields:
    """Field values over the frame's events or links (flattened), with each row's span."""

    def __init__(self, frame: Frame, which: str) -> None:
        lists = frame.column("events" if which == "event" else "links")
        self.frame = frame
        self.which = which
        self.items = pc.list_flatten(lists)
        self.owner = ints(pc.list_parent_indices(lists))
        self.n = len(self.items)

    def field(self, leaf: plan.Field) -> Values:
        if isinstance(leaf, plan.Literal):
            return Values.constant(self.n, leaf)
        if isinstance(leaf, plan.Attribute):
            attrs = self.items.field("attributes")
            types = self.items.field("attributes_types")
            return Values.attribute(
                pc.map_lookup(attrs, leaf.name, "first"), pc.map_lookup(types, leaf.name, "first")
            )
        if isinstance(leaf, plan.Intrinsic):
            if leaf.name == "event:name":
                return _strings(self.items.field("name"))
            if leaf.name == "event:timeSinceStart":
                since = ints(self.items.field("time_unix_nano")) - self.frame.start[self.owner]
                return _numbers("duration", since)
            if leaf.name == "link:traceID":
                return _strings(self.items.field("trace_id"))
            if leaf.name == "link:spanID":
                return _strings(self.items.field("span_id"))
        raise TraceQLError(f"{plan.field_text(leaf)} cannot be used with {self.which} fields")

    def any_per_span(self, rows: BOOL) -> BOOL:
        out = np.zeros(self.frame.n, dtype=np.bool_)
        out[self.owner[rows]] = True
        return out


def _connective(node: plan.Logic | plan.Not, over: Callable[[plan.Field], BOOL]) -> BOOL:
    """``&&``, ``||`` or ``!`` of the conditions that ``over`` gives the operands."""
    if isinstance(node, plan.Not):
        return ~over(node.operand)
    left, right = over(node.left), over(node.right)
    return left & right if node.op == "&&" else left | right


def _condition_over(fields: SpanFields | NestedFields, node: plan.Field) -> BOOL:
    n = fields.frame.n if isinstance(fields, SpanFields) else fields.n
    if isinstance(node, plan.Logic | plan.Not):
        return _connective(node, lambda operand: _condition_over(fields, operand))
    if isinstance(node, plan.Compare):
        if isinstance(node.left, plan.Compare | plan.Logic | plan.Not) or isinstance(
            node.right, plan.Compare | plan.Logic | plan.Not
        ):
            raise TraceQLError("a comparison's sides must be fields or literals")
        return compare(node.op, fields.field(node.left), fields.field(node.right))
    if isinstance(node, plan.Literal):
        if node.kind != "bool":
            raise TraceQLError(f"{node.text()} is not a condition")
        return np.full(n, bool(node.value), dtype=np.bool_)
    return truth(fields.field(node))


def condition(frame: Frame, node: plan.Field | None) -> BOOL:
    """The spans of ``frame`` for which the field expression ``node`` holds."""
    if node is None:
        return np.ones(frame.n, dtype=np.bool_)
    if isinstance(node, plan.Logic | plan.Not):
        return _connective(node, lambda operand: condition(frame, operand))
    where = level(node)
    if where == "span":
        return _condition_over(SpanFields(frame), node)
    nested = NestedFields(frame, where)
    if (
        isinstance(node, plan.Compare)
        and node.op == "="
        and isinstance(node.right, plan.Literal)
        and node.right.kind == "nil"
    ):
        # no event (link) has the field
        has = compare("!=", nested.field(node.left), Values(nested.n, {}))
        return ~nested.any_per_span(has)
    return nested.any_per_span(_condition_over(nested, node))
