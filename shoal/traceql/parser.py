"""TraceQL text to a plan (:mod:`shoal.traceql.plan`), with lark's LALR parser.

A query that does not parse, or uses what shoal does not evaluate (metrics functions,
arithmetic, the nested-set intrinsics), raises :class:`~shoal.errors.TraceQLError` with
a message that names the position or the feature: never a wrong answer.
"""

from __future__ import annotations

import fractions
import functools
import re
from typing import Any

import lark

from shoal.errors import TraceQLError
from shoal.traceql import plan
from shoal.traceql.grammar import GRAMMAR

MAX_QUERY_BYTES = 64 * 1024
"""The longest query accepted (a Grafana search editor's query is a few hundred bytes)."""

INTRINSICS = {
    "name": "span:name",
    "status": "span:status",
    "statusMessage": "span:statusMessage",
    "kind": "span:kind",
    "duration": "span:duration",
    "childCount": "span:childCount",
    "rootName": "trace:rootName",
    "rootServiceName": "trace:rootService",
    "rootService": "trace:rootService",
    "traceDuration": "trace:duration",
    "traceID": "trace:id",
    "spanID": "span:id",
    "parentID": "span:parentID",
    "id": "span:id",
}
"""Unscoped intrinsic names and the scoped name each stands for."""

SCOPED = frozenset(
    {
        "span:name",
        "span:status",
        "span:statusMessage",
        "span:kind",
        "span:duration",
        "span:childCount",
        "span:id",
        "span:parentID",
        "trace:rootName",
        "trace:rootService",
        "trace:duration",
        "trace:id",
        "event:name",
        "event:timeSinceStart",
        "link:traceID",
        "link:spanID",
        "instrumentation:name",
        "instrumentation:version",
    }
)
"""The intrinsics shoal evaluates, by their scoped names."""

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9,
            "h": 3600 * 10**9}  # fmt: skip
_STATUS = {"unset": 0, "ok": 1, "error": 2}
_KIND = {"unspecified": 0, "internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def duration_ns(text: str) -> int:
    """A Go duration (``1h30m``, ``250ms``, ``1.5s``) in nanoseconds."""
    total = fractions.Fraction(0)
    for number, unit in _DURATION_PART.findall(text):
        total += fractions.Fraction(number) * _UNIT_NS[unit]
    return round(total)


def _unquote(text: str) -> str:
    if text.startswith("`"):
        return text[1:-1]
    body = text[1:-1]
    out = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _attribute(text: str) -> plan.Attribute:
    dot = text.index(".")
    scope = text[:dot] or None
    if scope == "parent":
        raise TraceQLError(f"{text}: parent-scoped attributes are not implemented")
    name = text[dot + 1 :]
    if '"' in name:  # quoted parts: their text without quotes and escapes
        name = re.sub(r'"((?:\\.|[^"\\])*)"', lambda m: _unquote('"' + m.group(1) + '"'), name)
    return plan.Attribute(scope, name)


class _ToPlan(lark.Transformer[Any, Any]):
    def pipeline(self, stages: list[Any]) -> plan.Spanset:
        if len(stages) == 1 and not isinstance(
            stages[0], plan.ScalarFilter | plan.By | plan.Select | plan.Coalesce
        ):
            return stages[0]  # type: ignore[no-any-return]
        return plan.Pipeline(tuple(stages))

    def with_hints(self, items: list[Any]) -> Any:
        return items[0]

    def hint(self, items: list[Any]) -> None:
        name, value = str(items[0]), items[1]
        if name != "most_recent":
            raise TraceQLError(f"the query hint {name} is not implemented")
        if not (isinstance(value, plan.Literal) and value.kind == "bool"):
            raise TraceQLError("the query hint most_recent takes true or false")
        # a search is exact, and answers the most recent traces first anyway

    def by_op(self, items: list[Any]) -> plan.By:
        return plan.By(items[0])

    def select_op(self, items: list[Any]) -> plan.Select:
        return plan.Select(tuple(items))

    def coalesce_op(self, _: list[Any]) -> plan.Coalesce:
        return plan.Coalesce()

    def metrics_op(self, items: list[Any]) -> None:
        raise TraceQLError(
            f"metrics queries ({items[0]}()) are not implemented: use a search, or the "
            "Prometheus API for metrics"
        )

    def spanset_logic(self, items: list[Any]) -> plan.SpansetOp:
        return plan.SpansetOp(str(items[1]), items[0], items[2])

    def structural(self, items: list[Any]) -> plan.SpansetOp:
        return plan.SpansetOp(str(items[1]), items[0], items[2])

    def match_all(self, _: list[Any]) -> plan.SpansetFilter:
        return plan.SpansetFilter(None)

    def spanset_filter(self, items: list[Any]) -> plan.SpansetFilter:
        return plan.SpansetFilter(items[0])

    def scalar_filter(self, items: list[Any]) -> plan.ScalarFilter:
        return plan.ScalarFilter(str(items[1]), items[0], items[2])

    def scalar_filter_flipped(self, items: list[Any]) -> plan.ScalarFilter:
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
        op = str(items[1])
        if op not in flip:
            raise TraceQLError(f"{op} cannot compare an aggregate")
        return plan.ScalarFilter(flip[op], items[2], items[0])

    def scalar_literal(self, items: list[Any]) -> plan.Literal:
        return items[0]  # type: ignore[no-any-return]

    def aggregate(self, items: list[Any]) -> plan.Aggregate:
        fn = str(items[0])
        field = items[1] if len(items) > 1 else None
        if (fn == "count") != (field is None):
            raise TraceQLError(
                "count() takes no argument" if fn == "count" else f"{fn}() needs a field"
            )
        return plan.Aggregate(fn, field)

    def field_logic(self, items: list[Any]) -> plan.Logic:
        return plan.Logic(str(items[1]), items[0], items[2])

    def compare(self, items: list[Any]) -> plan.Compare:
        return plan.Compare(str(items[1]), items[0], items[2])

    def arithmetic(self, items: list[Any]) -> None:
        op = str(items[1]) if len(items) == 3 else "-"
        raise TraceQLError(f"arithmetic ({op}) in field expressions is not implemented")

    def negate(self, items: list[Any]) -> plan.Not:
        return plan.Not(items[0])

    def attribute(self, items: list[Any]) -> plan.Attribute:
        return _attribute(str(items[0]))

    def scoped_intrinsic(self, items: list[Any]) -> plan.Intrinsic:
        name = str(items[0])
        if name not in SCOPED:
            raise TraceQLError(f"{name} is not an intrinsic shoal evaluates")
        return plan.Intrinsic(name)

    def intrinsic(self, items: list[Any]) -> plan.Intrinsic:
        name = str(items[0])
        if name not in INTRINSICS:
            raise TraceQLError(f"the intrinsic {name} is not implemented")
        return plan.Intrinsic(INTRINSICS[name])

    def string(self, items: list[Any]) -> plan.Literal:
        return plan.Literal("string", _unquote(str(items[0])))

    def duration(self, items: list[Any]) -> plan.Literal:
        return plan.Literal("duration", duration_ns(str(items[0])))

    def neg_duration(self, items: list[Any]) -> plan.Literal:
        return plan.Literal("duration", -duration_ns(str(items[0])))

    def number(self, items: list[Any], sign: int = 1) -> plan.Literal:
        text = str(items[0])
        if re.fullmatch(r"[0-9]+", text):
            value = sign * int(text)
            if not INT_MIN <= value <= INT_MAX:
                raise TraceQLError(f"integer {value} is out of the 64-bit range")
            return plan.Literal("int", value)
        return plan.Literal("float", sign * float(text))

    def neg_number(self, items: list[Any]) -> plan.Literal:
        return self.number(items, -1)

    def true(self, _: list[Any]) -> plan.Literal:
        return plan.Literal("bool", True)

    def false(self, _: list[Any]) -> plan.Literal:
        return plan.Literal("bool", False)

    def nil(self, _: list[Any]) -> plan.Literal:
        return plan.Literal("nil", None)

    def status(self, items: list[Any]) -> plan.Literal:
        return plan.Literal("status", _STATUS[str(items[0])])

    def kind(self, items: list[Any]) -> plan.Literal:
        return plan.Literal("span_kind", _KIND[str(items[0])])

    def int_bound(self, items: list[Any]) -> plan.Literal:
        return plan.Literal("int", INT_MIN if str(items[0]) == "minInt" else INT_MAX)


@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark(GRAMMAR, parser="lalr", lexer="contextual", maybe_placeholders=False)


def parse(text: str) -> plan.Spanset:
    """The plan of a TraceQL query; TraceQLError naming what is wrong or not implemented."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise TraceQLError(f"the query is longer than {MAX_QUERY_BYTES} bytes")
    if not text.strip():
        return plan.SpansetFilter(None)
    try:
        tree = _parser().parse(text)
        result = _ToPlan().transform(tree)
    except lark.exceptions.VisitError as exc:
        if isinstance(exc.orig_exc, TraceQLError):
            raise exc.orig_exc from None
        raise TraceQLError(f"invalid TraceQL query: {exc.orig_exc}") from None
    except lark.exceptions.UnexpectedInput as exc:
        raise TraceQLError(_syntax_message(text, exc)) from None
    except lark.exceptions.LarkError as exc:
        raise TraceQLError(f"invalid TraceQL query: {exc}") from None
    if isinstance(result, plan.SpansetFilter | plan.SpansetOp | plan.Pipeline):
        return result
    raise TraceQLError("invalid TraceQL query: expected a spanset")


def _syntax_message(text: str, exc: lark.exceptions.UnexpectedInput) -> str:
    column = getattr(exc, "column", None)
    where = f" at column {column}" if isinstance(column, int) and column > 0 else ""
    token = getattr(exc, "token", None)
    if token is not None and getattr(token, "type", "") == "$END":
        return f"invalid TraceQL query: unexpected end of query{where}"
    found = f" near {str(token)[:30]!r}" if token is not None else ""
    if not found and isinstance(column, int) and column > 0:
        found = f" near {text[column - 1 : column + 19]!r}"
    return f"invalid TraceQL query: syntax error{where}{found}"
