"""The time range each table scan of a planned query can read, for file pruning.

A listing scan spreads its *files* over the session's partitions before it
prunes them by statistics, so when a query's time range leaves one hourly
file of a day, one partition reads it while the other idles (a 1-hour query
took twice as long as it needed). Given the optimized logical plan, this
module finds, for every scan of a table's committed files, the bounds its
pushed-down filters put on the table's time column; the service then plans
again over only the files inside those bounds, which DataFusion splits
across partitions by byte range.

Only conjuncts of the form ``time <op> literal`` (either side, ``<``, ``<=``,
``>``, ``>=``, ``=``) and ``time BETWEEN literal AND literal`` narrow a
range; anything else (OR, casts, functions, ``now()`` that was not folded)
leaves it open. An open side keeps every file on that side, so pruning can
only drop files the scan's own statistics pruning would skip anyway.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from datafusion import Expr, LogicalPlan

Bounds = tuple[int | None, int | None]
"""Inclusive lower and upper bounds in microseconds since the epoch; None is open."""

_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "µs": 1_000, "us": 1_000, "ns": 1}
_UNIT = re.compile(r"^Timestamp\((s|ms|µs|us|ns)\b")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


def scans(plan: LogicalPlan) -> Iterator[Any]:
    """Every TableScan node of ``plan``."""
    stack = [plan]
    while stack:
        node = stack.pop()
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan":
            yield variant
        stack.extend(node.inputs())


def _timestamp_us(expr: Expr, *, upper: bool) -> int | None:
    """A timestamp literal in microseconds (rounded outwards), or None."""
    literal = expr.to_variant()
    if type(literal).__name__ != "Literal":
        return None
    match = _UNIT.match(literal.data_type())
    if match is None:
        return None
    value = literal.value_timestamp()
    if value is None:
        return None
    raw = value[0] if isinstance(value, tuple) else value
    if not isinstance(raw, int):
        return None
    ns = raw * _UNIT_NS[match.group(1)]
    return -(-ns // 1000) if upper else ns // 1000


def _column_name(expr: Expr) -> str | None:
    column = expr.to_variant()
    if type(column).__name__ != "Column":
        return None
    name = column.name()
    return name if isinstance(name, str) else None


def _narrow(bounds: Bounds, op: str, us: int) -> Bounds:
    lo, hi = bounds
    if op in (">", ">="):
        lo = us if lo is None else max(lo, us)
    elif op in ("<", "<="):
        hi = us if hi is None else min(hi, us)
    elif op == "=":
        lo = us if lo is None else max(lo, us)
        hi = us if hi is None else min(hi, us)
    return lo, hi


def scan_bounds(filters: list[Expr], time_column: str) -> Bounds:
    """The bounds the conjuncts ``filters`` put on ``time_column``."""
    bounds: Bounds = (None, None)
    for expr in filters:
        variant = expr.to_variant()
        kind = type(variant).__name__
        if kind == "BinaryExpr":
            op = variant.op()
            if op not in _FLIP:
                continue
            left, right = variant.left(), variant.right()
            if _column_name(left) != time_column:
                if _column_name(right) != time_column:
                    continue
                left, right, op = right, left, _FLIP[op]
            us = _timestamp_us(right, upper=op in ("<", "<="))
            if us is not None:
                bounds = _narrow(bounds, op, us)
        elif kind == "Between" and not variant.negated():
            if _column_name(variant.expr()) != time_column:
                continue
            low = _timestamp_us(variant.low(), upper=False)
            high = _timestamp_us(variant.high(), upper=True)
            if low is not None:
                bounds = _narrow(bounds, ">=", low)
            if high is not None:
                bounds = _narrow(bounds, "<=", high)
    return bounds


def table_bounds(plan: LogicalPlan, owners: Mapping[str, tuple[str, str]]) -> dict[str, Bounds]:
    """Per table, the union of the bounds of all its scans in ``plan``.

    ``owners`` maps a scan's table name (the name a committed-file scan was
    built under) to ``(table, time column)``. A table is left out when one of
    its scans is unbounded on both sides (nothing to prune).
    """
    found: dict[str, Bounds] = {}
    open_tables: set[str] = set()
    for scan in scans(plan):
        owner = owners.get(scan.table_name())
        if owner is None:
            continue
        table, time_column = owner
        lo, hi = scan_bounds(scan.filters(), time_column)
        if lo is None and hi is None:
            open_tables.add(table)
            continue
        if table in found:
            old_lo, old_hi = found[table]
            lo = None if lo is None or old_lo is None else min(lo, old_lo)
            hi = None if hi is None or old_hi is None else max(hi, old_hi)
        found[table] = (lo, hi)
    return {t: b for t, b in found.items() if t not in open_tables}
