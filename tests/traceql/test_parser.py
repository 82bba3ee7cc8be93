"""TraceQL's parse trees, written out by hand: the precedence and associativity of Tempo's
``pkg/traceql/expr.y`` (the pipe loosest; spanset ``&&`` and ``||`` one level, left to
right; structural operators tighter, left to right; inside ``{ }`` ``&&`` and ``||`` one
level, comparisons tighter, ``!`` tighter still), query hints, and what is refused.

The ground-truth tests evaluate shoal's own plan with an independent evaluator, so a
wrong tree would go unseen there; these pin the trees themselves."""

from __future__ import annotations

import pytest

from shoal.errors import TraceQLError
from shoal.traceql import plan
from shoal.traceql.parser import parse

A = plan.SpansetFilter(plan.Compare("=", plan.Attribute(None, "a"), plan.Literal("int", 1)))
B = plan.SpansetFilter(plan.Compare("=", plan.Attribute(None, "b"), plan.Literal("int", 2)))
C = plan.SpansetFilter(plan.Compare("=", plan.Attribute(None, "c"), plan.Literal("int", 3)))
X = plan.Compare("=", plan.Attribute("span", "x"), plan.Literal("string", "1"))
Y = plan.Compare(">", plan.Intrinsic("span:duration"), plan.Literal("duration", 2_000_000))
Z = plan.Compare("=", plan.Intrinsic("span:status"), plan.Literal("status", 2))
a, b, c = "{ .a = 1 }", "{ .b = 2 }", "{ .c = 3 }"
x, y, z = 'span.x = "1"', "duration > 2ms", "status = error"


def _op(op: str, left: plan.Spanset, right: plan.Spanset) -> plan.SpansetOp:
    return plan.SpansetOp(op, left, right)


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        (f"{a} && {b} > {c}", _op("&&", A, _op(">", B, C))),
        (f"{a} > {b} && {c}", _op("&&", _op(">", A, B), C)),
        (f"{a} || {b} && {c}", _op("&&", _op("||", A, B), C)),
        (f"{a} && {b} || {c}", _op("||", _op("&&", A, B), C)),
        (f"{a} >> {b} > {c}", _op(">", _op(">>", A, B), C)),
        (f"{a} ~ {b} !<< {c}", _op("!<<", _op("~", A, B), C)),
        (f"{a} && ({b} || {c})", _op("&&", A, _op("||", B, C))),
        (f"{a} &>> {b} || {c} !~ {a}", _op("||", _op("&>>", A, B), _op("!~", C, A))),
    ],
)
def test_spanset_operators(text: str, tree: plan.Spanset) -> None:
    assert parse(text) == tree


@pytest.mark.parametrize(
    ("text", "condition"),
    [
        (f"{x} || {y} && {z}", plan.Logic("&&", plan.Logic("||", X, Y), Z)),
        (f"{x} && {y} || {z}", plan.Logic("||", plan.Logic("&&", X, Y), Z)),
        (f"{x} || ({y} && {z})", plan.Logic("||", X, plan.Logic("&&", Y, Z))),
        (f"!({x}) && {y}", plan.Logic("&&", plan.Not(X), Y)),
        (f"!({x} && {y})", plan.Not(plan.Logic("&&", X, Y))),
        (
            "2ms < duration",
            plan.Compare("<", plan.Literal("duration", 2_000_000), plan.Intrinsic("span:duration")),
        ),
    ],
)
def test_field_expressions(text: str, condition: plan.Field) -> None:
    assert parse("{ " + text + " }") == plan.SpansetFilter(condition)


def test_pipelines() -> None:
    count = plan.Aggregate("count", None)
    assert parse(f"{a} | count() > 1 | by(.b)") == plan.Pipeline(
        (
            A,
            plan.ScalarFilter(">", count, plan.Literal("int", 1)),
            plan.By(plan.Attribute(None, "b")),
        )
    )
    # a literal on the left flips the comparison
    assert parse(f"{a} | 1 < count()") == parse(f"{a} | count() > 1")
    # the pipe is loosest: the stage applies to the union
    union = parse(f"{a} || {b} | count() > 2")
    assert isinstance(union, plan.Pipeline) and union.stages[0] == _op("||", A, B)


@pytest.mark.parametrize("text", [f"{a} with(most_recent=true)", f"{a} with (most_recent = false)"])
def test_most_recent_is_what_a_search_does_anyway(text: str) -> None:
    assert parse(text) == A


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{a} with(sample=true)", "the query hint sample is not implemented"),
        (f"{a} with(most_recent=1)", "most_recent takes true or false"),
        (f"{a} | rate()", "metrics queries (rate()) are not implemented"),
        (f"{a} | quantile_over_time(duration, .9) by (name)", "quantile_over_time()"),
        ("{ span.a + 1 > 2 }", "arithmetic (+) in field expressions is not implemented"),
        ("{ parent.a = 1 }", "parent-scoped attributes are not implemented"),
        ("{ nestedSetLeft > 1 }", "the intrinsic nestedSetLeft is not implemented"),
        ("{ span:nestedSetParent = 1 }", "span:nestedSetParent is not an intrinsic"),
        ("{ } | count(duration) > 1", "count() takes no argument"),
        ("{ } | avg() > 1", "avg() needs a field"),
    ],
)
def test_what_is_not_implemented_is_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(TraceQLError) as caught:
        parse(text)
    assert message in str(caught.value)
