"""LogQL's parsers: labels out of each line (``json``, ``logfmt``, ``regexp``, ``pattern``,
``unpack``), as Loki's parsers name and fill them.

``regexp`` and ``pattern`` run column by column in Arrow's RE2 kernel (a pattern becomes
a regular expression). ``json``, ``logfmt`` and ``unpack`` read each line's text with a
decoder written in C (msgspec) or one precompiled expression: no Arrow kernel reads JSON
or logfmt out of a string column, and these run on the entries the line filters kept.

Each returns the parsed label columns (null where a line has no such label) and, per
line, the error Loki would set (``JSONParserErr``, ``LogfmtParserErr``; null: none).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import LogQLError
from shoal.regex import extract_column

Parsed = tuple[dict[str, list[str | None]], list[str | None], list[str | None]]
"""Label name -> values per line, the error per line, the error's details per line."""

_DECODER = msgspec.json.Decoder(float_hook=Decimal)
_SANITIZE = re.compile(r"[^a-zA-Z0-9_]")
_LOGFMT = re.compile(r'\s*([^\s="]+)(?:=("(?:[^"\\]|\\.)*("?)|[^\s"]*))?|\s*(\S)')


def sanitize(key: str, prefix: bool = True) -> str:
    """A parsed key as a label name (Loki's ``sanitizeLabelKey``)."""
    key = key.strip()
    if not key:
        return key
    if prefix and "0" <= key[0] <= "9":
        key = "_" + key
    return _SANITIZE.sub("_", key)


def _value(value: Any) -> str | None:
    """A JSON value as Loki's json parser renders it (None: not a label's value)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    if value is None:
        return ""
    return None


def _flatten(obj: dict[str, Any], prefix: str, out: dict[str, str]) -> None:
    for key, value in obj.items():
        part = sanitize(key, prefix=not prefix)
        if not part:
            continue
        name = f"{prefix}_{part}" if prefix else part
        if isinstance(value, dict):
            _flatten(value, name, out)
            continue
        text = _value(value)
        if text is not None:
            out[name] = text


def _collect(rows: Iterable[dict[str, str] | None], n: int) -> dict[str, list[str | None]]:
    columns: dict[str, list[str | None]] = {}
    for i, found in enumerate(rows):
        if not found:
            continue
        for name, value in found.items():
            column = columns.get(name)
            if column is None:
                column = columns[name] = [None] * n
            column[i] = value
    return columns


def _each_json(lines: pa.Array, labels: Callable[[Any], dict[str, str] | None]) -> Parsed:
    """``labels`` of each line's decoded JSON; JSONParserErr for a line that is not JSON,
    or for which ``labels`` gives None."""
    texts = lines.to_pylist()
    errors: list[str | None] = [None] * len(texts)
    details: list[str | None] = [None] * len(texts)
    found: list[dict[str, str] | None] = []
    for i, text in enumerate(texts):
        try:
            out = labels(_DECODER.decode(text or ""))
        except msgspec.DecodeError as exc:
            out, details[i] = None, str(exc)
        if out is None:
            errors[i] = "JSONParserErr"
            details[i] = details[i] or "the line is not a JSON object"
        found.append(out)
    return _collect(found, len(texts)), errors, details


def _all_fields(obj: Any) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    out: dict[str, str] = {}
    _flatten(obj, "", out)
    return out


def json_all(lines: pa.Array) -> Parsed:
    """``| json``: every scalar field, nested objects flattened with ``_``."""
    return _each_json(lines, _all_fields)


_PATH = re.compile(r'\.?([a-zA-Z_][a-zA-Z0-9_]*)|\[(\d+)\]|\["((?:[^"\\]|\\.)*)"\]')


def json_path(expression: str) -> list[str | int]:
    """A json parser's extraction path (``a.b[0]["c d"]``) as keys and indexes."""
    parts: list[str | int] = []
    at = 0
    while at < len(expression):
        match = _PATH.match(expression, at)
        if match is None or match.end() == at:
            raise LogQLError(f"invalid json expression {expression!r}")
        if match.group(1) is not None:
            parts.append(match.group(1))
        elif match.group(2) is not None:
            parts.append(int(match.group(2)))
        else:
            parts.append(msgspec.json.decode(f'"{match.group(3)}"'))
        at = match.end()
    if not parts:
        raise LogQLError(f"invalid json expression {expression!r}")
    return parts


def json_extract(lines: pa.Array, extractions: tuple[tuple[str, str], ...]) -> Parsed:
    """``| json a="x.y", b``: the named paths only (a missing path gives no label)."""
    paths = [(sanitize(name), json_path(path)) for name, path in extractions]

    def labels(obj: Any) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, path in paths:
            value = _walk(obj, path)
            if value is _MISSING:
                continue
            if isinstance(value, dict | list):
                out[name] = msgspec.json.encode(value).decode()
            else:
                text = _value(value)
                if text is not None:
                    out[name] = text
        return out

    return _each_json(lines, labels)


def _walk(value: Any, path: list[str | int]) -> Any:
    for part in path:
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


_MISSING = object()


_ENTRY = "\x00entry"


def _unpacked(obj: Any) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    out: dict[str, str] = {}
    for key, value in obj.items():
        if key == "_entry" and isinstance(value, str):
            out[_ENTRY] = value
        elif isinstance(value, str) and (name := sanitize(key)):
            out[name] = value
    return out


def unpack(lines: pa.Array) -> tuple[Parsed, list[str | None]]:
    """``| unpack``: a JSON object's string fields as labels, and its ``_entry`` as the new
    line (None: the line stays)."""
    columns, errors, details = _each_json(lines, _unpacked)
    entries = columns.pop(_ENTRY, [None] * len(lines))
    return (columns, errors, details), entries


def logfmt(lines: pa.Array, strict: bool, keep_empty: bool) -> Parsed:
    """``| logfmt``: ``key=value`` pairs (quoted values unquoted); a key without ``=`` has
    the empty value, kept only with ``--keep-empty``; ``--strict`` stops at a malformed
    pair with an error, where the default skips it."""
    texts = lines.to_pylist()
    errors: list[str | None] = [None] * len(texts)
    details: list[str | None] = [None] * len(texts)
    found: list[dict[str, str] | None] = []
    for i, text in enumerate(texts):
        out: dict[str, str] = {}
        for match in _LOGFMT.finditer(text or ""):
            key, raw, closed, stray = match.groups()
            if stray is not None or (raw is not None and raw.startswith('"') and not closed):
                if strict:
                    errors[i], details[i] = (
                        "LogfmtParserErr",
                        f"logfmt syntax error at pos {match.start() + 1}",
                    )
                    break
                continue
            if key is None:
                continue
            name = sanitize(key)
            if not name:
                continue
            value = raw or ""
            if value.startswith('"'):
                try:
                    value = msgspec.json.decode(value.encode())
                except msgspec.DecodeError:
                    value = value[1:-1]
            if value or keep_empty:
                out[name] = value
        found.append(out)
    return _collect(found, len(texts)), errors, details


def regexp(lines: pa.Array, pattern: str) -> dict[str, pa.Array]:
    """``| regexp "..."``: the named groups of the first match (no label where a line does
    not match)."""
    found = extract_column(lines, pattern)
    out: dict[str, pa.Array] = {}
    for index in range(found.type.num_fields):
        name = found.type.field(index).name
        values = pc.if_else(found.is_valid(), found.field(index), None)
        out[sanitize(name)] = values
    return out


_CAPTURE = re.compile(r"<(_|[a-zA-Z_][a-zA-Z0-9_]*)>")


def pattern_regex(pattern: str) -> str:
    """A pattern parser's expression as a regular expression: a literal must follow each
    capture (two captures side by side are refused, as Loki refuses them); a capture takes
    the text up to the first occurrence of the literal after it, the last one the rest of
    the line; the pattern starts at the line's start and need not reach its end."""
    pieces: list[str] = ["^"]
    at = 0
    names: set[str] = set()
    previous_capture = False
    for match in _CAPTURE.finditer(pattern):
        literal = pattern[at : match.start()]
        if not literal and previous_capture:
            raise LogQLError(f"invalid pattern {pattern!r}: two captures side by side")
        pieces.append(re.escape(literal))
        name = match.group(1)
        if name == "_":
            pieces.append("(?:.*?)")
        else:
            if name in names:
                raise LogQLError(f"invalid pattern {pattern!r}: duplicate capture {name!r}")
            names.add(name)
            pieces.append(f"(?P<{name}>.*?)")
        previous_capture = True
        at = match.end()
    if not names:
        raise LogQLError(f"invalid pattern {pattern!r}: at least one named capture is needed")
    rest = pattern[at:]
    if rest:
        pieces.append(re.escape(rest))
    else:  # the last capture takes the rest of the line
        last = pieces.pop()
        pieces.append(last.replace(".*?)", ".*)"))
    return "".join(pieces)


def pattern(lines: pa.Array, text: str) -> dict[str, pa.Array]:
    """``| pattern "<ip> - <_> [<ts>]"``."""
    return regexp(lines, pattern_regex(text))
