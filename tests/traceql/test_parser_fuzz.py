"""The TraceQL parser, fuzzed: any text is a plan or a TraceQLError (never another
exception), generated valid queries parse, and what the plan prints parses to the same."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shoal.errors import TraceQLError
from shoal.traceql import plan
from shoal.traceql.parser import MAX_QUERY_BYTES, duration_ns, parse

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ALPHABET = st.sampled_from(list('{}()[]|&!=~<>.,:"` \n\t-+*/%^') + list("abcdefgz019_"))
TOKENS = st.sampled_from(
    [
        "{", "}", "(", ")", "&&", "||", ">>", "<<", "~", "!~", "=~", "!=", ">=", "<=", "=",
        ">", "<", "!", "|", "&>", "!>", "count()", "avg(duration)", "by(.a)", "select(.a)",
        "coalesce()", "span.a", "resource.service.name", ".x", "event.e", "link.l", "name",
        "status", "kind", "duration", "rootName", "traceDuration", "span:id", "trace:id",
        '"s"', "1", "-2", "1.5", "10ms", "true", "nil", "error", "server", "rate()", "maxInt",
    ]
)  # fmt: skip


@FUZZ
@given(st.text(ALPHABET, max_size=60))
def test_any_text_parses_or_is_refused(text: str) -> None:
    try:
        parse(text)
    except TraceQLError as exc:
        assert str(exc)


@FUZZ
@given(st.lists(TOKENS, max_size=14).map(" ".join))
def test_token_soup_parses_or_is_refused(text: str) -> None:
    try:
        parse(text)
    except TraceQLError as exc:
        assert str(exc)


fields = st.sampled_from(
    ["span.http.method", "resource.service.name", ".region", "name", "status", "kind",
     "duration", "span:childCount", "event.exception.message", 'span."a b"']
)  # fmt: skip
literals = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8).map(
        lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    ),
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.sampled_from(["1.5", "-0.25", "100ms", "1h30m", "true", "false", "nil", "error", "client"]),
)
ops = st.sampled_from(["=", "!=", ">", ">=", "<", "<=", "=~", "!~"])


@st.composite
def conditions(draw: st.DrawFn, depth: int = 0) -> str:
    if depth < 2 and draw(st.booleans()):
        logic = draw(st.sampled_from(["&&", "||"]))
        left = draw(conditions(depth + 1))
        right = draw(conditions(depth + 1))
        return f"({left}) {logic} {right}" if draw(st.booleans()) else f"{left} {logic} {right}"
    return f"{draw(fields)} {draw(ops)} {draw(literals)}"


@st.composite
def queries(draw: st.DrawFn) -> str:
    sets = [f"{{ {draw(conditions())} }}" for _ in range(draw(st.integers(1, 3)))]
    text = sets[0]
    for other in sets[1:]:
        text += f" {draw(st.sampled_from(['&&', '||', '>>', '>', '~', '!<', '&>>']))} {other}"
    if draw(st.booleans()):
        text += " | " + draw(st.sampled_from(["count() > 2", "avg(duration) < 1s", "by(.a)",
                                               "select(span.x)", "coalesce()"]))  # fmt: skip
    return text


@FUZZ
@given(queries())
def test_generated_queries_parse(text: str) -> None:
    node = parse(text)
    assert isinstance(node, plan.SpansetFilter | plan.SpansetOp | plan.Pipeline)
    # a spanset filter's condition, printed, parses back to the same condition
    if isinstance(node, plan.SpansetFilter) and node.condition is not None:
        again = parse("{ " + plan.field_text(node.condition) + " }")
        assert isinstance(again, plan.SpansetFilter)
        assert plan.field_text(again.condition) == plan.field_text(node.condition)  # type: ignore[arg-type]


UNITS = st.sampled_from(["ns", "us", "ms", "s", "m", "h"])


@given(st.lists(st.tuples(st.integers(0, 10**6), UNITS), min_size=1, max_size=3))
@settings(max_examples=100, deadline=None)
def test_durations(parts: list[tuple[int, str]]) -> None:
    unit = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
    text = "".join(f"{n}{u}" for n, u in parts)
    assert duration_ns(text) == sum(n * unit[u] for n, u in parts)


def test_a_huge_query_is_refused() -> None:
    with pytest.raises(TraceQLError, match="longer than"):
        parse("{ " + " && ".join(['.a = "x"'] * (MAX_QUERY_BYTES // 8)) + " }")
