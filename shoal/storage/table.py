"""One Delta Lake table of one tenant: the face the rest of shoal sees.

A thin facade over three parts: :class:`~shoal.storage.log.DeltaLog` (the log,
snapshots, history and the one commit loop), :class:`~shoal.storage.files.TableFiles`
(writing data and coverage files before a commit) and
:class:`~shoal.storage.coverage_index.CoverageIndex` (coverage questions).
Every change goes through :meth:`Table.commit` with a
:class:`~shoal.storage.commit.Commit`; :meth:`Table.flush` is the flusher's
shorthand for one. docs/storage.md has the commit protocol and its crash points.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from shoal.errors import StorageError
from shoal.schema import TableSpec
from shoal.storage import coverage as cov
from shoal.storage import faults, layout, logindex
from shoal.storage import series as series_index
from shoal.storage.commit import Commit, Txn
from shoal.storage.coverage_index import CoverageIndex
from shoal.storage.files import TableFiles
from shoal.storage.location import StorageLocation
from shoal.storage.log import DeltaLog
from shoal.storage.lookup import LookupIndex
from shoal.storage.options import TableOptions
from shoal.storage.place import Place
from shoal.storage.series import SeriesIndex
from shoal.storage.series_budget import SeriesBudget
from shoal.storage.types import (
    WAL_APP_ID,
    CommitResult,
    CoverageResult,
    HistoryEntry,
    ScanFile,
    TableSnapshot,
)
from shoal.storage.unflushed import LsnBatch

logger = logging.getLogger(__name__)


class Table:
    """A tenant's Delta table. Thread-safe; obtain it from ``TableStore.open``."""

    def __init__(
        self,
        tenant: str,
        place: Place | Path,
        spec: TableSpec,
        *,
        bucket_s: int,
        options: TableOptions,
        series_budget: SeriesBudget | None = None,
    ) -> None:
        if not isinstance(place, Place):
            place = Place(StorageLocation.local(place))
        self.tenant = tenant
        self.name = spec.name
        self.place = place
        self.spec = spec
        self.bucket_s = bucket_s
        self.log = DeltaLog(tenant, place, spec, options)
        self.label = self.log.label
        self._metrics = options.metrics
        self._background = options.background
        """A long-lived process (the server): work that serves later reads runs in threads."""
        self.files = TableFiles(place, spec, bucket_s, self.label)
        self._coverage = CoverageIndex(self.files)
        self._series = (
            SeriesIndex(place, spec, self.label, series_budget) if spec.index_columns else None
        )
        if self._series is not None and not place.local:  # on disk, read back cheaply
            self.files.summaries = self._series.remember
        self._lookup = LookupIndex(place, spec, self.label) if spec.lookup_column else None

    @property
    def path(self) -> Path:
        """The table's directory on local disk (a table in a bucket has none: use ``place``)."""
        return self.place.root

    def __repr__(self) -> str:
        return f"Table({self.label})"

    # -- reading -----------------------------------------------------------------

    def snapshot(self) -> TableSnapshot:
        """The latest committed version; one ``stat`` when nothing changed since last time."""
        return self.log.snapshot()

    def snapshot_at(
        self, version: int | None = None, timestamp: dt.datetime | None = None
    ) -> TableSnapshot:
        """The table as of a version, or as of the last version committed at or before a time."""
        return self.log.snapshot_at(version, timestamp)

    def scan_files(
        self, start: dt.datetime | None, end: dt.datetime | None, version: int | None = None
    ) -> list[ScanFile]:
        """Committed files that can hold rows with ``start <= time < end``."""
        snap = self.snapshot() if version is None else self.snapshot_at(version)
        return snap.files_between(
            None if start is None else cov.to_us(start), None if end is None else cov.to_us(end)
        )

    def committed_lsn(self, app_id: str = WAL_APP_ID) -> int:
        """The highest WAL LSN (or other app's version) committed to this table; 0 if none."""
        return self.log.committed_lsn(app_id)

    def history(self, limit: int = 50) -> list[HistoryEntry]:
        """Versions, newest first: operation, rows and files added/removed, WAL LSN."""
        return self.log.history(limit)

    # -- writing -----------------------------------------------------------------

    def commit(self, commit: Commit, *, started: float | None = None) -> CommitResult | None:
        """Land ``commit``: the one way a table changes. None when its txn is already held.

        The commit's files are deleted again when it is refused (a requirement
        failed, a conflict, its transaction already committed) and kept when
        the failure may have come after it landed. ``started`` is when the
        caller began the work it reports as this commit's duration.
        """
        began = time.perf_counter() if started is None else started
        prepared = self.files.prepare(commit.adds)
        result = self.log.commit(
            commit, prepared, self._coverage.covered, lambda: self.files.discard(prepared)
        )
        if result is None:
            logger.info("%s: %s already committed; nothing done", self.label, commit.txn)
            return None
        self._metrics.commit_done(
            self.tenant,
            self.name,
            commit.operation,
            time.perf_counter() - began,
            result.rows_added,
            result.files_added,
        )
        return result

    def flush(
        self,
        data: pa.Table | Sequence[pa.RecordBatch],
        wal_lsn: int,
        *,
        app_id: str = WAL_APP_ID,
        helpers: concurrent.futures.Executor | None = None,
        after: int | None = None,
    ) -> CommitResult | None:
        """Write rows as hourly Parquet files and commit them with txn ``(app_id, wal_lsn)``.

        Returns None, committing nothing, when the table already holds ``wal_lsn``.
        ``helpers``: threads to share the writing with (:meth:`TableFiles.write`).
        ``after``: the rows are those of LSNs above it; CommitConflictError, committing
        nothing, when the table comes to hold an LSN between the two (an earlier
        attempt's commit that landed late), so that no row is committed twice.
        """
        if wal_lsn <= 0:
            raise ValueError(f"wal_lsn must be positive, got {wal_lsn}")
        started = time.perf_counter()
        if self.committed_lsn(app_id) >= wal_lsn:
            return None
        if not isinstance(data, pa.Table):
            data = pa.Table.from_batches(list(data)) if data else self.spec.schema.empty_table()
        prepared = self.files.write(self.files.conform(data), helpers)
        result = self.commit(
            Commit(
                operation="flush",
                adds=tuple(prepared),
                txn=Txn(app_id, wal_lsn, after),
                metadata={"shoal.walLsn": wal_lsn},
            ),
            started=started,
        )
        if result is not None:
            faults.point("committed")
            if self._background and self._series is not None:
                self._series.keep_current(self.snapshot)
        return result

    def conform(self, data: pa.Table) -> pa.Table:
        """``data`` with exactly the table's schema, or SchemaMismatchError."""
        return self.files.conform(data)

    # -- coverage ----------------------------------------------------------------

    def file_coverage(self, file: ScanFile) -> cov.Coverage:
        """A committed file's coverage (cached; recomputed from the file if missing)."""
        return self._coverage.of_file(file)

    def covered(self, snapshot: TableSnapshot | None = None) -> cov.Coverage:
        """The union of the coverage of every committed file (cached per version)."""
        return self._coverage.covered(snapshot or self.snapshot())

    def coverage(
        self,
        start: dt.datetime,
        end: dt.datetime,
        series: str | None = None,
        bucket_s: int | None = None,
    ) -> CoverageResult:
        """Covered buckets and gaps in ``[start, end)``, from coverage metadata only."""
        return self._coverage.query(self.snapshot(), start, end, series, bucket_s)

    # -- series ------------------------------------------------------------------

    def series(
        self,
        snapshot: TableSnapshot,
        batches: Sequence[LsnBatch] = (),
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> pa.Table:
        """One row per series of ``snapshot``'s files and ``batches`` (the unflushed
        rows above its committed LSN) seen in ``[start_ns, end_ns]``: the table's
        ``index_columns`` from its earliest row, ``first_ns`` and ``last_ns``."""
        if self._series is None:
            raise StorageError(f"{self.label} keeps no series index")
        return self._series.read(snapshot, batches, start_ns, end_ns)

    def settle(self) -> None:
        """Wait for the series index checkpoint being written beside a read, if any."""
        if self._series is not None:
            self._series.settle()

    # -- lookup ------------------------------------------------------------------

    def files_holding(self, files: Sequence[ScanFile], value: str) -> list[ScanFile]:
        """Those of ``files`` (a snapshot's) that may hold rows whose lookup column (the
        spec's ``lookup_column``) is ``value``, from the files' filters alone."""
        if self._lookup is None:
            raise StorageError(f"{self.label} has no lookup column")
        return self._lookup.files_holding(files, value)

    # -- maintenance -------------------------------------------------------------

    def vacuum(self, retention_hours: float, *, dry_run: bool = False) -> list[str]:
        """Delete data files, coverage and series summaries no committed version needs,
        older than the window.

        Data files go through delta-rs's vacuum (files removed longer ago than
        the window, and files no commit ever added); the coverage and series
        summaries of data files not in the latest version are deleted here once
        older than the window. Returns the relative paths deleted (or, with
        ``dry_run``, to delete).
        """
        hours = max(0, math.ceil(retention_hours))
        deleted, latest = self.log.vacuum(hours, dry_run=dry_run)
        rels = [self.place.rel(f.path) for f in latest.files]
        active = {series_index.CHECKPOINT}
        active.update(layout.coverage_path(rel) for rel in rels)
        active.update(layout.series_path(rel) for rel in rels)
        active.update(logindex.index_path(rel) for rel in rels)
        active.update(layout.lookup_path(rel) for rel in rels)
        cutoff = time.time() - retention_hours * 3600
        sidecar_dirs = (
            layout.COVERAGE_DIR,
            layout.SERIES_DIR,
            logindex.INDEX_DIR,
            layout.LOOKUP_DIR,
        )
        for sidecars in sidecar_dirs:
            for name, mtime in self.place.listdir(sidecars):
                rel = f"{sidecars}/{name}"
                if rel in active or mtime > cutoff:
                    continue
                deleted.append(rel)
                if not dry_run:
                    try:
                        self.place.delete(rel)
                    except FileNotFoundError:
                        pass
        return deleted
