"""PromQL text from shoal's expression tree (shoal/promql/tree.py), for tests that rewrite
a query: every node in parentheses, durations in milliseconds, ``@`` in seconds."""

from __future__ import annotations

import json
import math

from shoal.promql.tree import Aggregate, Binary, Call, Neg, Node, Num, Selector, Str, Subquery


def _number(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf" if x > 0 else "-Inf"
    return repr(x)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _modifiers(offset_ms: int, at_ms: int | None) -> str:
    out = ""
    if at_ms is not None:
        out += f" @ {at_ms / 1000:.3f}"
    if offset_ms:
        out += f" offset {offset_ms}ms"
    return out


def render(node: Node) -> str:
    if isinstance(node, Num):
        return _number(node.value)
    if isinstance(node, Str):
        return _string(node.value)
    if isinstance(node, Selector):
        matchers = ", ".join(f"{m.name}{m.op}{_string(m.value)}" for m in node.matchers)
        window = f"[{node.range_ms}ms]" if node.range_ms is not None else ""
        return "{" + matchers + "}" + window + _modifiers(node.offset_ms, node.at_ms)
    if isinstance(node, Subquery):
        step = f"{node.step_ms}ms" if node.step_ms is not None else ""
        inner = f"({render(node.expr)})[{node.range_ms}ms:{step}]"
        return inner + _modifiers(node.offset_ms, node.at_ms)
    if isinstance(node, Neg):
        return f"-({render(node.expr)})"
    if isinstance(node, Call):
        return f"{node.name}(" + ", ".join(render(a) for a in node.args) + ")"
    if isinstance(node, Aggregate):
        grouping = ""
        if node.grouped:
            grouping = (" without" if node.without else " by") + f" ({', '.join(node.labels)})"
        args = ([render(node.param)] if node.param is not None else []) + [render(node.expr)]
        return f"{node.op}{grouping} ({', '.join(args)})"
    if isinstance(node, Binary):
        op = node.op + (" bool" if node.return_bool else "")
        if node.on is not None:
            op += (" on" if node.on else " ignoring") + f" ({', '.join(node.matching)})"
        if node.card == "ManyToOne":
            op += f" group_left ({', '.join(node.include)})"
        elif node.card == "OneToMany":
            op += f" group_right ({', '.join(node.include)})"
        return f"({render(node.lhs)}) {op} ({render(node.rhs)})"
    raise TypeError(f"cannot render {type(node).__name__}")
