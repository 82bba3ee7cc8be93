"""Loki's live tail: ``/loki/api/v1/tail`` over WebSocket.

The token (``query`` role) decides the tenant, from the upgrade request's headers (as
Grafana's data source proxy sends them). Parameters as Loki's: ``query`` (a log query),
``start`` (default an hour ago), ``limit`` (100: the entries sent first, from before the
connection), ``delay_for`` (0 to 5 seconds: how long entries are held to be sent
together). Then each entry is sent the moment it is acknowledged: the route follows the
tenant's ``logs`` rows through the ingest path's :class:`~shoal.ingest.feed.RowFeed`,
with a buffer of ``loki_tail_buffer_rows`` rows; a client slower than the stream gets the
entries it missed listed in ``dropped_entries`` (their stream labels and times).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import msgspec
import pyarrow as pa
from fastapi import APIRouter
from starlette.websockets import WebSocket, WebSocketDisconnect

from shoal.auth import Authenticator
from shoal.errors import AuthError, LogQLError, QueryError
from shoal.ingest.feed import RowFeed
from shoal.logql import params as p
from shoal.logql import tail
from shoal.logql.output import CATEGORIZE
from shoal.logql.service import LogQLService

logger = logging.getLogger(__name__)

router = APIRouter()

BUFFER_ROWS = 10_000
"""Rows a tail holds for a slow client before it drops some (and says so), unless the
server sets ``app.state.tail_buffer_rows`` (setting ``loki_tail_buffer_rows``)."""
POLICY_VIOLATION = 1008


def _one(websocket: WebSocket, name: str) -> str | None:
    return websocket.query_params.get(name)


@router.websocket("/loki/api/v1/tail")
async def follow(websocket: WebSocket) -> None:
    authenticator: Authenticator = websocket.app.state.authenticator
    service: LogQLService | None = websocket.app.state.logql
    feed: RowFeed | None = websocket.app.state.feed
    try:
        principal = authenticator.check(websocket.headers.get("authorization"), "query")
        if service is None or feed is None:
            raise QueryError("shoal is starting; retry shortly")
        query = tail.log_query(_one(websocket, "query") or "")
        now = time.time_ns()
        start = p.timestamp(_one(websocket, "start"), now - p.DEFAULT_SINCE_NS, "start")
        limit = p.limit(_one(websocket, "limit"))
        delay = int(_one(websocket, "delay_for") or "0")
        if not 0 <= delay <= tail.MAX_DELAY_S:
            raise LogQLError(f"delay_for can't be greater than {tail.MAX_DELAY_S}")
    except (AuthError, QueryError, ValueError) as exc:
        await websocket.close(POLICY_VIOLATION, str(exc)[:120])
        return
    flags = websocket.headers.get("x-loki-response-encoding-flags", "")
    categorize = CATEGORIZE in {f.strip() for f in flags.split(",")}
    capacity = int(getattr(websocket.app.state, "tail_buffer_rows", BUFFER_ROWS))
    subscription = feed.subscribe(principal.tenant, "logs", capacity, asyncio.get_running_loop())
    await websocket.accept()
    closed = asyncio.Event()
    watcher = asyncio.create_task(_watch(websocket, closed))
    try:
        history = await service.history(principal.tenant, query, start, now + 1, limit)
        history = history.take(history.ts.argsort(kind="stable"))
        seen = set(zip(history.ts.tolist(), history.line.to_pylist(), strict=True))
        await _send(websocket, tail.message(history, [], categorize))
        while not closed.is_set():
            if not await subscription.wait(1.0):
                continue
            if delay:
                await asyncio.sleep(delay)
            batches, dropped_rows, _ = subscription.take()
            frame = tail.entries(query, batches)
            if seen and frame.rows:  # acknowledged while the history was read
                fresh = [
                    (t, line) not in seen
                    for t, line in zip(frame.ts.tolist(), frame.line.to_pylist(), strict=True)
                ]
                frame = frame.filter(pa.array(fresh))
                seen = set()
            dropped = tail.dropped(query, dropped_rows) if dropped_rows else []
            if frame.rows or dropped:
                await _send(websocket, tail.message(frame, dropped, categorize))
    except (WebSocketDisconnect, RuntimeError):
        pass
    except QueryError as exc:
        with contextlib.suppress(RuntimeError):
            await websocket.close(POLICY_VIOLATION, str(exc)[:120])
    finally:
        subscription.close()
        watcher.cancel()


async def _send(websocket: WebSocket, body: dict[str, Any]) -> None:
    await websocket.send_text(msgspec.json.encode(body).decode())


async def _watch(websocket: WebSocket, closed: asyncio.Event) -> None:
    """Read (and ignore) what the client sends, to notice when it goes away."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        closed.set()
