"""What the PostgreSQL protocol needs to know about SQL text: statements, parameters,
comments, over the one SQL lexer (:mod:`shoal.sql.lexer`).

Quoted strings, quoted identifiers and comments are skipped, so a ``;`` or ``$1`` inside
them is never taken for a statement boundary or a parameter. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from shoal.sql.lexer import SqlTextError, spans, word_before

__all__ = [
    "Placeholder",
    "SqlTextError",
    "code_pieces",
    "parameter_count",
    "placeholders",
    "quote_literal",
    "replace_in_code",
    "split_statements",
    "strip_comments",
    "substitute",
]

_PARAM = re.compile(r"\$([0-9]+)")
_CAST = re.compile(
    r"\s*::\s*((?:pg_catalog\.)?[A-Za-z_][A-Za-z_0-9]*(?:\s+(?:precision|with(?:out)?\s+time\s+zone))?)"
    r"(\s*\[\s*\])?",
    re.IGNORECASE,
)


def split_statements(sql: str) -> list[str]:
    """The statements of ``sql`` (split at ``;`` outside quotes), stripped, empty ones dropped."""
    parts: list[str] = []
    current: list[str] = []
    for start, end, code in spans(sql):
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
    return any(sql[s:e].strip() for s, e, code in spans(sql) if code)


def code_pieces(sql: str) -> list[str]:
    """The parts of ``sql`` outside quotes and comments."""
    return [sql[s:e] for s, e, code in spans(sql) if code]


def strip_comments(sql: str) -> str:
    """``sql`` with its comments removed (quoted text kept)."""
    out: list[str] = []
    for start, end, code in spans(sql):
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
    for start, end, code in spans(sql):
        if not code:
            continue
        for m in _PARAM.finditer(sql, start, end):
            if word_before(sql, m.start()):
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
    for start, end, code in spans(sql):
        piece = sql[start:end]
        out.append(pattern.sub(replacement, piece) if code else piece)
    return "".join(out)


def quote_literal(text: str) -> str:
    """A standard SQL string literal (backslashes are not escapes in shoal's dialect)."""
    return "'" + text.replace("'", "''") + "'"
