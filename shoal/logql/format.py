"""A LogQL query printed back from its tree, in Loki's canonical spelling
(``/loki/api/v1/format_query``): matchers as written, stages separated by ``|``, strings
double-quoted, durations in Prometheus' form."""

from __future__ import annotations

import json

from shoal.logql import model as m
from shoal.logql.parse import parse

_UNITS = (("y", 31_536_000), ("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


def duration(ns: int) -> str:
    if ns == 0:
        return "0s"
    ms_total = ns // 1_000_000
    seconds, ms = divmod(ms_total, 1000)
    out = ""
    for unit, size in _UNITS:
        if seconds >= size:
            count, seconds = divmod(seconds, size)
            out += f"{count}{unit}"
    if ms:
        out += f"{ms}ms"
    return out or f"{ns}ns"


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _number(value: float) -> str:
    return repr(int(value)) if value.is_integer() else repr(value)


def _selector(matchers: tuple[m.Matcher, ...]) -> str:
    return "{" + ", ".join(f"{x.name}{x.op}{_q(x.value)}" for x in matchers) + "}"


def _filter(node: m.LabelFilter) -> str:
    if isinstance(node, m.StringFilter):
        return f"{node.name}{node.op}{_q(node.value)}"
    if isinstance(node, m.NumberFilter):
        value = _number(node.value)
        if node.kind == "duration":
            value = duration(int(node.value * 1e9))
        elif node.kind == "bytes":
            value = f"{_number(node.value)}B"
        return f"{node.name}{node.op}{value}"
    joiner = " or " if node.op == "or" else ", "
    return f"( {_filter(node.left)}{joiner}{_filter(node.right)} )"


def _stage(stage: m.Stage) -> str:
    if isinstance(stage, m.LineFilter):
        return f"{stage.op} " + " or ".join(_q(v) for v in stage.values)
    if isinstance(stage, m.Parser):
        if stage.kind in ("regexp", "pattern"):
            return f"| {stage.kind} {_q(stage.argument)}"
        params = ", ".join(
            name if name == path else f"{name}={_q(path)}" for name, path in stage.extractions
        )
        flags = " ".join(stage.flags)
        return " ".join(p for p in (f"| {stage.kind}", flags, params) if p)
    if isinstance(stage, m.LabelFilterStage):
        return f"| {_filter(stage.filter)}"
    if isinstance(stage, m.LineFormat):
        return f"| line_format {_q(stage.template)}"
    if isinstance(stage, m.LabelFormat):
        items = ", ".join(f"{new}={_q(src) if tpl else src}" for new, src, tpl in stage.items)
        return f"| label_format {items}"
    if isinstance(stage, m.KeepDrop):
        items = ", ".join(
            name if matcher is None else f"{name}{matcher.op}{_q(matcher.value)}"
            for name, matcher in stage.items
        )
        return f"| {'keep' if stage.keep else 'drop'} {items}"
    if isinstance(stage, m.Decolorize):
        return "| decolorize"
    assert isinstance(stage, m.Unwrap)
    target = f"{stage.conversion}({stage.label})" if stage.conversion else stage.label
    return f"| unwrap {target}"


def log_query(query: m.LogQuery) -> str:
    return " ".join([_selector(query.matchers), *(_stage(s) for s in query.stages)])


def _grouping(grouping: m.Grouping | None) -> str:
    if grouping is None:
        return ""
    return f" {'without' if grouping.without else 'by'} ({', '.join(grouping.labels)})"


def expr(node: m.Query) -> str:
    if isinstance(node, m.LogQuery):
        return log_query(node)
    if isinstance(node, m.Literal):
        return _number(node.value)
    if isinstance(node, m.VectorLiteral):
        return f"vector({_number(node.value)})"
    if isinstance(node, m.RangeAggregation):
        offset = f" offset {duration(node.offset_ns)}" if node.offset_ns else ""
        inner = f"{log_query(node.query)} [{duration(node.range_ns)}]{offset}"
        if node.parameter is not None:
            inner = f"{_number(node.parameter)}, {inner}"
        return f"{node.function}({inner}){_grouping(node.grouping)}"
    if isinstance(node, m.VectorAggregation):
        args = expr(node.expr)
        if node.parameter is not None:
            args = f"{expr(node.parameter)}, {args}"
        return f"{node.op}{_grouping(node.grouping)}({args})"
    if isinstance(node, m.Negate):
        return f"-{expr(node.expr)}"
    if isinstance(node, m.LabelReplace):
        args = ", ".join(
            _q(x) for x in (node.destination, node.replacement, node.source, node.regex)
        )
        return f"label_replace({expr(node.expr)}, {args})"
    assert isinstance(node, m.Binary)
    modifier = " bool" if node.bool_modifier else ""
    if node.matching is not None:
        kind = "on" if node.matching.on else "ignoring"
        modifier += f" {kind} ({', '.join(node.matching.labels)})"
        if node.matching.group:
            modifier += f" group_{node.matching.group} ({', '.join(node.matching.include)})"
    return f"{_side(node.left)} {node.op}{modifier} {_side(node.right)}"


def _side(node: m.Expr) -> str:
    text = expr(node)
    return f"({text})" if isinstance(node, m.Binary) else text


def format_query(text: str) -> str:
    return expr(parse(text))
