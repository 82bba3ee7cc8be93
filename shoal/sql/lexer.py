"""SQL text cut into pieces and tokens: the one lexer every reader of SQL text uses.

Quoted strings (``'...'``, ``E'...'``, ``$tag$...$tag$``), quoted identifiers and
comments are found first (:func:`spans`), so that nothing inside them is taken for
code: not a ``;`` between statements, a ``$1`` parameter, an operator, or a table's
name. The pieces of code are then cut into tokens (:func:`tokens`). The SQL endpoint's
cost checks (:mod:`shoal.sql.cost`), the tables a query can read (:func:`identifiers`)
and the PostgreSQL protocol's statement handling (:mod:`shoal.pgwire.sqltext`) are all
built on these two functions. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from shoal.errors import ShoalError

OPERATOR_CHARS = frozenset("+-*/%<>=|&^")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


class SqlTextError(ShoalError):
    """SQL text the lexer cannot follow (an unterminated quote or comment)."""


def word_before(sql: str, i: int) -> bool:
    """Whether the character before ``i`` continues a word (``E'`` and ``$`` are then not
    the start of a quote)."""
    return i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$")


def _quoted_end(sql: str, i: int, strict: bool) -> int:
    """The end of the quote, identifier, comment or dollar-quoted string starting at
    ``i``, or -1 when none starts there. Unterminated: an error when ``strict``, else it
    runs to the end of the text."""
    n = len(sql)
    c = sql[i]
    if c == "'" or (c in "eE" and sql[i + 1 : i + 2] == "'" and not word_before(sql, i)):
        escapes = c != "'"
        j = i + (2 if escapes else 1)
        while j < n:
            if escapes and sql[j] == "\\":
                j += 2
                continue
            if sql[j] == "'":
                if sql[j + 1 : j + 2] == "'":
                    j += 2
                    continue
                return j + 1
            j += 1
        return _unterminated("quoted string", n, strict)
    if c == '"':
        j = sql.find('"', i + 1)
        while j >= 0 and sql[j + 1 : j + 2] == '"':
            j = sql.find('"', j + 2)
        return _unterminated("quoted identifier", n, strict) if j < 0 else j + 1
    if c == "-" and sql[i + 1 : i + 2] == "-":
        j = sql.find("\n", i)
        return n if j < 0 else j + 1
    if c == "/" and sql[i + 1 : i + 2] == "*":
        depth, j = 1, i + 2
        while depth:
            if j >= n:
                return _unterminated("/* comment", n, strict)
            if sql.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif sql.startswith("*/", j):
                depth, j = depth - 1, j + 2
            else:
                j += 1
        return j
    if c == "$" and not word_before(sql, i):
        m = _DOLLAR_TAG.match(sql, i)
        if m:
            close = sql.find(m.group(0), m.end())
            if close < 0:
                return _unterminated("dollar-quoted string", n, strict)
            return close + len(m.group(0))
    return -1


def _unterminated(what: str, n: int, strict: bool) -> int:
    if strict:
        raise SqlTextError(f"unterminated {what}")
    return n


def spans(sql: str, strict: bool = True) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, is_code)`` pieces covering ``sql``: code, or one quote or comment.

    With ``strict`` an unterminated quote or comment raises :class:`SqlTextError`;
    otherwise it runs to the end of the text."""
    i, n, start = 0, len(sql), 0
    while i < n:
        end = _quoted_end(sql, i, strict)
        if end < 0:
            i += 1
            continue
        if start < i:
            yield start, i, True
        yield i, end, False
        start = i = end
    if start < n:
        yield start, n, True


def tokens(sql: str) -> Iterator[str]:
    """Words (lower-cased), operator runs, numbers and ``( ) ,`` of the code of ``sql``;
    a string literal is one token ``''``, a quoted identifier ``""``; comments are left
    out. Never raises: an unterminated quote runs to the end."""
    for token in located(sql):
        if token.text not in _MARKS:
            yield token.text


class Token(NamedTuple):
    """A token of :func:`located`: ``sql[start:end]`` is its text as written."""

    start: int
    end: int
    text: str
    """As :func:`tokens` gives it (words lower-cased, ``''`` for a string literal, ``""``
    for a quoted identifier), or one of ``. [ ] ; :``."""


_MARKS = frozenset(".[];:")
"""Characters :func:`located` gives as tokens of their own and :func:`tokens` leaves out."""


def located(sql: str) -> Iterator[Token]:
    """The tokens of :func:`tokens` with where each stands in ``sql``, and the marks
    ``. [ ] ; :`` (outside numbers) as tokens too. Never raises."""
    for start, end, code in spans(sql, strict=False):
        if not code:
            first = sql[start]
            if first == '"':
                yield Token(start, end, '""')
            elif first in "'eE$":
                yield Token(start, end, "''")
            continue
        yield from _code_tokens(sql, start, end)


def _code_tokens(sql: str, i: int, n: int) -> Iterator[Token]:
    while i < n:
        ch = sql[i]
        start = i
        if ch in OPERATOR_CHARS:
            i += 1
            while i < n and sql[i] in OPERATOR_CHARS:
                i += 1
            yield Token(start, i, sql[start:i])
        elif ch.isalpha() or ch == "_":
            while i < n and (sql[i].isalnum() or sql[i] in "_$"):
                i += 1
            yield Token(start, i, sql[start:i].lower())
        elif ch.isdigit():
            while i < n and (sql[i].isdigit() or sql[i] == "."):
                i += 1
            if i < n and sql[i] in "eE":
                j = i + 1 + (i + 1 < n and sql[i + 1] in "+-")
                if j < n and sql[j].isdigit():
                    i = j
                    while i < n and sql[i].isdigit():
                        i += 1
            yield Token(start, i, sql[start:i])
        elif ch in "()," or ch in _MARKS:
            i += 1
            yield Token(start, i, ch)
        else:
            i += 1


def identifiers(sql: str) -> set[str]:
    """Every name ``sql`` can refer to, lower-cased: its words outside quotes and
    comments, and the names of its quoted identifiers."""
    found: set[str] = set()
    for start, end, code in spans(sql, strict=False):
        if code:
            words = (t.text for t in _code_tokens(sql, start, end))
            found.update(w for w in words if w[0].isalpha() or w[0] == "_")
        elif sql[start] == '"':
            found.add(sql[start + 1 : end - 1].replace('""', '"').lower())
    return found
