"""One authenticated PostgreSQL session: its state, and running and streaming one statement.

The two query protocols that drive it are :mod:`shoal.pgwire.simple` and
:mod:`shoal.pgwire.extended`.

The session translates messages into calls of
:class:`shoal.sql.service.QueryService` (prepare, execute, stream batches)
and the answers into backend messages. Session statements (``SET``,
``SHOW``, ``BEGIN``, ...) are answered by :mod:`shoal.pgwire.statements`.
Tenancy, the sandbox and the limits are the query service's; nothing here
decides what a tenant may read.

A query runs in a task of its own, so that a ``CancelRequest`` (which
arrives on another connection) cancels exactly that task: the task closes its
:class:`~shoal.sql.service.QueryResult`, which drops DataFusion's stream and
with it the query's work, and the client gets SQLSTATE 57014.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pyarrow as pa

from shoal.errors import QueryError, ShoalError
from shoal.pgwire import (
    codec,
    cursors,
    params,
    pg_catalog,
    pg_catalog_tables,
    results,
    rows,
    statements,
)
from shoal.pgwire.sqltext import SqlTextError
from shoal.sql.service import QueryResult, QueryService

logger = logging.getLogger(__name__)

CATALOG_TTL_S = 5.0
"""How long a session reuses the tenant's table schemas for catalog queries."""
PEER_CHECK_S = 0.5
"""How often a running query checks that its client is still connected."""
FLUSH_BYTES = 256 * 1024
"""Wait for the socket to drain once this much is buffered."""

COPY_TO_STDOUT = re.compile(
    r"^copy\s*\((?P<query>.*)\)\s*to\s+stdout\s*(?P<options>.*?)\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


class SessionError(ShoalError):
    """An error answered with an ErrorResponse; the session goes on."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Cancelled(ShoalError):
    """The running query was cancelled by a CancelRequest."""


@dataclasses.dataclass
class Statement:
    sql: str
    param_oids: list[int]
    schema: pa.Schema | None = None
    described: bool = False


@dataclasses.dataclass
class Portal:
    statement: Statement
    sql: str
    formats: list[int]
    local: statements.LocalResult | None = None
    cursor_op: cursors.CursorStatement | None = None
    result: QueryResult | None = None
    schema: pa.Schema | None = None
    batches: AsyncIterator[pa.RecordBatch] | None = None
    pending: pa.RecordBatch | None = None  # rows read but not yet sent (after a row limit)
    done: bool = False

    def close(self) -> None:
        if self.result is not None:
            self.result.close()
        self.done = True


@dataclasses.dataclass(eq=False)
class Session:
    """The protocol state of one connection after authentication: who it is, how to
    write to the client (``send``, ``drain``, ``buffered``: bytes not yet sent), and
    whether the client is gone (``peer_gone``)."""

    service: QueryService
    tenant: str
    user: str
    pid: int
    settings: dict[str, str]
    send: Callable[[bytes], None]
    drain: Callable[[], Awaitable[None]]
    buffered: Callable[[], int]
    peer_gone: Callable[[], bool] = lambda: False
    prepared: dict[str, Statement] = dataclasses.field(default_factory=dict, init=False)
    """Prepared statements by name."""
    portals: dict[str, Portal] = dataclasses.field(default_factory=dict, init=False)
    open_cursors: dict[str, tuple[Portal, bool]] = dataclasses.field(
        default_factory=dict, init=False
    )
    """By name: the portal, and whether it was declared WITH HOLD."""
    in_transaction: bool = dataclasses.field(default=False, init=False)
    skip_until_sync: bool = dataclasses.field(default=False, init=False)
    _task: asyncio.Task[Any] | None = dataclasses.field(default=None, init=False)
    _cancel_requested: bool = dataclasses.field(default=False, init=False)
    _catalog: tuple[float, dict[str, pa.Table]] | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.defaults = dict(self.settings)

    # -- cancellation ---------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the running query, if any (called for a CancelRequest)."""
        task = self._task
        if task is None or task.done():
            return False
        self._cancel_requested = True
        task.cancel()
        return True

    async def cancellable(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._task = task
        self._cancel_requested = False
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=PEER_CHECK_S)
                if not task.done() and self.peer_gone():
                    # the client hung up mid-query: stop the work nobody will read
                    logger.info("pgwire session %d: client gone, cancelling its query", self.pid)
                    task.cancel()
                    await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            self._task = None
        if task.cancelled():
            raise Cancelled()
        task.result()

    async def attempt(self, work: Coroutine[Any, Any, None]) -> bool:
        """Run one statement's or message's ``work`` (:meth:`cancellable`); an error is
        answered with an ErrorResponse and False returned, and the session goes on."""
        try:
            await self.cancellable(work)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error(exc)
            return False
        return True

    # -- output ---------------------------------------------------------------------

    async def maybe_drain(self) -> None:
        if self.buffered() >= FLUSH_BYTES:
            await self.drain()

    def ready(self) -> bytes:
        return codec.ready_for_query("T" if self.in_transaction else "I")

    def error(self, exc: BaseException) -> None:
        if isinstance(exc, SessionError):
            code, message = exc.code, str(exc)
        elif isinstance(exc, Cancelled):
            code, message = "57014", "canceling statement due to user request"
        elif isinstance(exc, codec.ProtocolError):
            code, message = exc.code, str(exc)
        elif isinstance(exc, statements.CommandError):
            code, message = exc.code, str(exc)
        elif isinstance(exc, params.ParameterError):
            code, message = "22P02", str(exc)
        elif isinstance(exc, SqlTextError):
            code, message = "42601", f"syntax error: {exc}"
        elif isinstance(exc, QueryError):
            code, message = results.sqlstate(exc), str(exc)
        else:
            logger.exception("pgwire session of tenant %s failed", self.tenant, exc_info=exc)
            code, message = "XX000", f"internal error: {type(exc).__name__}: {exc}"
        self.send(codec.error_response(code, message))

    # -- running one statement ------------------------------------------------------

    def local(self, sql: str) -> statements.LocalResult | None:
        local = statements.local_command(sql, self.settings, self.defaults)
        if local is not None and local.transaction == "begin":
            self.in_transaction = True
        elif local is not None and local.transaction == "end":
            self.in_transaction = False
            for name, (portal, hold) in list(self.open_cursors.items()):
                if not hold:
                    portal.close()
                    del self.open_cursors[name]
        return local

    async def _start(self, sql: str) -> QueryResult:
        prepared = await self.service.aprepare(self.tenant, sql)
        return await self.service.execute(prepared)

    async def _catalog_tables(self) -> dict[str, pa.Table]:
        """The catalog of the tenant's tables, built from their schemas as the query service
        reports them (so a tenant's catalog shows only what its SQL can read)."""
        now = time.monotonic()
        if self._catalog is not None and now - self._catalog[0] < CATALOG_TTL_S:
            return self._catalog[1]
        listing = await self._start(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' ORDER BY table_name"
        )
        names = [str(n) for n in (await listing.to_table()).column(0).to_pylist()]
        schemas: dict[str, pa.Schema] = {}
        for name in names:
            quoted = '"' + name.replace('"', '""') + '"'
            result = await self._start(f"SELECT * FROM {quoted} LIMIT 0")
            result.close()
            schemas[name] = result.schema
        tables = pg_catalog_tables.build_tables(schemas, self.settings)
        self._catalog = (now, tables)
        return tables

    async def run(
        self, sql: str
    ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch], QueryResult | None]:
        """Start ``sql``: a catalog query here, anything else in the tenant's session."""
        text = statements.rewrite_functions(sql, self.settings, self.user, self.pid)
        if pg_catalog.uses_catalog(text):
            tables = await self._catalog_tables()
            timeout = self.service.limits.timeout_s
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(None, pg_catalog.run, text, tables)
            try:
                table = await asyncio.wait_for(future, timeout)
            except TimeoutError:
                raise SessionError("57014", f"catalog query exceeded {timeout:g}s") from None
            except statements.CommandError as exc:
                raise SessionError(exc.code, str(exc)) from None
            return table.schema, results.table_batches(table), None
        result = await self._start(text)
        return result.schema, result.batches(), result

    async def schema_of(self, sql: str) -> pa.Schema:
        schema, _, result = await self.run(sql)
        if result is not None:
            result.close()
        return schema

    def complete_local(self, local: statements.LocalResult) -> None:
        for name, value in local.changed.items():
            self.send(codec.parameter_status(name, value))

    async def stream(self, portal: Portal, max_rows: int) -> tuple[int, bool]:
        """Send up to ``max_rows`` rows (all when 0); returns (rows sent, suspended)."""
        sent = 0
        while True:
            if max_rows and sent >= max_rows:
                return sent, True
            batch: pa.RecordBatch
            if portal.pending is not None:
                batch, portal.pending = portal.pending, None
            else:
                if portal.done or portal.batches is None:
                    return sent, False
                try:
                    batch = await anext(portal.batches)
                except StopAsyncIteration:
                    portal.done = True
                    return sent, False
            take = batch.num_rows if not max_rows else min(batch.num_rows, max_rows - sent)
            if take < batch.num_rows:
                portal.pending = batch.slice(take)
                batch = batch.slice(0, take)
            self.send(rows.encode_rows(batch, portal.formats))
            sent += take
            await self.maybe_drain()

    def finish(self, portal: Portal, sent: int) -> None:
        if portal.result is not None and portal.result.truncated:
            message = portal.result.truncation_message or "the result was truncated"
            self.send(codec.notice_response(message))
        self.send(codec.command_complete(f"SELECT {sent}"))

    async def open(self, portal: Portal) -> None:
        """Start the portal's query (once); its schema is known afterwards."""
        if portal.local is not None or portal.schema is not None or portal.done:
            return
        portal.schema, portal.batches, portal.result = await self.run(portal.sql)

    # -- SQL cursors ----------------------------------------------------------------

    async def _declare(self, op: cursors.Declare) -> None:
        if op.name in self.open_cursors:
            raise SessionError("42P03", f'cursor "{op.name}" already exists')
        portal = Portal(Statement(op.query, []), op.query, [])
        await self.open(portal)
        assert portal.schema is not None
        portal.formats = [1 if op.binary else 0] * len(portal.schema)
        self.open_cursors[op.name] = (portal, op.hold)

    def cursor(self, name: str) -> Portal:
        entry = self.open_cursors.get(name)
        if entry is None:
            raise SessionError("34000", f'cursor "{name}" does not exist')
        return entry[0]

    def _close_cursor(self, op: cursors.CloseCursor) -> None:
        names = list(self.open_cursors) if op.name is None else [op.name]
        for name in names:
            self.cursor(name).close()
            del self.open_cursors[name]

    async def _fetch(self, op: cursors.Fetch, formats: list[int] | None) -> None:
        """Send the next rows of a cursor (in ``formats``, else the cursor's own)."""
        portal = self.cursor(op.name)
        assert portal.schema is not None
        if formats is not None:
            portal.formats = results.formats_for(len(portal.schema), formats)
        sent, _ = await self.stream(portal, op.count)
        self.send(codec.command_complete(f"FETCH {sent}"))

    async def run_cursor_op(self, op: cursors.CursorStatement, formats: list[int] | None) -> None:
        if isinstance(op, cursors.Declare):
            await self._declare(op)
            self.send(codec.command_complete("DECLARE CURSOR"))
        elif isinstance(op, cursors.Fetch):
            await self._fetch(op, formats)
        else:
            self._close_cursor(op)
            self.send(codec.command_complete("CLOSE CURSOR"))

    def cursor_fields(self, op: cursors.CursorStatement, formats: list[int]) -> bytes:
        """RowDescription (FETCH) or NoData (DECLARE, CLOSE) for a cursor statement."""
        if not isinstance(op, cursors.Fetch):
            return codec.no_data()
        portal = self.cursor(op.name)
        assert portal.schema is not None
        chosen = results.formats_for(len(portal.schema), formats) if formats else portal.formats
        return codec.row_description(results.fields(portal.schema, chosen))

    @staticmethod
    def parse_cursor(sql: str) -> cursors.CursorStatement | None:
        try:
            return cursors.parse(sql)
        except cursors.CursorError as exc:
            raise SessionError("0A000", str(exc)) from None

    def peek_local(self, sql: str) -> statements.LocalResult | None:
        """A session statement is run at Execute; Bind only needs to know it is one."""
        if COPY_TO_STDOUT.match(sql):
            raise SessionError("0A000", "COPY is supported in the simple query protocol only")
        probe = dict(self.settings)
        try:
            return statements.local_command(sql, probe, self.defaults)
        except statements.CommandError:
            return statements.LocalResult("SET")

    def close_portals(self) -> None:
        for portal in self.portals.values():
            portal.close()
        self.portals.clear()

    def close(self) -> None:
        self.close_portals()
        for portal, _ in self.open_cursors.values():
            portal.close()
        self.open_cursors.clear()
        task = self._task
        if task is not None:
            task.cancel()
