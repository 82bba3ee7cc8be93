"""LogQL text to the syntax tree of :mod:`shoal.logql.model`, by lark (LALR).

A syntax error is a :class:`~shoal.errors.LogQLError` saying where and what was
expected, as Loki's ``parse error at line 1, col 12: ...``.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, UnexpectedInput, UnexpectedToken, VisitError

from shoal.errors import LogQLError
from shoal.logql import model as m
from shoal.logql.grammar import GRAMMAR
from shoal.lokipush.labels import go_unquote
from shoal.regex import compile_pattern

MAX_QUERY_BYTES = 64 * 1024

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "h": 3_600_000_000_000, "d": 86_400_000_000_000,
             "w": 604_800_000_000_000, "y": 31_536_000_000_000_000}  # fmt: skip
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h|d|w|y)")
_BYTES = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kKmMgGtTpPeE]?)(i?)[bB]")


def duration_ns(text: str) -> int:
    """A LogQL duration (``1h30m``, ``250ms``, ``2d``) in nanoseconds."""
    total = 0.0
    at = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != at:
            break
        total += float(match.group(1)) * _UNITS_NS[match.group(2)]
        at = match.end()
    if at != len(text) or not text:
        raise LogQLError(f"invalid duration {text!r}")
    return int(total)


def bytes_value(text: str) -> float:
    """``5KB``, ``1.5MiB``, ``10b`` as a number of bytes (humanize's reading: K is 1000,
    Ki 1024)."""
    match = _BYTES.fullmatch(text)
    if match is None:
        raise LogQLError(f"invalid bytes value {text!r}")
    power = " KMGTPE".index(match.group(2).upper() or " ")
    base = 1024 if match.group(3) else 1000
    return float(match.group(1)) * float(base**power)


def _string(token: Token) -> str:
    try:
        return go_unquote(str(token))
    except ValueError as exc:
        raise LogQLError(f"invalid string {token!s}: {exc}") from None


def _number(text: str) -> float:
    low = text.lower()
    if low.startswith("0x"):
        return float(int(low, 16))
    if low in ("inf", "nan"):
        return math.inf if low == "inf" else math.nan
    return float(text)


def _needs_value(matcher: m.Matcher) -> bool:
    """Whether the matcher refuses the empty value (a stream selector needs one)."""
    if matcher.op == "=":
        return matcher.value != ""
    if matcher.op == "=~":
        return not compile_pattern(matcher.value).matches("")
    return False


@v_args(inline=True)
class _Build(Transformer[Token, Any]):
    def string(self, token: Token) -> str:
        return _string(token)

    def number(self, token: Token) -> m.Literal:
        return m.Literal(_number(str(token)))

    def names(self, *tokens: Token | None) -> tuple[str, ...]:
        return tuple(str(t) for t in tokens if t is not None)

    def matcher(self, name: Token, op: Token, value: str) -> m.Matcher:
        if str(op) not in ("=", "!=", "=~", "!~"):
            raise LogQLError(f"unexpected operator {op!s} in a stream selector")
        return m.Matcher(str(name), str(op), value)

    def selector(self, *matchers: m.Matcher | None) -> tuple[m.Matcher, ...]:
        return tuple(x for x in matchers if x is not None)

    def log_query(self, matchers: tuple[m.Matcher, ...], *stages: m.Stage) -> m.LogQuery:
        if not any(_needs_value(x) for x in matchers):
            raise LogQLError(
                "queries require at least one regexp or equality matcher that does not have "
                'an empty-compatible value. For instance, app=~".*" does not meet this '
                'requirement, but app=~".+" will'
            )
        return m.LogQuery(matchers, tuple(stages))

    def filter_value(self, value: str) -> str:
        return value

    def ip_filter(self, _ip: Token, _value: str) -> str:
        raise LogQLError("the ip() line filter is not supported")

    def line_filter(self, op: Token, *values: Any) -> m.LineFilter:
        kept = tuple(v for v in values if isinstance(v, str) and not isinstance(v, Token))
        if str(op) in ("|>", "!>"):
            raise LogQLError(f"the pattern line filter {op!s} is not supported")
        return m.LineFilter(str(op), kept)

    def extraction(self, name: Token, op: Token | None, value: str | None) -> tuple[str, str]:
        if op is not None and str(op) != "=":
            raise LogQLError(f"unexpected {op!s} in a parser's extraction")
        return str(name), value if value is not None else str(name)

    def json(self, _kw: Token, *items: tuple[str, str] | None) -> m.Parser:
        return m.Parser("json", extractions=tuple(i for i in items if i is not None))

    def logfmt_flag(self, flag: Token) -> str:
        return str(flag)

    def logfmt(self, _kw: Token, *items: Any) -> m.Parser:
        flags = tuple(i for i in items if isinstance(i, str))
        found = tuple(i for i in items if isinstance(i, tuple))
        return m.Parser("logfmt", extractions=found, flags=flags)

    def regexp(self, _kw: Token, text: str) -> m.Parser:
        return m.Parser("regexp", argument=text)

    def pattern(self, _kw: Token, text: str) -> m.Parser:
        return m.Parser("pattern", argument=text)

    def unpack(self, _kw: Token) -> m.Parser:
        return m.Parser("unpack")

    def parser_stage(self, stage: m.Parser) -> m.Parser:
        return stage

    def line_format(self, _kw: Token, template: str) -> m.LineFormat:
        return m.LineFormat(template)

    def label_fmt(self, name: Token, op: Token, value: Any) -> tuple[str, str, bool]:
        if str(op) != "=":
            raise LogQLError(f"unexpected {op!s} in label_format")
        if isinstance(value, Token):
            return str(name), str(value), False
        return str(name), value, True

    def label_format(self, _kw: Token, *items: tuple[str, str, bool]) -> m.LabelFormat:
        return m.LabelFormat(tuple(items))

    def keep_item(self, name: Token, op: Token | None, value: str | None) -> tuple[str, Any]:
        if op is None:
            return str(name), None
        if str(op) not in ("=", "!=", "=~", "!~"):
            raise LogQLError(f"unexpected {op!s} in keep or drop")
        return str(name), m.Matcher(str(name), str(op), value or "")

    def keep(self, _kw: Token, *items: Any) -> m.KeepDrop:
        return m.KeepDrop(True, tuple(items))

    def drop(self, _kw: Token, *items: Any) -> m.KeepDrop:
        return m.KeepDrop(False, tuple(items))

    def decolorize(self, _kw: Token) -> m.Decolorize:
        return m.Decolorize()

    def distinct(self, _kw: Token, _names: Any) -> m.Stage:
        raise LogQLError("the distinct stage is not supported")

    def conv(self, token: Token) -> str:
        return str(token)

    def unwrap_target(self, first: Any, second: Token | None = None) -> m.Unwrap:
        if second is None:
            return m.Unwrap(str(first))
        return m.Unwrap(str(second), str(first))

    def unwrap(self, _kw: Token, target: m.Unwrap) -> m.Unwrap:
        return target

    def formatter(self, stage: m.Stage) -> m.Stage:
        return stage

    def lf_value(self, token: Token) -> tuple[float, str]:
        if token.type == "DURATION":
            return duration_ns(str(token)) / 1e9, "duration"
        if token.type == "BYTES":
            return bytes_value(str(token)), "bytes"
        return _number(str(token)), "number"

    def lf_string(self, name: Token, op: Token, value: str) -> m.StringFilter:
        if str(op) not in ("=", "!=", "=~", "!~"):
            raise LogQLError(f"unexpected {op!s} before a string in a label filter")
        return m.StringFilter(str(name), str(op), value)

    def lf_compare(self, name: Token, op: Token, value: tuple[float, str]) -> m.NumberFilter:
        if str(op) in ("=~", "!~"):
            raise LogQLError(f"unexpected {op!s} before a number in a label filter")
        text = "==" if str(op) == "=" else str(op)
        return m.NumberFilter(str(name), text, value[0], value[1])

    def lf_ip(self, *_args: Any) -> m.LabelFilter:
        raise LogQLError("the ip() label filter is not supported")

    def lf_and(self, left: m.LabelFilter, *rest: Any) -> m.FilterOp:
        return m.FilterOp("and", left, rest[-1])

    def lf_or(self, left: m.LabelFilter, _or: Token, right: m.LabelFilter) -> m.FilterOp:
        return m.FilterOp("or", left, right)

    def label_filter_stage(self, node: m.LabelFilter) -> m.LabelFilterStage:
        return m.LabelFilterStage(node)

    def range(self, token: Token) -> int:
        return duration_ns(str(token))

    def offset(self, _kw: Token, token: Token) -> int:
        return duration_ns(str(token))

    def range_arg(self, query: m.LogQuery, range_ns: int, offset: int | None) -> tuple[Any, ...]:
        return query, range_ns, offset or 0

    def grouping(self, kind: Token, names: tuple[str, ...] | None) -> m.Grouping:
        return m.Grouping(str(kind) == "without", names or ())

    def range_call(self, fn: Token, *args: Any) -> m.RangeAggregation:
        parameter = None
        if str(fn) == "quantile_over_time":
            parameter, args = args[0].value, args[1:]
        (query, range_ns, offset), grouping = args[0], args[1]
        return m.RangeAggregation(str(fn), query, range_ns, offset, parameter, grouping)

    def call_args(self, *args: m.Expr) -> tuple[m.Expr, ...]:
        return args

    def vector_call(self, op: Token, *args: Any) -> m.VectorAggregation:
        grouping = next((a for a in args if isinstance(a, m.Grouping)), None)
        call = next(a for a in args if isinstance(a, tuple))
        name = str(op)
        if name in ("approx_topk", "count_values"):
            raise LogQLError(f"the {name} aggregation is not supported")
        if name in ("topk", "bottomk"):
            if len(call) != 2:
                raise LogQLError(f"{name} takes a parameter and an expression")
            return m.VectorAggregation(name, call[1], grouping, call[0])
        if len(call) != 1:
            raise LogQLError(f"{name} takes one expression")
        return m.VectorAggregation(name, call[0], grouping)

    def fn_args(self, *args: Any) -> tuple[Any, ...]:
        return args

    def simple_call(self, fn: Token, args: tuple[m.Expr, ...] | None) -> m.Expr:
        name = str(fn)
        if name == "vector" and args and len(args) == 1 and isinstance(args[0], m.Literal):
            return m.VectorLiteral(args[0].value)
        raise LogQLError(f"the function {name}() is not supported")

    def label_replace(self, _fn: Token, expr: m.Expr, *strings: str) -> m.LabelReplace:
        return m.LabelReplace(expr, *strings)

    def modifier(self, bool_token: Token | None, matching: m.Matching | None) -> Any:
        return bool_token is not None, matching

    def group_side(self, side: Token, names: tuple[str, ...] | None) -> tuple[str, Any]:
        return ("left" if str(side) == "group_left" else "right"), names or ()

    def matching(self, kind: Token, names: tuple[str, ...] | None, side: Any) -> m.Matching:
        group, include = side if side else ("", ())
        return m.Matching(str(kind) == "on", names or (), group, include)

    def binary(self, left: m.Expr, op: Token, modifier: Any, right: m.Expr) -> m.Expr:
        bool_modifier, matching = modifier
        return m.Binary(str(op), left, right, bool_modifier, matching)

    def negate(self, op: Token, expr: m.Expr) -> m.Expr:
        if str(op) == "+":
            return expr
        if isinstance(expr, m.Literal):
            return m.Literal(-expr.value)
        return m.Negate(expr)


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=True)


@functools.lru_cache(maxsize=512)
def parse(text: str) -> m.Query:
    """The syntax tree of a LogQL query; LogQLError for text that is not one."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise LogQLError(f"the query is over {MAX_QUERY_BYTES} bytes")
    if not text.strip():
        raise LogQLError("syntax error: empty query")
    try:
        tree = _parser().parse(text)
        return _Build().transform(tree)  # type: ignore[no-any-return]
    except VisitError as exc:
        if isinstance(exc.orig_exc, LogQLError):
            raise exc.orig_exc from None
        raise LogQLError(f"parse error: {exc.orig_exc}") from None
    except UnexpectedToken as exc:
        if exc.token.type == "$END":
            raise LogQLError("parse error: syntax error: unexpected end of query") from None
        raise _syntax(text, exc) from None
    except UnexpectedInput as exc:
        raise _syntax(text, exc) from None
    except LarkError as exc:
        raise LogQLError(f"parse error: {exc}") from None


def _syntax(text: str, exc: UnexpectedInput) -> LogQLError:
    line, column = exc.line, exc.column
    found = text.splitlines()[line - 1][column - 1 : column + 19] if line > 0 else ""
    return LogQLError(
        f"parse error at line {line}, col {column}: syntax error: unexpected {found!r}"
    )
