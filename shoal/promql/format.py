"""PromQL printed as Prometheus prints it: ``/api/v1/format_query``.

:func:`text` is Prometheus' one-line form of an expression (its ``String()``), and
:func:`pretty` its formatter (``Pretty``): a node whose one-line form is longer than
100 bytes is split, its children one level (two spaces) deeper, each on its own line.
Both work over ``promql-parser``'s tree. The parser has a ``prettify()`` of its own, but
it spells numbers as Rust does (``1000000`` where Prometheus writes ``1e+06``), so the
printing is done here, following Prometheus 2.42's printer: numbers as Go's ``%v``,
strings quoted as Go's ``%q``, matchers sorted, ``@`` before ``offset``, durations as
Prometheus writes them.

Known difference: a unary ``+`` is dropped by the parser, so ``+x`` prints as ``x``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import promql_parser

from shoal.errors import PromQLError
from shoal.promql.tree import at_ms, parse_expr

MAX_LINE = 100
INDENT = "  "
_MATCH_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}
_WITH_PARAM = {"topk", "bottomk", "count_values", "quantile", "limitk", "limit_ratio"}
_CARD = {"OneToOne": "one-to-one", "ManyToOne": "many-to-one", "OneToMany": "one-to-many",
         "ManyToMany": "many-to-many"}  # fmt: skip


def kind_of(node: Any) -> str:
    return type(node).__name__


def enum_name(value: Any) -> str:
    return str(value).rsplit(".", 1)[-1]


def go_float(value: float) -> str:
    """``value`` as Go's ``fmt.Sprint`` writes a float64: the shortest digits, with an
    exponent (two digits at least) when it is below -4 or at least 6."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    point = len(text) + exponent  # digits before the decimal point
    exp = point - 1
    if exp < -4 or exp >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        out = f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    elif point <= 0:
        out = "0." + "0" * -point + text
    elif point >= len(text):
        out = text + "0" * (point - len(text))
    else:
        out = text[:point] + "." + text[point:]
    return "-" + out if sign else out


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q`` quotes it (``strconv.Quote``)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\v": "\\v"}  # fmt: skip


def duration(delta: dt.timedelta) -> str:
    """A non-negative duration as Prometheus writes it (``1h30m``, ``2w``, ``0s``)."""
    return str(promql_parser.display_duration(delta))


def _modifiers(at: Any, offset: dt.timedelta | None) -> str:
    out = ""
    if at is not None:
        kind = enum_name(at.type)
        if kind == "At":
            out += f" @ {at_ms(at) / 1000:.3f}"  # type: ignore[operator]
        else:
            out += f" @ {kind.lower()}()"
    if offset:
        if offset < dt.timedelta(0):
            out += f" offset -{duration(-offset)}"
        else:
            out += f" offset {duration(offset)}"
    return out


def matchers_of(vs: Any) -> list[tuple[str, str, str]]:
    """A vector selector's matchers as Prometheus keeps them: (name, op, value), with the
    metric name's matcher last when the name was written before the braces."""
    out = [(str(m.name), _MATCH_OPS[enum_name(m.op)], str(m.value)) for m in vs.matchers.matchers]
    if vs.matchers.or_matchers:
        raise PromQLError("label matchers joined with 'or' are not supported")
    if vs.name is not None:
        out.append(("__name__", "=", str(vs.name)))
    return out


def _selector(vs: Any) -> str:
    name = str(vs.name) if vs.name is not None else ""
    shown = sorted(
        f"{n}{op}{go_quote(v)}"
        for n, op, v in matchers_of(vs)
        if not (n == "__name__" and op == "=" and v == name)
    )
    return f"{name}{{{','.join(shown)}}}" if shown else name


def value_type(node: Any) -> str:
    """The type of an expression: ``vector``, ``matrix``, ``scalar`` or ``string``."""
    kind = kind_of(node)
    if kind in ("VectorSelector", "AggregateExpr"):
        return "vector"
    if kind in ("MatrixSelector", "SubqueryExpr"):
        return "matrix"
    if kind == "NumberLiteral":
        return "scalar"
    if kind == "StringLiteral":
        return "string"
    if kind in ("ParenExpr", "UnaryExpr"):
        return value_type(node.expr)
    if kind == "Call":
        return enum_name(node.func.return_type).lower()
    if kind == "BinaryExpr":
        sides = (value_type(node.lhs), value_type(node.rhs))
        return "vector" if "vector" in sides else "scalar"
    raise PromQLError(f"unsupported expression: {kind}")


def vector_matching(node: Any) -> dict[str, Any] | None:
    """A binary expression's vector matching as Prometheus keeps it: none unless both
    sides are instant vectors."""
    if value_type(node.lhs) != "vector" or value_type(node.rhs) != "vector":
        return None
    mod = node.modifier
    card = enum_name(mod.card) if mod is not None else "OneToOne"
    if str(node.op) in ("and", "or", "unless") and card == "OneToOne":
        card = "ManyToMany"
    matching = mod.matching if mod is not None else None
    return {
        "card": card,
        "on": matching is not None and enum_name(matching.type) == "Include",
        "labels": [str(x) for x in matching.labels] if matching is not None else [],
        "include": [str(x) for x in (mod.group_labels or [])] if mod is not None else [],
    }


def _agg_head(node: Any) -> str:
    op = str(node.op)
    mod = node.modifier
    if mod is None:
        return op
    labels = ", ".join(str(x) for x in mod.labels)
    if enum_name(mod.type) == "Without":
        return f"{op} without ({labels}) "
    return f"{op} by ({labels}) " if mod.labels else op


def _matching_text(node: Any) -> str:
    vm = vector_matching(node)
    if vm is None or not (vm["labels"] or vm["on"]):
        return ""
    out = f" {'on' if vm['on'] else 'ignoring'} ({', '.join(vm['labels'])})"
    if vm["card"] in ("ManyToOne", "OneToMany"):
        side = "left" if vm["card"] == "ManyToOne" else "right"
        out += f" group_{side} ({', '.join(vm['include'])})"
    return out


def _bool(node: Any) -> str:
    return " bool" if node.modifier is not None and node.modifier.return_bool else ""


def text(node: Any) -> str:
    """Prometheus' one-line form of an expression."""
    kind = kind_of(node)
    if kind == "NumberLiteral":
        return go_float(float(node.val))
    if kind == "StringLiteral":
        return go_quote(str(node.val))
    if kind == "ParenExpr":
        return f"({text(node.expr)})"
    if kind == "UnaryExpr":
        return f"-{text(node.expr)}"
    if kind == "VectorSelector":
        return _selector(node) + _modifiers(node.at, node.offset)
    if kind == "MatrixSelector":
        vs = node.vector_selector
        return f"{_selector(vs)}[{duration(node.range)}]" + _modifiers(vs.at, vs.offset)
    if kind == "SubqueryExpr":
        return text(node.expr) + _subquery_suffix(node)
    if kind == "Call":
        return f"{node.func.name}({', '.join(text(a) for a in node.args)})"
    if kind == "AggregateExpr":
        param = f"{text(node.param)}, " if str(node.op) in _WITH_PARAM else ""
        return f"{_agg_head(node)}({param}{text(node.expr)})"
    if kind == "BinaryExpr":
        return f"{text(node.lhs)} {node.op}{_bool(node)}{_matching_text(node)} {text(node.rhs)}"
    raise PromQLError(f"unsupported expression: {kind}")


def _subquery_suffix(node: Any) -> str:
    step = duration(node.step) if node.step else ""
    return f"[{duration(node.range)}:{step}]" + _modifiers(node.at, node.offset)


def _long(node: Any) -> bool:
    return len(text(node).encode()) > MAX_LINE


def pretty(node: Any, level: int = 0) -> str:
    """Prometheus' formatted form of an expression (``Pretty(level)``)."""
    pad = INDENT * level
    kind = kind_of(node)
    if kind == "SubqueryExpr":
        if not _long(node):
            return text(node)
        return pretty(node.expr, level) + _subquery_suffix(node)
    if kind == "UnaryExpr":
        return f"{pad}-{pretty(node.expr, level).strip()}"
    if kind in ("NumberLiteral", "StringLiteral", "VectorSelector", "MatrixSelector"):
        return pad + text(node)
    if not _long(node):
        return pad + text(node)
    if kind == "AggregateExpr":
        out = f"{pad}{_agg_head(node)}(\n"
        if str(node.op) in _WITH_PARAM:
            out += f"{pretty(node.param, level + 1)},\n"
        return out + f"{pretty(node.expr, level + 1)}\n{pad})"
    if kind == "BinaryExpr":
        return (
            f"{pretty(node.lhs, level + 1)}\n{pad}{node.op}{_bool(node)}{_matching_text(node)}\n"
            f"{pretty(node.rhs, level + 1)}"
        )
    if kind == "Call":
        args = ",\n".join(pretty(a, level + 1) for a in node.args)
        return f"{pad}{node.func.name}(\n{args}\n{pad})"
    if kind == "ParenExpr":
        return f"{pad}(\n{pretty(node.expr, level + 1)}\n{pad})"
    raise PromQLError(f"unsupported expression: {kind}")


def format_query(query: str) -> str:
    """``query`` formatted as Prometheus' ``/api/v1/format_query`` answers."""
    return pretty(parse_expr(query))
