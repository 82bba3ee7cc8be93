"""The Prometheus HTTP API v1 at Prometheus' own paths (PromQL over the metrics table).

Routes translate HTTP only: parameters from the query string and, for POST, a
form-encoded body (the body wins, as in Prometheus); everything else is in
:mod:`shoal.promql`. Every answer is Prometheus' JSON envelope; errors are
``{"status": "error", "errorType": ..., "error": ...}``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import msgspec
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from shoal import __version__
from shoal.api.access import request_principal
from shoal.errors import AuthError, PermissionDeniedError, PromQLError, QueryError, QueryLimitError
from shoal.promql.service import (
    MAX_TIME_MS,
    MIN_TIME_MS,
    PromQLService,
    parse_duration,
    parse_time,
)

logger = logging.getLogger(__name__)

router = APIRouter()

PROMETHEUS_VERSION = "2.42.0"
"""The Prometheus release whose query semantics shoal follows (buildinfo reports it)."""

_STATUS = {"bad_data": 400, "execution": 422, "timeout": 503, "unavailable": 503, "internal": 500}

Params = dict[str, list[str]]
T = TypeVar("T")


def _error(error_type: str, message: str, status: int | None = None) -> JSONResponse:
    return JSONResponse(
        {"status": "error", "errorType": error_type, "error": message},
        status_code=status or _STATUS.get(error_type, 400),
    )


def _success(data: Any) -> Response:
    # msgspec encodes a large answer (15,000 label sets) several times faster than json
    body = msgspec.json.encode({"status": "success", "data": data})
    return Response(body, media_type="application/json")


def _translate(exc: Exception) -> JSONResponse:
    if isinstance(exc, AuthError | PermissionDeniedError):
        status = 403 if isinstance(exc, PermissionDeniedError) else 401
        return _error("unauthorized" if status == 401 else "forbidden", str(exc), status)
    if isinstance(exc, PromQLError):
        return _error(exc.error_type, str(exc))
    if isinstance(exc, QueryLimitError):
        if exc.limit in ("time", "concurrency"):
            return _error("timeout", str(exc))
        return _error("execution", str(exc))
    if isinstance(exc, QueryError):
        return _error("execution", str(exc))
    raise exc


async def params_of(request: Request) -> Params:
    """A request's parameters: the query string's, and for a form-encoded POST its body's
    (which win, as in Prometheus and Loki)."""
    out: Params = {}
    if request.method == "POST":
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media == "application/x-www-form-urlencoded":
            body = (await request.body()).decode("utf-8", errors="replace")
            for k, v in parse_qsl(body, keep_blank_values=True):
                out.setdefault(k, []).append(v)
    for k, v in request.query_params.multi_items():
        if k not in out or request.method != "POST":
            out.setdefault(k, []).append(v)
    return out


def one(params: Params, name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


def time_range(params: Params) -> tuple[int, int]:
    start = one(params, "start")
    end = one(params, "end")
    start_ms = parse_time(start, "start") if start else MIN_TIME_MS
    end_ms = parse_time(end, "end") if end else MAX_TIME_MS
    if end_ms < start_ms:
        raise PromQLError('invalid parameter "end": end timestamp must not be before start time')
    # an open range reads what the tables hold; the SQL time filter needs finite bounds
    return max(start_ms, 0), min(end_ms, int(time.time() * 1000) + 86_400_000 * 365)


Handler = Callable[[PromQLService, str, Params], Awaitable[Any]]
"""A call's body: the service, the tenant and the call's parameters."""


async def call(request: Request, timeout_s: float, run: Callable[[str, Params], Awaitable[T]]) -> T:
    """A query call's steps before its answer, Prometheus' and Loki's: the token (role
    ``query``) names the tenant, the parameters are read, and ``run(tenant, params)`` has
    ``timeout_s`` to finish (``TimeoutError`` past it)."""
    tenant = request_principal(request, "query").tenant
    params = await params_of(request)
    return await asyncio.wait_for(run(tenant, params), timeout=timeout_s)


async def serve(request: Request, handler: Handler) -> Response:
    promql: PromQLService = request.app.state.promql
    try:
        data = await call(request, promql.timeout_s, functools.partial(handler, promql))
    except TimeoutError:
        return _error(
            "timeout",
            f"query timed out in expression evaluation (query_timeout_s = {promql.timeout_s:g} s)",
        )
    except (QueryError, AuthError, PermissionDeniedError) as exc:
        return _translate(exc)
    return _success(data)


def _timeout(params: Params) -> float | None:
    text = one(params, "timeout")
    return parse_duration(text, "timeout") / 1000 if text else None


def _required(params: Params, name: str) -> str:
    text = one(params, name)
    if text is None:
        raise PromQLError(f'invalid parameter "{name}": cannot parse "" to a valid {_KINDS[name]}')
    return text


_KINDS = {"start": "timestamp", "end": "timestamp", "step": "duration"}


async def _query(promql: PromQLService, tenant: str, params: Params) -> Any:
    text = one(params, "query")
    if text is None:
        raise PromQLError('invalid parameter "query": query must not be empty')
    when = one(params, "time")
    t_ms = parse_time(when, "time") if when else int(time.time() * 1000)
    return await promql.instant(tenant, text, t_ms, _timeout(params))


async def _query_range(promql: PromQLService, tenant: str, params: Params) -> Any:
    text = one(params, "query")
    if text is None:
        raise PromQLError('invalid parameter "query": query must not be empty')
    start_ms = parse_time(_required(params, "start"), "start")
    end_ms = parse_time(_required(params, "end"), "end")
    step_ms = parse_duration(_required(params, "step"), "step")
    return await promql.range(tenant, text, start_ms, end_ms, step_ms, _timeout(params))


def _limit(params: Params) -> int | None:
    text = one(params, "limit")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise PromQLError(f'invalid parameter "limit": cannot parse "{text}"') from None
    return value if value > 0 else None


def _limited(found: list[T], params: Params) -> list[T]:
    limit = _limit(params)
    return found[:limit] if limit else found


async def _series(promql: PromQLService, tenant: str, params: Params) -> Any:
    start_ms, end_ms = time_range(params)
    found = await promql.series(tenant, params.get("match[]", []), start_ms, end_ms)
    return _limited(found, params)


async def _labels(promql: PromQLService, tenant: str, params: Params) -> Any:
    start_ms, end_ms = time_range(params)
    names = await promql.label_names(tenant, params.get("match[]", []), start_ms, end_ms)
    return _limited(names, params)


def _label_values(name: str) -> Handler:
    async def handler(promql: PromQLService, tenant: str, params: Params) -> Any:
        start_ms, end_ms = time_range(params)
        matches = params.get("match[]", [])
        return _limited(await promql.label_values(tenant, name, matches, start_ms, end_ms), params)

    return handler


async def _metadata(promql: PromQLService, tenant: str, params: Params) -> Any:
    start_ms, end_ms = time_range(params)
    found = await promql.metadata(tenant, one(params, "metric"), start_ms, end_ms)
    limit = _limit(params)
    if limit:
        found = dict(list(found.items())[:limit])
    return found


async def _exemplars(promql: PromQLService, tenant: str, params: Params) -> Any:
    text = one(params, "query")
    if not text:
        raise PromQLError('invalid parameter "query": query must not be empty')
    start_ms, end_ms = time_range(params)
    return await promql.exemplars(tenant, text, start_ms, end_ms)


for path, handler, methods in (
    ("/api/v1/query", _query, ["GET", "POST"]),
    ("/api/v1/query_range", _query_range, ["GET", "POST"]),
    ("/api/v1/series", _series, ["GET", "POST"]),
    ("/api/v1/labels", _labels, ["GET", "POST"]),
    ("/api/v1/metadata", _metadata, ["GET"]),
    ("/api/v1/query_exemplars", _exemplars, ["GET", "POST"]),
):

    def _make(h: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            return await serve(request, h)

        return route

    router.add_api_route(path, _make(handler), methods=methods, include_in_schema=False)


@router.get("/api/v1/label/{name}/values", include_in_schema=False)
async def label_values(request: Request, name: str) -> Response:
    return await serve(request, _label_values(name))


async def static(request: Request, data: Any) -> Response:
    try:
        request_principal(request, "query")
    except (AuthError, PermissionDeniedError) as exc:
        return _translate(exc)
    return _success(data)


@router.get("/api/v1/status/buildinfo", include_in_schema=False)
async def buildinfo(request: Request) -> Response:
    return await static(
        request,
        {
            "version": PROMETHEUS_VERSION,
            "revision": f"shoal-{__version__}",
            "branch": "shoal",
            "buildUser": "shoal",
            "buildDate": "",
            "goVersion": "",
        },
    )


@router.get("/api/v1/rules", include_in_schema=False)
async def rules(request: Request) -> Response:
    return await static(request, {"groups": []})


@router.get("/api/v1/alerts", include_in_schema=False)
async def alerts(request: Request) -> Response:
    return await static(request, {"alerts": []})
