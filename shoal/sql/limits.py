"""Query limits: SQL size and complexity checks, and DataFusion errors as shoal errors.

Planning cost in DataFusion grows quickly with the number of operators in one
expression (docs/rationale.md, "Query path"), and planning cannot be
interrupted, so the operator count is checked before the text reaches
DataFusion. Nesting depth is already bounded by DataFusion's SQL parser
(recursion limit 50), which answers with a clear error.
"""

from __future__ import annotations

import dataclasses
import re

from shoal.errors import QueryError, QueryLimitError
from shoal.sql import cost

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
    memory_limit_bytes: int = 0
    """The process's memory budget; 0 means its cgroup's limit (see admission)."""

    @property
    def tenant_slots(self) -> int:
        if self.max_tenant_share > 0:
            return min(self.max_tenant_share, self.max_concurrency)
        return max(1, self.max_concurrency - 1)


def _human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}" if n % size == 0 else f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def count_operators(sql: str) -> int:
    """Operators outside string literals, quoted identifiers and comments."""
    return cost.sql_shape(sql).operators


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
    shape = cost.sql_shape(text)
    if shape.operators > limits.max_operators:
        raise QueryLimitError(
            "complexity",
            f"query has {shape.operators} operators; the limit is {limits.max_operators} "
            "(planning time grows quickly with expression size): use IN (...) lists "
            "or split the query",
        )
    for call in cost.allocations(text):
        if not call.constant:
            raise QueryLimitError(
                "memory",
                f"{call.function}(...) needs constant counts: it builds its result whole, "
                "outside the memory pool (query_memory_bytes), so a count taken from data "
                "could exhaust the server's memory; use a literal count",
            )
        if call.bytes > limits.memory_bytes:
            raise QueryLimitError(
                "memory",
                f"{call.function}(...) would build a result of at least "
                f"{_human_bytes(call.bytes)}, over the query memory limit of "
                f"{_human_bytes(limits.memory_bytes)} (query_memory_bytes): ask for a "
                "smaller result",
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
    """Refuse a query whose joins without an equality key may compare too many row pairs
    (weighted by the cost of the join condition, see work.filter_cost)."""
    if pairs > limits.max_join_pairs:
        raise QueryLimitError(
            "complexity",
            f"query joins without an equality key (cross join, ON true, <, LIKE, ~) over up "
            f"to {pairs:,} row pairs, counting each pair by what its join condition costs; "
            f"the limit is {limits.max_join_pairs:,} (query_max_join_pairs): join on an "
            "equality (a.trace_id = b.trace_id), narrow the time range of each side, or "
            "aggregate before joining",
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
        f"and none finished within the time limit of {limits.timeout_s:g} s (query_timeout_s): "
        f"retry later, or {NARROW_HINT} so "
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
