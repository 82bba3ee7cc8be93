"""DataFusion sessions holding exactly one tenant's tables.

Each query gets its own :class:`datafusion.SessionContext` with its own
memory pool (a fair spill pool of ``query_memory_bytes``). In it, each table
of the tenant is a view: the UNION ALL of its committed Parquet files, read
natively (so DataFusion prunes files and row groups with Parquet statistics
and pushes projections and filters into the scan), and the unflushed rows' record
batches. Both sides have exactly the frozen schema, so no cast sits between a
filter and the scan.

The committed files are read by one listing scan per chunk of files (a day,
the newest hour apart; :mod:`shoal.sql.links`), not one scan per file: the
files are spread over the session's partitions instead of each file becoming
partitions of its own under a sort-preserving merge. The Parquet side is
built once per (tenant, table, Delta version, file set) and cached: a later
query of the same version only wraps the cached view and its fresh batches.

Each chunk's scan carries a name of its own (``shoal_files_<key>``, never
registered in a tenant's session), so a scan in a plan maps back to its table.
Before a query's tables are loaded, :mod:`shoal.sql.probe` plans it over
stand-ins to learn the time range it reads each table in; the session then
loads only the files and unflushed batches in that range, and chooses whether
the Parquet scans filter with pushdown (:func:`wants_pushdown`).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import pyarrow as pa
from datafusion import DataFrame, RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions
from datafusion.catalog import Table

from shoal.errors import QueryError
from shoal.sql.links import LinkDirs, chunks
from shoal.sql.probe import TimeProbe
from shoal.sql.prune import Bounds, TableRead, meets, within
from shoal.storage.lru import Lru
from shoal.storage.runs import BatchCoalescer, Level, Loose, TimeRange
from shoal.storage.types import ScanFile
from shoal.storage.view import TableInput, TenantView

logger = logging.getLogger(__name__)

SESSION_OPTIONS: dict[str, str] = {
    # Parquet strings come back as `string`, exactly the frozen schema: a union whose
    # inputs differ in type gets a cast above the scan, and filters no longer reach it.
    "datafusion.execution.parquet.schema_force_view_types": "false",
    # Row-group pruning with statistics and the page index (both default on; pinned here).
    "datafusion.execution.parquet.pruning": "true",
    "datafusion.execution.parquet.enable_page_index": "true",
    # Late materialisation: filter columns are decoded first and the rest only for the
    # matching rows (docs/benchmarks.md, Query, has the figures).
    "datafusion.execution.parquet.pushdown_filters": "true",
}


def sql_options() -> SQLOptions:
    """Read-only: no DDL (CREATE/DROP), no DML (INSERT/COPY), no statements (SET, BEGIN)."""
    return SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)


def session_config(pushdown: bool = True) -> SessionConfig:
    """The settings of every session; ``pushdown`` False turns Parquet filter pushdown off
    (it is fixed into a Parquet scan when the scan is made, see :func:`wants_pushdown`)."""
    options = dict(SESSION_OPTIONS)
    if not pushdown:
        options["datafusion.execution.parquet.pushdown_filters"] = "false"
    return SessionConfig(options).with_information_schema(True)


class ParquetViewCache:
    """Cached views of a table version's committed files, shared by every query.

    A view is built in a private context and only ever registered, read-only,
    into sessions of the same tenant. ``linger_s`` is how long the link
    directories of an evicted view stay readable (longer than a query may run).
    A file set has a view with Parquet filter pushdown and, when a query asks for
    it, one without (the two share their link directories).
    """

    def __init__(self, max_entries: int = 128, linger_s: float = 600.0) -> None:
        self._builders = {flag: SessionContext(session_config(flag)) for flag in (True, False)}
        self._builder_lock = threading.Lock()
        self._lock = threading.Lock()
        self.links = LinkDirs(linger_s)
        self._views: Lru[
            tuple[str, str, int, tuple[ScanFile, ...], bool], tuple[Table, list[str]]
        ] = Lru(max_entries)
        self.hits = 0
        self.misses = 0

    def get(
        self,
        tenant: str,
        table: TableInput,
        verify: bool = False,
        files: Sequence[ScanFile] | None = None,
        pushdown: bool = True,
    ) -> tuple[Table, tuple[str, ...]] | None:
        """The view of ``table``'s files (or of ``files``, a subset of them) and the
        names of its scans; None when there are no files.

        ``verify`` checks that every file still exists even when the view is cached
        (time travel to a version whose files vacuum may have deleted). ``pushdown``
        chooses the view that evaluates filters inside the Parquet scan.
        """
        chosen = table.files if files is None else tuple(files)
        if not chosen:
            return None
        key = (tenant, table.name, table.version, chosen, pushdown)
        with self._lock:
            entry = self._views.get(key)
            if entry is not None:
                self.hits += 1
        if entry is not None:
            if verify:
                _check_files(table, chosen)
            return entry[0], tuple(scan_name(d) for d in entry[1])
        try:
            view, dirs = self._build(chosen, table.schema, pushdown)
        except FileNotFoundError as exc:
            raise QueryError(f"{table.name} (version {table.version}): {exc}") from None
        with self._lock:
            self.misses += 1
            evicted = self._views.put(key, (view, dirs))  # with one built concurrently
        for _, old_dirs in evicted:
            for directory in old_dirs:
                self.links.release(directory)
        return view, tuple(scan_name(d) for d in dirs)

    def _build(
        self, files: Sequence[ScanFile], schema: pa.Schema, pushdown: bool
    ) -> tuple[Table, list[str]]:
        dirs = [self.links.acquire(chunk) for chunk in chunks(files)]
        builder = self._builders[pushdown]
        frames: list[DataFrame] = []
        with self._builder_lock:  # the name is registered just long enough to scan it
            for d in dirs:
                name = scan_name(d)
                builder.register_parquet(name, d, schema=schema)
                try:
                    frames.append(builder.table(name))
                finally:
                    builder.deregister_table(name)
        union: DataFrame = frames[0]
        for frame in frames[1:]:
            union = union.union(frame)
        return union.into_view(), dirs

    def clear(self) -> None:
        with self._lock:
            entries = self._views.pop_all()
        for _, dirs in entries:
            for directory in dirs:
                self.links.release(directory)

    def close(self) -> None:
        """Forget every view and delete the link directories (no query may still run)."""
        self.clear()
        self.links.close()


def scan_name(directory: str) -> str:
    """The table name a link directory's scan carries in query plans."""
    return "shoal_files_" + os.path.basename(directory.rstrip("/"))


def _check_files(table: TableInput, files: Sequence[ScanFile]) -> None:
    for f in files:
        if not os.path.isfile(f.path):
            raise QueryError(
                f"{table.name} (version {table.version}): committed file missing: {f.path}"
            )


def new_session(memory_bytes: int) -> SessionContext:
    """A session with its own memory pool and no spill files (over the pool, a query fails)."""
    runtime = RuntimeEnvBuilder().with_fair_spill_pool(memory_bytes).with_disk_manager_disabled()
    return SessionContext(session_config(), runtime)


def register_tables(
    ctx: SessionContext,
    view: TenantView,
    cache: ParquetViewCache,
    coalescer: BatchCoalescer | None = None,
    only: Iterable[str] | None = None,
    reads: Mapping[str, TableRead] | None = None,
) -> Loaded:
    """Register the tenant's tables in ``ctx``, each Parquet UNION ALL the unflushed rows.

    ``only`` limits registration to the tables a query names (it can read no others);
    by default every table of the tenant is registered. ``reads`` says how the query
    reads each table (see :mod:`shoal.sql.probe`): a table read within time bounds
    gets only the committed files and unflushed batches whose time range meets them, and
    when nothing but those bounds filters it and every file lies inside them, its files
    are read without Parquet filter pushdown (see :func:`wants_pushdown`). Returns the
    names registered, per scan of committed files its table and time column, and per
    table the rows loaded (files and unflushed batches, an upper bound of what it reads)
    and the span of time of what it loaded (None when a batch's span is unknown).
    """
    wanted = None if only is None else set(only)
    names: list[str] = []
    owners: dict[str, tuple[str, str]] = {}
    rows: dict[str, int] = {}
    spans: dict[str, TimeRange | None] = {}
    for name, table in view.tables.items():
        if wanted is not None and name not in wanted:
            continue
        read = None if reads is None else reads.get(name)
        limit = None if read is None else read.bounds
        files = None if limit is None else files_within(table.files, limit)
        frames: list[DataFrame] = []
        parquet = None
        if files is None or files:
            chosen = table.files if files is None else files
            parquet = cache.get(
                view.tenant,
                table,
                verify=view.as_of is not None,
                files=_local(view, table, chosen),
                pushdown=wants_pushdown(read, chosen),
            )
        loaded = table.files if files is None else files
        rows[name] = table.unflushed_rows + sum(f.rows for f in loaded)
        if parquet is not None:
            frames.append(ctx.read_table(parquet[0]))
            owners.update((scan, (name, table.time_column)) for scan in parquet[1])
        if coalescer is not None and not table.batches and view.as_of is None:
            coalescer.forget(view.tenant, name)  # all flushed: keep no copies of its rows
        fresh, fresh_spans = _unflushed_frames(ctx, view.tenant, table, coalescer, limit)
        frames.extend(fresh)
        spans[name] = _span([(f.min_time_us, f.max_time_us) for f in loaded] + fresh_spans)
        if not frames:
            frames.append(ctx.read_batches([pa.RecordBatch.from_pylist([], schema=table.schema)]))
        frame = frames[0]
        for recent in frames[1:]:
            frame = frame.union(recent)
        ctx.register_view(name, frame)
        names.append(name)
    return Loaded(names, owners, rows, spans)


class Loaded(NamedTuple):
    """What :func:`register_tables` registered."""

    names: list[str]
    owners: dict[str, tuple[str, str]]
    """Per scan of committed files: its table and time column."""
    rows: dict[str, int]
    """Per table, the rows loaded (files and unflushed batches)."""
    spans: dict[str, TimeRange | None]
    """Per table, the span of time of what was loaded (None: a batch's span unknown)."""


def _span(spans: Sequence[TimeRange | None]) -> TimeRange | None:
    """The span of all of ``spans`` (empty ones, ``(1, 0)``, left out); None when one is
    unknown."""
    if any(s is None for s in spans):
        return None
    known = [s for s in spans if s is not None and s[0] <= s[1]]
    if not known:
        return (1, 0)
    return min(s[0] for s in known), max(s[1] for s in known)


def _local(view: TenantView, table: TableInput, files: Sequence[ScanFile]) -> list[ScanFile]:
    """The files a query reads, on local disk (from the read cache for a bucket's tables)."""
    try:
        return view.local(files)
    except FileNotFoundError as exc:
        raise QueryError(f"{table.name} (version {table.version}): {exc}") from None


def _unflushed_frames(
    ctx: SessionContext,
    tenant: str,
    table: TableInput,
    coalescer: BatchCoalescer | None,
    bounds: Bounds | None = None,
) -> tuple[list[DataFrame], list[TimeRange | None]]:
    """The unflushed batches of ``table`` as frames of ``ctx``: one per run length of
    complete LSN runs (its DataFusion table made once per change, kept with the level)
    and one for the rest, with the time span of each. Levels and batches whose time
    range misses ``bounds`` are left out."""
    if not table.batches:
        return [], []
    column = table.time_column
    if coalescer is None or not table.lsns:
        loose = Loose(list(table.batches))
        levels: list[Level] = []
    else:
        levels, loose = coalescer.levels(tenant, table.name, table.lsns, table.batches)
    frames: list[DataFrame] = []
    spans: list[TimeRange | None] = []
    for level in levels:
        if bounds is not None and not meets(level.time_range(column), bounds):
            continue
        spans.append(level.time_range(column))
        derived = level.derived
        if not isinstance(derived, Table):
            derived = _RUN_BUILDER.read_batches(level.batches).into_view()
            level.derived = derived
        frames.append(ctx.read_table(derived))
    kept = list(zip(loose.batches, loose.ranges(column), strict=True))
    if bounds is not None:
        kept = [(b, r) for b, r in kept if meets(r, bounds)]
    if kept:
        frames.append(ctx.read_batches(few_batches([b for b, _ in kept])))
        spans.extend(r for _, r in kept)
    return frames, spans


SMALL_LOOSE_ROWS = 65_536
"""Up to this many rows, the loose unflushed batches a query reads are joined into one."""


def few_batches(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """Small batches joined into one before DataFusion imports them.

    DataFusion imports a batch column by column, so each batch costs the same
    however few its rows, and joining many small ones first is cheaper than
    importing them one by one. The newest batches of a table
    that receives one small export at a time are exactly that, and the
    freshness of such a table is what they decide. Larger batches are left as
    they are (copying them would cost more than it saves).
    """
    if len(batches) < 2 or sum(b.num_rows for b in batches) > SMALL_LOOSE_ROWS:
        return batches
    try:
        return [pa.concat_batches(batches)]
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # schemas differ in metadata: import as is
        return batches


_RUN_BUILDER = SessionContext(session_config())
"""Builds the cached DataFusion tables of the unflushed rows' levels (never runs a query)."""


def wants_pushdown(read: TableRead | None, files: Sequence[ScanFile]) -> bool:
    """Whether to read ``files`` with Parquet filter pushdown.

    Pushdown decodes the filter columns first and the others only for matching rows:
    a large gain for a selective filter, pure overhead for one that keeps every row.
    When the only filters are time bounds and every file lies inside them, no row
    is dropped (the filter still runs, above the scan), and pushdown is turned off
    (docs/benchmarks.md, Query, has the figures).
    """
    if read is None or not read.time_only:
        return True
    return not all(within((f.min_time_us, f.max_time_us), read.bounds) for f in files)


def files_within(files: Sequence[ScanFile], bounds: Bounds) -> list[ScanFile]:
    """The files whose time range meets ``bounds`` (inclusive; None is open)."""
    lo, hi = bounds
    return [
        f
        for f in files
        if (lo is None or f.max_time_us >= lo) and (hi is None or f.min_time_us <= hi)
    ]


class TenantSession:
    """A session lent to one query at a time; its tables are replaced for each query.

    Reusing a session keeps its runtime's Parquet metadata cache warm (a fresh
    runtime re-reads every file footer), while the memory pool stays per query, because a
    session runs one query at a time.
    """

    def __init__(self, tenant: str, memory_bytes: int) -> None:
        self.tenant = tenant
        self.ctx = new_session(memory_bytes)
        self.probe = TimeProbe(SessionContext(session_config()))
        self._names: list[str] = []
        self.owners: dict[str, tuple[str, str]] = {}
        """Per scan of committed files in the loaded tables: its table and time column."""
        self.rows: dict[str, int] = {}
        """Per loaded table, the rows loaded for the query."""
        self.spans: dict[str, TimeRange | None] = {}
        """Per loaded table, the span of time of what was loaded (see register_tables)."""

    def reads(self, view: TenantView, sql: str, only: Iterable[str]) -> dict[str, TableRead]:
        """How ``sql`` reads the tables of ``view`` named in ``only`` (see the probe)."""
        wanted = set(only)
        tables = {
            name: (t.schema, t.time_column) for name, t in view.tables.items() if name in wanted
        }
        return self.probe.reads(sql, tables, sql_options())

    def load(
        self,
        view: TenantView,
        cache: ParquetViewCache,
        coalescer: BatchCoalescer | None = None,
        only: Iterable[str] | None = None,
        reads: Mapping[str, TableRead] | None = None,
    ) -> SessionContext:
        if view.tenant != self.tenant:
            raise ValueError("a session serves one tenant only")
        self.clear()
        self._names, self.owners, self.rows, self.spans = register_tables(
            self.ctx, view, cache, coalescer, only, reads
        )
        return self.ctx

    def register(self, name: str, table: pa.Table) -> None:
        """``table`` under ``name`` for the query at hand (dropped by :meth:`clear`)."""
        self.ctx.register_record_batches(name, [table.to_batches()])
        self._names.append(name)

    def clear(self) -> None:
        for name in self._names:
            self.ctx.deregister_table(name)
        self._names = []
        self.owners = {}
        self.rows = {}
        self.spans = {}


class SessionPool:
    """Idle :class:`TenantSession` objects per tenant, at most ``max_idle`` in all (LRU)."""

    def __init__(self, memory_bytes: int, max_idle: int = 16) -> None:
        self._memory = memory_bytes
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: collections.OrderedDict[int, TenantSession] = collections.OrderedDict()

    def acquire(self, tenant: str) -> TenantSession:
        with self._lock:
            for key, session in reversed(self._idle.items()):
                if session.tenant == tenant:
                    del self._idle[key]
                    return session
        return TenantSession(tenant, self._memory)

    def release(self, session: TenantSession) -> None:
        """Return a session whose query has finished (its stream dropped)."""
        session.clear()
        with self._lock:
            self._idle[id(session)] = session
            while len(self._idle) > self._max_idle:
                self._idle.popitem(last=False)
