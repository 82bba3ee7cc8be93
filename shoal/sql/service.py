"""The query service: tenant-scoped, read-only SQL under memory, time, size and row limits.

A query runs in three steps:

1. :meth:`QueryService.prepare` checks the text (size, operator count),
   collects the tenant's view (snapshot batches first, then Delta snapshots)
   and computes its ETag. Cheap; a GET with a matching ``If-None-Match``
   stops here.
2. :meth:`QueryService.execute` waits for one of ``query_max_concurrency``
   slots, then plans the query in a worker thread (a pooled session of the
   tenant with its own memory pool; a probe plan for the time range of each
   table, then one logical and physical plan over what that range reaches). Planning cannot be
   interrupted, so its cost is bounded up front by the size and operator
   caps; if it still overruns the time limit the caller gets the time-limit
   error at once and the slot is freed only when the thread is done.
3. :class:`QueryResult` streams record batches from DataFusion on the event
   loop, each wait bounded by what is left of the time limit. Dropping the
   stream cancels DataFusion's work, so a query past its limit stops using
   CPU. At most ``query_max_rows`` rows are returned; ``truncated`` says
   whether more existed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pyarrow as pa
from datafusion import RecordBatchStream

from shoal.config import Config
from shoal.errors import QueryError, QueryLimitError
from shoal.sql import admission, limits, series_plan, work
from shoal.sql.cost import sql_shape
from shoal.sql.limits import Limits
from shoal.sql.sessions import ParquetViewCache, SessionPool, TenantSession, sql_options
from shoal.sql.tables import etag, readable, tables_named_in
from shoal.storage.reader import TenantReader
from shoal.storage.view import AsOf, TenantView

logger = logging.getLogger(__name__)

_ROOT_ONLY_PLANS = frozenset({"Explain", "Analyze", "DescribeTable"})
"""Plans that must stay at the root: no LIMIT is wrapped around them (they return few rows)."""


def limits_from_config(config: Config) -> Limits:
    return Limits(
        memory_bytes=int(config.query_memory_bytes),
        timeout_s=float(config.query_timeout_s),
        max_sql_bytes=int(config.query_max_sql_bytes),
        max_concurrency=int(config.query_max_concurrency),
        max_rows=int(config.query_max_rows),
        max_join_pairs=int(config.query_max_join_pairs),
        max_tenant_share=int(config.query_max_tenant_share),
        memory_limit_bytes=int(config.memory_limit_bytes),
        max_samples=int(config.promql_max_samples),
    )


_MIN_PLANNING_S = 0.05
"""Time a query must have left when it gets its slot, or it fails with the time limit at once."""


@dataclasses.dataclass
class _Planned:
    """A planned query handed from the planning thread; ``stream`` is None when abandoned,
    and once a :class:`QueryResult` took it."""

    schema: pa.Schema
    stream: RecordBatchStream | None
    session: TenantSession
    per_series: bool = False


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A checked query and the view it will read."""

    tenant: str
    sql: str
    view: TenantView
    etag: str
    started: float

    @property
    def tables_read(self) -> list[str]:
        return [t.name for t in tables_named_in(self.view, self.sql)]

    def deadline(self, caps: Limits) -> float:
        """When the query's time limit runs out: it counts from ``started``."""
        return self.started + caps.timeout_s


class QueryResult:
    """The streaming result of one query. Iterate :meth:`batches` once, then read ``truncated``.

    ``close()`` (or exhausting :meth:`batches`) releases the concurrency slot
    and cancels whatever DataFusion still has running.
    """

    def __init__(self, prepared: Prepared, planned: _Planned, limits: Limits, release: Any) -> None:
        """Stream what ``planned`` started, under ``limits``; ``release`` frees the
        concurrency slot. The stream is taken from ``planned`` (which the planning thread's
        future keeps): the result alone holds it, so that dropping it cancels DataFusion's
        work."""
        self.prepared = prepared
        self.schema = planned.schema
        self.per_series = planned.per_series
        """Whether the query ran per series first (:mod:`shoal.sql.series_plan`)."""
        self.truncated = False
        self.rows = 0
        self._stream, planned.stream = planned.stream, None
        self._deadline = prepared.deadline(limits)
        self._limits = limits
        self._release = release
        self._buffer: list[pa.RecordBatch] = []
        self._done = False

    @property
    def truncation_message(self) -> str | None:
        return limits.row_cap_message(self._limits) if self.truncated else None

    async def _next(self) -> pa.RecordBatch | None:
        if self._done or self._stream is None:
            return None
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            self.close()
            raise limits.timeout_error(self._limits)
        failure: QueryError | None = None
        try:
            item = await asyncio.wait_for(self._stream.__anext__(), remaining)
        except StopAsyncIteration:
            self.close()
            return None
        except TimeoutError:
            failure = limits.timeout_error(self._limits)
        except Exception as exc:
            failure = limits.translate(exc, self._limits)
        if failure is not None:
            # Raised outside the except clause so that no traceback (whose frames hold the
            # DataFusion stream) outlives this call: dropping the stream cancels its work.
            self.close()
            raise failure
        batch = conform(item.to_pyarrow(), self.schema)
        room = self._limits.max_rows - self.rows
        if batch.num_rows > room:
            self.truncated = True
            batch = batch.slice(0, room)
            self.close()
        self.rows += batch.num_rows
        return batch

    async def prefetch(self, max_bytes: int) -> None:
        """Read ahead up to ``max_bytes`` so errors and truncation show before any byte is sent."""
        held = self.buffered_bytes
        while held < max_bytes and not self._done:
            batch = await self._next()
            if batch is None:
                break
            self._buffer.append(batch)
            held += batch.nbytes

    @property
    def complete(self) -> bool:
        """True once every row that will be returned has been read."""
        return self._done

    @property
    def buffered_bytes(self) -> int:
        """Arrow bytes read ahead and not yet handed out."""
        return sum(b.nbytes for b in self._buffer)

    async def batches(self) -> AsyncIterator[pa.RecordBatch]:
        try:
            while self._buffer:
                yield self._buffer.pop(0)
            while True:
                batch = await self._next()
                if batch is None:
                    return
                if batch.num_rows:
                    yield batch
        finally:
            self.close()

    async def to_table(self) -> pa.Table:
        return pa.Table.from_batches([b async for b in self.batches()], schema=self.schema)

    def close(self) -> None:
        self._done = True
        self._stream = None  # dropping the stream cancels DataFusion's tasks
        release, self._release = self._release, None
        if release is not None:
            release()


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly the result's declared ``schema``.

    DataFusion may hand back batches whose fields differ from the plan's schema in
    nullability alone (``min(ts)`` answered from Parquet statistics comes back
    non-null while the plan says nullable); an Arrow IPC stream or a table built
    from the declared schema refuses such batches.
    """
    if batch.schema.equals(schema):
        return batch
    if batch.schema.types == schema.types:
        return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
    return batch.cast(schema)


class QueryService:
    """What the SQL endpoint and ``shoal sql`` call. Safe to share across tasks and threads."""

    def __init__(
        self,
        reader: TenantReader,
        limits: Limits | Config | None = None,
        series_first: bool = True,
    ) -> None:
        self.reader = reader
        self.series_first = series_first
        """Whether aggregations by labels over many rows run per series first
        (:mod:`shoal.sql.series_plan`)."""
        if isinstance(limits, Config):
            limits = limits_from_config(limits)
        self.limits = limits or Limits()
        # link directories of an evicted view outlive every query that may still read them
        self.cache = ParquetViewCache(linger_s=2 * self.limits.timeout_s + 60)
        self.sessions = SessionPool(
            self.limits.memory_bytes, max_idle=4 * self.limits.max_concurrency
        )
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.limits.max_concurrency, thread_name_prefix="shoal-query"
        )
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        self._tenant_slots: dict[str, asyncio.Semaphore] = {}
        self.gate = admission.MemoryGate(
            admission.memory_budget(self.limits.memory_limit_bytes), self.limits.memory_bytes
        )

    # -- step 1 -----------------------------------------------------------------

    def prepare(
        self, tenant: str, sql: str, as_of: AsOf | None = None, variant: str = ""
    ) -> Prepared:
        """Check ``sql`` and collect the tenant's view. Blocking but cheap."""
        started = time.monotonic()
        text = limits.check_sql(sql, self.limits)
        # only the tables the text can name: no other table's files are listed or pinned
        view = self.reader.view(tenant, readable(text), as_of)
        return Prepared(tenant, text, view, etag(view, text, variant), started)

    async def aprepare(
        self, tenant: str, sql: str, as_of: AsOf | None = None, variant: str = ""
    ) -> Prepared:
        return await asyncio.get_running_loop().run_in_executor(
            None, self.prepare, tenant, sql, as_of, variant
        )

    # -- step 2 -----------------------------------------------------------------

    def _semaphores(self, tenant: str) -> tuple[asyncio.Semaphore, asyncio.Semaphore]:
        """The tenant's share of the slots, and the slots of all tenants."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots = asyncio.Semaphore(self.limits.max_concurrency)
            self._slots_loop = loop
            self._tenant_slots = {}
        share = self._tenant_slots.get(tenant)
        if share is None:
            share = self._tenant_slots[tenant] = asyncio.Semaphore(self.limits.tenant_slots)
        return share, self._slots

    async def _acquire_slots(self, tenant: str, deadline: float) -> tuple[asyncio.Semaphore, ...]:
        """A slot of the tenant's share, then one of all (so a tenant whose queries are stuck
        never holds every slot); the concurrency error when none frees before ``deadline``."""
        held: list[asyncio.Semaphore] = []
        try:
            for semaphore in self._semaphores(tenant):
                await asyncio.wait_for(semaphore.acquire(), max(deadline - time.monotonic(), 0.001))
                held.append(semaphore)
        except TimeoutError:
            for semaphore in held:
                semaphore.release()
            raise limits.concurrency_error(self.limits) from None
        except BaseException:
            for semaphore in held:
                semaphore.release()
            raise
        return tuple(held)

    def _plan(self, prepared: Prepared, caps: Limits, abandoned: threading.Event) -> _Planned:
        session = self.sessions.acquire(prepared.tenant)
        try:
            only = prepared.tables_read
            # how each table is read (time range, other filters), from a plan over stand-ins
            # (see probe), so that the one real plan covers only the files and unflushed
            # batches in that range and reads them the cheapest way
            reads = session.reads(prepared.view, prepared.sql, only)
            ctx = session.load(
                prepared.view, self.cache, self.reader.coalescer, only=only, reads=reads
            )
            rewritten = None
            if self.series_first:
                rewritten = series_plan.plan(
                    session, prepared.view, prepared.sql, reads, self.reader.view_series
                )
            if rewritten is None:
                frame = ctx.sql_with_options(prepared.sql, sql_options())
                declared = None
            else:
                frame, declared = rewritten
            if sql_shape(prepared.sql).relations > 1:
                limits.check_join_pairs(
                    work.nested_loop_pairs(frame.optimized_logical_plan(), session.rows),
                    self.limits,
                )
            if type(frame.logical_plan().to_variant()).__name__ not in _ROOT_ONLY_PLANS:
                # Let DataFusion stop (and sort with a top-k) once the row cap is exceeded.
                frame = frame.limit(caps.max_rows + 1)
            # a query run per series first answers with the columns it has as written
            schema = frame.schema() if declared is None else declared
            if abandoned.is_set():
                # past its time limit already: starting it would run work nobody reads
                return _Planned(schema, None, session)
            stream = frame.execute_stream()
        except Exception as exc:
            self.sessions.release(session)
            raise limits.translate(exc, self.limits) from exc
        return _Planned(schema, stream, session, per_series=declared is not None)

    async def execute(self, prepared: Prepared, max_rows: int | None = None) -> QueryResult:
        """Plan ``prepared`` and start it; errors here come before any response byte.

        ``max_rows`` replaces ``query_max_rows`` for this query (PromQL's sample reads).
        """
        caps = (
            self.limits if max_rows is None else dataclasses.replace(self.limits, max_rows=max_rows)
        )
        deadline = prepared.deadline(self.limits)
        slots = await self._acquire_slots(prepared.tenant, deadline)
        try:
            self.gate.check()
            if deadline - time.monotonic() < _MIN_PLANNING_S:
                # a slot freed just before the deadline: the query spent its time waiting
                raise limits.concurrency_error(self.limits)
        except QueryLimitError:
            for semaphore in slots:
                semaphore.release()
            raise
        loop = asyncio.get_running_loop()
        released = False

        session_box: list[TenantSession] = []

        def finish(sessions: list[TenantSession]) -> None:
            for session in sessions:
                self.sessions.release(session)
            for semaphore in slots:
                loop.call_soon_threadsafe(semaphore.release)

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            # Deregistering a session's tables drops the unflushed batches it imported
            # (about half a millisecond for a few dozen small batches): a worker thread
            # does it, so the response about to be sent does not wait for it. The
            # concurrency slot frees once it is done.
            try:
                self._executor.submit(finish, list(session_box))
            except RuntimeError:  # the service is shutting down
                finish(list(session_box))

        abandoned = threading.Event()
        future = loop.run_in_executor(self._executor, self._plan, prepared, caps, abandoned)
        try:
            planned = await asyncio.wait_for(
                asyncio.shield(future), max(deadline - time.monotonic(), 0.001)
            )
        except (TimeoutError, asyncio.CancelledError) as exc:
            # The planning thread cannot be interrupted (the complexity caps keep it short);
            # it starts nothing once abandoned, and its slot frees when it ends.
            abandoned.set()

            def finished(f: asyncio.Future[_Planned]) -> None:
                if not f.cancelled() and f.exception() is None:
                    late = f.result()
                    # A started stream runs its partitions until it is dropped, and the
                    # future keeps its result alive: drop the stream itself.
                    late.stream = None
                    session_box.append(late.session)
                release()

            future.add_done_callback(finished)
            if isinstance(exc, asyncio.CancelledError):
                raise
            logger.warning(
                "query of tenant %s overran its time limit while planning", prepared.tenant
            )
            raise limits.timeout_error(self.limits) from None
        except BaseException:
            release()
            raise
        session_box.append(planned.session)
        assert planned.stream is not None
        return QueryResult(prepared, planned, caps, release)

    async def run(
        self, tenant: str, sql: str, as_of: AsOf | None = None
    ) -> tuple[pa.Table, QueryResult]:
        """Prepare, execute and collect (for the CLI and tests)."""
        prepared = await self.aprepare(tenant, sql, as_of)
        result = await self.execute(prepared)
        return await result.to_table(), result

    def run_sync(self, tenant: str, sql: str, as_of: AsOf | None = None) -> pa.Table:
        """:meth:`run` from synchronous code (no running event loop)."""
        table, _ = asyncio.run(self.run(tenant, sql, as_of))
        return table

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.cache.close()


__all__ = ["AsOf", "Prepared", "QueryError", "QueryLimitError", "QueryResult", "QueryService"]
