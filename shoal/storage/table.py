"""One Delta Lake table of one tenant: flushes, commits, snapshots, history, coverage.

Commit protocol (docs/storage.md has the crash points):

1. write each Parquet file under ``hour=.../``, fsync it, fsync its directory;
2. write each file's coverage under ``_coverage/``, fsync it and the directory;
3. commit one Delta version through delta-rs with ``max_commit_retries=0``,
   so the version is exactly ``base + 1``; if another writer took that
   version, re-read the log, check for conflicts ourselves (delta-rs does
   not notice two commits removing the same file) and retry;
4. fsync the new ``_delta_log`` entry and the directory.

A flush carries the Delta transaction id ``(app_id, wal_lsn)``; the check
``committed_lsn() >= wal_lsn`` is repeated before every attempt, so a record
is committed at most once even with two writers racing.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
)
from pyroaring import BitMap

from shoal.errors import CommitConflictError, SchemaMismatchError, StorageError
from shoal.otlp.schema import TableSpec
from shoal.storage import coverage as cov
from shoal.storage import faults, layout
from shoal.storage.durable import fsync_dir, fsync_file, make_dirs_durable
from shoal.storage.metrics import NOOP, StorageMetrics
from shoal.storage.spec import schema_differences
from shoal.storage.types import (
    WAL_APP_ID,
    CommitResult,
    CoverageResult,
    HistoryEntry,
    NewFile,
    ScanFile,
    TableSnapshot,
)

logger = logging.getLogger(__name__)

_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
_MAX_ATTEMPTS = 100
_MIN_US = -(2**63)
_MAX_US = 2**63 - 1
_COVERAGE_CACHE_FILES = 8192


class PreparedFile:
    """A data file written and fsynced, with its stats and coverage, not yet committed."""

    __slots__ = ("coverage", "path", "size", "stats")

    def __init__(self, path: str, size: int, stats: layout.FileStats, coverage: cov.Coverage):
        self.path = path
        self.size = size
        self.stats = stats
        self.coverage = coverage


class Table:
    """A tenant's Delta table. Thread-safe; obtain it from ``TableStore.open``."""

    def __init__(
        self,
        tenant: str,
        path: Path,
        spec: TableSpec,
        *,
        bucket_s: int,
        checkpoint_interval: int,
        metrics: StorageMetrics = NOOP,
    ) -> None:
        self.tenant = tenant
        self.name = spec.name
        self.path = path
        self.spec = spec
        self.bucket_s = bucket_s
        self.checkpoint_interval = checkpoint_interval
        self._metrics = metrics
        self._log_dir = path / "_delta_log"
        self._lock = threading.RLock()
        self._dt = DeltaTable(str(path))
        self._snapshot: TableSnapshot | None = None
        self._cov_cache: collections.OrderedDict[str, cov.Coverage] = collections.OrderedDict()
        self._union_cache: tuple[int, cov.Coverage] | None = None

    def __repr__(self) -> str:
        return f"Table({self.tenant}/{self.name})"

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.name}"

    # -- reading -----------------------------------------------------------------

    def _refresh(self) -> None:
        """Bring the DeltaTable to the latest version (cheap when nothing changed)."""
        nxt = self._log_dir / f"{self._dt.version() + 1:020d}.json"
        if nxt.exists():
            self._dt.update_incremental()

    def snapshot(self) -> TableSnapshot:
        """The latest committed version; one ``stat`` when nothing changed since last time."""
        with self._lock:
            snap = self._snapshot
            if snap is not None and not self._next_exists(snap.version):
                return snap
            self._refresh()
            self._snapshot = self._build_snapshot(self._dt)
            return self._snapshot

    def snapshot_at(
        self, version: int | None = None, timestamp: dt.datetime | None = None
    ) -> TableSnapshot:
        """The table as of a version, or as of the last version committed at or before a time."""
        if version is None and timestamp is None:
            return self.snapshot()
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        try:
            old = DeltaTable(str(self.path))
            if version is not None:
                old.load_as_version(version)
            else:
                assert timestamp is not None
                old.load_as_version(timestamp)
        except Exception as exc:
            raise StorageError(f"{self.label}: cannot load that version: {exc}") from None
        return self._build_snapshot(old)

    def scan_files(
        self, start: dt.datetime | None, end: dt.datetime | None, version: int | None = None
    ) -> list[ScanFile]:
        """Committed files that can hold rows with ``start <= time < end``."""
        snap = self.snapshot() if version is None else self.snapshot_at(version)
        return snap.files_between(
            None if start is None else cov.to_us(start), None if end is None else cov.to_us(end)
        )

    def committed_lsn(self, app_id: str = WAL_APP_ID) -> int:
        """The highest WAL LSN committed to this table (0 before the first flush)."""
        with self._lock:
            snap = self._snapshot
            fresh = snap is not None and not self._next_exists(snap.version)
            if app_id == WAL_APP_ID and snap is not None and fresh:
                return snap.committed_lsn
            self._refresh()
            return self._dt.transaction_version(app_id) or 0

    def _next_exists(self, version: int) -> bool:
        return (self._log_dir / f"{version + 1:020d}.json").exists()

    def _build_snapshot(self, table: DeltaTable) -> TableSnapshot:
        actions = pa.table(table.get_add_actions(flatten=True))
        root = str(self.path)
        tc = self.spec.time_column
        n = actions.num_rows
        paths = actions.column("path").to_pylist() if n else []
        sizes = actions.column("size_bytes").to_pylist() if n else []
        rows = _int_column(actions, "num_records", 0)
        mins = _int_column(actions, f"min.{tc}", _MIN_US)
        maxs = _int_column(actions, f"max.{tc}", _MAX_US)
        files = tuple(
            ScanFile(
                path=os.path.join(root, p),
                size=int(sizes[i]),
                rows=int(rows[i]),
                min_time_us=int(mins[i]),
                max_time_us=int(maxs[i]),
            )
            for i, p in enumerate(paths)
        )
        return TableSnapshot(
            tenant=self.tenant,
            table=self.name,
            version=table.version(),
            committed_lsn=table.transaction_version(WAL_APP_ID) or 0,
            files=files,
            schema=self.spec.schema,
            time_column=tc,
        )

    def history(self, limit: int = 50) -> list[HistoryEntry]:
        """Versions, newest first: operation, rows and files added/removed, WAL LSN."""
        with self._lock:
            self._refresh()
            raw = self._dt.history(limit)
        entries = []
        for info in raw:
            metrics = info.get("operationMetrics") or {}
            entries.append(
                HistoryEntry(
                    version=int(info["version"]),
                    timestamp=dt.datetime.fromtimestamp(info.get("timestamp", 0) / 1000, tz=dt.UTC),
                    operation=str(info.get("shoal.operation") or info.get("operation", "?")),
                    rows_added=_opt_int(info.get("shoal.rowsAdded", metrics.get("num_added_rows"))),
                    rows_removed=_opt_int(
                        info.get("shoal.rowsRemoved", metrics.get("num_removed_rows"))
                    ),
                    files_added=_opt_int(
                        info.get("shoal.filesAdded", metrics.get("num_added_files"))
                    ),
                    files_removed=_opt_int(
                        info.get("shoal.filesRemoved", metrics.get("num_removed_files"))
                    ),
                    wal_lsn=_opt_int(info.get("shoal.walLsn")),
                )
            )
        return entries

    # -- writing -----------------------------------------------------------------

    def flush(
        self,
        data: pa.Table | Sequence[pa.RecordBatch],
        wal_lsn: int,
        *,
        app_id: str = WAL_APP_ID,
    ) -> CommitResult | None:
        """Write rows as hourly Parquet files and commit them with txn ``(app_id, wal_lsn)``.

        Returns None, committing nothing, when the table already holds ``wal_lsn``.
        """
        if wal_lsn <= 0:
            raise ValueError(f"wal_lsn must be positive, got {wal_lsn}")
        started = time.perf_counter()
        if self.committed_lsn(app_id) >= wal_lsn:
            return None
        table = data if isinstance(data, pa.Table) else _batches_to_table(data, self.spec.schema)
        table = self.conform(table)
        prepared = self.write_files(table)
        try:
            result = self._commit(
                prepared,
                [],
                operation="flush",
                read_version=None,
                txn=(app_id, wal_lsn),
                data_change=True,
                extra={"shoal.walLsn": wal_lsn},
            )
        except BaseException:
            self._discard(prepared)
            raise
        if result is None:
            logger.info("%s: WAL LSN %d already committed; nothing flushed", self.label, wal_lsn)
            self._discard(prepared)
            return None
        faults.point("committed")
        self._metrics.commit_done(
            self.tenant,
            self.name,
            "flush",
            time.perf_counter() - started,
            result.rows_added,
            result.files_added,
        )
        return result

    def conform(self, table: pa.Table) -> pa.Table:
        """``table`` with exactly the table's schema, or SchemaMismatchError."""
        schema = self.spec.schema
        if table.schema.equals(schema):
            return table
        diffs = schema_differences(table.schema, schema)
        try:
            table = table.select(schema.names).cast(schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            raise SchemaMismatchError(self.label, diffs or ["incompatible types"]) from None
        for field in schema:
            if not field.nullable and table.column(field.name).null_count:
                raise SchemaMismatchError(
                    self.label, [f"column {field.name!r} holds nulls but the table requires values"]
                )
        return table

    def write_files(self, table: pa.Table) -> list[PreparedFile]:
        """Split ``table`` (already conformed) by hour, sort, write and fsync files + coverage."""
        pieces = layout.split_by_hour(table, self.spec)
        prepared: list[PreparedFile] = []
        dirs: set[Path] = set()
        for hour, piece in pieces:
            rel = layout.hour_file_path(hour)
            target = self.path / rel
            if target.parent not in dirs:
                make_dirs_durable(target.parent, self.path)
                dirs.add(target.parent)
            size = layout.write_parquet(piece, target, self.spec)
            stats = layout.compute_stats(piece, self.spec)
            prepared.append(PreparedFile(rel, size, stats, self.compute_coverage(piece)))
        for d in dirs:
            fsync_dir(d)
        faults.point("parquet-written")
        self.write_coverage(prepared)
        return prepared

    def compute_coverage(self, table: pa.Table) -> cov.Coverage:
        time_us = layout.time_as_us(table.column(self.spec.time_column))
        series = None
        if self.spec.series_columns and self.spec.series_columns[0] in table.schema.names:
            series = table.column(self.spec.series_columns[0])
        return cov.compute(time_us, series, self.bucket_s)

    def write_coverage(self, prepared: Sequence[PreparedFile]) -> None:
        if not prepared:
            return
        cov_dir = self.path / layout.COVERAGE_DIR
        make_dirs_durable(cov_dir, self.path)
        for item in prepared:
            cov.write(self.path / layout.coverage_path(item.path), item.coverage)
        fsync_dir(cov_dir)
        faults.point("coverage-written")

    def _discard(self, prepared: Sequence[PreparedFile]) -> None:
        """Delete files that were written but will never be committed."""
        for item in prepared:
            for rel in (item.path, layout.coverage_path(item.path)):
                try:
                    (self.path / rel).unlink()
                except FileNotFoundError:
                    pass

    def commit(
        self,
        adds: Sequence[NewFile],
        removes: Sequence[str],
        *,
        operation: str,
        read_version: int,
        data_change: bool = False,
        app_txn: tuple[str, int] | None = None,
        check: Callable[[], None] | None = None,
    ) -> CommitResult:
        """Remove and add files in one atomic commit (compaction, retention, rollups).

        ``adds`` are files already written inside the table directory with
        :mod:`shoal.storage.layout`'s rules; ``removes`` are relative paths of
        files in the table at ``read_version``. Raises CommitConflictError when
        any of them was removed by a concurrent commit (refresh and retry). A
        concurrent append does not conflict. ``data_change`` is False for
        compaction (rows unchanged) and True for retention. ``check`` runs on the
        version the commit lands on and raises to abandon it (see ``_commit``).
        """
        started = time.perf_counter()
        prepared: list[PreparedFile] = []
        for add in adds:
            full = self.path / add.path
            if not full.is_file():
                raise StorageError(f"{self.label}: file to add does not exist: {add.path}")
            if add.stats is not None:
                stats = layout.parse_stats(add.stats, self.spec.time_column)
            else:
                stats = layout.stats_for_file(full, self.spec)
            size = add.size if add.size is not None else full.stat().st_size
            cov_file = self.path / layout.coverage_path(add.path)
            if cov_file.exists():
                file_cov = cov.read(cov_file)
            else:
                file_cov = self.compute_coverage(
                    pq.read_table(full, columns=self._coverage_columns(full))
                )
            prepared.append(PreparedFile(add.path, size, stats, file_cov))
            fsync_file(full)
            fsync_dir(full.parent)
        self.write_coverage(
            [p for p in prepared if not (self.path / layout.coverage_path(p.path)).exists()]
        )
        with self._lock:
            self._refresh()
            if read_version > self._dt.version():
                raise StorageError(
                    f"{self.label}: read_version {read_version} is newer than the table"
                )
        result = self._commit(
            prepared,
            list(removes),
            operation=operation,
            read_version=read_version,
            txn=app_txn,
            data_change=data_change,
            extra={},
            check=check,
        )
        if result is None:
            raise CommitConflictError(
                self.label, self.snapshot().version, "transaction already committed"
            )
        self._metrics.commit_done(
            self.tenant,
            self.name,
            operation,
            time.perf_counter() - started,
            result.rows_added,
            result.files_added,
        )
        return result

    def _coverage_columns(self, path: Path) -> list[str]:
        names = pq.ParquetFile(path).schema_arrow.names
        return [c for c in (self.spec.time_column, *self.spec.series_columns) if c in names]

    def _commit(
        self,
        prepared: Sequence[PreparedFile],
        removes: Sequence[str],
        *,
        operation: str,
        read_version: int | None,
        txn: tuple[str, int] | None,
        data_change: bool,
        extra: dict[str, Any],
        check: Callable[[], None] | None = None,
    ) -> CommitResult | None:
        """Commit ``prepared`` and ``removes`` on top of the newest version, retrying on
        conflicts. ``check`` runs against that newest version before every attempt (with
        the log refreshed, under the table's lock) and raises to abandon the commit:
        a version committed meanwhile by anyone makes the attempt fail and re-check."""
        now_ms = int(time.time() * 1000)
        adds = [
            AddAction(p.path, p.size, {}, now_ms, data_change, p.stats.to_json()) for p in prepared
        ]
        rows_added = sum(p.stats.rows for p in prepared)
        with self._lock:
            for _attempt in range(_MAX_ATTEMPTS):
                self._refresh()
                base = self._dt.version()
                if txn is not None:
                    done = self._dt.transaction_version(txn[0])
                    if done is not None and done >= txn[1]:
                        return None
                if check is not None:
                    check()
                remove_actions, rows_removed = self._remove_actions(removes, now_ms, data_change)
                metadata: dict[str, Any] = {
                    "shoal.operation": operation,
                    "shoal.rowsAdded": rows_added,
                    "shoal.rowsRemoved": rows_removed,
                    "shoal.filesAdded": len(adds),
                    "shoal.filesRemoved": len(remove_actions),
                    "shoal.coverage": [layout.coverage_path(p.path) for p in prepared],
                    **extra,
                }
                if read_version is not None:
                    metadata["readVersion"] = read_version
                props = CommitProperties(
                    custom_metadata=metadata,
                    max_commit_retries=0,
                    app_transactions=[Transaction(txn[0], txn[1])] if txn else None,
                )
                target = self._log_dir / f"{base + 1:020d}.json"
                try:
                    self._dt.create_write_transaction(
                        [*remove_actions, *adds],
                        "append",
                        self._dt.schema(),
                        commit_properties=props,
                        post_commithook_properties=_NO_HOOKS,
                    )
                except CommitFailedError as exc:
                    if target.exists():
                        self._metrics.commit_retry(self.tenant, self.name)
                        time.sleep(random.uniform(0, 0.005))
                        continue
                    raise StorageError(f"{self.label}: commit failed: {exc}") from exc
                fsync_file(target)
                fsync_dir(self._log_dir)
                version = base + 1
                self._dt.update_incremental()
                self._advance_snapshot(base, version, prepared, removes, txn)
                self._maybe_checkpoint(version)
                logger.debug(
                    "%s: committed version %d (%s, %d files, %d rows)",
                    self.label,
                    version,
                    operation,
                    len(adds),
                    rows_added,
                )
                return CommitResult(version, len(adds), rows_added, len(remove_actions))
        raise CommitConflictError(self.label, base, f"gave up after {_MAX_ATTEMPTS} attempts")

    def _advance_snapshot(
        self,
        base: int,
        version: int,
        prepared: Sequence[PreparedFile],
        removes: Sequence[str],
        txn: tuple[str, int] | None,
    ) -> None:
        """Derive the new snapshot from the old one after our own commit (no log reload)."""
        old = self._snapshot
        if old is None or old.version != base:
            self._snapshot = None
            return
        root = str(self.path)
        gone = {os.path.join(root, r) for r in removes}
        added = tuple(
            ScanFile(
                path=os.path.join(root, p.path),
                size=p.size,
                rows=p.stats.rows,
                min_time_us=p.stats.min_time_us,
                max_time_us=p.stats.max_time_us,
            )
            for p in prepared
        )
        lsn = txn[1] if txn is not None and txn[0] == WAL_APP_ID else old.committed_lsn
        self._snapshot = dataclasses.replace(
            old,
            version=version,
            committed_lsn=lsn,
            files=tuple(f for f in old.files if f.path not in gone) + added,
        )

    def _remove_actions(
        self, removes: Sequence[str], now_ms: int, data_change: bool
    ) -> tuple[list[RemoveAction], int]:
        if not removes:
            return [], 0
        actions = pa.table(self._dt.get_add_actions(flatten=True))
        active = (
            dict(
                zip(
                    actions.column("path").to_pylist(),
                    zip(
                        actions.column("size_bytes").to_pylist(),
                        _int_column(actions, "num_records", 0).tolist(),
                        strict=True,
                    ),
                    strict=True,
                )
            )
            if actions.num_rows
            else {}
        )
        missing = [p for p in removes if p not in active]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise CommitConflictError(
                self.label, self._dt.version(), f"files no longer in the table: {shown}"
            )
        result = [RemoveAction(p, data_change, now_ms, int(active[p][0]), {}) for p in removes]
        return result, sum(int(active[p][1]) for p in removes)

    def _maybe_checkpoint(self, version: int) -> None:
        if version == 0 or version % self.checkpoint_interval:
            return
        started = time.perf_counter()
        try:
            self._dt.create_checkpoint()
            for name in (f"{version:020d}.checkpoint.parquet", "_last_checkpoint"):
                if (self._log_dir / name).exists():
                    fsync_file(self._log_dir / name)
            fsync_dir(self._log_dir)
            self._dt.cleanup_metadata()
        except Exception:
            logger.exception("%s: checkpoint at version %d failed", self.label, version)
            return
        self._metrics.checkpoint_done(self.tenant, self.name, time.perf_counter() - started)

    def import_files(
        self,
        paths: Sequence[Path],
        *,
        time_column: str | None = None,
        allow_overlap: bool = False,
        progress: Callable[[int, int], None] | None = None,
        rewrite: bool | None = None,
    ) -> CommitResult:
        """Append Parquet files in one commit, refusing time buckets the table already holds.

        ``rewrite``: None adopts files whose schema is exactly the table's and
        rewrites the others; True rewrites every file; False refuses files that
        would need rewriting. See :mod:`shoal.storage.importer`.
        """
        from shoal.storage import importer

        if time_column is not None and time_column != self.spec.time_column:
            raise SchemaMismatchError(
                self.label,
                [f"time column is {self.spec.time_column!r}, not {time_column!r}"],
            )
        started = time.perf_counter()
        result = importer.import_files(
            self, paths, allow_overlap=allow_overlap, progress=progress, rewrite=rewrite
        )
        self._metrics.commit_done(
            self.tenant,
            self.name,
            "import",
            time.perf_counter() - started,
            result.rows_added,
            result.files_added,
        )
        return result

    # -- coverage ----------------------------------------------------------------

    def file_coverage(self, file: ScanFile) -> cov.Coverage:
        """A committed file's coverage (cached; recomputed from the file if missing)."""
        with self._lock:
            hit = self._cov_cache.get(file.path)
            if hit is not None:
                self._cov_cache.move_to_end(file.path)
                return hit
        rel = os.path.relpath(file.path, self.path)
        cov_file = self.path / layout.coverage_path(rel)
        try:
            result = cov.read(cov_file)
        except (FileNotFoundError, cov.CoverageFormatError) as exc:
            logger.warning("%s: coverage of %s unusable (%s); recomputing", self.label, rel, exc)
            table = pq.read_table(file.path, columns=self._coverage_columns(Path(file.path)))
            result = self.compute_coverage(table)
        if result.bucket_s != self.bucket_s:
            raise StorageError(
                f"{self.label}: {rel} has {result.bucket_s}s coverage, table uses {self.bucket_s}s"
            )
        with self._lock:
            self._cov_cache[file.path] = result
            while len(self._cov_cache) > _COVERAGE_CACHE_FILES:
                self._cov_cache.popitem(last=False)
        return result

    def covered(self, snapshot: TableSnapshot | None = None) -> cov.Coverage:
        """The union of the coverage of every committed file (cached per version)."""
        snap = snapshot or self.snapshot()
        with self._lock:
            cached = self._union_cache
            if cached is not None and cached[0] == snap.version:
                return cached[1]
        result = cov.union((self.file_coverage(f) for f in snap.files), self.bucket_s)
        with self._lock:
            self._union_cache = (snap.version, result)
        return result

    def coverage(
        self,
        start: dt.datetime,
        end: dt.datetime,
        series: str | None = None,
        bucket_s: int | None = None,
    ) -> CoverageResult:
        """Covered buckets and gaps in ``[start, end)``, from coverage metadata only."""
        width = bucket_s or self.bucket_s
        if width % self.bucket_s:
            raise StorageError(
                f"{self.label}: bucket of {width}s is not a multiple of the table's "
                f"{self.bucket_s}s coverage bucket"
            )
        if end <= start:
            raise ValueError("end must be after start")
        factor = width // self.bucket_s
        snap = self.snapshot()
        s_us, e_us = cov.to_us(start), cov.to_us(end)
        lo, hi = cov.bucket_range(start, end, width)
        unit = width * 1_000_000
        merged = BitMap()
        for f in snap.files_between(lo * unit, hi * unit):
            fc = self.file_coverage(f)
            if series is None:
                merged |= fc.buckets
            else:
                bm = fc.series.get(series)
                if bm is not None:
                    merged |= bm
        coarse = cov.coarsen(merged, factor)
        window = BitMap()
        window.add_range(lo, hi)
        hits = coarse & window
        gaps = window - hits

        def spans(bm: BitMap) -> tuple[tuple[dt.datetime, dt.datetime], ...]:
            return tuple(
                (cov.from_us(max(a * unit, s_us)), cov.from_us(min(b * unit, e_us)))
                for a, b in cov.runs(bm)
            )

        return CoverageResult(
            start=start,
            end=end,
            bucket_s=width,
            series=series,
            covered_buckets=len(hits),
            total_buckets=hi - lo,
            covered=spans(hits),
            gaps=spans(gaps),
        )

    # -- maintenance -------------------------------------------------------------

    def vacuum(self, retention_hours: float, *, dry_run: bool = False) -> list[str]:
        """Delete data files and coverage no committed version needs, older than the window.

        Data files go through delta-rs's vacuum (files removed longer ago than
        the window, and files no commit ever added); coverage files of data
        files not in the latest version are deleted here once older than the
        window. Returns the relative paths deleted (or, with ``dry_run``, to delete).
        """
        hours = max(0, int(np.ceil(retention_hours)))
        with self._lock:
            self._refresh()
            deleted = list(
                self._dt.vacuum(
                    retention_hours=hours,
                    dry_run=dry_run,
                    enforce_retention_duration=False,
                    full=True,
                    post_commithook_properties=_NO_HOOKS,
                )
            )
            self._dt.update_incremental()
            active = {
                layout.coverage_path(os.path.relpath(f.path, self.path))
                for f in self._build_snapshot(self._dt).files
            }
        cutoff = time.time() - retention_hours * 3600
        cov_dir = self.path / layout.COVERAGE_DIR
        if cov_dir.is_dir():
            for entry in os.scandir(cov_dir):
                rel = f"{layout.COVERAGE_DIR}/{entry.name}"
                if rel in active or entry.stat().st_mtime > cutoff:
                    continue
                deleted.append(rel)
                if not dry_run:
                    os.unlink(entry.path)
        return deleted


def _batches_to_table(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(list(batches))


def _int_column(actions: pa.Table, name: str, default: int) -> np.ndarray[Any, Any]:
    if name not in actions.schema.names:
        return np.full(actions.num_rows, default, dtype=np.int64)
    col = actions.column(name)
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.int64())
    return np.asarray(pc.fill_null(col, default).to_numpy(), dtype=np.int64)


def _opt_int(value: object) -> int | None:
    if value is None:
        return None
    try:
        return int(value)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
