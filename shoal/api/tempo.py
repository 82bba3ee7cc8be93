"""Tempo's HTTP API at Tempo's own paths (TraceQL over the spans table), for Grafana's
built-in Tempo data source.

Routes translate HTTP only: parameters from the query string, the token's tenant, the
``Accept`` header's encoding; everything else is :mod:`shoal.traceql`. Errors are
answered as Tempo's query frontend answers them: a plain-text body with 400 for a bad
request, 404 for an unknown trace, 401/403 for the token, 503 past a limit of time or
concurrency, 422 past another limit.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable

import msgspec
from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from shoal import __version__
from shoal.api.access import request_principal
from shoal.errors import AuthError, PermissionDeniedError, QueryError, QueryLimitError, TraceQLError
from shoal.otlp import tempo
from shoal.traceql.parser import duration_ns
from shoal.traceql.service import (
    DEFAULT_LIMIT,
    DEFAULT_SPSS,
    DEFAULT_TAG_LIMIT,
    SearchRequest,
    TraceQLService,
)

logger = logging.getLogger(__name__)

router = APIRouter()

TEMPO_VERSION = "2.9.0"
"""The Tempo release whose API shoal answers as (buildinfo reports it; Grafana turns its
features on by this version)."""


def _text(message: str, status: int) -> Response:
    return PlainTextResponse(message + "\n", status_code=status)


def _translate(exc: Exception) -> Response:
    if isinstance(exc, PermissionDeniedError):
        return _text(str(exc), 403)
    if isinstance(exc, AuthError):
        return _text(str(exc), 401)
    if isinstance(exc, TraceQLError):
        return _text(str(exc), 404 if exc.not_found else 400)
    if isinstance(exc, QueryLimitError):
        return _text(str(exc), 503 if exc.limit in ("time", "concurrency") else 422)
    if isinstance(exc, QueryError):
        return _text(str(exc), 400)
    raise exc


def _tenant(request: Request) -> str:
    return str(request_principal(request, "query").tenant)


def _after_token(request: Request, answer: Response) -> Response:
    """``answer``, to a request whose token holds the ``query`` role (else the refusal)."""
    try:
        _tenant(request)
    except AuthError as exc:
        return _translate(exc)
    return answer


def _integer(request: Request, name: str, meaning: str) -> int | None:
    """The query parameter ``name`` as an integer, None when absent or empty."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise TraceQLError(f"invalid {name}: {text!r} is not {meaning}") from None


def _seconds(request: Request, name: str) -> int | None:
    value = _integer(request, name, "unix seconds")
    if value is not None and value < 0:
        raise TraceQLError(f"invalid {name}: {value} is before 1970")
    return value


def _range(request: Request) -> tuple[int | None, int | None]:
    start, end = _seconds(request, "start"), _seconds(request, "end")
    if start is not None and end is not None and end < start:
        raise TraceQLError("invalid start and end: end is before start")
    return start, end


def _protobuf(request: Request) -> bool:
    return tempo.PROTOBUF in request.headers.get("accept", "")


def _json(data: object) -> Response:
    return Response(msgspec.json.encode(data), media_type=tempo.JSON)


async def _serve(
    request: Request, answer: Callable[[TraceQLService, str], Awaitable[Response]]
) -> Response:
    service: TraceQLService = request.app.state.traceql
    try:
        tenant = _tenant(request)
        return await answer(service, tenant)
    except TimeoutError:
        return _text(f"query timed out (query_timeout_s = {service.timeout_s:g} s)", 503)
    except (QueryError, AuthError) as exc:
        return _translate(exc)


async def _trace(request: Request, trace_id: str, version: int) -> Response:
    async def answer(service: TraceQLService, tenant: str) -> Response:
        start, end = _range(request)
        found = await service.trace(tenant, trace_id, start, end)
        if _protobuf(request):
            body = (
                tempo.v1_protobuf(found.trace)
                if version == 1
                else tempo.v2_protobuf(found.trace, found.inspected_bytes)
            )
            return Response(body, media_type=tempo.PROTOBUF)
        if version == 1:
            return _json(tempo.v1_json(found.trace))
        return _json(tempo.v2_json(found.trace, found.inspected_bytes))

    return await _serve(request, answer)


@router.get("/api/traces/{trace_id}", include_in_schema=False)
async def trace_v1(request: Request, trace_id: str) -> Response:
    return await _trace(request, trace_id, 1)


@router.get("/api/v2/traces/{trace_id}", include_in_schema=False)
async def trace_v2(request: Request, trace_id: str) -> Response:
    return await _trace(request, trace_id, 2)


def _count(request: Request, name: str, default: int) -> int:
    value = _integer(request, name, "a whole number")
    if value is None:
        return default
    if value <= 0:
        raise TraceQLError(f"invalid {name}: {value} must be positive")
    return value


def _duration(request: Request, name: str) -> int | None:
    text = (request.query_params.get(name) or "").strip()
    if not text:
        return None
    if not re.fullmatch(r"([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+", text):
        raise TraceQLError(f"invalid {name}: {text!r} is not a duration such as 100ms or 1m30s")
    return duration_ns(text)


def search_request(request: Request) -> SearchRequest:
    """A search's parameters, as Tempo's ``ParseSearchRequest`` reads them; without
    ``start`` and ``end`` the last hour."""
    start, end = _range(request)
    now = int(time.time())
    if end is None:
        end = now if start is None else max(start, now)
    if start is None:
        start = end - 3600
    return SearchRequest(
        start_ns=start * 1_000_000_000,
        end_ns=(end + 1) * 1_000_000_000,
        query=request.query_params.get("q") or "",
        tags=request.query_params.get("tags") or "",
        min_duration_ns=_duration(request, "minDuration"),
        max_duration_ns=_duration(request, "maxDuration"),
        limit=_count(request, "limit", DEFAULT_LIMIT),
        spss=_count(request, "spss", DEFAULT_SPSS),
    )


@router.get("/api/search", include_in_schema=False)
async def search(request: Request) -> Response:
    async def answer(service: TraceQLService, tenant: str) -> Response:
        return _json(await service.search(tenant, search_request(request)))

    return await _serve(request, answer)


TAGS_WINDOW_S = 3600
"""The window of tag names and values when a request names none (Tempo then answers
from its recent data)."""


def _window(request: Request, default_s: int) -> tuple[int, int]:
    start, end = _range(request)
    if end is None:
        end = int(time.time()) if start is None else max(start, int(time.time()))
    if start is None:
        start = end - default_s
    return start * 1_000_000_000, (end + 1) * 1_000_000_000


def _limit(request: Request) -> int:
    return _count(request, "limit", DEFAULT_TAG_LIMIT)


async def _tags(request: Request, v2: bool) -> Response:
    async def answer(service: TraceQLService, tenant: str) -> Response:
        start, end = _window(request, TAGS_WINDOW_S)
        found = await service.tag_names(
            tenant,
            start,
            end,
            request.query_params.get("scope"),
            request.query_params.get("q"),
            _limit(request),
            v2,
        )
        return _json(found)

    return await _serve(request, answer)


@router.get("/api/search/tags", include_in_schema=False)
async def tags_v1(request: Request) -> Response:
    return await _tags(request, v2=False)


@router.get("/api/v2/search/tags", include_in_schema=False)
async def tags_v2(request: Request) -> Response:
    return await _tags(request, v2=True)


async def _values(request: Request, name: str, v2: bool) -> Response:
    async def answer(service: TraceQLService, tenant: str) -> Response:
        start, end = _window(request, TAGS_WINDOW_S)
        q = request.query_params.get("q")
        found = await service.tag_values(tenant, name, start, end, q, _limit(request), v2)
        return _json(found)

    return await _serve(request, answer)


@router.get("/api/search/tag/{name:path}/values", include_in_schema=False)
async def values_v1(request: Request, name: str) -> Response:
    return await _values(request, name, v2=False)


@router.get("/api/v2/search/tag/{name:path}/values", include_in_schema=False)
async def values_v2(request: Request, name: str) -> Response:
    return await _values(request, name, v2=True)


@router.get("/api/echo", include_in_schema=False)
async def echo(request: Request) -> Response:
    return _after_token(request, _text("echo", 200))


@router.get("/api/status/buildinfo", include_in_schema=False)
async def buildinfo(request: Request) -> Response:
    return _after_token(
        request,
        _json(
            {
                "version": TEMPO_VERSION,
                "revision": f"shoal-{__version__}",
                "branch": "shoal",
                "buildUser": "shoal",
                "buildDate": "",
                "goVersion": "",
            }
        ),
    )
