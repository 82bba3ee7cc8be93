"""Prometheus remote read: ``POST /api/v1/read``, so a Prometheus can use shoal as its
long-term storage (``remote_read`` in its configuration).

The body is a snappy-compressed ``prometheus.ReadRequest``; each query's matchers
select series as a PromQL selector does (:mod:`shoal.promql.raw`), from the tenant the
token decides (``query`` role; no header widens it). The answer is the first response
type the client accepts: ``SAMPLES`` (one snappy ``ReadResponse``) or
``STREAMED_XOR_CHUNKS`` (framed ``ChunkedReadResponse`` messages,
:mod:`shoal.promwrite.remote_read`). Every query is read, and every frame built, before
the first byte is sent, so a request over a limit gets a clean error status and the
reason as text, as Prometheus' own read handler answers: 400 for a body that cannot be
read or a request over a sample or series cap, 401/403 for the token, 413 for a body
over ``max_body_bytes``, 503 when out of time or memory (retry later).
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request, Response

from shoal.api.access import request_principal
from shoal.api.bodies import read_body
from shoal.errors import (
    AuthError,
    DecodeError,
    PayloadTooLargeError,
    PermissionDeniedError,
    PromQLError,
    QueryError,
    QueryLimitError,
)
from shoal.promql.service import LabelMatcher, PromQLService, RawQuery, RawSeries
from shoal.promwrite import remote_read, snappy

logger = logging.getLogger(__name__)

router = APIRouter()


def _text(status: int, message: str) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(f"{message}\n", status, headers=headers, media_type="text/plain")


def _encode(request: remote_read.ReadRequest, results: list[list[RawSeries]]) -> bytes:
    if request.response_type == remote_read.STREAMED_XOR_CHUNKS:
        return b"".join(
            frame
            for index, series in enumerate(results)
            for s in series
            for frame in remote_read.chunked_frames(index, s.labels, s.t, s.v)
        )
    body = remote_read.samples_response(
        [[(s.labels, s.t, s.v) for s in series] for series in results]
    )
    return snappy.compress(body)


@router.post("/api/v1/read", include_in_schema=False)
async def read(request: Request) -> Response:
    promql: PromQLService | None = request.app.state.promql
    limit: int = request.app.state.max_body_bytes
    try:
        principal = request_principal(request, "query")
        if promql is None:
            return _text(503, "not ready: the tables are still being opened")
        encoding = request.headers.get("content-encoding", "snappy").strip().lower()
        if encoding != "snappy":
            raise DecodeError(
                f"unsupported content encoding {encoding!r}: a remote-read body is snappy"
            )
        body = snappy.decompress(await read_body(request, limit), limit)
        decoded = remote_read.decode_request(body)
        queries = [
            RawQuery(
                tuple(LabelMatcher(m.name, m.op, m.value) for m in q.matchers),
                q.start_ms,
                q.end_ms,
            )
            for q in decoded.queries
        ]
        results = await asyncio.wait_for(
            promql.read_raw(principal.tenant, queries), timeout=promql.timeout_s
        )
        payload = await asyncio.get_running_loop().run_in_executor(None, _encode, decoded, results)
    except TimeoutError:
        timeout = promql.timeout_s if promql is not None else 0.0
        return _text(
            503,
            f"remote read timed out (query_timeout_s = {timeout:g} s); "
            "narrow the matchers or the time range",
        )
    except PermissionDeniedError as exc:
        return _text(403, str(exc))
    except AuthError as exc:
        return _text(401, str(exc))
    except PayloadTooLargeError as exc:
        return _text(413, str(exc))
    except DecodeError as exc:
        return _text(400, str(exc))
    except QueryLimitError as exc:
        return _text(
            503 if exc.limit in ("time", "concurrency", "server_memory") else 400, str(exc)
        )
    except PromQLError as exc:
        return _text(400, str(exc))
    except QueryError as exc:
        logger.error("remote read failed: %s", exc)
        return _text(500, str(exc))
    if decoded.response_type == remote_read.STREAMED_XOR_CHUNKS:
        return Response(payload, media_type=remote_read.STREAMED_CONTENT_TYPE)
    return Response(
        payload,
        media_type=remote_read.SAMPLES_CONTENT_TYPE,
        headers={"Content-Encoding": "snappy"},
    )
