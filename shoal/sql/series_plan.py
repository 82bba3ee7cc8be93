"""Planning a query per series first (:mod:`shoal.sql.series_first`), where it pays.

A query that reads many rows of few series, grouped or filtered by their labels, is
planned twice: as written, for the names and types of its columns, and rewritten, to
run. The rewritten plan joins the per-series aggregates with the series' labels of the
query's view, read from the series index for the query's time range (no scan of the
data) and registered as :data:`~shoal.sql.series_first.SERIES_TABLE`. Anything that
does not fit (too few rows per series, a series key seen twice, a column whose type
differs from the query's as written) leaves the query as written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from datafusion import DataFrame, SessionContext

from shoal.errors import ShoalError
from shoal.schema import SIGNAL_TABLES, TableSpec
from shoal.sql.prune import TableRead
from shoal.sql.series_first import SERIES_TABLE, Rewritten, Shape, rewrite
from shoal.sql.sessions import TenantSession, sql_options
from shoal.storage.series_rows import plain
from shoal.storage.view import TableInput, TenantView

logger = logging.getLogger(__name__)

MIN_ROWS = 1_000_000
"""Fewer rows than this are read as written: per series first paid off from about 1.7M
rows of 400 series, and made no difference at 0.8M (docs/rationale.md)."""
MIN_ROWS_PER_SERIES = 16
"""Fewer rows per series than this are read as written, for a query that reads a map of
labels (``attributes``, ``resource_attributes``): the grouping per series and the join
would cost more than the maps they save decoding (measured: 2M rows of 100,000 series
took as long either way)."""
MIN_ROWS_PER_SERIES_BY_NAME = 1_000
"""The same for a query that reads only string labels (``metric_name``): grouping by a
few names is cheap as written, so the plan pays only where each series has many rows
(measured: 10M rows of 100,000 series by name, 257 ms as written against 362 per
series; 20M rows of 400 series, faster per series)."""

SeriesOf = Callable[[TenantView, str, int | None, int | None], pa.Table]
"""The series index rows of a view's table seen in a time range (ns, both ends included)."""


def shape(spec: TableSpec) -> Shape | None:
    if not spec.label_columns or len(spec.series_columns) != 1:
        return None
    return Shape(
        spec.name,
        spec.series_columns[0],
        frozenset(spec.label_columns),
        frozenset(spec.schema.names),
    )


_SHAPES = {name: s for name, spec in SIGNAL_TABLES.items() if (s := shape(spec)) is not None}


def plan(
    session: TenantSession,
    view: TenantView,
    sql: str,
    reads: Mapping[str, TableRead],
    series_of: SeriesOf,
) -> tuple[DataFrame, pa.Schema] | None:
    """The rewritten query's frame and the schema of the query as written, or None to run
    it as written. ``session`` holds the view's tables already (:meth:`TenantSession.load`)."""
    for name, table_shape in _SHAPES.items():
        rows = session.rows.get(name, 0)
        if name not in view.tables or rows < MIN_ROWS:
            continue
        rewritten = rewrite(sql, table_shape)
        if rewritten is None:
            continue
        read = reads.get(name)
        bounds = read.bounds if read is not None else None
        lo, hi = bounds if bounds is not None else (None, None)
        start_ns = None if lo is None else lo * 1000
        end_ns = None if hi is None else hi * 1000 + 999
        try:
            found = series_of(view, name, start_ns, end_ns)
        except ShoalError as exc:  # the index could not be read: the data still can
            logger.warning(
                "series index of %s unreadable, the query runs as written: %s", name, exc
            )
            return None
        schema = SIGNAL_TABLES[name].schema
        maps = any(pa.types.is_map(schema.field(c).type) for c in rewritten.labels)
        per_series = MIN_ROWS_PER_SERIES if maps else MIN_ROWS_PER_SERIES_BY_NAME
        if not found.num_rows or found.num_rows * per_series > rows:
            return None
        key = table_shape.series_key
        labels = pa.table({c: plain(found.column(c)) for c in (key, *sorted(table_shape.labels))})
        if pc.count_distinct(labels.column(key)).as_py() != labels.num_rows:
            logger.warning("series index of %s holds a series key twice", name)
            return None
        return _frames(
            session, sql, rewritten.sql(_needed(session, view.tables[name], rewritten)), labels
        )
    return None


_PROBED = 8
"""At most this many conditions are tried one by one (a probe plan each)."""


def _needed(session: TenantSession, table: TableInput, rewritten: Rewritten) -> list[str]:
    """The per-series query's conditions on rows, but those that hold for every row loaded.
    Conditions of literals alone are tried together first (one probe plan for the usual
    time range), then one by one."""
    fixed = {c for c, f in zip(rewritten.rows, rewritten.fixed, strict=True) if f}
    if not fixed:
        return list(rewritten.rows)
    if _holds(session, table, " AND ".join(sorted(fixed))):
        return [c for c in rewritten.rows if c not in fixed]
    if len(fixed) == 1 or len(fixed) > _PROBED:
        return list(rewritten.rows)
    return [c for c in rewritten.rows if c not in fixed or not _holds(session, table, c)]


def _holds(session: TenantSession, table: TableInput, condition: str) -> bool:
    """Whether ``condition`` holds for every row the session loaded of ``table``: it is
    nothing but time bounds, and the loaded files and batches lie inside them. Leaving it
    out saves decoding and comparing the time of every row."""
    span = session.spans.get(table.name)
    if span is None:
        return False
    return session.probe.always(
        table.name, table.schema, table.time_column, condition, span, sql_options()
    )


def _frames(
    session: TenantSession, sql: str, text: str, labels: pa.Table
) -> tuple[DataFrame, pa.Schema] | None:
    ctx: SessionContext = session.ctx
    written = ctx.sql_with_options(sql, sql_options()).schema()
    session.register(SERIES_TABLE, labels)
    try:
        frame = ctx.sql_with_options(text, sql_options())
    except Exception as exc:  # a shape the rewrite let through and the engine refuses
        logger.warning("per-series plan refused, the query runs as written: %s", exc)
        return None
    if frame.schema().types != written.types:
        logger.warning(
            "per-series plan gives %s where the query gives %s; run as written",
            frame.schema().types,
            written.types,
        )
        return None
    return frame, written
