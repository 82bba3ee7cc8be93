"""Prometheus' engine test files (``*.test``), read into commands.

The format (Prometheus' ``promql/test.go`` at the version in testdata/):

- ``load <interval>`` then one series per line: ``name{label="v", ...} <values>``,
  the n-th value at ``n * interval`` from time 0. A value is a number (``Inf``,
  ``NaN`` too), ``stale`` (a staleness marker), ``_`` (no sample), ``_xN`` (N
  without a sample), ``AxN`` (A, N+1 times) or ``A+BxN`` / ``A-BxN`` (A, then N
  steps of B: N+1 values).
- ``eval[_fail|_ordered] instant at <duration> <expr>`` then the expected answer:
  one line with a number (a scalar), or one ``{labels} value`` line per series.
- ``clear`` drops every series loaded so far.

Lines starting with ``#`` are comments; a blank line ends a block.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import struct
from pathlib import Path

import promql_parser

TESTDATA = Path(__file__).parent / "testdata" / "prometheus-v2.42"

STALE_NAN = 0x7FF0000000000002
"""The staleness marker's bit pattern (a NaN that Prometheus treats as "series ended")."""

_FLOAT = r"(?:Inf|inf|NaN|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_ITEM = re.compile(
    rf"^(?:(?P<blank>_)|(?P<stale>stale)|(?P<a>[+-]?{_FLOAT}))"
    rf"(?P<b>[+-]{_FLOAT})?(?:x(?P<n>\d+))?$"
)
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(
    r"""\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*"""
)
_EVAL = re.compile(r"^eval(?:_(fail|ordered))?\s+instant\s+(?:at\s+(\S+))?\s+(.+)$")


class FormatError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Load:
    line: int
    series: tuple[tuple[dict[str, str], tuple[tuple[int, float], ...]], ...]
    """Each series' labels (``__name__`` included) and its ``(t_ms, value)`` samples."""


@dataclasses.dataclass(frozen=True)
class Expected:
    labels: dict[str, str] | None
    """None for a scalar answer."""
    value: float


@dataclasses.dataclass(frozen=True)
class Eval:
    line: int
    expr: str
    at_ms: int
    fail: bool
    ordered: bool
    expected: tuple[Expected, ...]


@dataclasses.dataclass(frozen=True)
class Clear:
    line: int


Command = Load | Eval | Clear


def duration_ms(text: str) -> int:
    if text.strip("0") == "" or text.strip("0") in ("s", "m", "h", "ms"):
        return 0
    delta = promql_parser.parse_duration(text)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def number(text: str) -> float:
    """A number as Go's ``strconv`` reads it in these files (integers in any base, floats)."""
    try:
        return float(int(text, 0))
    except ValueError:
        pass
    lowered = text.lower().lstrip("+-")
    if lowered in ("inf", "infinity"):
        return -math.inf if text.startswith("-") else math.inf
    if lowered == "nan":
        return math.nan
    return float(text)


def _unquote(text: str) -> str:
    if text.startswith("'"):
        text = '"' + text[1:-1].replace('"', '\\"').replace("\\'", "'") + '"'
    value: str = json.loads(text)
    return value


def series_desc(text: str, line: int) -> tuple[dict[str, str], list[float | None]]:
    """``name{labels} values`` into labels and values (None where a sample is omitted)."""
    labels: dict[str, str] = {}
    pos = 0
    found = _NAME.match(text)
    after = text[found.end() : found.end() + 1] if found else "?"
    if found and (after in ("{", "") or after.isspace()):
        labels["__name__"] = found.group()
        pos = found.end()
    braces = text[pos : pos + 1] == "{"
    if braces:
        pos += 1
        while True:
            if text[pos : pos + 1] == "}":
                pos += 1
                break
            item = _LABEL.match(text, pos)
            if item is None:
                raise FormatError(f"line {line}: cannot read labels in {text!r}")
            labels[item.group(1)] = _unquote(item.group(3))
            pos = item.end()
            if text[pos : pos + 1] == ",":
                pos += 1
    if not labels and not braces:
        raise FormatError(f"line {line}: no metric in {text!r}")
    values: list[float | None] = []
    for token in text[pos:].split():
        item = _ITEM.match(token)
        if item is None:
            raise FormatError(f"line {line}: cannot read value {token!r}")
        times = int(item["n"]) if item["n"] is not None else None
        if item["blank"]:
            values.extend([None] * (times if times is not None else 1))
            continue
        first = struct_nan(STALE_NAN) if item["stale"] else number(item["a"])
        if times is None:
            if item["b"] is not None:
                raise FormatError(f"line {line}: {token!r} needs xN")
            values.append(first)
            continue
        step = number(item["b"]) if item["b"] is not None else 0.0
        value = first
        for _ in range(times + 1):
            values.append(value)
            value += step
    return labels, values


def struct_nan(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


def _block(lines: list[str], start: int) -> list[str]:
    out = []
    for text in lines[start:]:
        if not text:
            break
        out.append(text)
    return out


def parse(text: str) -> list[Command]:
    lines = ["" if t.strip().startswith("#") else t.strip() for t in text.split("\n")]
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        head = lines[i]
        if not head:
            i += 1
            continue
        word = head.split(None, 1)[0].lower()
        body = _block(lines, i + 1)
        if word == "clear":
            commands.append(Clear(i + 1))
        elif word == "load":
            interval = duration_ms(head.split(None, 1)[1])
            series = []
            for offset, desc in enumerate(body):
                labels, values = series_desc(desc, i + 2 + offset)
                samples = tuple((n * interval, v) for n, v in enumerate(values) if v is not None)
                series.append((labels, samples))
            commands.append(Load(i + 1, tuple(series)))
            i += len(body)
        elif word.startswith("eval"):
            found = _EVAL.match(head)
            if found is None:
                raise FormatError(f"line {i + 1}: cannot read {head!r}")
            mod, at, expr = found.groups()
            expected = []
            for offset, row in enumerate(body):
                try:
                    expected.append(Expected(None, number(row)))
                    break
                except ValueError:
                    pass
                labels, values = series_desc(row, i + 2 + offset)
                if len(values) != 1 or values[0] is None:
                    raise FormatError(f"line {i + 2 + offset}: one value expected")
                expected.append(Expected(labels, values[0]))
            commands.append(
                Eval(
                    i + 1,
                    expr,
                    duration_ms(at) if at else 0,
                    mod == "fail",
                    mod == "ordered",
                    tuple(expected),
                )
            )
            i += len(body)
        else:
            raise FormatError(f"line {i + 1}: unknown command {head!r}")
        i += 1
    return commands


def almost_equal(a: float, b: float) -> bool:
    """Prometheus' test comparison: relative error under 1e-6, NaN equal to NaN."""
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    diff = abs(a - b)
    min_normal = 2.2250738585072014e-308
    if a == 0 or b == 0 or diff < min_normal:
        return diff < 1e-6 * min_normal
    return diff / (abs(a) + abs(b)) < 1e-6
