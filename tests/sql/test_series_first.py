"""The per-series rewrite of SQL text: which queries it takes, and what it makes of them."""

from __future__ import annotations

import itertools

import pytest
from datafusion import SessionConfig, SessionContext
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.schema import METRICS
from shoal.sql.lexer import located, tokens
from shoal.sql.series_first import AGGREGATES, PARTIAL, SERIES_TABLE, Shape, rewrite
from shoal.sql.series_plan import shape

SHAPE = shape(METRICS)
assert SHAPE is not None


def rewritten(sql: str, table: Shape = SHAPE) -> str | None:
    found = rewrite(sql, table)
    return None if found is None else found.sql()


def test_the_engines_aggregates_are_all_known() -> None:
    """An aggregate the rewrite does not know would be taken for a scalar function and
    computed over one row per series: every one DataFusion has must be listed."""
    ctx = SessionContext(SessionConfig().with_information_schema(True))
    names = ctx.sql(
        "SELECT DISTINCT routine_name FROM information_schema.routines "
        "WHERE function_type = 'AGGREGATE'"
    ).to_pydict()["routine_name"]
    assert len(names) > 30
    assert set(names) <= AGGREGATES


def test_a_grouping_by_labels_is_split_into_series_and_labels() -> None:
    sql = (
        "SELECT metric_name, attributes['host'] AS host, avg(value) AS avg, count(*) AS n "
        "FROM metrics WHERE timestamp >= TIMESTAMP '2026-01-01T00:00:00Z' "
        "AND attributes['zone'] = 'a' GROUP BY metric_name, host ORDER BY metric_name, host "
        "LIMIT 10"
    )
    text = rewritten(sql)
    assert text is not None
    partial = text[text.index("(SELECT") : text.index(f") AS {PARTIAL}")]
    # the rows are filtered by time and grouped by series; labels are not read there
    assert "GROUP BY series_id" in partial
    assert "timestamp >=" in partial
    assert "attributes" not in partial and "metric_name" not in partial
    outer = text.replace(partial, "")
    assert f"JOIN {SERIES_TABLE}" in outer
    assert "WHERE (attributes['zone'] = 'a')" in outer
    assert "GROUP BY metric_name, host ORDER BY metric_name, host LIMIT 10" in outer
    # an average is the sums' sum over the counts' sum; a count the counts' sum
    assert "sum(value)" in partial and "count(value)" in partial
    assert "nullif(sum(" in outer and "coalesce(sum(" in outer


@pytest.mark.parametrize(
    "sql",
    [
        # nothing grouped: an aggregate over everything is as fast as written
        "SELECT count(*) FROM metrics WHERE attributes['host'] = 'a'",
        # no label read outside the aggregates: nothing to save
        "SELECT series_id, count(*) FROM metrics GROUP BY series_id",
        # a key that is not a label
        "SELECT metric_name, date_bin(INTERVAL '1 minute', timestamp) AS m, avg(value) "
        "FROM metrics GROUP BY metric_name, m",
        "SELECT metric_type, count(*) FROM metrics GROUP BY metric_type",
        "SELECT metric_name, value, count(*) FROM metrics GROUP BY metric_name, value",
        # aggregates that do not combine per series
        "SELECT metric_name, median(value) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, array_agg(value) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, count(DISTINCT value) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, sum(value) FILTER (WHERE value > 1) FROM metrics GROUP BY metric_name",
        # other shapes
        "SELECT * FROM metrics",
        "SELECT metric_name, count(*) FROM metrics m GROUP BY metric_name",
        "SELECT m.metric_name, count(*) FROM metrics m GROUP BY m.metric_name",
        "SELECT metric_name, count(*) FROM logs GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM metrics JOIN metrics_1m USING (series_id) "
        "GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM (SELECT * FROM metrics) GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM metrics GROUP BY metric_name UNION ALL "
        "SELECT metric_name, count(*) FROM metrics GROUP BY metric_name",
        "WITH x AS (SELECT 1) SELECT metric_name, count(*) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, count(*) OVER () FROM metrics GROUP BY metric_name",
        "SELECT DISTINCT metric_name FROM metrics GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM metrics WHERE series_id IN "
        "(SELECT series_id FROM metrics) GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM metrics WHERE random() < 0.5 GROUP BY metric_name",
        "SELECT metric_name, sum(count(*)) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, sum(*) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM metrics GROUP BY metric_name; SELECT 1",
        "EXPLAIN SELECT metric_name, count(*) FROM metrics GROUP BY metric_name",
        "SELECT metric_name, count(*) FROM metrics GROUP BY metric_name WHERE value > 1",
        "SELECT metric_name, count(*) FROM metrics GROUP BY ROLLUP (metric_name)",
        # an alias that is also a column's name, used as a key: read as the column
        "SELECT attributes['a'] AS value, count(*) FROM metrics GROUP BY value",
        "SELECT metric_name, count(*) FROM metrics GROUP BY metric_name HAVING max(value",
    ],
)
def test_other_queries_are_left_as_written(sql: str) -> None:
    assert rewritten(sql) is None


def test_where_terms_go_where_they_can_be_answered() -> None:
    sql = (
        "SELECT metric_name, sum(value) FROM metrics WHERE value > 1 "
        "AND timestamp BETWEEN TIMESTAMP '2026-01-01T00:00:00Z' AND TIMESTAMP "
        "'2026-01-02T00:00:00Z' AND metric_name LIKE 'http%' AND "
        "(attributes['a'] = 'x' OR value < 0) AND resource_attributes['r'] IS NOT NULL "
        "GROUP BY metric_name"
    )
    text = rewritten(sql)
    assert text is not None
    partial, outer = text.split(f") AS {PARTIAL}")
    # BETWEEN's AND stays inside its term; a term mixing labels and rows stays with rows
    assert "(timestamp BETWEEN TIMESTAMP '2026-01-01T00:00:00Z' AND TIMESTAMP" in partial
    assert "(value > 1)" in partial
    assert "(attributes['a'] = 'x' OR value < 0)" in partial
    assert "(metric_name LIKE 'http%')" in outer
    assert "(resource_attributes['r'] IS NOT NULL)" in outer
    # a top-level OR keeps the condition whole, with the rows
    text = rewritten(
        "SELECT metric_name, count(*) FROM metrics WHERE metric_name = 'a' AND value > 1 "
        "OR metric_name = 'b' GROUP BY metric_name",
        SHAPE,
    )
    assert text is not None
    assert "WHERE (metric_name = 'a' AND value > 1 OR metric_name = 'b') GROUP BY series_id" in (
        text
    )


def test_aliases_named_like_columns_may_be_ordered_by() -> None:
    text = rewritten(
        "SELECT metric_name, count(*) AS count, max(value) AS max FROM metrics "
        "GROUP BY metric_name HAVING count(*) > 2 ORDER BY count DESC, max",
        SHAPE,
    )
    assert text is not None
    assert "HAVING coalesce(sum(" in text and text.endswith("ORDER BY count DESC, max")


def test_quoted_names_and_case_are_read_as_the_engine_reads_them() -> None:
    text = rewritten('Select "metric_name", COUNT(*) From "metrics" Group By "metric_name"')
    assert text is not None and '"metric_name"' in text
    assert rewritten('SELECT "value", count(*) FROM metrics GROUP BY "value"') is None


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab_1.[]'\"();:,* -\n"), max_size=40))
def test_located_tokens_are_where_they_say(sql: str) -> None:
    found = list(located(sql))
    assert [t.text for t in found if t.text not in ".[];:"] == list(tokens(sql))
    for t in found:
        written = sql[t.start : t.end]
        if t.text not in ("''", '""'):
            assert written.lower() == t.text
    assert all(a.end <= b.start for a, b in itertools.pairwise(found))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_any_text_is_rewritten_or_refused_without_an_error(sql: str) -> None:
    text = rewritten(sql)
    assert text is None or text.startswith("SELECT ")


def test_only_conditions_of_literals_may_be_left_out() -> None:
    found = rewrite(
        "SELECT metric_name, count(*) FROM metrics WHERE timestamp >= TIMESTAMP "
        "'2026-01-01T00:00:00Z' AND timestamp > now() - INTERVAL '1 hour' AND timestamp < "
        "CURRENT_TIMESTAMP AND timestamp <= '2026-01-02' GROUP BY metric_name",
        SHAPE,
    )
    assert found is not None
    assert found.fixed == (True, False, False, True)
    # the caller chooses which conditions the per-series query keeps
    assert "WHERE (timestamp <= '2026-01-02') GROUP BY" in found.sql(found.rows[3:])
    assert " FROM metrics GROUP BY series_id" in found.sql([])


def test_a_query_of_thousands_of_aggregates_is_read_in_one_pass() -> None:
    """The text is read with its parentheses matched once and the calls looked up by
    position, so a query at the size cap with thousands of calls is rewritten, each call
    in its place."""
    calls = 3000  # about 56 KiB, under the 64 KiB cap on SQL text
    sql = (
        "SELECT metric_name, "
        + ", ".join(f"max(value + {i})" for i in range(calls))
        + " FROM metrics GROUP BY metric_name"
    )
    text = rewritten(sql)
    assert text is not None
    assert text.count("max(__shoal_p.__shoal_a") == calls
    assert f"max(value + {calls - 1}) AS __shoal_a{calls - 1}" in text
