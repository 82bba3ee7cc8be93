"""A table's Delta log: the one place a commit is made, snapshots and history read.

:meth:`DeltaLog.commit` is the only retry loop. Each attempt refreshes the
log, checks the commit's requirements on the newest version (see
:mod:`shoal.storage.commit`), and commits exactly version ``base + 1``
through delta-rs with ``max_commit_retries=0``. If another writer took that
version, the attempt is repeated on top of it: delta-rs would not notice two
commits removing the same file, so the conflict check is ours. After a
commit on local disk the new ``_delta_log`` entry and its directory are fsynced
(delta-rs does not; in a bucket the conditional PUT that made the entry is
durable once answered), the cached snapshot is advanced without reloading the
log, and every ``checkpoint_interval`` versions a checkpoint is written.

Each commit carries an id of its own (``shoal.commitId``). When an attempt fails
and the version it aimed at exists, that entry is read: if it holds our id, the
attempt landed (an answer lost on the way back, a request retried after it
succeeded) and counts as done, so a commit is never applied twice nor taken back.
A failure that leaves the outcome unknown (the store unreachable) keeps the
commit's files: the commit may still land, and vacuum deletes them if it did not.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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

from shoal.errors import CommitConflictError, CoverageOverlapError, StorageError
from shoal.schema import TableSpec
from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.commit import Commit, PreparedFile
from shoal.storage.durable import fsync_dir, fsync_file
from shoal.storage.freshness import Watch
from shoal.storage.options import TableOptions
from shoal.storage.place import Place
from shoal.storage.types import WAL_APP_ID, CommitResult, HistoryEntry, ScanFile, TableSnapshot

logger = logging.getLogger(__name__)

_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
_MAX_ATTEMPTS = 100
_MIN_US = -(2**63)
_MAX_US = 2**63 - 1

Covered = Callable[[TableSnapshot], cov.Coverage]
"""The union of the coverage of a version's files (for the overlap requirement)."""


class DeltaLog:
    """The Delta log of one table directory. Thread-safe."""

    def __init__(self, tenant: str, place: Place, spec: TableSpec, options: TableOptions) -> None:
        self.tenant = tenant
        self.place = place
        self.spec = spec
        self.label = f"{tenant}/{spec.name}"
        """How logs and errors name the table (its :class:`~shoal.storage.table.Table` too)."""
        self.checkpoint_interval = options.checkpoint_interval
        self._metrics = options.metrics
        self._lock = threading.RLock()
        self._dt = self._open()
        self._latest: TableSnapshot | None = None
        self._watch = Watch(
            self.label, options.poll_s, background=options.background, tolerant=not place.local
        )
        """When the store was last asked for a newer version than ``_latest``."""

    def _open(self) -> DeltaTable:
        return DeltaTable(self.place.uri, storage_options=self.place.storage_options or None)

    # -- reading -----------------------------------------------------------------

    @staticmethod
    def _entry(version: int) -> str:
        return f"_delta_log/{version:020d}.json"

    def _next_exists(self, version: int) -> bool:
        return self.place.exists(self._entry(version + 1))

    def _refresh(self) -> None:
        """Bring the handle to the latest version (one ``stat`` when nothing changed)."""
        if self._next_exists(self._dt.version()):
            self._dt.update_incremental()
        self._watch.seen()

    def _fresh(self, snap: TableSnapshot | None) -> bool:
        """Whether ``snap`` may be read as the latest version (one look on local disk;
        for a bucket see :mod:`shoal.storage.freshness`). The version this process saw
        last stays the latest while the store does not answer (its own commits advance
        it)."""
        return snap is not None and self._watch.fresh(
            lambda: self._next_exists(snap.version), lambda: self._load_newer(snap.version)
        )

    def _load_newer(self, version: int) -> None:
        with self._lock:
            if self._latest is not None and self._latest.version == version:
                self._refresh()
                self._latest = self._build_snapshot(self._dt)

    def snapshot(self) -> TableSnapshot:
        """The latest committed version; one ``stat`` when nothing changed since last time."""
        with self._lock:
            snap = self._latest
            if snap is not None and self._fresh(snap):
                return snap
            self._refresh()
            self._latest = self._build_snapshot(self._dt)
            return self._latest

    def snapshot_at(
        self, version: int | None = None, timestamp: dt.datetime | None = None
    ) -> TableSnapshot:
        """The table as of a version, or as of the last version committed at or before a time."""
        if version is None and timestamp is None:
            return self.snapshot()
        if version is not None and timestamp is not None:
            raise ValueError("give a version or a timestamp, not both")
        target: int | dt.datetime = version if version is not None else timestamp  # type: ignore[assignment]
        try:
            old = self._open()
            old.load_as_version(target)
        except Exception as exc:
            raise StorageError(f"{self.label}: cannot load that version: {exc}") from None
        return self._build_snapshot(old)

    def committed_lsn(self, app_id: str = WAL_APP_ID) -> int:
        """The highest version committed for ``app_id`` (the WAL LSN for flushes; 0: none)."""
        with self._lock:
            snap = self._latest
            if app_id == WAL_APP_ID and snap is not None and not self._next_exists(snap.version):
                self._watch.seen()
                return snap.committed_lsn
            self._refresh()
            return self._dt.transaction_version(app_id) or 0

    def _build_snapshot(self, table: DeltaTable) -> TableSnapshot:
        actions = pa.table(table.get_add_actions(flatten=True))
        tc = self.spec.time_column
        n = actions.num_rows
        paths = actions.column("path").to_pylist() if n else []
        sizes = actions.column("size_bytes").to_pylist() if n else []
        rows = _int_column(actions, "num_records", 0)
        mins = _int_column(actions, f"min.{tc}", _MIN_US)
        maxs = _int_column(actions, f"max.{tc}", _MAX_US)
        files = tuple(
            ScanFile(
                path=self.place.full(p),
                size=int(sizes[i]),
                rows=int(rows[i]),
                min_time_us=int(mins[i]),
                max_time_us=int(maxs[i]),
            )
            for i, p in enumerate(paths)
        )
        return TableSnapshot(
            tenant=self.tenant,
            table=self.spec.name,
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
        return [_history_entry(info) for info in raw]

    # -- the commit ----------------------------------------------------------------

    def commit(
        self,
        commit: Commit,
        prepared: Sequence[PreparedFile],
        covered: Covered,
        refused: Callable[[], None],
    ) -> CommitResult | None:
        """Land ``commit`` (its adds already ``prepared``) on the newest version, retrying
        lost races; None when its transaction id is already committed.

        ``refused`` is called whenever the commit certainly did not land (a
        requirement failed, its transaction id is held, delta-rs refused it)
        before the error is raised or None returned; not when the failure may
        have come after it landed (an fsync of the new log entry).
        """
        now_ms = int(time.time() * 1000)
        adds = [
            AddAction(p.path, p.size, {}, now_ms, commit.data_change, p.stats.to_json())
            for p in prepared
        ]
        rows_added = sum(p.stats.rows for p in prepared)
        txn = commit.txn
        commit_id = uuid.uuid4().hex
        with self._lock:
            for _attempt in range(_MAX_ATTEMPTS):
                target: str | None = None
                try:
                    self._refresh()
                    base = self._dt.version()
                    if txn is not None:
                        done = self._dt.transaction_version(txn.app_id)
                        if done is not None and done >= txn.version:
                            refused()
                            return None
                        if done is not None and txn.after is not None and txn.after < done:
                            raise CommitConflictError(  # its files go below
                                self.label, base, f"{txn.app_id} {done} holds some rows"
                            )
                    self._check_requirements(commit, base, covered)
                    removes, rows_removed = self._remove_actions(commit, now_ms)
                    info = self._commit_info(
                        commit, prepared, rows_added, rows_removed, len(removes)
                    )
                    info["shoal.commitId"] = commit_id
                    props = CommitProperties(
                        custom_metadata=info,
                        max_commit_retries=0,
                        app_transactions=[Transaction(txn.app_id, txn.version)] if txn else None,
                    )
                    target = self._entry(base + 1)
                    self._dt.create_write_transaction(
                        [*removes, *adds],
                        "append",
                        self._dt.schema(),
                        commit_properties=props,
                        post_commithook_properties=_NO_HOOKS,
                    )
                except CommitFailedError as exc:
                    landed = self._landed(target, commit_id)
                    if landed is None:
                        self._metrics.commit_retry(self.tenant, self.spec.name)
                        time.sleep(random.uniform(0, 0.005))
                        continue
                    if not landed:
                        refused()
                        raise StorageError(f"{self.label}: commit failed: {exc}") from exc
                except BaseException:
                    landed = self._landed(target, commit_id, certain=False)
                    if landed is False and (self.place.local or target is None):
                        refused()
                    if not landed:
                        raise
                version = base + 1
                assert target is not None
                if self.place.local:
                    fsync_file(self.place.path(target))
                    fsync_dir(self.place.path("_delta_log"))
                self._dt.update_incremental()
                self._advance_snapshot(base, version, prepared, commit)
                self._maybe_checkpoint(version)
                logger.debug(
                    "%s: committed version %d (%s, %d files, %d rows)",
                    self.label,
                    version,
                    commit.operation,
                    len(adds),
                    rows_added,
                )
                return CommitResult(version, len(adds), rows_added, len(removes))
        refused()
        raise CommitConflictError(self.label, base, f"gave up after {_MAX_ATTEMPTS} attempts")

    def _landed(self, target: str | None, commit_id: str, certain: bool = True) -> bool | None:
        """After a failed attempt at log entry ``target``: True when the entry is ours
        (the attempt landed), None when another writer took it (try again on top), False
        when there is no entry (the attempt did not land, or, with ``certain`` False,
        its outcome cannot be told yet)."""
        if target is None:
            return False
        try:
            data = self.place.read(target)
        except FileNotFoundError:
            return False
        except Exception:  # the store cannot be asked: the outcome is unknown
            if certain:
                raise
            return False
        if commit_id.encode() in data:
            logger.info("%s: %s landed although its answer was an error", self.label, target)
            return True
        return None if certain else False

    @staticmethod
    def _commit_info(
        commit: Commit,
        prepared: Sequence[PreparedFile],
        rows_added: int,
        rows_removed: int,
        files_removed: int,
    ) -> dict[str, Any]:
        info: dict[str, Any] = {
            "shoal.operation": commit.operation,
            "shoal.rowsAdded": rows_added,
            "shoal.rowsRemoved": rows_removed,
            "shoal.filesAdded": len(prepared),
            "shoal.filesRemoved": files_removed,
            "shoal.coverage": [layout.coverage_path(p.path) for p in prepared],
            **commit.metadata,
        }
        if commit.read_version is not None:
            info["readVersion"] = commit.read_version
        return info

    def _check_requirements(self, commit: Commit, base: int, covered: Covered) -> None:
        if commit.read_version is not None and commit.read_version > base:
            raise StorageError(
                f"{self.label}: read_version {commit.read_version} is newer than the table"
            )
        if commit.no_overlap is not None:
            existing = covered(self.snapshot())
            clash = overlap(existing, commit.no_overlap, bool(self.spec.series_columns))
            if clash:
                raise overlap_error(self.label, clash, existing.bucket_s)

    def _remove_actions(self, commit: Commit, now_ms: int) -> tuple[list[RemoveAction], int]:
        if not commit.removes:
            return [], 0
        actions = pa.table(self._dt.get_add_actions(flatten=True))
        active: dict[str, tuple[int, int]] = {}
        if actions.num_rows:
            rows = _int_column(actions, "num_records", 0).tolist()
            sizes = actions.column("size_bytes").to_pylist()
            for i, path in enumerate(actions.column("path").to_pylist()):
                active[path] = (int(sizes[i]), int(rows[i]))
        missing = [p for p in commit.removes if p not in active]
        if missing:
            shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            raise CommitConflictError(
                self.label, self._dt.version(), f"files no longer in the table: {shown}"
            )
        removes = [
            RemoveAction(p, commit.data_change, now_ms, active[p][0], {}) for p in commit.removes
        ]
        return removes, sum(active[p][1] for p in commit.removes)

    def _advance_snapshot(
        self, base: int, version: int, prepared: Sequence[PreparedFile], commit: Commit
    ) -> None:
        """Derive the new snapshot from the old one after our own commit (no log reload),
        or with none to derive from, build it from the handle (in memory, no request)."""
        old = self._latest
        self._watch.seen()
        if old is None or old.version != base:
            self._latest = None if self.place.local else self._build_snapshot(self._dt)
            return
        gone = {self.place.full(r) for r in commit.removes}
        added = tuple(
            ScanFile(
                path=self.place.full(p.path),
                size=p.size,
                rows=p.stats.rows,
                min_time_us=p.stats.min_time_us,
                max_time_us=p.stats.max_time_us,
            )
            for p in prepared
        )
        txn = commit.txn
        lsn = txn.version if txn is not None and txn.app_id == WAL_APP_ID else old.committed_lsn
        self._latest = dataclasses.replace(
            old,
            version=version,
            committed_lsn=lsn,
            files=tuple(f for f in old.files if f.path not in gone) + added,
        )

    def _maybe_checkpoint(self, version: int) -> None:
        if version == 0 or version % self.checkpoint_interval:
            return
        started = time.perf_counter()
        try:
            self._dt.create_checkpoint()
            if self.place.local:
                for name in (f"{version:020d}.checkpoint.parquet", "_last_checkpoint"):
                    if self.place.exists(f"_delta_log/{name}"):
                        fsync_file(self.place.path(f"_delta_log/{name}"))
                fsync_dir(self.place.path("_delta_log"))
            self._dt.cleanup_metadata()
        except Exception:
            logger.exception("%s: checkpoint at version %d failed", self.label, version)
            return
        self._metrics.checkpoint_done(self.tenant, self.spec.name, time.perf_counter() - started)

    # -- maintenance -------------------------------------------------------------

    def vacuum(self, retention_hours: int, *, dry_run: bool) -> tuple[list[str], TableSnapshot]:
        """delta-rs's vacuum of data files; returns what it deleted and the latest snapshot."""
        with self._lock:
            self._refresh()
            deleted = list(
                self._dt.vacuum(
                    retention_hours=retention_hours,
                    dry_run=dry_run,
                    enforce_retention_duration=False,
                    full=True,
                    post_commithook_properties=_NO_HOOKS,
                )
            )
            self._dt.update_incremental()
            return deleted, self._build_snapshot(self._dt)


def overlap(existing: cov.Coverage, incoming: Sequence[cov.Coverage], by_series: bool) -> BitMap:
    """Buckets of ``incoming`` that ``existing``, or an earlier incoming item, already covers.

    Per series when the table has a series column (two series may share a
    bucket; one series may not get the same bucket twice), else per table.
    """
    found = BitMap()
    seen_all = BitMap(existing.buckets)
    seen: dict[str, BitMap] = {k: BitMap(v) for k, v in existing.series.items()}
    for item in incoming:
        if by_series:
            for key, bm in item.series.items():
                prior = seen.setdefault(key, BitMap())
                found |= prior & bm
                prior |= bm
        else:
            found |= seen_all & item.buckets
        seen_all |= item.buckets
    return found


def overlap_error(label: str, buckets: BitMap, bucket_s: int) -> CoverageOverlapError:
    """The error naming the time ranges of overlapping coverage ``buckets``."""
    unit = bucket_s * 1_000_000
    ranges = [
        (cov.from_us(a * unit).isoformat(), cov.from_us(b * unit).isoformat())
        for a, b in cov.runs(buckets)
    ]
    return CoverageOverlapError(label, ranges)


def _history_entry(info: dict[str, Any]) -> HistoryEntry:
    metrics = info.get("operationMetrics") or {}

    def number(ours: str, theirs: str) -> int | None:
        return _opt_int(info.get(ours, metrics.get(theirs)))

    return HistoryEntry(
        version=int(info["version"]),
        timestamp=dt.datetime.fromtimestamp(info.get("timestamp", 0) / 1000, tz=dt.UTC),
        operation=str(info.get("shoal.operation") or info.get("operation", "?")),
        rows_added=number("shoal.rowsAdded", "num_added_rows"),
        rows_removed=number("shoal.rowsRemoved", "num_removed_rows"),
        files_added=number("shoal.filesAdded", "num_added_files"),
        files_removed=number("shoal.filesRemoved", "num_removed_files"),
        wal_lsn=_opt_int(info.get("shoal.walLsn")),
    )


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
