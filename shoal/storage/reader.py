"""The read side of storage: what every front-end reads a tenant's data through.

:class:`TenantReader` holds the tables, the unflushed rows and what is kept between
reads (the unflushed batches combined into runs, the metric rows decoded from each
file) and answers the three reads the query languages make, each under the read
protocol of :mod:`shoal.storage.view`: a tenant's tables as one view (for SQL), one
table's series in a time range (from the series index), and a few metrics' rows in a
time range without SQL (for PromQL).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from shoal.schema import SIGNAL_TABLES
from shoal.storage import lookup, samples
from shoal.storage.cache import FileCache
from shoal.storage.runs import BatchCoalescer
from shoal.storage.unflushed import UnflushedSource
from shoal.storage.view import AsOf, TenantView, collect_view, series_in_range, view_series

if TYPE_CHECKING:
    from shoal.storage.store import TableStore

logger = logging.getLogger(__name__)


class TenantReader:
    """Reads of any tenant's tables. Safe to share across threads."""

    def __init__(
        self,
        catalog: TableStore,
        unflushed: UnflushedSource | None,
        sample_cache_bytes: int = 0,
        files: FileCache | None = None,
    ) -> None:
        self.catalog = catalog
        self.unflushed = unflushed
        self.files = files
        """Local copies of the committed files of tables in a bucket (the read cache);
        None when the tables are on local disk."""
        self.coalescer = BatchCoalescer()
        """The unflushed batches combined into runs, kept while they stay unflushed."""
        self.slices = samples.FileSlices(sample_cache_bytes)
        """Metric rows decoded from committed files, bounded in bytes."""

    def view(
        self, tenant: str, tables: Iterable[str] | None = None, as_of: AsOf | None = None
    ) -> TenantView:
        """The tenant's tables (those named in ``tables``, or all), with their unflushed
        rows, or as of a version or time."""
        view = collect_view(self.catalog, self.unflushed, tenant, as_of, tables)
        if self.files is None:
            return view
        return dataclasses.replace(view, fetch=self.files.local)

    def series(self, tenant: str, table: str, start_ns: int, end_ns: int) -> pa.Table:
        """One row per series of ``table`` seen in ``[start_ns, end_ns]``, from the series
        index: no scan of the data. Blocking, a few milliseconds."""
        return series_in_range(self.catalog, self.unflushed, tenant, table, start_ns, end_ns)

    def warm(self, stopping: Callable[[], bool] = lambda: False) -> None:
        """Read every tenant's series indexes once, in the calling thread, so that the first
        query after a start does not wait for them: at a million series, loading an index
        and merging the files its checkpoint does not cover takes seconds. A failure is
        logged; the first query that needs the index reads it again. Stops at the next
        index once ``stopping()`` (the server's shutdown need not wait for them all)."""
        for tenant in self.catalog.tenants():
            for table in sorted(set(self.catalog.tables(tenant)) & _INDEXED):
                if stopping():
                    return
                started = time.perf_counter()
                try:
                    found = self.series(tenant, table, 0, _LAST_NS)
                except Exception:
                    logger.exception("could not read the series index of %s/%s", tenant, table)
                    continue
                logger.info(
                    "series index of %s/%s read: %d series in %.1f s",
                    tenant, table, found.num_rows, time.perf_counter() - started,
                )  # fmt: skip

    def view_series(
        self, view: TenantView, table: str, start_ns: int | None, end_ns: int | None
    ) -> pa.Table:
        """The series of exactly ``view``'s ``table`` seen in ``[start_ns, end_ns]``, from
        the series index (strings dictionary-encoded)."""
        return view_series(self.catalog, view, table, start_ns, end_ns)

    def metric_rows(
        self,
        tenant: str,
        names: Sequence[str],
        columns: Sequence[str],
        start_ns: int,
        end_ns: int,
        max_rows: int,
        retries: int = 2,
    ) -> pa.Table:
        """The rows of metrics ``names`` in ``[start_ns, end_ns)`` of the tenant's
        ``metrics`` table (:func:`shoal.storage.samples.read_metrics`), in the calling
        thread; the rows decoded from each file are kept for the next read. Stops reading
        past ``max_rows`` rows."""
        view = self.view(tenant, ("metrics",))
        try:
            return samples.read_metrics(
                view.tables["metrics"],
                tenant,
                names,
                columns,
                start_ns,
                end_ns,
                self.slices,
                self.coalescer,
                max_rows,
                view.local,
            )
        except FileNotFoundError:
            # a file of the view was vacuumed (compaction replaced it): a new view lists
            # the file that replaced it
            if not retries:
                raise
            return self.metric_rows(tenant, names, columns, start_ns, end_ns, max_rows, retries - 1)

    def lookup_rows(
        self, tenant: str, table: str, value: str, retries: int = 2
    ) -> tuple[pa.Table, int]:
        """The rows of ``table`` whose lookup column (its spec's ``lookup_column``: the
        spans' ``trace_id``) is ``value``, flushed and unflushed, and the bytes read.

        The files are found by their filters (:mod:`shoal.storage.lookup`), not by a scan;
        in each, only the row groups whose statistics admit ``value`` are read."""
        view = self.view(tenant, (table,))
        found = view.tables.get(table)
        if found is None:
            return pa.table({}), 0
        handle = self.catalog.open(tenant, table, create=False) if found.files else None
        column = handle.spec.lookup_column if handle is not None else None
        column = column or _LOOKUP_COLUMNS.get(table)
        if column is None:
            raise ValueError(f"table {table!r} has no lookup column")
        parts: list[pa.Table] = []
        inspected = 0
        try:
            holding = handle.files_holding(found.files, value) if handle else []
            for file in view.local(holding):
                rows, size = lookup.read_matching(file.path, column, value)
                parts.append(rows.cast(found.schema))
                inspected += size
        except FileNotFoundError:
            # a file of the view was vacuumed (compaction replaced it): a new view lists
            # the file that replaced it
            if not retries:
                raise
            return self.lookup_rows(tenant, table, value, retries - 1)
        for batch in found.batches:
            keep = pc.equal(batch.column(column), value)
            if pc.any(keep).as_py():
                parts.append(pa.Table.from_batches([batch.filter(keep)]))
                inspected += batch.nbytes
        if not parts:
            return found.schema.empty_table(), inspected
        return pa.concat_tables(parts), inspected


_INDEXED = {name for name, spec in SIGNAL_TABLES.items() if spec.index_columns}
_LAST_NS = 2**63 - 1

_LOOKUP_COLUMNS = {name: spec.lookup_column for name, spec in SIGNAL_TABLES.items()}
