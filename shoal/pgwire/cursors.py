"""``DECLARE … CURSOR``, ``FETCH`` and ``CLOSE``: SQL-level cursors, parsed. Pure: no I/O.

A cursor is a portal the client names in SQL (psycopg's named cursors, pandas'
chunked reads): ``DECLARE`` starts the query, each ``FETCH`` sends the next rows,
``CLOSE`` (or the end of the transaction) drops it.
"""

from __future__ import annotations

import dataclasses
import re

from shoal.errors import ShoalError
from shoal.pgwire.sqltext import strip_comments


class CursorError(ShoalError):
    """A cursor statement shoal does not support (SQLSTATE 0A000)."""


@dataclasses.dataclass(frozen=True)
class Declare:
    name: str
    query: str
    binary: bool
    hold: bool


@dataclasses.dataclass(frozen=True)
class Fetch:
    name: str
    count: int  # 0: all that is left


@dataclasses.dataclass(frozen=True)
class CloseCursor:
    name: str | None  # None: every cursor


CursorStatement = Declare | Fetch | CloseCursor

_NAME = r'("(?:[^"]|"")+"|[A-Za-z_][\w$]*)'
_DECLARE = re.compile(
    rf"^declare\s+{_NAME}\s+(?P<opts>(?:(?:binary|insensitive|asensitive|no\s+scroll|scroll)\s+)*)"
    r"cursor\s+(?:(?P<hold>with|without)\s+hold\s+)?for\s+(?P<query>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_FETCH = re.compile(
    rf"^(?:fetch)\s+(?:(?P<dir>next|forward|all|backward|prior|first|last|absolute|relative)\s+)?"
    rf"(?P<count>all|[+-]?\d+)?\s*(?:(?:from|in)\s+)?{_NAME}$",
    re.IGNORECASE | re.DOTALL,
)
_CLOSE = re.compile(rf"^close\s+(?:all|{_NAME})$", re.IGNORECASE)


def _name(raw: str) -> str:
    if raw.startswith('"'):
        return raw[1:-1].replace('""', '"')
    return raw.lower()


def parse(sql: str) -> CursorStatement | None:
    """The cursor statement ``sql`` is, or None when it is none."""
    text = strip_comments(sql).rstrip(";").strip()
    head = text[:8].lower()
    if head.startswith("declare"):
        m = _DECLARE.match(text)
        if m is None:
            raise CursorError(f"cannot parse DECLARE statement: {text[:200]!r}")
        opts = m.group("opts").lower()
        if re.search(r"(?<!no )scroll", opts):
            raise CursorError("scrollable cursors are not supported: use NO SCROLL")
        hold = (m.group("hold") or "").lower() == "with"
        return Declare(_name(m.group(1)), m.group("query").strip(), "binary" in opts, hold)
    if head.startswith("fetch"):
        m = _FETCH.match(text)
        if m is None:
            raise CursorError(f"cannot parse FETCH statement: {text[:200]!r}")
        direction = (m.group("dir") or "forward").lower()
        count_text = (m.group("count") or "").lower()
        if direction == "all":
            direction, count_text = "forward", "all"
        if direction not in ("next", "forward"):
            raise CursorError(
                f"FETCH {direction.upper()} is not supported: cursors move forward only"
            )
        if direction == "next" and count_text:
            raise CursorError("FETCH NEXT takes no count")
        count = 0 if count_text == "all" else int(count_text or "1")
        if count < 0:
            raise CursorError("cursors move forward only")
        if count == 0 and count_text != "all":
            raise CursorError("FETCH 0 (the current row again) is not supported")
        return Fetch(_name(m.group(3)), count)
    if head.startswith("close"):
        m = _CLOSE.match(text)
        if m is None:
            return None
        return CloseCursor(None if m.group(1) is None else _name(m.group(1)))
    return None
