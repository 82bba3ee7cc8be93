"""The SQL endpoint: ``POST /api/v1/sql`` and ``GET /api/v1/sql?q=``.

The body of a POST is the SQL text, or JSON ``{"query": "..."}``. Query
parameters: ``format`` (json, csv, ndjson, arrow), ``as_of_version`` or
``as_of`` (time travel over the committed Parquet, without the unflushed
rows). GET answers carry an ``ETag`` built from the versions of the
tables the query reads and the unflushed rows' last LSN; a matching ``If-None-Match``
gets 304 without running the query.

Errors are JSON ``{"error": ..., "limit": ...}``: 400 for a bad query or a
query over a limit (``limit`` names it), 429 when every query slot stayed
busy for the whole time limit, 503 when the process's memory budget has no room for
one more query (``memory_limit_bytes``). Errors found before the first byte (planning,
early execution) get their status; an error later in a streamed answer is
written in-band (see :mod:`shoal.sql.encoders`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated

import pyarrow as pa
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from shoal.api.access import require_role
from shoal.auth import Principal
from shoal.errors import QueryError, QueryLimitError
from shoal.sql.encoders import ENCODERS, FORMATS, StreamStatus
from shoal.sql.service import AsOf, Prepared, QueryResult, QueryService
from shoal.text import parse_utc

logger = logging.getLogger(__name__)

router = APIRouter()

PREFETCH_BYTES = 4 * 1024 * 1024
"""Read this much of a result before answering, so most errors and truncations show in
the status and headers rather than in-band."""
ONE_BODY_BYTES = 256 * 1024
"""A complete result up to this many Arrow bytes is sent as one body, not streamed."""

QueryPrincipal = Annotated[Principal, Depends(require_role("query"))]


def _error(exc: QueryError, retry_after_s: float = 1.0) -> JSONResponse:
    body: dict[str, str] = {"error": str(exc)}
    headers: dict[str, str] = {}
    status = 400
    if isinstance(exc, QueryLimitError):
        body["limit"] = exc.limit
        if exc.limit == "concurrency":
            status = 429
            headers["Retry-After"] = str(max(1, round(retry_after_s)))
        elif exc.limit == "server_memory":  # the process is full, not the query too big
            status = 503
            headers["Retry-After"] = str(max(1, round(retry_after_s)))
    return JSONResponse(body, status_code=status, headers=headers)


def _parse_as_of(version: str | None, timestamp: str | None) -> AsOf | None:
    if version is not None and timestamp is not None:
        raise QueryError("give as_of_version or as_of, not both")
    if version is not None:
        try:
            number = int(version)
        except ValueError:
            raise QueryError(
                f"as_of_version must be a table version number, got {version!r}"
            ) from None
        if number < 0:
            raise QueryError("as_of_version must not be negative")
        return AsOf(version=number)
    if timestamp is not None:
        try:
            return AsOf(timestamp=parse_utc(timestamp))
        except ValueError:
            raise QueryError(
                f"as_of must be an ISO 8601 time such as 2026-01-05T10:00:00Z, got {timestamp!r}"
            ) from None
    return None


def _format(request: Request) -> str:
    fmt = request.query_params.get("format", "json").strip().lower()
    if fmt not in FORMATS:
        raise QueryError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    return fmt


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    candidates = [c.strip() for c in header.split(",")]
    return any(c == "*" or c.removeprefix("W/") == etag for c in candidates)


async def _sql_from_body(request: Request, service: QueryService) -> str:
    limit = service.limits.max_sql_bytes * 2 + 4096
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise QueryLimitError(
                "size",
                f"request body exceeds {limit} bytes; the SQL text limit is "
                f"{service.limits.max_sql_bytes} bytes (query_max_sql_bytes)",
            )
        chunks.append(chunk)
    body = b"".join(chunks)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise QueryError("the request body is not UTF-8 text") from None
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (media == "" and text.lstrip().startswith("{")):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise QueryError(f'body is not valid JSON ({exc}); send {{"query": "..."}}') from None
        if not isinstance(doc, dict) or not isinstance(doc.get("query"), str):
            raise QueryError('JSON body must be an object with a "query" string')
        return str(doc["query"])
    return text


async def _guarded(result: QueryResult, status: StreamStatus) -> AsyncIterator[pa.RecordBatch]:
    """The result's batches; a late error or the row cap is noted in ``status``."""
    try:
        async for batch in result.batches():
            yield batch
    except QueryError as exc:
        status.error = str(exc)
        logger.info("query of tenant %s failed mid-stream: %s", result.prepared.tenant, exc)
    finally:
        result.close()
    status.truncated_message = result.truncation_message


async def _start(service: QueryService, prepared: Prepared) -> QueryResult:
    result = await service.execute(prepared)
    try:
        await result.prefetch(PREFETCH_BYTES)
    except BaseException:
        result.close()  # dropping the stream stops DataFusion's work
        raise
    return result


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed its connection (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _until_first_rows(
    request: Request, service: QueryService, prepared: Prepared
) -> QueryResult | None:
    """Plan and run until the first rows, or None (the query stopped) if the client left.

    Once the answer streams, Starlette notices a disconnect itself and stops the stream."""
    work = asyncio.ensure_future(_start(service, prepared))
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if work.done():
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError, QueryError):
        await work
    return None


async def _answer(request: Request, principal: Principal, sql: str, conditional: bool) -> Response:
    service: QueryService = request.app.state.query_service
    retry_after = float(getattr(request.app.state, "retry_after_s", 1.0))
    try:
        fmt = _format(request)
        params = request.query_params
        as_of = _parse_as_of(params.get("as_of_version"), params.get("as_of"))
        prepared = await service.aprepare(principal.tenant, sql, as_of, variant=fmt)
        if conditional and _etag_matches(request.headers.get("if-none-match"), prepared.etag):
            return Response(status_code=304, headers={"ETag": prepared.etag})
        result = await _until_first_rows(request, service, prepared)
    except QueryError as exc:
        return _error(exc, retry_after)
    if result is None:
        logger.info("client of tenant %s went away; its query was stopped", principal.tenant)
        return Response(status_code=499)
    headers = {
        "X-Shoal-Row-Cap": str(service.limits.max_rows),
        "X-Shoal-Tables": ",".join(prepared.tables_read),
        "Cache-Control": "private, no-cache",
    }
    if conditional:
        headers["ETag"] = prepared.etag
    if result.complete and result.truncated and result.truncation_message:
        headers["X-Shoal-Truncated"] = result.truncation_message
    status = StreamStatus()
    body = ENCODERS[fmt](result.schema, _guarded(result, status), status)
    if result.complete and result.buffered_bytes <= ONE_BODY_BYTES:
        # Every row is in hand and few (the usual case for dashboards and aggregations):
        # one body with a Content-Length, without the streaming machinery's extra tasks.
        content = b"".join([chunk async for chunk in body])
        return Response(content, media_type=FORMATS[fmt], headers=headers)
    return StreamingResponse(body, media_type=FORMATS[fmt], headers=headers)


@router.get("/api/v1/sql")
async def sql_get(request: Request, principal: QueryPrincipal) -> Response:
    q = request.query_params.get("q")
    if q is None:
        return _error(QueryError("missing query: GET /api/v1/sql?q=SELECT..."))
    return await _answer(request, principal, q, conditional=True)


@router.post("/api/v1/sql")
async def sql_post(request: Request, principal: QueryPrincipal) -> Response:
    service: QueryService = request.app.state.query_service
    try:
        sql = await _sql_from_body(request, service)
    except QueryError as exc:
        return _error(exc)
    return await _answer(request, principal, sql, conditional=False)
