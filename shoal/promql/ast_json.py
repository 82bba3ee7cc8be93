"""A parsed PromQL expression as JSON: ``/api/v1/parse_query``.

Prometheus 3 added the endpoint for its UI's tree view (2.x has none); this is the
shape of its ``translateAST``: a ``type`` per node (``vectorSelector``,
``matrixSelector``, ``subquery``, ``call``, ``aggregation``, ``binaryExpr``,
``unaryExpr``, ``parenExpr``, ``numberLiteral``, ``stringLiteral``), times and
durations in milliseconds, matchers with the metric name's matcher included. The keys
later releases added for experimental syntax (duration expressions, ``anchored`` and
``smoothed`` selectors, fill values of vector matching) are present with the values an
expression without that syntax has (null, false).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from shoal.errors import PromQLError
from shoal.promql import format as fmt
from shoal.promql.tree import at_ms, parse_expr

_CARD = {"OneToOne": "one-to-one", "ManyToOne": "many-to-one", "OneToMany": "one-to-many",
         "ManyToMany": "many-to-many"}  # fmt: skip


def _ms(delta: dt.timedelta | None) -> int:
    if delta is None:
        return 0
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def _number(value: float) -> str:
    """A float as Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: positional, shortest."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = fmt.go_float(value)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits = mantissa.lstrip("-").replace(".", "")
    point = 1 + int(exponent)
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _at(at: Any) -> tuple[int | None, str | None]:
    if at is None:
        return None, None
    kind = fmt.enum_name(at.type)
    if kind == "At":
        return at_ms(at), None
    return None, kind.lower()


def _matchers(vs: Any) -> list[dict[str, str]]:
    return [{"name": n, "value": v, "type": op} for n, op, v in fmt.matchers_of(vs)]


def _selector(vs: Any) -> dict[str, Any]:
    timestamp, start_or_end = _at(vs.at)
    return {
        "name": str(vs.name) if vs.name is not None else "",
        "offset": _ms(vs.offset),
        "offsetExpr": None,
        "matchers": _matchers(vs),
        "timestamp": timestamp,
        "startOrEnd": start_or_end,
        "anchored": False,
        "smoothed": False,
    }


def translate(node: Any) -> dict[str, Any]:
    """The JSON tree of a parsed expression."""
    kind = fmt.kind_of(node)
    if kind == "NumberLiteral":
        return {"type": "numberLiteral", "val": _number(float(node.val))}
    if kind == "StringLiteral":
        return {"type": "stringLiteral", "val": str(node.val)}
    if kind == "ParenExpr":
        return {"type": "parenExpr", "expr": translate(node.expr)}
    if kind == "UnaryExpr":
        return {"type": "unaryExpr", "op": "-", "expr": translate(node.expr)}
    if kind == "VectorSelector":
        return {"type": "vectorSelector", **_selector(node)}
    if kind == "MatrixSelector":
        found = _selector(node.vector_selector)
        return {
            "type": "matrixSelector",
            "name": found["name"],
            "range": _ms(node.range),
            "rangeExpr": None,
            **{k: v for k, v in found.items() if k != "name"},
        }
    if kind == "SubqueryExpr":
        timestamp, start_or_end = _at(node.at)
        return {
            "type": "subquery",
            "expr": translate(node.expr),
            "range": _ms(node.range),
            "rangeExpr": None,
            "offset": _ms(node.offset),
            "offsetExpr": None,
            "step": _ms(node.step),
            "stepExpr": None,
            "timestamp": timestamp,
            "startOrEnd": start_or_end,
        }
    if kind == "Call":
        func = node.func
        return {
            "type": "call",
            "func": {
                "name": str(func.name),
                "argTypes": [fmt.enum_name(t).lower() for t in func.arg_types],
                "variadic": int(func.variadic),
                "returnType": fmt.enum_name(func.return_type).lower(),
            },
            "args": [translate(a) for a in node.args],
        }
    if kind == "AggregateExpr":
        mod = node.modifier
        return {
            "type": "aggregation",
            "op": str(node.op),
            "expr": translate(node.expr),
            "param": translate(node.param) if node.param is not None else None,
            "grouping": [str(x) for x in mod.labels] if mod is not None else [],
            "without": mod is not None and fmt.enum_name(mod.type) == "Without",
        }
    if kind == "BinaryExpr":
        vm = fmt.vector_matching(node)
        matching = None
        if vm is not None:
            matching = {
                "card": _CARD[vm["card"]],
                "labels": vm["labels"],
                "on": vm["on"],
                "include": vm["include"],
                "fillValues": {"lhs": None, "rhs": None},
            }
        return {
            "type": "binaryExpr",
            "op": str(node.op),
            "lhs": translate(node.lhs),
            "rhs": translate(node.rhs),
            "matching": matching,
            "bool": node.modifier is not None and bool(node.modifier.return_bool),
        }
    raise PromQLError(f"unsupported expression: {kind}")


def parse_query(query: str) -> dict[str, Any]:
    """``query``'s tree as Prometheus' ``/api/v1/parse_query`` answers."""
    return translate(parse_expr(query))
