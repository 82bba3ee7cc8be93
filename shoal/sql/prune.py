"""The time range each table scan of a planned query can read, for file and batch pruning.

A listing scan spreads its *files* over the session's partitions before it
prunes them by statistics, so when a query's time range leaves one hourly
file of a day, one partition reads it while the other idles. Given an
optimized logical plan (the probe's, :mod:`shoal.sql.probe`), this module
finds, for every scan of a table, the bounds its pushed-down filters put on
the table's time column and whether anything else filters it; the session
then loads only the files and unflushed batches inside those bounds, and the
remaining files are split across partitions by byte range.

Only conjuncts of the form ``time <op> literal`` (either side, ``<``, ``<=``,
``>``, ``>=``, ``=``) and ``time BETWEEN literal AND literal`` narrow a
range; anything else (OR, casts, functions, ``now()`` that was not folded)
leaves it open. An open side keeps every file on that side, so pruning can
only drop files and batches that hold no row the filter keeps.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

from datafusion import Expr, LogicalPlan

from shoal.storage.runs import UNIT_NS, TimeRange

Bounds = tuple[int | None, int | None]
"""Inclusive lower and upper bounds in microseconds since the epoch; None is open."""

_UNIT = re.compile(r"^Timestamp\((s|ms|µs|us|ns)\b")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
_SUBQUERY = re.compile(r"^\s*Subquery:", re.M)
"""How an indented plan shows a subquery nested in an expression of the node above it."""


def variant(node: Expr | LogicalPlan) -> Any:
    """The typed variant of an expression or plan node; None for what the bindings cannot
    convert (DataFusion 55 raises on scalar function calls such as map lookups, ``upper``
    or ``strpos``). Callers treat None as opaque: it narrows nothing."""
    try:
        return node.to_variant()
    except Exception:  # the bindings raise plain exceptions for unsupported variants
        return None


def _kind(value: Any) -> str:
    return "" if value is None else type(value).__name__


def scans(plan: LogicalPlan) -> Iterator[Any]:
    """Every TableScan node of ``plan`` (nodes the bindings cannot convert are passed
    through to their inputs)."""
    return (found for node in _nodes(plan) if _kind(found := variant(node)) == "TableScan")


def _nodes(plan: LogicalPlan) -> Iterator[LogicalPlan]:
    """Every node of ``plan``, depth first."""
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.inputs())


def _literal_us(expr: Expr, *, upper: bool) -> int | None:
    """A timestamp literal in microseconds (rounded outwards), or None."""
    literal = variant(expr)
    if _kind(literal) != "Literal":
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
    ns = raw * UNIT_NS[match.group(1)]
    return -(-ns // 1000) if upper else ns // 1000


def _column_name(expr: Expr) -> str | None:
    column = variant(expr)
    if _kind(column) != "Column":
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


def _time_terms(expr: Expr, time_column: str, exact: bool = False) -> list[tuple[str, int]] | None:
    """The ``(op, microseconds)`` bounds the conjunct ``expr`` puts on ``time_column``;
    None when it is not a comparison of that column with timestamp literals (``exact``:
    literals of whole microseconds, not rounded)."""

    def _timestamp_us(literal: Expr, *, upper: bool) -> int | None:
        us = _literal_us(literal, upper=upper)
        return None if exact and us != _literal_us(literal, upper=not upper) else us

    node = variant(expr)
    kind = _kind(node)
    if kind == "BinaryExpr":
        op = node.op()
        if op not in _FLIP:
            return None
        left, right = node.left(), node.right()
        if _column_name(left) != time_column:
            if _column_name(right) != time_column:
                return None
            left, right, op = right, left, _FLIP[op]
        us = _timestamp_us(right, upper=op in ("<", "<="))
        return None if us is None else [(op, us)]
    if kind == "Between" and not node.negated():
        if _column_name(node.expr()) != time_column:
            return None
        low = _timestamp_us(node.low(), upper=False)
        high = _timestamp_us(node.high(), upper=True)
        if low is None or high is None:
            return None
        return [(">=", low), ("<=", high)]
    return None


def scan_terms(filters: list[Expr], time_column: str) -> tuple[Bounds, bool]:
    """The bounds the conjuncts ``filters`` put on ``time_column``, and whether every
    conjunct is such a bound (nothing else filters the scan)."""
    bounds: Bounds = (None, None)
    time_only = True
    for expr in filters:
        terms = _time_terms(expr, time_column)
        if terms is None:
            time_only = False
            continue
        for op, us in terms:
            bounds = _narrow(bounds, op, us)
    return bounds, time_only


def always(plan: LogicalPlan, time_column: str, span: TimeRange) -> bool:
    """Whether the condition of ``plan`` (one table's rows filtered by one condition) holds
    for every row whose time lies in ``span``: all of it compares ``time_column`` with
    timestamp literals of whole microseconds, and every time in ``span`` meets each
    comparison (a strict one strictly)."""
    filters = [found for node in _nodes(plan) if _kind(found := variant(node)) == "Filter"]
    if len(filters) != 1 or _SUBQUERY.search(plan.display_indent()):
        return False
    lo, hi = span
    test = {
        ">=": lambda us: lo >= us,
        ">": lambda us: lo > us,
        "<=": lambda us: hi <= us,
        "<": lambda us: hi < us,
        "=": lambda us: lo == us == hi,
    }
    for conjunct in _conjuncts(filters[0].predicate()):
        terms = _time_terms(conjunct, time_column, exact=True)
        if terms is None or not all(test[op](us) for op, us in terms):
            return False
    return True


def _conjuncts(expr: Expr) -> Iterator[Expr]:
    node = variant(expr)
    if _kind(node) == "BinaryExpr" and node.op().upper() == "AND":
        yield from _conjuncts(node.left())
        yield from _conjuncts(node.right())
    else:
        yield expr


def scan_bounds(filters: list[Expr], time_column: str) -> Bounds:
    """The bounds the conjuncts ``filters`` put on ``time_column``."""
    return scan_terms(filters, time_column)[0]


@dataclasses.dataclass(frozen=True)
class TableRead:
    """How a query reads one table, from the filters on all its scans."""

    bounds: Bounds | None
    """The span of time any scan of the table can read; None when one scan is unbounded."""
    time_only: bool
    """No scan of the table is filtered by anything but time bounds."""


def table_reads(plan: LogicalPlan, owners: Mapping[str, tuple[str, str]]) -> dict[str, TableRead]:
    """Per table that ``plan`` scans, the union of its scans' bounds (see :class:`TableRead`).

    ``owners`` maps a scan's table name (the name a scan was built under) to
    ``(table, time column)``; other scans are ignored. A plan with a subquery left
    inside an expression (a scalar subquery the optimizer did not turn into a join)
    gives nothing: the scans of that subquery are not among the plan's inputs, so
    bounds read from the others would drop rows the subquery reads.
    """
    if _SUBQUERY.search(plan.display_indent()):
        return {}
    found: dict[str, Bounds] = {}
    open_tables: set[str] = set()
    mixed: set[str] = set()
    for scan in scans(plan):
        owner = owners.get(scan.table_name())
        if owner is None:
            continue
        table, time_column = owner
        (lo, hi), time_only = scan_terms(scan.filters(), time_column)
        if not time_only:
            mixed.add(table)
        if lo is None and hi is None:
            open_tables.add(table)
            continue
        if table in found:
            old_lo, old_hi = found[table]
            lo = None if lo is None or old_lo is None else min(lo, old_lo)
            hi = None if hi is None or old_hi is None else max(hi, old_hi)
        found[table] = (lo, hi)
    return {
        table: TableRead(None if table in open_tables else found.get(table), table not in mixed)
        for table in {*found, *open_tables}
    }


def within(span: TimeRange, bounds: Bounds | None) -> bool:
    """Whether all of ``span`` lies inside ``bounds`` (a time filter keeps every row)."""
    if bounds is None:
        return True
    lo, hi = bounds
    return (lo is None or span[0] >= lo) and (hi is None or span[1] <= hi)


def meets(span: TimeRange | None, bounds: Bounds | None) -> bool:
    """Whether rows spanning ``span`` can meet ``bounds`` (None: unknown span, no bounds)."""
    if span is None or bounds is None:
        return True
    if span[0] > span[1]:  # no rows with a time
        return False
    lo, hi = bounds
    return (lo is None or span[1] >= lo) and (hi is None or span[0] <= hi)
