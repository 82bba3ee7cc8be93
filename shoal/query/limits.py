"""Query limits: SQL size and complexity checks, and DataFusion errors as shoal errors.

Planning cost in DataFusion grows quickly with the number of operators in one
expression (FINDINGS 15: 5,000 ``+`` terms took about 40 s to plan; 1,000 take
about a second), and planning cannot be interrupted, so the operator count is
checked before the text reaches DataFusion. Nesting depth is already bounded
by DataFusion's SQL parser (recursion limit 50), which answers with a clear
error.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from shoal.errors import QueryError, QueryLimitError

MAX_OPERATORS = 1000
"""Most operators (arithmetic, comparison, AND/OR, ||) one query may contain."""

MAX_RELATIONS = 64
"""Most SELECTs, JOINs, FROM items and set operations one query may contain: planning 64
joins takes under a second here, 300 about 40 s (docs/benchmarks.md)."""

MAX_JOIN_PAIRS = 1_000_000_000
"""Most row pairs the joins without an equality key of one query may compare. Such a join
(a nested loop) does not yield while it finds no match, so a query past its time limit
cannot be stopped inside it; bounded up front, it ends in seconds."""

NARROW_HINT = "narrow the time range, add a LIMIT, or aggregate more coarsely"

_OPERATOR_CHARS = frozenset("+-*/%<>=|&^")
_KEYWORD_OPS = frozenset({"and", "or"})


@dataclasses.dataclass(frozen=True)
class Limits:
    """The resource limits of one query (from the ``query_*`` settings)."""

    memory_bytes: int = 256 * 1024 * 1024
    timeout_s: float = 30.0
    max_sql_bytes: int = 64 * 1024
    max_concurrency: int = 4
    max_rows: int = 100_000
    max_samples: int = 5_000_000
    """Most rows a PromQL selector reads (``promql_max_samples``); SQL answers use ``max_rows``."""
    max_operators: int = MAX_OPERATORS
    max_relations: int = MAX_RELATIONS
    max_join_pairs: int = MAX_JOIN_PAIRS
    max_tenant_share: int = 0
    """Most queries one tenant may run at once; 0 means ``max_concurrency - 1`` (at least 1),
    so a tenant whose queries are stuck leaves a slot to the others."""

    @property
    def tenant_slots(self) -> int:
        if self.max_tenant_share > 0:
            return min(self.max_tenant_share, self.max_concurrency)
        return max(1, self.max_concurrency - 1)


def _human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


@dataclasses.dataclass(frozen=True)
class Shape:
    """What planning cost grows with, counted in the query text before DataFusion sees it."""

    operators: int = 0
    """Arithmetic, comparison, ``||``, AND, OR."""
    relations: int = 0
    """SELECTs, JOINs, comma-separated FROM items and UNION/INTERSECT/EXCEPT."""


_CLAUSE_ENDS = frozenset(
    {
        "where",
        "group",
        "having",
        "order",
        "limit",
        "window",
        "qualify",
        "union",
        "intersect",
        "except",
        "on",
        "using",
        "select",
    }
)
_SET_OPS = frozenset({"union", "intersect", "except"})


def _tokens(sql: str) -> Iterator[str]:
    """Words (lower-cased), operator runs and punctuation outside string literals, quoted
    identifiers and comments."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = i + 1
            while end < n:
                if sql[end] == ch:
                    if end + 1 < n and sql[end + 1] == ch:  # doubled quote escapes itself
                        end += 2
                        continue
                    break
                end += 1
            i = end + 1
            if ch == '"':
                yield '""'  # a quoted identifier
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            i = n if close < 0 else close + 2
        elif ch in _OPERATOR_CHARS:
            start = i
            i += 1
            while i < n and sql[i] in _OPERATOR_CHARS and not sql.startswith("--", i):
                i += 1
            yield sql[start:i]
        elif ch.isalpha() or ch == "_":
            start = i
            while i < n and (sql[i].isalnum() or sql[i] == "_"):
                i += 1
            yield sql[start:i].lower()
        elif ch.isdigit():
            start = i
            while i < n and (sql[i].isdigit() or sql[i] == "."):
                i += 1
            if i < n and sql[i] in "eE":
                j = i + 1 + (i + 1 < n and sql[i + 1] in "+-")
                if j < n and sql[j].isdigit():
                    i = j
                    while i < n and sql[i].isdigit():
                        i += 1
            yield sql[start:i]
        elif ch in "(),":
            yield ch
            i += 1
        else:
            i += 1


def sql_shape(sql: str) -> Shape:
    """The :class:`Shape` of ``sql``."""
    operators = relations = 0
    depth = 0
    from_depths: list[int] = []  # paren depths at which a FROM list is open
    for token in _tokens(sql):
        if token[0] in _OPERATOR_CHARS:
            operators += 1
        elif token in _KEYWORD_OPS:
            operators += 1
        elif token in ("select", "join") or token in _SET_OPS:
            relations += 1
        if token == "(":
            depth += 1
        elif token == ")":
            while from_depths and from_depths[-1] >= depth:
                from_depths.pop()
            depth -= 1
        elif token == "from":
            from_depths.append(depth)
        elif token in _CLAUSE_ENDS and from_depths and from_depths[-1] == depth:
            from_depths.pop()
        elif token == "," and from_depths and from_depths[-1] == depth:
            relations += 1
    return Shape(operators=operators, relations=relations)


_ELEMENT_BYTES = {
    # function: bytes per unit of its count argument (a character, or an 8-byte element)
    "repeat": 1,
    "lpad": 1,
    "rpad": 1,
    "array_repeat": 8,
    "array_resize": 8,
    "range": 8,
    "generate_series": 8,
}
_SERIES = frozenset({"range", "generate_series"})


def _number(token: str) -> float | None:
    try:
        return float(token) if token[0].isdigit() else None
    except ValueError:
        return None


def literal_allocations(sql: str) -> list[tuple[str, int]]:
    """Calls of functions whose result size is set by a count argument (``repeat``,
    ``lpad``, ``array_repeat``, scalar ``range`` ...), with the bytes their numeric literal
    arguments ask for at least. Such a result is built whole, outside the memory pool, so a
    call that asks for more than the pool holds is refused before it runs. ``range`` in a
    FROM clause (a table function, which streams) is not counted."""
    tokens = list(_tokens(sql))
    found: list[tuple[str, int]] = []
    for i, token in enumerate(tokens):
        per_unit = _ELEMENT_BYTES.get(token)
        if per_unit is None or i + 1 >= len(tokens) or tokens[i + 1] != "(":
            continue
        if token in _SERIES and i > 0 and tokens[i - 1] in ("from", "join", ","):
            continue
        depth = 0
        args: list[list[str]] = []
        current: list[str] = []
        for inner in tokens[i + 1 :]:
            if inner == "(":
                depth += 1
                if depth == 1:
                    continue
            elif inner == ")":
                depth -= 1
                if depth == 0:
                    break
            if depth == 1 and inner == ",":
                args.append(current)
                current = []
            else:
                current.append(inner)
        args.append(current)
        numbers = [_number(a[0]) if len(a) == 1 else None for a in args]
        if token in _SERIES:
            units = _series_length(numbers)
        else:
            units = max((x for x in numbers if x is not None), default=0.0)
        found.append((token, int(min(units, 1e18)) * per_unit))
    return found


def _series_length(numbers: list[float | None]) -> float:
    if any(x is None for x in numbers) or not numbers:
        return 0.0
    values = [float(x) for x in numbers if x is not None]
    start, stop = (0.0, values[0]) if len(values) == 1 else (values[0], values[1])
    step = values[2] if len(values) > 2 and values[2] else 1.0
    return max((stop - start) / step, 0.0)


def count_operators(sql: str) -> int:
    """Operators outside string literals, quoted identifiers and comments."""
    return sql_shape(sql).operators


def check_sql(sql: str, limits: Limits) -> str:
    """The query text, stripped, after the size and complexity checks."""
    size = len(sql.encode("utf-8"))
    if size > limits.max_sql_bytes:
        raise QueryLimitError(
            "size",
            f"query text is {size} bytes; the limit is {limits.max_sql_bytes} bytes "
            "(query_max_sql_bytes)",
        )
    text = sql.strip()
    if not text:
        raise QueryError(
            "empty query: send the SQL text as the body, in JSON {'query': ...}, or as ?q="
        )
    shape = sql_shape(text)
    if shape.operators > limits.max_operators:
        raise QueryLimitError(
            "complexity",
            f"query has {shape.operators} operators; the limit is {limits.max_operators} "
            "(planning time grows quickly with expression size): use IN (...) lists "
            "or split the query",
        )
    for name, size in literal_allocations(text):
        if size > limits.memory_bytes:
            raise QueryLimitError(
                "memory",
                f"{name}(...) would build a result of at least {_human_bytes(size)}, over the "
                f"query memory limit of {_human_bytes(limits.memory_bytes)} "
                "(query_memory_bytes): ask for a smaller result",
            )
    if shape.relations > limits.max_relations:
        raise QueryLimitError(
            "complexity",
            f"query has {shape.relations} SELECTs, JOINs, FROM items and set operations; "
            f"the limit is {limits.max_relations} (planning time grows quickly with the "
            "number of joins): split the query",
        )
    return text


def check_join_pairs(pairs: int, limits: Limits) -> None:
    """Refuse a query whose joins without an equality key may compare too many row pairs."""
    if pairs > limits.max_join_pairs:
        raise QueryLimitError(
            "complexity",
            f"query joins without an equality key (cross join, ON true, <, OR) over up to "
            f"{pairs:,} row pairs; the limit is {limits.max_join_pairs:,} "
            "(query_max_join_pairs): join on an equality (a.trace_id = b.trace_id), narrow "
            "the time range of each side, or aggregate before joining",
        )


def memory_error(limits: Limits, detail: str) -> QueryLimitError:
    return QueryLimitError(
        "memory",
        f"query exceeded its memory limit of {_human_bytes(limits.memory_bytes)} "
        f"(query_memory_bytes): {NARROW_HINT}. ({detail})",
    )


def timeout_error(limits: Limits) -> QueryLimitError:
    return QueryLimitError(
        "time",
        f"query exceeded its time limit of {limits.timeout_s:g} s (query_timeout_s): {NARROW_HINT}",
    )


def concurrency_error(limits: Limits) -> QueryLimitError:
    return QueryLimitError(
        "concurrency",
        f"too many queries running at once (query_max_concurrency={limits.max_concurrency}) "
        f"and none finished within the time limit: retry later, or {NARROW_HINT} so "
        "queries finish sooner",
    )


def row_cap_message(limits: Limits) -> str:
    return (
        f"result truncated at {limits.max_rows} rows (query_max_rows): add a LIMIT, "
        "narrow the time range or aggregate"
    )


_PREFIX = re.compile(r"^(DataFusion error: |Execution error: |External error: )+")
_CAUSED_BY = re.compile(r"\s*\bcaused by\b\s*", re.IGNORECASE)
_MEMORY_MARKERS = ("Resources exhausted", "cannot spill", "Memory Exhausted")
MAX_MESSAGE_CHARS = 600
"""Longest error message answered (DataFusion lists every valid field on a typo)."""


def clean_message(raw: str) -> str:
    """DataFusion's error text made for people: one line, no wrapper prefixes or quoting.

    A chain (``Optimizer rule ... failed / caused by / Arrow error: ...``) keeps its
    innermost cause, which names the actual problem; newlines become spaces; a message the
    bindings returned as a quoted debug string is unquoted; very long text is cut.
    """
    text = raw.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].replace('\\"', '"')
    parts = [p for p in _CAUSED_BY.split(text) if p.strip()]
    if parts:
        text = parts[-1]
    text = _PREFIX.sub("", " ".join(text.split()))
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 3].rstrip() + "..."
    return text


def translate(exc: BaseException, limits: Limits) -> QueryError:
    """A DataFusion (or Arrow) exception as a :class:`QueryError` carrying its message."""
    if isinstance(exc, QueryError):
        return exc
    message = clean_message(str(exc)) or type(exc).__name__
    if any(marker in message for marker in _MEMORY_MARKERS):
        return memory_error(limits, message)
    return QueryError(message)
