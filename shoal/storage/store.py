"""The tables of every tenant: ``<root>/<tenant>/<table>/`` Delta tables.

The root is ``<data_dir>/tenants`` unless setting ``storage_url`` names another
directory or a bucket (:mod:`shoal.storage.location`).
"""

from __future__ import annotations

import fcntl
import logging
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from pyarrow import fs as pafs

from shoal.config import Config
from shoal.errors import SchemaMismatchError, StorageError, TableNotFoundError
from shoal.schema import SIGNAL_TABLES, TableSpec
from shoal.storage import spec as spec_mod
from shoal.storage.durable import fsync_dir, fsync_file, make_dirs_durable
from shoal.storage.freshness import Watch
from shoal.storage.location import StorageLocation
from shoal.storage.options import TableOptions
from shoal.storage.place import Place
from shoal.storage.reporting import NOOP, StorageMetrics
from shoal.storage.series_budget import SeriesBudget
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
        location: StorageLocation | None = None,
        poll_s: float = 0.0,
        background: bool = False,
        series_index_bytes: int = 0,
    ) -> None:
        if coverage_bucket_s <= 0 or checkpoint_interval <= 0:
            raise ValueError("coverage_bucket_s and checkpoint_interval must be positive")
        # absolute, so file paths handed to readers (ScanFile.path) stay valid whatever
        # the working directory of the code that reads them
        self.data_dir = Path(data_dir).absolute()
        self.location = location or StorageLocation.local(self.data_dir / "tenants")
        self.root = Path(self.location.root)
        """The directory of the tables (for a bucket, ``bucket/prefix``: use ``location``)."""
        self.coverage_bucket_s = coverage_bucket_s
        self.options = TableOptions(
            checkpoint_interval,
            metrics,
            poll_s=poll_s if not self.location.is_local else 0.0,
            background=background,
        )
        """What every table is opened with (on local disk a read always looks: no ``poll_s``)."""
        self.series_budget = SeriesBudget(series_index_bytes)
        """What the series indexes of every table may hold together (0: no bound)."""
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, str], Table] = {}
        self._listed: dict[str, list[str]] = {}
        self._list_watches: dict[str, Watch] = {}
        self._written: Callable[[str, pa.Buffer], None] | None = None

    def keep_written(self, written: Callable[[str, pa.Buffer], None]) -> None:
        """Hand every data file this process uploads to ``written`` (the read cache's
        ``put``), for the tables open now and those opened later."""
        with self._lock:
            self._written = written
            for table in self._tables.values():
                table.place.written = written

    @classmethod
    def for_config(
        cls, cfg: Config, metrics: StorageMetrics = NOOP, *, background: bool = False
    ) -> TableStore:
        """The tables where the settings say (``storage_url`` and its neighbours);
        ``background`` as the attribute."""
        location = StorageLocation.parse(
            cfg.storage_url, cfg.data_path, cfg.storage_endpoint, float(cfg.storage_timeout_s)
        )
        return cls(
            cfg.data_path,
            coverage_bucket_s=int(cfg.coverage_bucket_s),
            checkpoint_interval=int(cfg.checkpoint_interval),
            metrics=metrics,
            location=location,
            poll_s=float(cfg.storage_poll_s),
            background=background,
            series_index_bytes=int(cfg.series_index_bytes),
        )

    def place(self, tenant: str, table: str) -> Place:
        """The directory (or bucket prefix) of ``tenant/table``."""
        check_name("tenant", tenant)
        check_name("table", table)
        place = Place(self.location, tenant, table)
        place.written = self._written
        return place

    def table_path(self, tenant: str, table: str) -> Path:
        """The directory of ``tenant/table`` on local disk."""
        return self.place(tenant, table).root

    def exists(self, tenant: str, table: str) -> bool:
        return self.place(tenant, table).is_dir("_delta_log")

    def committed_lsn(self, tenant: str, table: str) -> int:
        """The WAL LSN the table's flushes have committed (0 before the first)."""
        return self.open(tenant, table).committed_lsn()

    def open(
        self, tenant: str, table: str, spec: TableSpec | None = None, *, create: bool = True
    ) -> Table:
        """The table ``tenant/table``, created from ``spec`` (or the signal's spec) if absent."""
        place = self.place(tenant, table)
        with self._lock:
            cached = self._tables.get((tenant, table))
            if cached is not None:
                if spec is not None:
                    _check_same(cached, spec)
                return cached
            if not _is_table(place):
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
                self._create(place, spec)
            try:
                delta = DeltaTable(place.uri, storage_options=place.storage_options)
            except Exception as exc:
                raise StorageError(f"cannot open table {tenant}/{table}: {exc}") from None
            stored, bucket_s = spec_mod.from_configuration(table, delta.metadata().configuration)
            opened = Table(
                tenant,
                place,
                stored,
                bucket_s=bucket_s,
                options=self.options,
                series_budget=self.series_budget,
            )
            if spec is not None:
                _check_same(opened, spec)
            self._tables[(tenant, table)] = opened
            return opened

    def _create(self, place: Place, spec: TableSpec) -> None:
        spec_mod.validate(spec)
        if place.local:
            self._create_local(place.root, spec)
            return
        # In a bucket the create is a conditional put of version 0: of two processes
        # racing through it, one fails, and then finds the other's table.
        try:
            self._create_table(place.uri, place.storage_options, spec)
        except StorageError:
            if not _is_table(place):
                raise
            logger.debug("table %s created concurrently", place.uri)
            return
        logger.info("created table %s", place.uri)

    def _create_table(self, uri: str, options: dict[str, str], spec: TableSpec) -> None:
        try:
            DeltaTable.create(
                uri,
                spec.schema,
                mode="error",
                name=spec.name,
                configuration=spec_mod.to_configuration(spec, self.coverage_bucket_s),
                raise_if_key_not_exists=False,
                storage_options=options or None,
            )
        except Exception as exc:
            raise StorageError(f"cannot create table at {uri}: {exc}") from exc

    def _create_local(self, path: Path, spec: TableSpec) -> None:
        make_dirs_durable(path, self.root.parent)
        # delta-rs's create is check-then-commit: two processes racing through it both
        # commit a CREATE TABLE (versions 0 and 1, with different table ids). A lock
        # shared across processes makes the check and the commit one step.
        with _create_lock(path):
            if DeltaTable.is_deltatable(str(path)):
                logger.debug("table %s created concurrently", path)
                return
            self._create_table(str(path), {}, spec)
            log_dir = path / "_delta_log"
            fsync_file(log_dir / f"{0:020d}.json")
            fsync_dir(log_dir)
            fsync_dir(path)
        logger.info("created table %s", path)

    def tenants(self) -> list[str]:
        return sorted(name for name in self._subdirs("") if _TENANT_RE.match(name))

    def tables(self, tenant: str) -> list[str]:
        """The tenant's tables. In a bucket the listing is kept for ``poll_s`` (every
        query asks), then listed again in the background or at once (see
        :mod:`shoal.storage.freshness`); while the store does not answer the last one
        stands, with the tables this process opened."""
        check_name("tenant", tenant)
        if self.location.is_local:
            return self._list_tables(tenant)

        def relist() -> bool:
            names = self._list_tables(tenant)
            with self._lock:
                self._listed[tenant] = names
            return False  # kept already: nothing more to load

        with self._lock:
            watch = self._list_watches.get(tenant)
            if watch is None:
                poll_s = max(self.options.poll_s, 0.001)
                watch = Watch(f"{tenant}'s tables", poll_s, background=self.options.background)
                self._list_watches[tenant] = watch
            known = tenant in self._listed
        if known:
            watch.fresh(relist, lambda: None)
        else:
            watch.ask(relist)
        with self._lock:
            names = self._listed.get(tenant, [])
            opened = {t for (owner, t) in self._tables if owner == tenant}
        return sorted(set(names) | opened)

    def _list_tables(self, tenant: str) -> list[str]:
        return sorted(
            name
            for name in self._subdirs(tenant)
            if _TABLE_RE.match(name) and self.place(tenant, name).is_dir("_delta_log")
        )

    def _subdirs(self, rel: str) -> list[str]:
        """The names of the directories (prefixes) directly under ``<root>/<rel>``."""
        base = self.location.join(rel) if rel else self.location.root
        fs = self.location.filesystem
        try:
            infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        except OSError as exc:
            raise StorageError(f"cannot list {self.location}: {exc}") from None
        return [i.base_name for i in infos if i.type == pafs.FileType.Directory]


def _is_table(place: Place) -> bool:
    if place.local:
        return bool(DeltaTable.is_deltatable(place.uri))
    try:
        return bool(DeltaTable.is_deltatable(place.uri, storage_options=place.storage_options))
    except Exception as exc:
        raise StorageError(f"cannot reach {place.uri}: {exc}") from None


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
