"""Rows of a result as ``DataRow`` messages, and shoal's errors as SQLSTATE codes."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence

import pyarrow as pa

from shoal.errors import QueryError, QueryLimitError
from shoal.pgwire import codec
from shoal.pgwire.types import column_encoder, pg_type

_LIMIT_CODES = {
    "time": "57014",  # query_canceled, as for PostgreSQL's statement_timeout
    "memory": "53200",  # out_of_memory
    "concurrency": "53300",  # too_many_connections
    "size": "54000",  # program_limit_exceeded
    "complexity": "54001",  # statement_too_complex
}


def sqlstate(exc: QueryError) -> str:
    """The SQLSTATE a client sees for a failed query."""
    if isinstance(exc, QueryLimitError):
        return _LIMIT_CODES.get(exc.limit, "54000")
    text = str(exc)
    if "ParserError" in text or "syntax error" in text.lower():
        return "42601"
    if "table" in text.lower() and "not found" in text.lower():
        return "42P01"
    if "No field named" in text or "Schema error" in text:
        return "42703"
    if "not supported" in text.lower() or "Unsupported" in text or "NotImplemented" in text:
        return "0A000"
    if "Invalid function" in text or ("function" in text.lower() and "not found" in text.lower()):
        return "42883"
    return "42000"


def formats_for(count: int, formats: Sequence[int]) -> list[int]:
    """One format per column from Bind's result format codes (none, one for all, or each)."""
    if not formats:
        return [0] * count
    if len(formats) == 1:
        return [formats[0]] * count
    if len(formats) != count:
        raise codec.ProtocolError(
            f"bind message has {len(formats)} result formats for {count} columns"
        )
    return list(formats)


_LITERAL = re.compile(
    r"^(?:NULL|(?:Int|UInt|Float|Utf8|LargeUtf8|Utf8View|Boolean|Decimal|Timestamp|Date|Time"
    r"|Interval|Binary|LargeBinary|Duration)\w*\(.*\))$",
    re.DOTALL,
)
_CALL = re.compile(r"^([A-Za-z_]\w*)\(")


def _closes_at_end(text: str, start: int) -> bool:
    """Whether the parenthesis at ``start`` closes at the last character of ``text``."""
    depth, quote = 0, ""
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False


def column_name(name: str) -> str:
    """The name PostgreSQL gives a result column whose expression DataFusion names ``name``:
    a function call is named after the function, any other unaliased expression
    ``?column?``; a column (or an alias) keeps its name."""
    if _LITERAL.match(name):
        return "?column?"
    call = _CALL.match(name)
    if call and _closes_at_end(name, call.end() - 1):
        return call.group(1).lower()
    if "(" in name or any(op in name for op in (" + ", " - ", " * ", " / ", " % ", " || ")):
        return "?column?"
    return name


def fields(schema: pa.Schema, formats: Sequence[int]) -> list[codec.Field]:
    out = []
    for field, fmt in zip(schema, formats, strict=True):
        kind = pg_type(field.type)
        out.append(codec.Field(column_name(field.name), kind.oid, kind.size, format=fmt))
    return out


class RowEncoder:
    """Encodes record batches of one schema into COPY text lines (DataRow messages are
    built by :mod:`shoal.pgwire.rows`)."""

    def __init__(self, schema: pa.Schema, formats: Sequence[int]) -> None:
        self._encoders = [
            column_encoder(f.type, fmt) for f, fmt in zip(schema, formats, strict=True)
        ]

    def copy_lines(self, batch: pa.RecordBatch) -> list[bytes]:
        """Rows as COPY text lines (tab-separated, ``\\N`` for NULL)."""
        columns = [enc(batch.column(i)) for i, enc in enumerate(self._encoders)]
        lines = []
        for values in zip(*columns, strict=True):
            items = [b"\\N" if v is None else _copy_escape(v) for v in values]
            lines.append(b"\t".join(items) + b"\n")
        return lines


def _copy_escape(value: bytes) -> bytes:
    return (
        value.replace(b"\\", b"\\\\")
        .replace(b"\t", b"\\t")
        .replace(b"\n", b"\\n")
        .replace(b"\r", b"\\r")
    )


async def table_batches(table: pa.Table) -> AsyncIterator[pa.RecordBatch]:
    for batch in table.to_batches():
        yield batch
