"""One authenticated PostgreSQL session: the simple and extended query protocols.

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
from shoal.pgwire.sqltext import SqlTextError, split_statements, substitute
from shoal.sql.service import QueryResult, QueryService

logger = logging.getLogger(__name__)

CATALOG_TTL_S = 5.0
"""How long a session reuses the tenant's table schemas for catalog queries."""
PEER_CHECK_S = 0.5
"""How often a running query checks that its client is still connected."""
FLUSH_BYTES = 256 * 1024
"""Wait for the socket to drain once this much is buffered."""

_COPY_TO_STDOUT = re.compile(
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


class Session:
    """The protocol state of one connection after authentication."""

    def __init__(
        self,
        service: QueryService,
        tenant: str,
        user: str,
        pid: int,
        settings: dict[str, str],
        send: Callable[[bytes], None],
        drain: Callable[[], Awaitable[None]],
        buffered: Callable[[], int],
        peer_gone: Callable[[], bool] = lambda: False,
    ) -> None:
        self.service = service
        self.tenant = tenant
        self.user = user
        self.pid = pid
        self.settings = settings
        self.defaults = dict(settings)
        self._send = send
        self._drain = drain
        self._buffered = buffered
        self._peer_gone = peer_gone
        self.statements: dict[str, Statement] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, tuple[Portal, bool]] = {}  # name: (portal, WITH HOLD)
        self.in_transaction = False
        self.skip_until_sync = False
        self._task: asyncio.Task[Any] | None = None
        self._cancel_requested = False
        self._catalog: tuple[float, dict[str, pa.Table]] | None = None

    # -- cancellation ---------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the running query, if any (called for a CancelRequest)."""
        task = self._task
        if task is None or task.done():
            return False
        self._cancel_requested = True
        task.cancel()
        return True

    async def _cancellable(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._task = task
        self._cancel_requested = False
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=PEER_CHECK_S)
                if not task.done() and self._peer_gone():
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

    # -- output ---------------------------------------------------------------------

    async def _maybe_drain(self) -> None:
        if self._buffered() >= FLUSH_BYTES:
            await self._drain()

    def ready(self) -> bytes:
        return codec.ready_for_query("T" if self.in_transaction else "I")

    def _error(self, exc: BaseException) -> None:
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
        self._send(codec.error_response(code, message))

    # -- running one statement ------------------------------------------------------

    def _local(self, sql: str) -> statements.LocalResult | None:
        local = statements.local_command(sql, self.settings, self.defaults)
        if local is not None and local.transaction == "begin":
            self.in_transaction = True
        elif local is not None and local.transaction == "end":
            self.in_transaction = False
            for name, (portal, hold) in list(self.cursors.items()):
                if not hold:
                    portal.close()
                    del self.cursors[name]
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

    async def _run(
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

    async def _schema_of(self, sql: str) -> pa.Schema:
        schema, _, result = await self._run(sql)
        if result is not None:
            result.close()
        return schema

    def _complete_local(self, local: statements.LocalResult) -> None:
        for name, value in local.changed.items():
            self._send(codec.parameter_status(name, value))

    async def _stream(self, portal: Portal, max_rows: int) -> tuple[int, bool]:
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
            self._send(rows.encode_rows(batch, portal.formats))
            sent += take
            await self._maybe_drain()

    def _finish(self, portal: Portal, sent: int) -> None:
        if portal.result is not None and portal.result.truncated:
            message = portal.result.truncation_message or "the result was truncated"
            self._send(codec.notice_response(message))
        self._send(codec.command_complete(f"SELECT {sent}"))

    async def _open(self, portal: Portal) -> None:
        """Start the portal's query (once); its schema is known afterwards."""
        if portal.local is not None or portal.schema is not None or portal.done:
            return
        portal.schema, portal.batches, portal.result = await self._run(portal.sql)

    # -- SQL cursors ----------------------------------------------------------------

    async def _declare(self, op: cursors.Declare) -> None:
        if op.name in self.cursors:
            raise SessionError("42P03", f'cursor "{op.name}" already exists')
        portal = Portal(Statement(op.query, []), op.query, [])
        await self._open(portal)
        assert portal.schema is not None
        portal.formats = [1 if op.binary else 0] * len(portal.schema)
        self.cursors[op.name] = (portal, op.hold)

    def _cursor(self, name: str) -> Portal:
        entry = self.cursors.get(name)
        if entry is None:
            raise SessionError("34000", f'cursor "{name}" does not exist')
        return entry[0]

    def _close_cursor(self, op: cursors.CloseCursor) -> None:
        names = list(self.cursors) if op.name is None else [op.name]
        for name in names:
            self._cursor(name).close()
            del self.cursors[name]

    async def _fetch(self, op: cursors.Fetch, formats: list[int] | None) -> None:
        """Send the next rows of a cursor (in ``formats``, else the cursor's own)."""
        portal = self._cursor(op.name)
        assert portal.schema is not None
        if formats is not None:
            portal.formats = results.formats_for(len(portal.schema), formats)
        sent, _ = await self._stream(portal, op.count)
        self._send(codec.command_complete(f"FETCH {sent}"))

    async def _run_cursor_op(self, op: cursors.CursorStatement, formats: list[int] | None) -> None:
        if isinstance(op, cursors.Declare):
            await self._declare(op)
            self._send(codec.command_complete("DECLARE CURSOR"))
        elif isinstance(op, cursors.Fetch):
            await self._fetch(op, formats)
        else:
            self._close_cursor(op)
            self._send(codec.command_complete("CLOSE CURSOR"))

    def _cursor_fields(self, op: cursors.CursorStatement, formats: list[int]) -> bytes:
        """RowDescription (FETCH) or NoData (DECLARE, CLOSE) for a cursor statement."""
        if not isinstance(op, cursors.Fetch):
            return codec.no_data()
        portal = self._cursor(op.name)
        assert portal.schema is not None
        chosen = results.formats_for(len(portal.schema), formats) if formats else portal.formats
        return codec.row_description(results.fields(portal.schema, chosen))

    # -- simple query protocol ------------------------------------------------------

    async def simple_query(self, sql: str) -> None:
        try:
            statements = split_statements(sql)
        except SqlTextError as exc:
            self._error(exc)
            self._send(self.ready())
            return
        if not statements:
            self._send(codec.empty_query_response())
        for text in statements:
            try:
                await self._cancellable(self._simple_one(text))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._error(exc)
                break
        self._send(self.ready())
        await self._drain()

    async def _simple_one(self, sql: str) -> None:
        copy = _COPY_TO_STDOUT.match(sql)
        if copy:
            await self._copy_out(copy.group("query"), copy.group("options"))
            return
        op = self._parse_cursor(sql)
        if op is not None:
            if isinstance(op, cursors.Fetch):
                self._send(self._cursor_fields(op, []))
            await self._run_cursor_op(op, None)
            return
        local = self._local(sql)
        if local is not None:
            if local.table is not None:
                portal = Portal(Statement(sql, []), sql, [0] * local.table.num_columns, local)
                portal.schema = local.table.schema
                portal.batches = results.table_batches(local.table)
                self._send(codec.row_description(results.fields(portal.schema, portal.formats)))
                sent, _ = await self._stream(portal, 0)
                self._send(
                    codec.command_complete(
                        f"{local.tag} {sent}" if local.tag == "SELECT" else local.tag
                    )
                )
            else:
                self._send(codec.command_complete(local.tag))
            self._complete_local(local)
            return
        portal = Portal(Statement(sql, []), sql, [])
        try:
            await self._open(portal)
            assert portal.schema is not None
            portal.formats = [0] * len(portal.schema)
            self._send(codec.row_description(results.fields(portal.schema, portal.formats)))
            sent, _ = await self._stream(portal, 0)
            self._finish(portal, sent)
        finally:
            portal.close()

    async def _copy_out(self, query: str, options: str) -> None:
        opts = options.strip().lower().removeprefix("with").strip().strip("()").strip()
        if opts not in ("", "format text", "(format text)"):
            raise SessionError(
                "0A000", f"COPY TO STDOUT supports the text format only, not {options!r}"
            )
        portal = Portal(Statement(query, []), query, [])
        try:
            await self._open(portal)
            assert portal.schema is not None and portal.batches is not None
            encoder = results.RowEncoder(portal.schema, [0] * len(portal.schema))
            self._send(codec.copy_out_response(len(portal.schema)))
            rows = 0
            async for batch in portal.batches:
                for line in encoder.copy_lines(batch):
                    self._send(codec.copy_data(line))
                rows += batch.num_rows
                await self._maybe_drain()
            self._send(codec.copy_done())
            self._send(codec.command_complete(f"COPY {rows}"))
        finally:
            portal.close()

    # -- extended query protocol ----------------------------------------------------

    async def extended(self, message: codec.FrontendMessage) -> None:
        if isinstance(message, codec.Sync):
            self.skip_until_sync = False
            if not self.in_transaction:
                self._close_portals()
            self._send(self.ready())
            await self._drain()
            return
        if isinstance(message, codec.Flush):
            await self._drain()
            return
        if self.skip_until_sync:
            return
        try:
            await self._cancellable(self._extended_one(message))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._error(exc)
            self.skip_until_sync = True

    def _close_portals(self) -> None:
        for portal in self.portals.values():
            portal.close()
        self.portals.clear()

    async def _extended_one(self, message: codec.FrontendMessage) -> None:
        if isinstance(message, codec.Parse):
            self._parse(message)
        elif isinstance(message, codec.Bind):
            self._bind(message)
        elif isinstance(message, codec.Describe):
            await self._describe(message)
        elif isinstance(message, codec.Execute):
            await self._execute(message)
        elif isinstance(message, codec.Close):
            if message.kind == "S":
                self.statements.pop(message.name, None)
            else:
                portal = self.portals.pop(message.name, None)
                if portal is not None:
                    portal.close()
            self._send(codec.close_complete())
        else:
            raise SessionError("08P01", f"unexpected message {type(message).__name__}")

    def _parse(self, message: codec.Parse) -> None:
        if message.name and message.name in self.statements:
            raise SessionError("42P05", f'prepared statement "{message.name}" already exists')
        found = split_statements(message.sql)
        if len(found) > 1:
            raise SessionError("42601", "cannot insert multiple commands into a prepared statement")
        sql = found[0] if found else ""
        oids = params.parameter_types(sql, message.param_types)
        self.statements[message.name] = Statement(sql, oids)
        self._send(codec.parse_complete())

    def _bind(self, message: codec.Bind) -> None:
        statement = self.statements.get(message.statement)
        if statement is None:
            raise SessionError("26000", f'prepared statement "{message.statement}" does not exist')
        if message.portal and message.portal in self.portals:
            raise SessionError("42P03", f'cursor "{message.portal}" already exists')
        values = params.literals(message.params, statement.param_oids, message.param_formats)
        sql = substitute(statement.sql, values) if values else statement.sql
        old = self.portals.pop(message.portal, None)
        if old is not None:
            old.close()
        portal = Portal(statement, sql, list(message.result_formats))
        if not sql:
            portal.done = True
        elif (op := self._parse_cursor(sql)) is not None:
            portal.cursor_op = op
        else:
            portal.local = self._peek_local(sql)
        self.portals[message.portal] = portal
        self._send(codec.bind_complete())

    @staticmethod
    def _parse_cursor(sql: str) -> cursors.CursorStatement | None:
        try:
            return cursors.parse(sql)
        except cursors.CursorError as exc:
            raise SessionError("0A000", str(exc)) from None

    def _peek_local(self, sql: str) -> statements.LocalResult | None:
        """A session statement is run at Execute; Bind only needs to know it is one."""
        if _COPY_TO_STDOUT.match(sql):
            raise SessionError("0A000", "COPY is supported in the simple query protocol only")
        probe = dict(self.settings)
        try:
            return statements.local_command(sql, probe, self.defaults)
        except statements.CommandError:
            return statements.LocalResult("SET")

    async def _describe(self, message: codec.Describe) -> None:
        if message.kind == "S":
            statement = self.statements.get(message.name)
            if statement is None:
                raise SessionError("26000", f'prepared statement "{message.name}" does not exist')
            self._send(codec.parameter_description(statement.param_oids))
            if not statement.described:
                op = self._parse_cursor(statement.sql) if statement.sql else None
                local = (
                    None
                    if op is not None
                    else (self._peek_local(statement.sql) if statement.sql else None)
                )
                if isinstance(op, cursors.Fetch):
                    statement.schema = self._cursor(op.name).schema
                elif op is not None:
                    statement.schema = None
                elif local is not None:
                    statement.schema = local.table.schema if local.table is not None else None
                elif statement.sql:
                    nulls = ["NULL"] * len(statement.param_oids)
                    statement.schema = await self._schema_of(substitute(statement.sql, nulls))
                statement.described = True
            if statement.schema is None:
                self._send(codec.no_data())
            else:
                formats = [0] * len(statement.schema)
                self._send(codec.row_description(results.fields(statement.schema, formats)))
            return
        portal = self.portals.get(message.name)
        if portal is None and message.name in self.cursors:
            portal = self.cursors[message.name][0]  # a cursor is a portal by that name
        if portal is None:
            raise SessionError("34000", f'portal "{message.name}" does not exist')
        if portal.cursor_op is not None:
            self._send(self._cursor_fields(portal.cursor_op, portal.formats))
            return
        if portal.local is not None:
            schema = portal.local.table.schema if portal.local.table is not None else None
        else:
            await self._open(portal)
            schema = portal.schema
        if schema is None:
            self._send(codec.no_data())
            return
        try:
            formats = results.formats_for(len(schema), portal.formats)
        except codec.ProtocolError as exc:
            raise SessionError(exc.code, str(exc)) from None
        self._send(codec.row_description(results.fields(schema, formats)))

    async def _execute(self, message: codec.Execute) -> None:
        portal = self.portals.get(message.portal)
        if portal is None:
            raise SessionError("34000", f'portal "{message.portal}" does not exist')
        if not portal.sql:
            self._send(codec.empty_query_response())
            return
        if portal.cursor_op is not None:
            if portal.done:
                raise SessionError("55000", "this cursor statement has already run")
            await self._run_cursor_op(portal.cursor_op, portal.formats or None)
            portal.done = True
            return
        if portal.local is not None and portal.schema is None:
            local = self._local(portal.sql)  # run for real now (it may change settings)
            assert local is not None
            portal.local = local
            if local.table is None:
                self._send(codec.command_complete(local.tag))
                self._complete_local(local)
                portal.done = True
                return
            portal.schema = local.table.schema
            portal.batches = results.table_batches(local.table)
        elif portal.local is not None and portal.done and portal.schema is None:
            self._send(codec.command_complete(portal.local.tag))
            return
        await self._open(portal)
        assert portal.schema is not None
        try:
            portal.formats = results.formats_for(len(portal.schema), portal.formats)
        except codec.ProtocolError as exc:
            raise SessionError(exc.code, str(exc)) from None
        sent, suspended = await self._stream(portal, max(0, message.max_rows))
        if suspended:
            self._send(codec.portal_suspended())
            return
        if portal.local is not None:
            self._send(codec.command_complete(portal.local.tag))
            self._complete_local(portal.local)
        else:
            self._finish(portal, sent)
        portal.close()

    def close(self) -> None:
        self._close_portals()
        for portal, _ in self.cursors.values():
            portal.close()
        self.cursors.clear()
        task = self._task
        if task is not None:
            task.cancel()
