"""The extended query protocol: Parse, Bind, Describe, Execute, Close, Sync and Flush over
the session's prepared statements and portals."""

from __future__ import annotations

from shoal.pgwire import codec, cursors, params, results
from shoal.pgwire.session import Portal, Session, SessionError, Statement
from shoal.pgwire.sqltext import split_statements, substitute


async def handle(session: Session, message: codec.FrontendMessage) -> None:
    """One message of the extended query protocol (Parse, Bind, Describe, Execute, Close,
    Sync, Flush); after an error, everything up to the next Sync is skipped."""
    if message is codec.Signal.SYNC:
        session.skip_until_sync = False
        if not session.in_transaction:
            session.close_portals()
        session.send(session.ready())
        await session.drain()
        return
    if message is codec.Signal.FLUSH:
        await session.drain()
        return
    if session.skip_until_sync:
        return
    if not await session.attempt(_extended_one(session, message)):
        session.skip_until_sync = True


async def _extended_one(session: Session, message: codec.FrontendMessage) -> None:
    if isinstance(message, codec.Parse):
        _parse(session, message)
    elif isinstance(message, codec.Bind):
        _bind(session, message)
    elif isinstance(message, codec.Describe):
        await _describe(session, message)
    elif isinstance(message, codec.Execute):
        await _execute(session, message)
    elif isinstance(message, codec.Close):
        if message.kind == "S":
            session.prepared.pop(message.name, None)
        else:
            portal = session.portals.pop(message.name, None)
            if portal is not None:
                portal.close()
        session.send(codec.close_complete())
    else:
        raise SessionError("08P01", f"unexpected message {type(message).__name__}")


def _parse(session: Session, message: codec.Parse) -> None:
    if message.name and message.name in session.prepared:
        raise SessionError("42P05", f'prepared statement "{message.name}" already exists')
    found = split_statements(message.sql)
    if len(found) > 1:
        raise SessionError("42601", "cannot insert multiple commands into a prepared statement")
    sql = found[0] if found else ""
    oids = params.parameter_types(sql, message.param_types)
    session.prepared[message.name] = Statement(sql, oids)
    session.send(codec.parse_complete())


def _bind(session: Session, message: codec.Bind) -> None:
    statement = session.prepared.get(message.statement)
    if statement is None:
        raise SessionError("26000", f'prepared statement "{message.statement}" does not exist')
    if message.portal and message.portal in session.portals:
        raise SessionError("42P03", f'cursor "{message.portal}" already exists')
    values = params.literals(message.params, statement.param_oids, message.param_formats)
    sql = substitute(statement.sql, values) if values else statement.sql
    old = session.portals.pop(message.portal, None)
    if old is not None:
        old.close()
    portal = Portal(statement, sql, list(message.result_formats))
    if not sql:
        portal.done = True
    elif (op := session.parse_cursor(sql)) is not None:
        portal.cursor_op = op
    else:
        portal.local = session.peek_local(sql)
    session.portals[message.portal] = portal
    session.send(codec.bind_complete())


async def _describe(session: Session, message: codec.Describe) -> None:
    if message.kind == "S":
        statement = session.prepared.get(message.name)
        if statement is None:
            raise SessionError("26000", f'prepared statement "{message.name}" does not exist')
        session.send(codec.parameter_description(statement.param_oids))
        if not statement.described:
            op = session.parse_cursor(statement.sql) if statement.sql else None
            local = (
                None
                if op is not None
                else (session.peek_local(statement.sql) if statement.sql else None)
            )
            if isinstance(op, cursors.Fetch):
                statement.schema = session.cursor(op.name).schema
            elif op is not None:
                statement.schema = None
            elif local is not None:
                statement.schema = local.table.schema if local.table is not None else None
            elif statement.sql:
                nulls = ["NULL"] * len(statement.param_oids)
                statement.schema = await session.schema_of(substitute(statement.sql, nulls))
            statement.described = True
        if statement.schema is None:
            session.send(codec.no_data())
        else:
            formats = [0] * len(statement.schema)
            session.send(codec.row_description(results.fields(statement.schema, formats)))
        return
    portal = session.portals.get(message.name)
    if portal is None and message.name in session.open_cursors:
        portal = session.open_cursors[message.name][0]  # a cursor is a portal by that name
    if portal is None:
        raise SessionError("34000", f'portal "{message.name}" does not exist')
    if portal.cursor_op is not None:
        session.send(session.cursor_fields(portal.cursor_op, portal.formats))
        return
    if portal.local is not None:
        schema = portal.local.table.schema if portal.local.table is not None else None
    else:
        await session.open(portal)
        schema = portal.schema
    if schema is None:
        session.send(codec.no_data())
        return
    try:
        formats = results.formats_for(len(schema), portal.formats)
    except codec.ProtocolError as exc:
        raise SessionError(exc.code, str(exc)) from None
    session.send(codec.row_description(results.fields(schema, formats)))


async def _execute(session: Session, message: codec.Execute) -> None:
    portal = session.portals.get(message.portal)
    if portal is None:
        raise SessionError("34000", f'portal "{message.portal}" does not exist')
    if not portal.sql:
        session.send(codec.empty_query_response())
        return
    if portal.cursor_op is not None:
        if portal.done:
            raise SessionError("55000", "this cursor statement has already run")
        await session.run_cursor_op(portal.cursor_op, portal.formats or None)
        portal.done = True
        return
    if portal.local is not None and portal.schema is None:
        local = session.local(portal.sql)  # run for real now (it may change settings)
        assert local is not None
        portal.local = local
        if local.table is None:
            session.send(codec.command_complete(local.tag))
            session.complete_local(local)
            portal.done = True
            return
        portal.schema = local.table.schema
        portal.batches = results.table_batches(local.table)
    elif portal.local is not None and portal.done and portal.schema is None:
        session.send(codec.command_complete(portal.local.tag))
        return
    await session.open(portal)
    assert portal.schema is not None
    try:
        portal.formats = results.formats_for(len(portal.schema), portal.formats)
    except codec.ProtocolError as exc:
        raise SessionError(exc.code, str(exc)) from None
    sent, suspended = await session.stream(portal, max(0, message.max_rows))
    if suspended:
        session.send(codec.portal_suspended())
        return
    if portal.local is not None:
        session.send(codec.command_complete(portal.local.tag))
        session.complete_local(portal.local)
    else:
        session.finish(portal, sent)
    portal.close()
