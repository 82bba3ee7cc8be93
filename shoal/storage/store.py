"""The tables of every tenant: ``<data_dir>/tenants/<tenant>/<table>/`` Delta tables."""

from __future__ import annotations

import fcntl
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deltalake import DeltaTable

from shoal.errors import SchemaMismatchError, StorageError, TableNotFoundError
from shoal.schema import SIGNAL_TABLES, TableSpec
from shoal.storage import spec as spec_mod
from shoal.storage.durable import fsync_dir, fsync_file, make_dirs_durable
from shoal.storage.reporting import NOOP, StorageMetrics
from shoal.storage.table import Table

logger = logging.getLogger(__name__)

_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_TABLE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_name(kind: str, name: str) -> None:
    pattern = _TENANT_RE if kind == "tenant" else _TABLE_RE
    if not pattern.match(name):
        raise StorageError(f"invalid {kind} name {name!r} (allowed: {pattern.pattern})")


class TableStore:
    """Opens (and creates) the Delta tables under a data directory; one Table object per table."""

    def __init__(
        self,
        data_dir: Path,
        *,
        coverage_bucket_s: int = 60,
        checkpoint_interval: int = 100,
        metrics: StorageMetrics = NOOP,
    ) -> None:
        if coverage_bucket_s <= 0 or checkpoint_interval <= 0:
            raise ValueError("coverage_bucket_s and checkpoint_interval must be positive")
        # absolute, so file paths handed to readers (ScanFile.path) stay valid whatever
        # the working directory of the code that reads them
        self.data_dir = Path(data_dir).absolute()
        self.root = self.data_dir / "tenants"
        self.coverage_bucket_s = coverage_bucket_s
        self.checkpoint_interval = checkpoint_interval
        self._metrics = metrics
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], Table] = {}

    def table_path(self, tenant: str, table: str) -> Path:
        check_name("tenant", tenant)
        check_name("table", table)
        return self.root / tenant / table

    def exists(self, tenant: str, table: str) -> bool:
        return (self.table_path(tenant, table) / "_delta_log").is_dir()

    def committed_lsn(self, tenant: str, table: str) -> int:
        """The WAL LSN the table's flushes have committed (0 before the first)."""
        return self.open(tenant, table).committed_lsn()

    def open(
        self, tenant: str, table: str, spec: TableSpec | None = None, *, create: bool = True
    ) -> Table:
        """The table ``tenant/table``, created from ``spec`` (or the signal's spec) if absent."""
        path = self.table_path(tenant, table)
        with self._lock:
            cached = self._tables.get((tenant, table))
            if cached is not None:
                if spec is not None:
                    _check_same(cached, spec)
                return cached
            if not DeltaTable.is_deltatable(str(path)):
                if not create:
                    raise TableNotFoundError(f"no table {table!r} for tenant {tenant!r}")
                if spec is None:
                    spec = SIGNAL_TABLES.get(table)
                if spec is None:
                    raise TableNotFoundError(
                        f"no table {table!r} for tenant {tenant!r}, and no spec to create it"
                    )
                if spec.name != table:
                    raise StorageError(f"spec is for table {spec.name!r}, not {table!r}")
                self._create(path, spec)
            delta = DeltaTable(str(path))
            stored, bucket_s = spec_mod.from_configuration(table, delta.metadata().configuration)
            opened = Table(
                tenant,
                path,
                stored,
                bucket_s=bucket_s,
                checkpoint_interval=self.checkpoint_interval,
                metrics=self._metrics,
            )
            if spec is not None:
                _check_same(opened, spec)
            self._tables[(tenant, table)] = opened
            return opened

    def _create(self, path: Path, spec: TableSpec) -> None:
        spec_mod.validate(spec)
        make_dirs_durable(path, self.data_dir)
        # delta-rs's create is check-then-commit: two processes racing through it both
        # commit a CREATE TABLE (versions 0 and 1, with different table ids). A lock
        # shared across processes makes the check and the commit one step.
        with _create_lock(path):
            if DeltaTable.is_deltatable(str(path)):
                logger.debug("table %s created concurrently", path)
                return
            try:
                DeltaTable.create(
                    str(path),
                    spec.schema,
                    mode="error",
                    name=spec.name,
                    configuration=spec_mod.to_configuration(spec, self.coverage_bucket_s),
                    raise_if_key_not_exists=False,
                )
            except Exception as exc:
                raise StorageError(f"cannot create table at {path}: {exc}") from exc
            log_dir = path / "_delta_log"
            fsync_file(log_dir / f"{0:020d}.json")
            fsync_dir(log_dir)
            fsync_dir(path)
        logger.info("created table %s", path)

    def tenants(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and _TENANT_RE.match(p.name)
        )

    def tables(self, tenant: str) -> list[str]:
        check_name("tenant", tenant)
        base = self.root / tenant
        if not base.is_dir():
            return []
        return sorted(
            p.name
            for p in base.iterdir()
            if (p / "_delta_log").is_dir() and _TABLE_RE.match(p.name)
        )


@contextmanager
def _create_lock(path: Path) -> Iterator[None]:
    """An exclusive lock, across processes, on creating the table at ``path``.

    The lock file sits beside the table (``.<table>.create-lock`` in the tenant's
    directory), outside the table's own directory, which vacuum owns.
    """
    lock_path = path.parent / f".{path.name}.create-lock"
    with open(lock_path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _check_same(table: Table, spec: TableSpec) -> None:
    diffs = spec_mod.schema_differences(spec.schema, table.spec.schema)
    if diffs:
        raise SchemaMismatchError(table.label, diffs)
    if spec.time_column != table.spec.time_column:
        raise SchemaMismatchError(
            table.label,
            [f"time column is {table.spec.time_column!r}, not {spec.time_column!r}"],
        )
