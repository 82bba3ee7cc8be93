"""LogQL's parser (lark): what it builds, what it refuses and how, and fuzzing: any text
gives a tree or a LogQLError, and a printed tree (format_query) parses back to itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.errors import LogQLError
from shoal.logql import model as m
from shoal.logql.format import format_query
from shoal.logql.parse import bytes_value, duration_ns, parse


def test_a_log_query() -> None:
    tree = parse('{app="a", env=~"p.*"} |= "x" or "y" != `z` | json first="a.b[0]" | '
                 'status >= 500 or (level="error", dur > 1.5s) | line_format "{{.msg}}" '
                 '| keep app | decolorize')  # fmt: skip
    assert isinstance(tree, m.LogQuery)
    assert tree.matchers == (m.Matcher("app", "=", "a"), m.Matcher("env", "=~", "p.*"))
    assert tree.stages[0] == m.LineFilter("|=", ("x", "y"))
    assert tree.stages[1] == m.LineFilter("!=", ("z",))
    assert tree.stages[2] == m.Parser("json", extractions=(("first", "a.b[0]"),))
    lf = tree.stages[3]
    assert isinstance(lf, m.LabelFilterStage) and isinstance(lf.filter, m.FilterOp)
    assert lf.filter.op == "or"
    assert lf.filter.right == m.FilterOp(
        "and", m.StringFilter("level", "=", "error"), m.NumberFilter("dur", ">", 1.5, "duration")
    )


def test_metric_queries() -> None:
    tree = parse(
        'sum by (level) (rate({a="b"} | logfmt | unwrap bytes(size) [5m] offset 1h)) '
        '/ on (level) group_left (x) count(count_over_time({a="b"}[5m])) '
        "> bool 2"
    )
    assert isinstance(tree, m.Binary) and tree.op == ">" and tree.bool_modifier
    left = tree.left
    assert isinstance(left, m.Binary) and left.matching == m.Matching(
        True, ("level",), "left", ("x",)
    )
    agg = left.left
    assert isinstance(agg, m.VectorAggregation) and agg.grouping == m.Grouping(False, ("level",))
    inner = agg.expr
    assert isinstance(inner, m.RangeAggregation)
    assert (inner.range_ns, inner.offset_ns) == (300 * 10**9, 3600 * 10**9)
    assert inner.query.stages[-1] == m.Unwrap("size", "bytes")


def test_units() -> None:
    assert duration_ns("1h30m") == 5400 * 10**9
    assert duration_ns("250ms") == 250 * 10**6
    assert bytes_value("5KB") == 5000 and bytes_value("1.5MiB") == 1.5 * 2**20


BAD = [
    "",
    "{",
    "{a}",
    '{a="b"} | json |',
    "sum(",
    '{a="b"} | x >',
    'rate({a="b"})',
    '{a!="b"}',
    'count_over_time({a="b"})',
]


@pytest.mark.parametrize("text", BAD)
def test_syntax_errors_say_so(text: str) -> None:
    with pytest.raises(LogQLError):
        parse(text)


tokens = st.sampled_from([
    "{", "}", "(", ")", "[", "]", ",", "|", "|=", "!=", "|~", "!~", "=", "=~", ">", ">=", "==",
    '"a"', '"b.*"', "`x`", "app", "level", "json", "logfmt", "unwrap", "by", "without", "sum",
    "rate", "count_over_time", "5m", "1h", "10KB", "1.5", "2", "and", "or", "offset",
    "line_format", "drop", "keep", "bool", "on", "group_left", "topk", "+", "/", "^",
])  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.lists(tokens, max_size=25))
def test_fuzz_token_soup_parses_or_is_a_logql_error(parts: list[str]) -> None:
    try:
        parse(" ".join(parts))
    except LogQLError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_any_text_parses_or_is_a_logql_error(text: str) -> None:
    try:
        parse(text)
    except LogQLError:
        pass


selectors = st.lists(
    st.tuples(st.sampled_from(["app", "env", "job"]), st.sampled_from(["=", "=~"]),
              st.from_regex(r"[a-z]{1,6}", fullmatch=True)),
    min_size=1, max_size=3,
).map(lambda ms: "{" + ", ".join(f'{n}{op}"{v}"' for n, op, v in ms) + "}")  # fmt: skip
stages = st.lists(st.sampled_from([
    '|= "x"', '!~ "a|b"', "| json", "| logfmt", '| level="error"', "| status >= 500",
    "| dur > 10ms", '| line_format "{{.a}}"', "| drop a, b", '| regexp "(?P<x>.)"',
]), max_size=4).map(" ".join)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(selectors, stages, st.sampled_from(["", "count_over_time", "rate", "bytes_rate"]),
       st.sampled_from(["", "sum by (app)", "max"]))  # fmt: skip
def test_fuzz_a_printed_query_parses_back_to_the_same_tree(
    selector: str, pipeline: str, function: str, outer: str
) -> None:
    text = f"{selector} {pipeline}"
    if function:
        text = f"{function}({text} [5m])"
        if outer:
            text = f"{outer} ({text})"
    tree = parse(text)
    assert parse(format_query(text)) == tree
