"""What the protocol needs to know about SQL text, found with a small lexer.

Quoted strings (``'...'``, ``E'...'``, ``$tag$...$tag$``), quoted identifiers
and comments are skipped, so a ``;`` or ``$1`` inside them is never taken for a
statement boundary or a parameter. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence

from shoal.errors import ShoalError

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
_PARAM = re.compile(r"\$([0-9]+)")
_CAST = re.compile(
    r"\s*::\s*((?:pg_catalog\.)?[A-Za-z_][A-Za-z_0-9]*(?:\s+(?:precision|with(?:out)?\s+time\s+zone))?)"
    r"(\s*\[\s*\])?",
    re.IGNORECASE,
)


class SqlTextError(ShoalError):
    """SQL text the lexer cannot follow (an unterminated quote or comment)."""


def _spans(sql: str) -> Iterator[tuple[int, int, bool]]:
    """``(start, end, is_code)`` pieces covering ``sql``: code, or a quote or comment."""
    i = n = 0
    n = len(sql)
    start = 0
    while i < n:
        c = sql[i]
        end = -1
        if c == "'" or (c in "eE" and sql[i + 1 : i + 2] == "'" and not _word_before(sql, i)):
            escapes = c != "'"
            j = i + (2 if escapes else 1)
            while True:
                if j >= n:
                    raise SqlTextError("unterminated quoted string")
                if escapes and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == "'":
                    if sql[j + 1 : j + 2] == "'":
                        j += 2
                        continue
                    break
                j += 1
            end = j + 1
        elif c == '"':
            j = sql.find('"', i + 1)
            while j >= 0 and sql[j + 1 : j + 2] == '"':
                j = sql.find('"', j + 2)
            if j < 0:
                raise SqlTextError("unterminated quoted identifier")
            end = j + 1
        elif c == "-" and sql[i + 1 : i + 2] == "-":
            j = sql.find("\n", i)
            end = n if j < 0 else j + 1
        elif c == "/" and sql[i + 1 : i + 2] == "*":
            depth, j = 1, i + 2
            while depth:
                if j >= n:
                    raise SqlTextError("unterminated /* comment")
                if sql.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif sql.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            end = j
        elif c == "$" and not _word_before(sql, i):
            m = _DOLLAR_TAG.match(sql, i)
            if m:
                close = sql.find(m.group(0), m.end())
                if close < 0:
                    raise SqlTextError("unterminated dollar-quoted string")
                end = close + len(m.group(0))
        if end < 0:
            i += 1
            continue
        if start < i:
            yield start, i, True
        yield i, end, False
        start = i = end
    if start < n:
        yield start, n, True


def _word_before(sql: str, i: int) -> bool:
    return i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$")


def split_statements(sql: str) -> list[str]:
    """The statements of ``sql`` (split at ``;`` outside quotes), stripped, empty ones dropped."""
    parts: list[str] = []
    current: list[str] = []
    for start, end, code in _spans(sql):
        piece = sql[start:end]
        if not code:
            current.append(piece)
            continue
        while ";" in piece:
            head, piece = piece.split(";", 1)
            current.append(head)
            parts.append("".join(current))
            current = []
        current.append(piece)
    parts.append("".join(current))
    return [p.strip() for p in parts if _has_code(p)]


def _has_code(sql: str) -> bool:
    return any(sql[s:e].strip() for s, e, code in _spans(sql) if code)


def code_pieces(sql: str) -> list[str]:
    """The parts of ``sql`` outside quotes and comments."""
    return [sql[s:e] for s, e, code in _spans(sql) if code]


def strip_comments(sql: str) -> str:
    """``sql`` with its comments removed (quoted text kept)."""
    out: list[str] = []
    for start, end, code in _spans(sql):
        piece = sql[start:end]
        if code or not piece.startswith(("--", "/*")):
            out.append(piece)
        else:
            out.append(" ")
    return "".join(out).strip()


@dataclasses.dataclass(frozen=True)
class Placeholder:
    start: int
    end: int
    index: int  # 1-based, as written: $1
    cast: str | None  # the type of a directly following ::cast, lower case


def placeholders(sql: str) -> list[Placeholder]:
    found: list[Placeholder] = []
    for start, end, code in _spans(sql):
        if not code:
            continue
        for m in _PARAM.finditer(sql, start, end):
            if _word_before(sql, m.start()):
                continue
            cast = _CAST.match(sql, m.end())
            name = None
            if cast:
                name = " ".join(cast.group(1).lower().split()).removeprefix("pg_catalog.")
                if cast.group(2):
                    name += "[]"
            found.append(Placeholder(m.start(), m.end(), int(m.group(1)), name))
    return found


def parameter_count(sql: str) -> int:
    return max((p.index for p in placeholders(sql)), default=0)


def substitute(sql: str, literals: Sequence[str]) -> str:
    """``sql`` with each ``$n`` replaced by ``literals[n - 1]``."""
    out: list[str] = []
    last = 0
    for p in placeholders(sql):
        if p.index < 1 or p.index > len(literals):
            raise SqlTextError(f"there is no parameter ${p.index}")
        out.append(sql[last : p.start])
        out.append(literals[p.index - 1])
        last = p.end
    out.append(sql[last:])
    return "".join(out)


def replace_in_code(sql: str, pattern: re.Pattern[str], replacement: str) -> str:
    """``pattern`` replaced by ``replacement`` in the code of ``sql``, never in quotes."""
    out: list[str] = []
    for start, end, code in _spans(sql):
        piece = sql[start:end]
        out.append(pattern.sub(replacement, piece) if code else piece)
    return "".join(out)


def quote_literal(text: str) -> str:
    """A standard SQL string literal (backslashes are not escapes in shoal's dialect)."""
    return "'" + text.replace("'", "''") + "'"
