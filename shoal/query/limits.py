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

from shoal.errors import QueryError, QueryLimitError

MAX_OPERATORS = 1000
"""Most operators (arithmetic, comparison, AND/OR, ||) one query may contain."""

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
    max_operators: int = MAX_OPERATORS


def _human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def count_operators(sql: str) -> int:
    """Operators outside string literals, quoted identifiers and comments."""
    count = 0
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
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif sql.startswith("/*", i):
            close = sql.find("*/", i + 2)
            i = n if close < 0 else close + 2
        elif ch in _OPERATOR_CHARS:
            count += 1
            i += 1
            while i < n and sql[i] in _OPERATOR_CHARS and not sql.startswith("--", i):
                i += 1
        elif ch.isalpha() or ch == "_":
            start = i
            while i < n and (sql[i].isalnum() or sql[i] == "_"):
                i += 1
            if sql[start:i].lower() in _KEYWORD_OPS:
                count += 1
        else:
            i += 1
    return count


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
        raise QueryError("empty query: send the SQL text as the body, in JSON {'query': ...}, "
                         "or as ?q=")
    ops = count_operators(text)
    if ops > limits.max_operators:
        raise QueryLimitError(
            "complexity",
            f"query has {ops} operators; the limit is {limits.max_operators} "
            "(planning time grows quickly with expression size): use IN (...) lists "
            "or split the query",
        )
    return text


def memory_error(limits: Limits, detail: str) -> QueryLimitError:
    return QueryLimitError(
        "memory",
        f"query exceeded its memory limit of {_human_bytes(limits.memory_bytes)} "
        f"(query_memory_bytes): {NARROW_HINT}. ({detail})",
    )


def timeout_error(limits: Limits) -> QueryLimitError:
    return QueryLimitError(
        "time",
        f"query exceeded its time limit of {limits.timeout_s:g} s (query_timeout_s): "
        f"{NARROW_HINT}",
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
