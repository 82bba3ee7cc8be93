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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from shoal.storage import samples
from shoal.storage.cache import FileCache
from shoal.storage.runs import BatchCoalescer
from shoal.storage.unflushed import UnflushedSource
from shoal.storage.view import AsOf, TenantView, collect_view, series_in_range

if TYPE_CHECKING:
    from shoal.storage.store import TableStore


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
