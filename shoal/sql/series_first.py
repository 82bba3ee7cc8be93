"""Aggregations over a series' labels, computed per series first: the SQL text rewrite.

In the ``metrics`` table ``series_id`` is a hash of ``metric_name``, ``attributes``
and ``resource_attributes`` (the table's ``label_columns``), so every row of a series
holds the same values in those columns. A query that groups by expressions of
those columns alone, and aggregates with ``count``, ``sum``, ``min``, ``max`` or ``avg``,
gets the same answer in two steps:

1. the rows are aggregated per ``series_id``, an integer key, under the query's own
   filters on the rows; the string and map columns are not decoded at all;
2. those per-series rows are joined with each series' labels (the series index, one row
   per series, registered as :data:`SERIES_TABLE`), filtered by the query's conditions
   on labels alone, and their partial aggregates combined per group (a count is the sum
   of the counts, an average the sum of the sums over the sum of the counts).

:func:`rewrite` turns a query of that shape into the two-step query and gives None for
any other: it reads the text with :func:`shoal.sql.lexer.located` and knows one plain
``SELECT ... FROM <table> [WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT] [OFFSET]``,
nothing nested, joined, windowed or distinct. What the query names outside the
aggregates' arguments must be a label, the series key, an alias, a function or a
literal; any other aggregate (``median``, ``array_agg``...) refuses the rewrite, since
over one row per series it would give another answer. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

from shoal.sql.lexer import Token, located

SERIES_TABLE = "__shoal_series"
"""The name the series' labels are registered under for a rewritten query."""
PARTIAL = "__shoal_p"
SERIES_KEY_ALIAS = "__shoal_sid"

COMBINED = frozenset({"count", "sum", "min", "max", "avg", "mean"})
"""Aggregates whose per-series results combine into the answer."""

AGGREGATES = COMBINED | frozenset(
    {
        "any_value", "approx_distinct", "approx_median", "approx_percentile_cont",
        "approx_percentile_cont_with_weight", "array_agg", "bit_and", "bit_or", "bit_xor",
        "bool_and", "bool_or", "corr", "covar", "covar_pop", "covar_samp", "first_value",
        "grouping", "last_value", "median", "nth_value", "percentile_cont", "quantile_cont",
        "regr_avgx", "regr_avgy", "regr_count", "regr_intercept", "regr_r2", "regr_slope",
        "regr_sxx", "regr_sxy", "regr_syy", "stddev", "stddev_pop", "stddev_samp",
        "string_agg", "var", "var_pop", "var_population", "var_samp", "var_sample",
    }
)  # fmt: skip
"""Every aggregate function DataFusion knows (a test checks this against the engine's list)."""

_REFUSED = frozenset(
    {
        "with", "union", "intersect", "except", "join", "over", "distinct", "filter",
        "window", "qualify", "lateral", "unnest", "within", "values", "rollup", "cube",
        "sets", "into", "natural", "cross", "using", "random", "uuid", ".", ";",
    }
)  # fmt: skip
"""Words that take a query out of the one shape (``.`` too: no qualified names)."""

_MOVING = frozenset(
    {"current_date", "current_time", "current_timestamp", "localtime", "localtimestamp"}
)
"""Words that name the current time without a call."""

_CLAUSES = ("from", "where", "group", "having", "order", "limit", "offset")


@dataclasses.dataclass(frozen=True)
class Shape:
    """What the rewrite needs to know of a table."""

    table: str
    series_key: str
    labels: frozenset[str]
    """Columns whose value is the same in every row of a series."""
    columns: frozenset[str]
    """Every column of the table."""


@dataclasses.dataclass(frozen=True)
class Rewritten:
    """A query rewritten to run per series first (:func:`rewrite`)."""

    head: str
    """The outer query's select list and the per-series query up to its conditions."""
    rows: tuple[str, ...]
    """The per-series query's conditions on rows (those not on labels alone), each in
    parentheses, as written."""
    tail: str
    """The rest: the per-series grouping, the join with the labels, the outer clauses."""
    fixed: tuple[bool, ...]
    """Per condition of :attr:`rows`, whether it calls no function and names no current
    time (``now()`` is another instant when the query is planned again)."""
    labels: frozenset[str] = frozenset()
    """The label columns the query reads outside its aggregates' arguments."""

    def sql(self, rows: Sequence[str] | None = None) -> str:
        """The query's text, with ``rows`` as the per-series query's conditions (by default
        all of :attr:`rows`: the caller may leave out those it knows to hold for every row)."""
        kept = self.rows if rows is None else rows
        where = " WHERE " + " AND ".join(kept) if kept else ""
        return f"{self.head}{where} {self.tail}"


class _Call(NamedTuple):
    """An aggregate call: its function, its argument's text, where it stands in the text."""

    name: str
    argument: str
    start: int
    end: int


class _Text:
    """The query's tokens, with each token's depth of parentheses."""

    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.tokens: list[Token] = list(located(sql))
        self.depth: list[int] = []
        self.match: dict[int, int] = {}
        """Per ``(``, the index of its ``)``."""
        opened: list[int] = []
        self.balanced = True
        for i, token in enumerate(self.tokens):
            if token.text == ")":
                if not opened:
                    self.balanced = False
                    break
                self.match[opened.pop()] = i
            self.depth.append(len(opened))
            if token.text == "(":
                opened.append(i)
        self.balanced = self.balanced and not opened

    def word(self, i: int) -> str:
        return self.tokens[i].text if i < len(self.tokens) else ""

    def closing(self, i: int) -> int:
        """The index of the ``)`` matching the ``(`` at ``i`` (the text is balanced)."""
        return self.match[i]

    def text(self, lo: int, hi: int) -> str:
        """The text of tokens ``lo`` up to ``hi`` (excluded), as written."""
        return self.sql[self.tokens[lo].start : self.tokens[hi - 1].end] if lo < hi else ""

    def name(self, i: int) -> str | None:
        """The column ``tokens[i]`` may name: a word that is not a call or an alias, or a
        quoted identifier."""
        token = self.tokens[i]
        if token.text == '""':
            return self.sql[token.start + 1 : token.end - 1].replace('""', '"')
        if not (token.text[0].isalpha() or token.text[0] == "_"):
            return None
        if self.word(i + 1) == "(" or (i > 0 and self.tokens[i - 1].text == "as"):
            return None
        return token.text


def _clauses(text: _Text) -> dict[str, tuple[int, int]] | None:
    """Per clause word, the token range of its body; None when the text is not one
    ``SELECT`` with its clauses once each, in order."""
    starts: list[tuple[str, int, int]] = [("select", 0, 1)]
    last = -1
    for i, token in enumerate(text.tokens):
        if text.depth[i] or token.text not in _CLAUSES:
            continue
        order = _CLAUSES.index(token.text)
        if order <= last:
            return None
        last = order
        body = i + 1
        if token.text in ("group", "order"):
            if text.word(i + 1) != "by":
                return None
            body = i + 2
        starts.append((token.text, i, body))
    found: dict[str, tuple[int, int]] = {}
    for k, (word, _, body) in enumerate(starts):
        end = starts[k + 1][1] if k + 1 < len(starts) else len(text.tokens)
        found[word] = (body, end)
    return found


def _calls(text: _Text, lo: int, hi: int) -> list[_Call] | None:
    """The aggregate calls between tokens ``lo`` and ``hi``; None when one of them does not
    combine per series."""
    calls: list[_Call] = []
    i = lo
    while i < hi:
        word = text.word(i)
        if word in AGGREGATES and text.word(i + 1) == "(":
            if word not in COMBINED:
                return None
            close = text.closing(i + 1)
            argument = text.text(i + 2, close)
            star = [t.text for t in text.tokens[i + 2 : close]] == ["*"]
            if not argument or (star and word != "count"):
                return None
            inner = _calls(text, i + 2, close)
            if inner is None or inner:
                return None  # an aggregate inside an aggregate
            calls.append(_Call(word, argument, text.tokens[i].start, text.tokens[close].end))
            i = close + 1
            continue
        i += 1
    return calls


def _names(text: _Text, lo: int, hi: int, skip: Sequence[_Call] = ()) -> set[str]:
    """The column names used between tokens ``lo`` and ``hi``, outside the calls ``skip``."""
    names: set[str] = set()
    starts = [call.start for call in skip]  # in order, and the calls do not overlap
    for i in range(lo, hi):
        start = text.tokens[i].start
        j = bisect.bisect_right(starts, start) - 1
        if j >= 0 and start < skip[j].end:
            continue
        name = text.name(i)
        if name is not None:
            names.add(name)
    return names


def _conjuncts(text: _Text, lo: int, hi: int) -> list[tuple[int, int]]:
    """The top-level ``AND`` terms of a condition (all of it when it has a top-level ``OR``)."""
    depth = text.depth[lo] if lo < hi else 0
    top = [i for i in range(lo, hi) if text.depth[i] == depth]
    if any(text.word(i) == "or" for i in top):
        return [(lo, hi)]
    terms: list[tuple[int, int]] = []
    start, between = lo, False
    for i in top:
        word = text.word(i)
        if word == "between":
            between = True
        elif word == "and":
            if between:
                between = False
                continue
            terms.append((start, i))
            start = i + 1
    terms.append((start, hi))
    return terms


def _combined(call: _Call, part: dict[str, str]) -> str:
    """How the outer query combines an aggregate call's per-series parts; ``part`` names
    each part of the per-series query (one name per distinct expression: DataFusion
    refuses two aggregates that it sees as one)."""

    def name(expression: str) -> str:
        alias = part.setdefault(expression, f"__shoal_a{len(part)}")
        return f"{PARTIAL}.{alias}"

    if call.name == "count":
        return f"coalesce(sum({name(f'count({call.argument})')}), 0)"
    if call.name in ("avg", "mean"):
        total = name(f"sum({call.argument})")
        count = name(f"count({call.argument})")
        return f"(CAST(sum({total}) AS DOUBLE) / nullif(sum({count}), 0))"
    return f"{call.name}({name(f'{call.name}({call.argument})')})"


def rewrite(sql: str, shape: Shape) -> Rewritten | None:
    """``sql`` as a per-series aggregation joined with :data:`SERIES_TABLE`, or None when
    it is not of the shape this knows (see the module's text)."""
    text = _Text(sql)
    if not text.balanced or not text.tokens or text.tokens[0].text != "select":
        return None
    if sum(t.text == "select" for t in text.tokens) != 1:
        return None
    if any(t.text in _REFUSED for t in text.tokens):
        return None
    clauses = _clauses(text)
    if clauses is None or "from" not in clauses:
        return None
    lo, hi = clauses["from"]
    if hi - lo != 1 or text.name(lo) != shape.table:
        return None
    outer = [clauses[c] for c in ("select", "having", "order") if c in clauses]
    calls: list[_Call] = []
    for a, b in outer:
        found = _calls(text, a, b)
        if found is None:
            return None
        calls.extend(found)
    if "group" not in clauses:
        # measured: an aggregate over all rows filtered by a name alone (no GROUP BY) is
        # as fast or faster as written (docs/rationale.md)
        return None
    where = clauses.get("where")
    if where is not None and _calls(text, *where):
        return None
    other = shape.columns - shape.labels - {shape.series_key}
    aliases = {
        text.tokens[i + 1].text
        for i in range(*clauses["select"])
        if text.word(i) == "as" and i + 1 < len(text.tokens)
    }
    # ORDER BY and HAVING may name the select list's aliases; GROUP BY is read as columns
    used = set().union(*(_names(text, a, b, calls) for a, b in outer)) - aliases
    if "group" in clauses:
        used |= _names(text, *clauses["group"])
    if used & other:
        return None
    rows: list[str] = []
    fixed: list[bool] = []
    labels: list[str] = []
    for a, b in _conjuncts(text, *where) if where is not None else []:
        names = _names(text, a, b)
        on_labels = bool(names & shape.labels) and not names & other
        (labels if on_labels else rows).append(f"({text.text(a, b)})")
        if not on_labels:
            fixed.append(
                not any(text.word(i) in _MOVING or text.word(i) == "(" for i in range(a, b))
            )
        used |= names if on_labels else set()
    if not used & shape.labels:
        return None  # no label is read outside the aggregates: nothing to save
    part: dict[str, str] = {}
    combine = [(call.start, call.end, _combined(call, part)) for call in calls]

    def section(word: str) -> str:
        a, b = clauses[word]
        if a >= b:
            return ""
        start, end = text.tokens[a].start, text.tokens[b - 1].end
        body, at = [], start
        for c_start, c_end, combined in sorted(combine):
            if start <= c_start < end:
                body.append(sql[at:c_start])
                body.append(combined)
                at = c_end
        body.append(sql[at:end])
        return "".join(body)

    key = shape.series_key
    head = f"SELECT {key} AS {SERIES_KEY_ALIAS}"
    head += "".join(f", {expression} AS {alias}" for expression, alias in part.items())
    head += f" FROM {text.text(lo, hi)}"
    query = [
        f"GROUP BY {key}) AS {PARTIAL} JOIN {SERIES_TABLE} "
        f"ON {PARTIAL}.{SERIES_KEY_ALIAS} = {SERIES_TABLE}.{key}"
    ]
    if labels:
        query.append("WHERE " + " AND ".join(labels))
    for word, title in (("group", "GROUP BY"), ("having", "HAVING"), ("order", "ORDER BY")):
        if word in clauses:
            query.append(f"{title} {section(word)}")
    for word in ("limit", "offset"):
        if word in clauses:
            a, b = clauses[word]
            query.append(f"{word.upper()} {text.text(a, b)}")
    return Rewritten(
        f"SELECT {section('select')} FROM ({head}",
        tuple(rows),
        " ".join(query),
        tuple(fixed),
        frozenset(used & shape.labels),
    )
