"""The one read view: a tenant's tables at a Delta version plus the rows not yet flushed.

Every reader (SQL, PromQL, the PostgreSQL listener, the trace and log APIs) sees a
tenant's data through :func:`collect_view` (or, for a table's series, through
:func:`series_in_range`), which follow one read protocol:

1. the unflushed rows' batch references are copied *first*
   (:meth:`~shoal.storage.unflushed.UnflushedSource.batches`);
2. then each table's Delta snapshot is read (its files, and the WAL LSN its last
   flush covered);
3. of the unflushed batches only those above that LSN are kept
   (:func:`unflushed_above`: the LSN rule, in this one place).

The flusher drops batches from the unflushed rows only after their commit, so every
acknowledged row is in exactly one of the two sides, and no lock is held while Delta
is read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from shoal.errors import QueryError, StorageError, TableNotFoundError
from shoal.schema import SIGNAL_TABLES, TableSpec
from shoal.storage import series_rows as index
from shoal.storage.types import ScanFile, TableSnapshot
from shoal.storage.unflushed import LsnBatch, UnflushedSource

if TYPE_CHECKING:  # opening a table needs delta-rs; reading a view of one does not
    from shoal.storage.store import TableStore
    from shoal.storage.table import Table

BUILTIN_TABLES: tuple[str, ...] = tuple(SIGNAL_TABLES)
"""Tables every tenant sees, even before its first write."""


@dataclasses.dataclass(frozen=True)
class AsOf:
    """Time travel: read the Parquet side as of a Delta version or a point in time."""

    version: int | None = None
    timestamp: dt.datetime | None = None

    def __post_init__(self) -> None:
        if (self.version is None) == (self.timestamp is None):
            raise ValueError("AsOf needs exactly one of version and timestamp")

    def tag(self) -> str:
        if self.version is not None:
            return f"v{self.version}"
        assert self.timestamp is not None
        return "t" + self.timestamp.isoformat()


@dataclasses.dataclass(frozen=True)
class TableInput:
    """One table of a query: its schema, committed files and the batches not yet in them."""

    name: str
    schema: pa.Schema
    version: int
    committed_lsn: int
    files: tuple[ScanFile, ...]
    batches: tuple[pa.RecordBatch, ...]
    max_batch_lsn: int
    lsns: tuple[int, ...] = ()
    """The WAL LSN of each of ``batches``."""
    time_column: str = "timestamp"
    """The column the files' time statistics (``ScanFile.min_time_us``...) are about."""

    @property
    def unflushed_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)


Fetch = Callable[[Sequence[ScanFile]], list[ScanFile]]
"""Committed files made readable on local disk (:meth:`shoal.storage.cache.FileCache.local`):
the same files, each ``path`` a local file."""


@dataclasses.dataclass(frozen=True)
class TenantView:
    """Everything one query of one tenant may read."""

    tenant: str
    tables: dict[str, TableInput]
    as_of: AsOf | None = None
    fetch: Fetch | None = None
    """How a reader gets the files it chose as local files (None: they already are)."""

    def local(self, files: Sequence[ScanFile]) -> list[ScanFile]:
        """``files`` as local files (from the read cache when the tables are in a bucket)."""
        return list(files) if self.fetch is None else self.fetch(files)


def _conform(batch: pa.RecordBatch, schema: pa.Schema, table: str) -> pa.RecordBatch:
    """``batch`` with exactly ``schema`` (zero-copy), or a clear error."""
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    if batch.schema.equals(schema, check_metadata=False):
        if batch.schema.metadata == schema.metadata:
            return batch
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    try:
        return batch.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError, ValueError) as exc:
        raise QueryError(f"{table}: snapshot batch does not match the table schema: {exc}") from exc


def _empty_snapshot(tenant: str, table: str) -> TableSnapshot:
    return TableSnapshot(tenant=tenant, table=table, version=-1, committed_lsn=0, files=())


def _snapshot_as_of(handle: Table, as_of: AsOf, tenant: str, name: str) -> TableSnapshot:
    """``handle``'s table as of ``as_of`` (delta-rs reads a time before the table's first
    commit as its empty version 0), or an error naming the table."""
    try:
        return handle.snapshot_at(version=as_of.version, timestamp=as_of.timestamp)
    except StorageError as exc:
        failure = exc
    latest = handle.snapshot()
    if as_of.version is not None and as_of.version > latest.version:
        raise QueryError(
            f"time travel: table {name} has versions 0 to {latest.version}; "
            f"as_of_version={as_of.version} does not exist yet"
        ) from None
    raise QueryError(f"time travel: {failure}") from None


def unflushed_above(batches: Iterable[LsnBatch], committed_lsn: int) -> list[LsnBatch]:
    """The LSN rule: of a table's unflushed batches (copied before its Delta snapshot was
    read), those its snapshot does not cover, the batches above ``committed_lsn``."""
    return [b for b in batches if b.lsn > committed_lsn and b.batch.num_rows]


def collect_view(
    catalog: TableStore,
    unflushed: UnflushedSource | None,
    tenant: str,
    as_of: AsOf | None = None,
    tables: Iterable[str] | None = None,
) -> TenantView:
    """The tenant's tables for one read (the protocol of the module docstring).

    With ``tables``, only those of them that exist are collected (a query's reader
    passes the names its text can refer to). With ``as_of`` the Parquet side of each
    table is read as of that version or time and the unflushed rows are left out; a
    table created after that time reads as empty, and a version the table has not
    reached yet is an error naming the table.
    """
    # 1. Batch references first, before any Delta snapshot is read.
    pending: dict[str, Sequence[LsnBatch]] = {}
    if unflushed is not None and as_of is None:
        pending = dict(unflushed.batches(tenant))
    stored = set(catalog.tables(tenant))
    names = set(BUILTIN_TABLES) | stored | set(pending)
    if tables is not None:
        wanted = {name.lower() for name in tables}
        names = {name for name in names if name.lower() in wanted}
    collected: dict[str, TableInput] = {}
    for name in sorted(names):
        handle = _handle(catalog, tenant, name, stored)
        if handle is None:
            # Not created yet (no flush so far): only unflushed rows, if any.
            snap = _empty_snapshot(tenant, name)
            spec = SIGNAL_TABLES.get(name)
            if spec is not None:
                schema = spec.schema
            elif pending.get(name):
                schema = pending[name][0].batch.schema
            else:
                continue
        else:
            schema = handle.spec.schema
            if as_of is None:
                snap = handle.snapshot()
            else:
                snap = _snapshot_as_of(handle, as_of, tenant, name)
        # 2. Keep only the batches the table's committed LSN does not cover.
        kept = unflushed_above(pending.get(name, ()), snap.committed_lsn)
        collected[name] = TableInput(
            name=name,
            schema=schema,
            version=snap.version,
            committed_lsn=snap.committed_lsn,
            files=snap.files,
            batches=tuple(_conform(b.batch, schema, name) for b in kept),
            max_batch_lsn=max((b.lsn for b in kept), default=0),
            lsns=tuple(b.lsn for b in kept),
            time_column=snap.time_column,
        )
    return TenantView(tenant=tenant, tables=collected, as_of=as_of)


def _handle(catalog: TableStore, tenant: str, name: str, stored: set[str]) -> Table | None:
    """The table's handle, or None when it has no Delta table (yet)."""
    if name not in stored:
        return None
    try:
        return catalog.open(tenant, name, create=False)
    except TableNotFoundError:
        return None


def series_in_range(
    catalog: TableStore,
    unflushed: UnflushedSource | None,
    tenant: str,
    table: str,
    start_ns: int,
    end_ns: int,
) -> pa.Table:
    """One row per series of ``table`` seen in ``[start_ns, end_ns]``: the table's
    index columns, ``first_ns`` and ``last_ns``, from the series index of its files and
    its unflushed batches (the same protocol as :func:`collect_view`; a table not created
    yet is summarised from its batches alone)."""
    spec = _indexed(table)
    pending = list(unflushed.batches(tenant).get(table, ())) if unflushed is not None else []
    handle = _handle(catalog, tenant, table, set(catalog.tables(tenant)))
    if handle is None:
        return _summarized(spec, pending, start_ns, end_ns)
    snap = handle.snapshot()
    return handle.series(snap, unflushed_above(pending, snap.committed_lsn), start_ns, end_ns)


def view_series(
    catalog: TableStore, view: TenantView, table: str, start_ns: int | None, end_ns: int | None
) -> pa.Table:
    """As :func:`series_in_range`, for exactly the files and unflushed batches of
    ``view``'s ``table`` (its strings dictionary-encoded, as the index holds them)."""
    spec = _indexed(table)
    read = view.tables[table]
    batches = [LsnBatch(lsn, b) for lsn, b in zip(read.lsns, read.batches, strict=True)]
    handle = _handle(catalog, view.tenant, table, set(catalog.tables(view.tenant)))
    if handle is None or read.version < 0:
        return index.hold(_summarized(spec, batches, start_ns, end_ns))
    snap = TableSnapshot(
        view.tenant, table, read.version, read.committed_lsn, read.files, read.schema,
        read.time_column,
    )  # fmt: skip
    return handle.series(snap, batches, start_ns, end_ns)


def _indexed(table: str) -> TableSpec:
    spec = SIGNAL_TABLES.get(table)
    if spec is None or not spec.index_columns:
        raise QueryError(f"table {table!r} keeps no series index")
    return spec


def _summarized(
    spec: TableSpec, batches: Sequence[LsnBatch], start_ns: int | None, end_ns: int | None
) -> pa.Table:
    schema = index.index_schema(spec)
    rows = [b.batch for b in batches if b.batch.num_rows]
    if not rows:
        return schema.empty_table()
    found = index.summarize(pa.Table.from_batches(rows), spec, schema)
    return index.within(found, start_ns, end_ns)
