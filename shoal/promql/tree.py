"""PromQL expressions as plain dataclasses, converted from ``promql-parser``'s objects.

The parser (a binding of a Rust PromQL parser) hands out fresh wrapper objects
on every attribute access; evaluation needs stable nodes it can key fetched
data by, with times already in milliseconds and ``@ start()``/``@ end()``
resolved, so the tree is copied once into these classes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import promql_parser

from shoal.errors import PromQLError
from shoal.promql.matchers import LabelMatcher
from shoal.promql.model import NAME

_MATCH_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def _register_functions() -> None:
    """Functions of the Prometheus 2.x releases the parser no longer knows by that name."""
    kind = promql_parser.ValueType
    extra = promql_parser.Function(
        "holt_winters", [kind.Matrix, kind.Scalar, kind.Scalar], kind.Vector
    )
    try:
        promql_parser.register_extra_functions([extra])
    except ValueError:  # already known (registered before, or a later parser has it)
        pass


_register_functions()


@dataclasses.dataclass(eq=False)
class Node:
    pass


@dataclasses.dataclass(eq=False)
class Num(Node):
    value: float


@dataclasses.dataclass(eq=False)
class Str(Node):
    value: str


@dataclasses.dataclass(eq=False)
class Selector(Node):
    matchers: list[LabelMatcher]
    offset_ms: int
    at_ms: int | None
    range_ms: int | None = None  # set for a range vector selector (``x[5m]``)

    @property
    def metric(self) -> str | None:
        for m in self.matchers:
            if m.name == NAME and m.op == "=":
                return m.value
        return None


@dataclasses.dataclass(eq=False)
class Subquery(Node):
    expr: Node
    range_ms: int
    step_ms: int | None
    offset_ms: int
    at_ms: int | None


@dataclasses.dataclass(eq=False)
class Call(Node):
    name: str
    args: list[Node]


@dataclasses.dataclass(eq=False)
class Aggregate(Node):
    op: str
    expr: Node
    param: Node | None
    labels: list[str]
    without: bool
    grouped: bool  # a by/without clause was given


@dataclasses.dataclass(eq=False)
class Binary(Node):
    op: str
    lhs: Node
    rhs: Node
    return_bool: bool = False
    card: str = "OneToOne"
    on: bool | None = None  # True: on(...), False: ignoring(...), None: neither
    matching: list[str] = dataclasses.field(default_factory=list)
    include: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class Neg(Node):
    expr: Node


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _ms(delta: dt.timedelta | None) -> int:
    if delta is None:
        return 0
    return (delta.days * 86_400_000) + delta.seconds * 1000 + delta.microseconds // 1000


def _at(at: Any, start_ms: int, end_ms: int) -> int | None:
    if at is None:
        return None
    kind = str(at.type).rsplit(".", 1)[-1]
    if kind == "Start":
        return start_ms
    if kind == "End":
        return end_ms
    return at_ms(at)


def at_ms(at: Any) -> int | None:
    """An ``@`` modifier's fixed time in milliseconds (None for ``start()``/``end()``)."""
    if str(at.type).rsplit(".", 1)[-1] != "At":
        return None
    try:
        when: dt.datetime = at.at
    except BaseException as exc:  # the binding panics on times before 1970
        if type(exc).__name__ != "PanicException":
            raise
        raise PromQLError("an @ time before 1970 is not supported") from None
    return _ms(when - _EPOCH)


def _selector(vs: Any, start_ms: int, end_ms: int) -> Selector:
    matchers = [
        LabelMatcher(str(m.name), _MATCH_OPS[str(m.op).rsplit(".", 1)[-1]], str(m.value))
        for m in vs.matchers.matchers
    ]
    if vs.matchers.or_matchers:
        raise PromQLError("label matchers joined with 'or' are not supported")
    if vs.name is not None:
        matchers.insert(0, LabelMatcher(NAME, "=", str(vs.name)))
    for m in matchers:
        if m.op in ("=~", "!~"):
            m.regex()
    return Selector(matchers, _ms(vs.offset), _at(vs.at, start_ms, end_ms))


def convert(expr: Any, start_ms: int, end_ms: int) -> Node:
    """Our tree for a parsed expression; unknown node kinds are a ``bad_data`` error."""
    kind = type(expr).__name__
    if kind == "NumberLiteral":
        return Num(float(expr.val))
    if kind == "StringLiteral":
        return Str(str(expr.val))
    if kind == "ParenExpr":
        return convert(expr.expr, start_ms, end_ms)
    if kind == "UnaryExpr":
        return Neg(convert(expr.expr, start_ms, end_ms))
    if kind == "VectorSelector":
        return _selector(expr, start_ms, end_ms)
    if kind == "MatrixSelector":
        sel = _selector(expr.vector_selector, start_ms, end_ms)
        sel.range_ms = _ms(expr.range)
        return sel
    if kind == "SubqueryExpr":
        step = _ms(expr.step) if expr.step is not None else None
        return Subquery(
            convert(expr.expr, start_ms, end_ms),
            _ms(expr.range),
            step or None,
            _ms(expr.offset),
            _at(expr.at, start_ms, end_ms),
        )
    if kind == "Call":
        return Call(str(expr.func.name), [convert(a, start_ms, end_ms) for a in expr.args])
    if kind == "AggregateExpr":
        modifier = expr.modifier
        labels: list[str] = []
        without = False
        if modifier is not None:
            labels = [str(x) for x in modifier.labels]
            without = str(modifier.type).endswith("Without")
        param = convert(expr.param, start_ms, end_ms) if expr.param is not None else None
        return Aggregate(
            str(expr.op),
            convert(expr.expr, start_ms, end_ms),
            param,
            labels,
            without,
            modifier is not None,
        )
    if kind == "BinaryExpr":
        node = Binary(
            str(expr.op), convert(expr.lhs, start_ms, end_ms), convert(expr.rhs, start_ms, end_ms)
        )
        mod = expr.modifier
        if mod is not None:
            node.return_bool = bool(mod.return_bool)
            node.card = str(mod.card).rsplit(".", 1)[-1]
            if mod.matching is not None:
                node.on = str(mod.matching.type).endswith("Include")
                node.matching = [str(x) for x in mod.matching.labels]
            if mod.group_labels is not None:
                node.include = [str(x) for x in mod.group_labels]
        return node
    raise PromQLError(f"unsupported expression: {kind}")


def parse_expr(text: str) -> Any:
    """The parser's own tree of ``text``; a ``bad_data`` error when it does not parse."""
    if not text.strip():
        raise PromQLError("empty query")
    try:
        return promql_parser.parse(text)
    except (ValueError, TypeError) as exc:
        raise PromQLError(f'invalid parameter "query": {exc}') from None


def parse(text: str, start_ms: int, end_ms: int) -> Node:
    return convert(parse_expr(text), start_ms, end_ms)
