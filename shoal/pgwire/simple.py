"""The simple query protocol: a Query message's statements, each run and answered in turn
(``COPY ... TO STDOUT`` and SQL cursors included)."""

from __future__ import annotations

from shoal.pgwire import codec, cursors, results
from shoal.pgwire.session import COPY_TO_STDOUT, Portal, Session, SessionError, Statement
from shoal.pgwire.sqltext import SqlTextError, split_statements


async def query(session: Session, sql: str) -> None:
    """A Query message: each of its statements in turn, then ReadyForQuery."""
    try:
        statements = split_statements(sql)
    except SqlTextError as exc:
        session.error(exc)
        session.send(session.ready())
        return
    if not statements:
        session.send(codec.empty_query_response())
    for text in statements:
        if not await session.attempt(_simple_one(session, text)):
            break
    session.send(session.ready())
    await session.drain()


async def _simple_one(session: Session, sql: str) -> None:
    copy = COPY_TO_STDOUT.match(sql)
    if copy:
        await _copy_out(session, copy.group("query"), copy.group("options"))
        return
    op = session.parse_cursor(sql)
    if op is not None:
        if isinstance(op, cursors.Fetch):
            session.send(session.cursor_fields(op, []))
        await session.run_cursor_op(op, None)
        return
    local = session.local(sql)
    if local is not None:
        if local.table is not None:
            portal = Portal(Statement(sql, []), sql, [0] * local.table.num_columns, local)
            portal.schema = local.table.schema
            portal.batches = results.table_batches(local.table)
            session.send(codec.row_description(results.fields(portal.schema, portal.formats)))
            sent, _ = await session.stream(portal, 0)
            session.send(
                codec.command_complete(
                    f"{local.tag} {sent}" if local.tag == "SELECT" else local.tag
                )
            )
        else:
            session.send(codec.command_complete(local.tag))
        session.complete_local(local)
        return
    portal = Portal(Statement(sql, []), sql, [])
    try:
        await session.open(portal)
        assert portal.schema is not None
        portal.formats = [0] * len(portal.schema)
        session.send(codec.row_description(results.fields(portal.schema, portal.formats)))
        sent, _ = await session.stream(portal, 0)
        session.finish(portal, sent)
    finally:
        portal.close()


async def _copy_out(session: Session, query: str, options: str) -> None:
    opts = options.strip().lower().removeprefix("with").strip().strip("()").strip()
    if opts not in ("", "format text", "(format text)"):
        raise SessionError(
            "0A000", f"COPY TO STDOUT supports the text format only, not {options!r}"
        )
    portal = Portal(Statement(query, []), query, [])
    try:
        await session.open(portal)
        assert portal.schema is not None and portal.batches is not None
        encoder = results.RowEncoder(portal.schema, [0] * len(portal.schema))
        session.send(codec.copy_out_response(len(portal.schema)))
        rows = 0
        async for batch in portal.batches:
            for line in encoder.copy_lines(batch):
                session.send(codec.copy_data(line))
            rows += batch.num_rows
            await session.maybe_drain()
        session.send(codec.copy_done())
        session.send(codec.command_complete(f"COPY {rows}"))
    finally:
        portal.close()
