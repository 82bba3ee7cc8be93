"""A tenant's tables as one query sees them: committed Parquet files plus unflushed batches.

:func:`collect_view` implements the read protocol of :mod:`shoal.storage.snapshot`:
the snapshot's batch references are copied *first*, then each table's Delta
snapshot is read, and only batches above that snapshot's committed WAL LSN
are kept. The flusher drops batches from the snapshot only after their
commit, so every acknowledged row is in exactly one of the two sides, and no
lock is held while Delta is read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

import pyarrow as pa

from shoal.errors import QueryError, StorageError, TableNotFoundError
from shoal.schema import SIGNAL_TABLES, TableSpec
from shoal.storage.snapshot import LsnBatch, SnapshotSource
from shoal.storage.types import ScanFile, TableSnapshot

BUILTIN_TABLES: tuple[str, ...] = tuple(SIGNAL_TABLES)
"""Tables every tenant sees, even before its first write."""


class TableHandle(Protocol):
    """The part of a storage ``Table`` the query layer uses."""

    @property
    def spec(self) -> TableSpec: ...

    def snapshot(self) -> TableSnapshot: ...

    def snapshot_at(
        self, version: int | None = None, timestamp: dt.datetime | None = None
    ) -> TableSnapshot: ...

    def series(
        self,
        snapshot: TableSnapshot,
        batches: Sequence[LsnBatch] = (),
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> pa.Table: ...


class TableCatalog(Protocol):
    """The part of the storage ``TableStore`` the query layer uses."""

    def tables(self, tenant: str) -> list[str]: ...

    def open(
        self, tenant: str, table: str, spec: TableSpec | None = None, *, create: bool = True
    ) -> TableHandle: ...


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
    def snapshot_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)


@dataclasses.dataclass(frozen=True)
class TenantView:
    """Everything one query of one tenant may read."""

    tenant: str
    tables: dict[str, TableInput]
    as_of: AsOf | None = None

    def tables_named_in(self, sql: str) -> list[TableInput]:
        """The tables whose names occur as words in ``sql`` (a superset of those it reads).

        A query that lists tables (``information_schema``, ``SHOW``, ``DESCRIBE``) reads them all.
        """
        wanted = names_in(sql, self.tables)
        return [t for name, t in sorted(self.tables.items()) if name in wanted]

    def etag(self, sql: str, variant: str) -> str:
        """A strong ETag for ``sql`` over this view, answered in ``variant`` (format etc.).

        It changes when any table the query can read gets a new Delta version,
        a new committed LSN or new snapshot rows.
        """
        h = hashlib.sha256()
        h.update(self.tenant.encode())
        h.update(b"\0" + variant.encode() + b"\0" + sql.encode())
        if self.as_of is not None:
            h.update(b"\0as_of=" + self.as_of.tag().encode())
        for t in self.tables_named_in(sql):
            h.update(f"\0{t.name}:{t.version}:{t.committed_lsn}:{t.max_batch_lsn}".encode())
        return '"' + h.hexdigest()[:32] + '"'


_CATALOG_WORDS = frozenset({"information_schema", "show", "describe", "desc"})


def names_in(sql: str, names: Iterable[str]) -> set[str]:
    """Those of ``names`` that ``sql`` can read: the ones occurring in it as words, or all
    of them for a query that lists tables (``information_schema``, ``SHOW``, ``DESCRIBE``)."""
    words = {w.lower() for w in sql_words(sql)}
    if words & _CATALOG_WORDS:
        return set(names)
    return {name for name in names if name.lower() in words}


def sql_words(sql: str) -> Iterable[str]:
    """The identifier-like words of ``sql`` (letters, digits, underscores), quoted or not."""
    word: list[str] = []
    for ch in sql:
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word:
            yield "".join(word)
            word = []
    if word:
        yield "".join(word)


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


def _spec_for(name: str) -> TableSpec | None:
    return SIGNAL_TABLES.get(name)


def _snapshot_as_of(handle: TableHandle, as_of: AsOf, tenant: str, name: str) -> TableSnapshot:
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


def collect_view(
    catalog: TableCatalog,
    snapshot: SnapshotSource | None,
    tenant: str,
    as_of: AsOf | None = None,
    sql: str | None = None,
) -> TenantView:
    """The tenant's tables for one query (see the module docstring for the protocol).

    With ``sql``, only the tables it can read (:func:`names_in`) are collected. With
    ``as_of`` the Parquet side of each of those tables is read as of that version or time
    and the snapshot is left out; a table created after that time reads as empty, and a
    version the table has not reached yet is an error naming the table.
    """
    # 1. Batch references first, before any Delta snapshot is read.
    pending: dict[str, Sequence[LsnBatch]] = {}
    if snapshot is not None and as_of is None:
        pending = dict(snapshot.batches(tenant))
    stored = set(catalog.tables(tenant))
    names = set(BUILTIN_TABLES) | stored | set(pending)
    if sql is not None:
        names = names_in(sql, names)
    tables: dict[str, TableInput] = {}
    for name in sorted(names):
        handle: TableHandle | None = None
        if name in stored:
            try:
                handle = catalog.open(tenant, name, create=False)
            except TableNotFoundError:
                handle = None
        if handle is None:
            # Not created yet (no flush so far): only snapshot rows, if any.
            snap = _empty_snapshot(tenant, name)
            spec = _spec_for(name)
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
        kept = [b for b in pending.get(name, ()) if b.lsn > snap.committed_lsn and b.batch.num_rows]
        tables[name] = TableInput(
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
    return TenantView(tenant=tenant, tables=tables, as_of=as_of)
