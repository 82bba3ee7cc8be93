"""Results of two engines compared as multisets (or lists), floats within 1e-9 relative."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

REL = 1e-9


def _value(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str | bytes):
        return v
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        return ("ts", v.isoformat())
    if isinstance(v, decimal.Decimal):
        v = float(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ("nan",)
        if v.is_integer() and abs(v) < 2**53:
            return int(v)
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, dict):
        return tuple(sorted((k, _value(x)) for k, x in v.items()))
    if isinstance(v, list | tuple):
        items = [_value(x) for x in v]
        if items and all(isinstance(x, tuple) and len(x) == 2 for x in v):  # a map's entries
            return tuple(sorted(items, key=repr))
        return tuple(items)
    return v


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The table's rows as tuples of normalised values, column order kept."""
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return [tuple(_value(c[i]) for c in columns) for i in range(table.num_rows)]


def _key(value: Any) -> Any:
    if isinstance(value, float):
        return (1, float(f"{value:.9g}"), "")
    if isinstance(value, int) and not isinstance(value, bool):
        return (1, float(value), "")
    if isinstance(value, tuple):
        return (2, 0.0, repr(tuple(_key(x) for x in value)))
    return (0 if value is None else 3, 0.0, repr(value))


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        if a == b:
            return True
        return abs(a - b) <= REL * max(abs(a), abs(b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def difference(
    got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]], ordered: bool
) -> str | None:
    """None when equal; else a short description of the first difference."""
    if len(got) != len(want):
        return f"{len(got)} rows, expected {len(want)}: got {list(got)[:5]}, want {list(want)[:5]}"
    if not ordered:
        got = sorted(got, key=lambda r: tuple(_key(v) for v in r))
        want = sorted(want, key=lambda r: tuple(_key(v) for v in r))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if not _close(g, w):
            return f"row {i}: got {g}, expected {w}"
    return None
