"""The time range a query asks of each table, read before its tables are loaded.

The query is planned (logically, never executed) in a session of its own
where each of the tenant's tables is an empty Parquet listing scan with the
table's schema. DataFusion pushes the query's filters into those scans as it
would into the real ones, and :func:`shoal.sql.prune.table_reads` reads
from them the time bounds and whether anything else filters the table. The
real session then loads only what can meet those bounds: the committed
files whose time statistics meet them and the unflushed batches whose time
range does. So a query is planned once over
exactly what it reads, and a one-hour query far from the unflushed rows
does not touch the unflushed rows at all.

The probe is a small part of a query's planning (docs/benchmarks.md); a
query that names no table's time column skips it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import pyarrow as pa
from datafusion import SessionContext, SQLOptions

from shoal.sql.lexer import identifiers
from shoal.sql.prune import TableRead, always, table_reads
from shoal.storage.runs import TimeRange

logger = logging.getLogger(__name__)

PROBE_PREFIX = "shoal_probe_"
"""Prefix of the scan names that stand for a table in a probe plan."""

_NOWHERE = "/nonexistent/shoal-probe/"
"""A probe scan's path: never listed, because a probe plan is never executed."""


class TimeProbe:
    """Per-tenant stand-ins of its tables, kept across queries. Not thread-safe:
    it belongs to a session that serves one query at a time."""

    def __init__(self, ctx: SessionContext) -> None:
        self.ctx = ctx
        self._tables: dict[str, pa.Schema] = {}
        self._owners: dict[str, tuple[str, str]] = {}

    def _register(self, tables: Mapping[str, tuple[pa.Schema, str]]) -> None:
        for name, (schema, time_column) in tables.items():
            known = self._tables.get(name)
            if known is not None and (known is schema or known.equals(schema)):
                self._owners[PROBE_PREFIX + name] = (name, time_column)
                continue
            scan = PROBE_PREFIX + name
            self.ctx.register_parquet(scan, _NOWHERE, schema=schema)
            try:
                view = self.ctx.table(scan).into_view()
            finally:
                self.ctx.deregister_table(scan)
            if known is not None:
                self.ctx.deregister_table(name)
            self.ctx.register_table(name, view)
            self._tables[name] = schema
            self._owners[scan] = (name, time_column)

    def reads(
        self,
        sql: str,
        tables: Mapping[str, tuple[pa.Schema, str]],
        options: SQLOptions,
    ) -> dict[str, TableRead]:
        """Per table of ``tables`` (name: schema, time column) that ``sql`` reads, the
        time bounds it puts on every read and whether it filters on anything else.

        A query the probe cannot plan gets nothing: the real planning reports its error.
        A plan it cannot read gets nothing either: every file and batch is then kept, so
        the probe can make a query faster but never change its answer or fail it.
        """
        if not _names_a_time_column(sql, (t for _, t in tables.values())):
            return {}
        self._register(tables)
        try:
            plan = self.ctx.sql_with_options(sql, options).optimized_logical_plan()
        except Exception as exc:  # reported by the real planning, with the real tables
            logger.debug("probe plan failed: %s", exc)
            return {}
        try:
            found = table_reads(plan, self._owners)
        except Exception:  # pruning is an optimisation: what it cannot read, it keeps whole
            logger.warning("time bounds not read from a plan; every file is kept", exc_info=True)
            return {}
        return {name: read for name, read in found.items() if name in tables}

    def always(
        self,
        table: str,
        schema: pa.Schema,
        time_column: str,
        condition: str,
        span: TimeRange,
        options: SQLOptions,
    ) -> bool:
        """Whether ``condition`` on ``table`` holds for every row whose time lies in
        ``span`` (see :func:`shoal.sql.prune.always`); False for what cannot be planned."""
        self._register({table: (schema, time_column)})
        try:
            sql = f"SELECT 1 FROM {table} WHERE {condition}"
            plan = self.ctx.sql_with_options(sql, options).optimized_logical_plan()
            return always(plan, time_column, span)
        except Exception as exc:  # keeping the condition is always right
            logger.debug("probe of a condition failed: %s", exc)
            return False


def _names_a_time_column(sql: str, columns: Iterable[str]) -> bool:
    """Whether a time column occurs as a word in ``sql`` (no bound is possible otherwise)."""
    present = identifiers(sql)
    return any(c.lower() in present for c in columns)
