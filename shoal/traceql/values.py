"""Typed value columns and TraceQL's comparisons over them, column-wise.

A field's values over ``n`` rows (spans, events or links) are a :class:`Values`: per
TraceQL type (string, int, float, bool, duration, status, span kind) the rows that hold
a value of that type, and the values. An attribute is stored as text plus a type tag
(:mod:`shoal.otlp.anyvalue`), so one attribute column can hold strings in some rows and
ints in others; each comparison looks at the rows of the types it can compare: strings
with strings, numbers (int and float) with numbers, durations, statuses, kinds, bools
with their own. A row whose value is missing, or of a type the other side cannot be
compared with, matches no comparison but ``= nil`` (Tempo's rule); ``=~`` and ``!~``
match strings through RE2 (:mod:`shoal.regex`), once per distinct value. An array
attribute matches a comparison when one of its elements does (:mod:`shoal.traceql.arrays`).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from shoal.errors import TraceQLError
from shoal.regex import compile_pattern
from shoal.traceql.arrays import explode
from shoal.traceql.plan import Literal

BOOL = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]
NUMERIC = ("int", "float")
ORDERED = ("int", "float", "duration", "string")

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
_PC_OPS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
    "<": pc.less,
    "<=": pc.less_equal,
}


def _mask(array: pa.Array) -> BOOL:
    return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.bool_)


@dataclasses.dataclass
class Values:
    """``n`` rows of values: ``typed[kind] = (values, rows holding that kind)``; ``other``
    marks rows holding a value of a type no comparison takes (bytes, arrays...). A
    string literal's values are one Arrow scalar standing for every row. ``elements``:
    the primitive elements of array values, each with the row it belongs to."""

    n: int
    typed: dict[str, tuple[Any, BOOL]]
    other: BOOL | None = None
    elements: list[tuple[Values, I64]] = dataclasses.field(default_factory=list)

    def take(self, rows: I64) -> Values:
        """The values of ``rows`` (in that order, repeats allowed), without elements."""
        typed: dict[str, tuple[Any, BOOL]] = {}
        for kind, (data, mask) in self.typed.items():
            if isinstance(data, pa.Scalar):
                typed[kind] = (data, mask[rows])
            elif isinstance(data, pa.Array | pa.ChunkedArray):
                typed[kind] = (data.take(pa.array(rows)), mask[rows])
            else:
                typed[kind] = (data[rows], mask[rows])
        return Values(len(rows), typed, None if self.other is None else self.other[rows])

    @property
    def present(self) -> BOOL:
        out = np.zeros(self.n, dtype=np.bool_) if self.other is None else self.other.copy()
        for _, rows in self.typed.values():
            out |= rows
        return out

    @classmethod
    def constant(cls, n: int, literal: Literal) -> Values:
        if literal.kind == "nil":
            return cls(n, {})
        if literal.kind == "string":
            # one scalar for every row: Arrow compares an array with a scalar directly
            text = pa.scalar(literal.value, pa.string())
            return cls(n, {"string": (text, np.ones(n, dtype=np.bool_))})
        dtype = {"float": np.float64, "bool": np.bool_}.get(literal.kind, np.int64)
        return cls(n, {literal.kind: (np.full(n, literal.value, dtype=dtype),
                                      np.ones(n, dtype=np.bool_))})  # fmt: skip

    @classmethod
    def attribute(cls, text: pa.Array, types: pa.Array) -> Values:
        """An attribute column: its text, and its type tags (null for strings)."""
        n = len(text)
        has = _mask(text.is_valid())
        untyped = _mask(types.is_null())
        typed: dict[str, tuple[Any, BOOL]] = {}
        strings = has & untyped
        if strings.any():
            typed["string"] = (text, strings)
        tags = types.fill_null("")
        other = np.zeros(n, dtype=np.bool_)
        for tag, kind in (("int", "int"), ("double", "float"), ("bool", "bool")):
            rows = has & _mask(pc.equal(tags, tag))
            if not rows.any():
                continue
            chosen = pc.if_else(pa.array(rows), text, {"int": "0", "double": "0", "bool": ""}[tag])
            if kind == "int":
                typed[kind] = (np.asarray(pc.cast(chosen, pa.int64()).to_numpy(False)), rows)
            elif kind == "float":
                typed[kind] = (np.asarray(pc.cast(chosen, pa.float64()).to_numpy(False)), rows)
            else:
                typed[kind] = (_mask(pc.equal(chosen, "true")), rows)
        for tag in ("bytes", "array", "kvlist", "empty"):
            other |= has & _mask(pc.equal(tags, tag))
        found = explode(text, has & _mask(pc.equal(tags, "array")))
        elements = [] if found is None else [(cls(len(found[0]), found[1]), found[0])]
        return cls(n, typed, other, elements)


def _rows_of(values: Values, kinds: tuple[str, ...]) -> list[tuple[str, Any, BOOL]]:
    return [(k, *values.typed[k]) for k in kinds if k in values.typed]


def _regex(op: str, left: Values, right: Values) -> BOOL:
    out = np.zeros(left.n, dtype=np.bool_)
    if "string" not in right.typed:
        return out
    patterns, prows = right.typed["string"]
    if isinstance(patterns, pa.Scalar):
        distinct_patterns = [patterns.as_py()] if prows.any() else []
    else:
        distinct_patterns = pc.unique(patterns).to_pylist() if len(patterns) else []
    if len(distinct_patterns) > 1:
        raise TraceQLError(f"{op} takes one pattern, a string literal")
    if not distinct_patterns:
        return out
    regex = compile_pattern(distinct_patterns[0])  # a bad pattern is refused even if unused
    if "string" not in left.typed:
        return out
    texts, rows = left.typed["string"]
    both = rows & prows
    if not both.any():
        return out
    encoded = pc.dictionary_encode(texts)
    hits = np.array([regex.matches(v) for v in encoded.dictionary.to_pylist()], dtype=np.bool_)
    indices = np.asarray(encoded.indices.fill_null(0).to_numpy(False), dtype=np.int64)
    matched = hits[indices] if len(hits) else np.zeros(left.n, dtype=np.bool_)
    return both & (matched if op == "=~" else ~matched)


def compare(op: str, left: Values, right: Values) -> BOOL:
    """The rows where ``left op right`` holds, by TraceQL's typing rules; an array value
    where one of its elements does."""
    out = _compare(op, left, right)
    for values, parent in left.elements:
        hit = _compare(op, values, right.take(parent))
        out[parent[hit]] = True
    for values, parent in right.elements:
        hit = _compare(op, left.take(parent), values)
        out[parent[hit]] = True
    return out


def _compare(op: str, left: Values, right: Values) -> BOOL:
    if op in ("=~", "!~"):
        return _regex(op, left, right)
    if not right.typed and right.other is None:  # nil
        if op == "=":
            return ~left.present
        if op == "!=":
            return left.present
        return np.zeros(left.n, dtype=np.bool_)
    if not left.typed and left.other is None:
        return _compare(op, right, left)
    out = np.zeros(left.n, dtype=np.bool_)
    for lk, (lv, lrows) in left.typed.items():
        groups = NUMERIC if lk in NUMERIC else (lk,)
        for _, rv, rrows in _rows_of(right, groups):
            rows = lrows & rrows
            if not rows.any():
                continue
            if lk in ("status", "span_kind", "bool") and op not in ("=", "!="):
                continue
            if lk == "string":
                hit = _mask(_PC_OPS[op](lv, rv))
            else:
                hit = np.asarray(_OPS[op](lv, rv), dtype=np.bool_)
            out |= rows & hit
    return out


def truth(values: Values) -> BOOL:
    """A field used as a condition on its own: true where it is the boolean true."""
    if "bool" not in values.typed:
        return np.zeros(values.n, dtype=np.bool_)
    data, rows = values.typed["bool"]
    return rows & np.asarray(data, dtype=np.bool_)
