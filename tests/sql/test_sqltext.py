"""The query-text reader: shape, and the size of results built outside the memory pool."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.sql import cost


@pytest.mark.parametrize(
    ("sql", "operators", "relations"),
    [
        ("SELECT 1", 0, 1),
        ("SELECT a + b * c FROM t WHERE x = 1 AND y < 2", 5, 1),
        ("SELECT * FROM a, b, c WHERE a.x = b.x", 1, 3),
        ("SELECT * FROM a JOIN b ON true JOIN c ON true", 0, 3),
        ("SELECT 1 UNION ALL SELECT 2", 0, 3),
        ("SELECT f(a, b), g(c, d) FROM t", 0, 1),  # commas outside a FROM list
        ("SELECT * FROM (SELECT 1 FROM x, y) s, z", 0, 4),
        ("SELECT 'a + b, c JOIN d' FROM \"t,u\" -- + JOIN\n", 0, 1),
    ],
)
def test_shape_counts_operators_and_relations_outside_literals(
    sql: str, operators: int, relations: int
) -> None:
    assert cost.sql_shape(sql) == cost.Shape(operators=operators, relations=relations)


@pytest.mark.parametrize(
    ("arg", "value"),
    [
        (["1000"], 1000.0),
        (["1000", "*", "1000", "*", "1000"], 1e9),
        (["(", "2", "+", "3", ")", "*", "4"], 20.0),
        (["cast", "(", "1e9", "as", "bigint", ")"], 1e9),
        (["1e9", "bigint"], 1e9),  # 1e9::bigint (the lexer drops the colons)
        (["-", "5"], -5.0),
        (["value"], None),
        (["1", "+", "value"], None),
        (["''"], None),
        ([], None),
    ],
)
def test_constant_counts_are_folded_and_data_is_not(arg: list[str], value: float | None) -> None:
    assert cost.constant_value(arg) == value


def _calls(sql: str) -> list[tuple[str, int, bool]]:
    return [(a.function, a.bytes, a.constant) for a in cost.allocations(sql)]


def test_allocations_of_result_building_functions() -> None:
    assert _calls("SELECT repeat('x', 1000*1000)") == [("repeat", 1_000_000, True)]
    assert _calls("SELECT lpad(name, 20) FROM t") == [
        ("lpad", 20 * cost.ROWS_PER_BATCH, True)  # a column's whole batch at once
    ]
    assert _calls("SELECT array_repeat(1.5, 100)") == [("array_repeat", 800, True)]
    assert _calls("SELECT range(10, 110, 10)") == [("range", 80, True)]
    assert _calls("SELECT repeat('-', CAST(v AS INT)) FROM t") == [("repeat", 0, False)]
    # range as a table function streams, and a name in a string is not a call
    assert _calls("SELECT count(*) FROM range(1000000000000)") == []
    assert _calls("SELECT 'repeat(x, 1e12)' AS s") == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_the_reader_never_fails_on_any_text(sql: str) -> None:
    shape = cost.sql_shape(sql)
    assert shape.operators >= 0 and shape.relations >= 0
    for call in cost.allocations(sql):
        assert call.bytes >= 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["repeat", "lpad", "range", "(", ")", ",", "'x'", "1e9", "*", "-", "a"]),
        max_size=40,
    )
)
def test_the_reader_never_fails_on_call_like_soup(parts: list[str]) -> None:
    for call in cost.allocations("SELECT " + " ".join(parts)):
        assert call.bytes >= 0
