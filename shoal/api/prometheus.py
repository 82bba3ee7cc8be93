"""The Prometheus HTTP API v1 at Prometheus' own paths (PromQL over the metrics table).

Routes translate HTTP only: parameters from the query string and, for POST, a
form-encoded body (the body wins, as in Prometheus); everything else is in
:mod:`shoal.promql`. Every answer is Prometheus' JSON envelope; errors are
``{"status": "error", "errorType": ..., "error": ...}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

import msgspec
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from shoal import __version__
from shoal.api.auth import Principal
from shoal.errors import AuthError, PermissionDeniedError, PromQLError, QueryError, QueryLimitError
from shoal.promql import engine, meta, output, tree
from shoal.promql.params import MAX_TIME_MS, MIN_TIME_MS, parse_duration, parse_time
from shoal.promql.source import QuerySource
from shoal.query.service import QueryService

logger = logging.getLogger(__name__)

router = APIRouter()

PROMETHEUS_VERSION = "2.42.0"
"""The Prometheus release whose query semantics shoal follows (buildinfo reports it)."""

_STATUS = {"bad_data": 400, "execution": 422, "timeout": 503, "unavailable": 503, "internal": 500}

Params = dict[str, list[str]]


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


async def _params(request: Request) -> Params:
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


def _one(params: Params, name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


def _range(params: Params) -> tuple[int, int]:
    start = _one(params, "start")
    end = _one(params, "end")
    start_ms = parse_time(start, "start") if start else MIN_TIME_MS
    end_ms = parse_time(end, "end") if end else MAX_TIME_MS
    if end_ms < start_ms:
        raise PromQLError('invalid parameter "end": end timestamp must not be before start time')
    # an open range reads what the tables hold; the SQL time filter needs finite bounds
    return max(start_ms, 0), min(end_ms, int(time.time() * 1000) + 86_400_000 * 365)


Handler = Callable[[Principal, QuerySource, Params], Awaitable[Any]]


async def _serve(request: Request, handler: Handler) -> Response:
    service: QueryService = request.app.state.query_service
    try:
        principal = request.app.state.authenticator.check(
            request.headers.get("authorization"), "query"
        )
        params = await _params(request)
        promote = getattr(request.app.state, "promql_promote", ())
        source = QuerySource(service, principal.tenant, promote)
        data = await asyncio.wait_for(
            handler(principal, source, params), timeout=service.limits.timeout_s
        )
    except TimeoutError:
        return _error(
            "timeout",
            f"query timed out in expression evaluation (query_timeout_s = "
            f"{service.limits.timeout_s:g} s)",
        )
    except (QueryError, AuthError, PermissionDeniedError) as exc:
        return _translate(exc)
    return _success(data)


def _timeout(params: Params) -> float | None:
    text = _one(params, "timeout")
    return parse_duration(text, "timeout") / 1000 if text else None


async def _query(principal: Principal, source: QuerySource, params: Params) -> Any:
    text = _one(params, "query")
    if text is None:
        raise PromQLError('invalid parameter "query": query must not be empty')
    when = _one(params, "time")
    t_ms = parse_time(when, "time") if when else int(time.time() * 1000)
    limit = _timeout(params)
    run = engine.evaluate(source, text, t_ms, t_ms, 1, instant=True)
    result = await (asyncio.wait_for(run, limit) if limit else run)
    return output.query_data(result)


async def _query_range(principal: Principal, source: QuerySource, params: Params) -> Any:
    text = _one(params, "query")
    if text is None:
        raise PromQLError('invalid parameter "query": query must not be empty')
    start = _one(params, "start")
    end = _one(params, "end")
    step = _one(params, "step")
    if start is None:
        raise PromQLError('invalid parameter "start": cannot parse "" to a valid timestamp')
    if end is None:
        raise PromQLError('invalid parameter "end": cannot parse "" to a valid timestamp')
    if step is None:
        raise PromQLError('invalid parameter "step": cannot parse "" to a valid duration')
    start_ms = parse_time(start, "start")
    end_ms = parse_time(end, "end")
    step_ms = parse_duration(step, "step")
    if end_ms < start_ms:
        raise PromQLError('invalid parameter "end": end timestamp must not be before start time')
    if step_ms <= 0:
        raise PromQLError(
            'invalid parameter "step": zero or negative query resolution step widths are not '
            "accepted. Try a positive integer"
        )
    if (end_ms - start_ms) // step_ms > engine.MAX_STEPS:
        raise PromQLError(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the "
            "query resolution (?step=XX)"
        )
    limit = _timeout(params)
    run = engine.evaluate(source, text, start_ms, end_ms, step_ms, instant=False)
    result = await (asyncio.wait_for(run, limit) if limit else run)
    return output.query_data(result)


def _limit(params: Params) -> int | None:
    text = _one(params, "limit")
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise PromQLError(f'invalid parameter "limit": cannot parse "{text}"') from None
    return value if value > 0 else None


async def _series(principal: Principal, source: QuerySource, params: Params) -> Any:
    texts = params.get("match[]", [])
    if not texts:
        raise PromQLError("no match[] parameter provided")
    start_ms, end_ms = _range(params)
    found = await meta.series(source, meta.selectors(texts, start_ms, end_ms), start_ms, end_ms)
    limit = _limit(params)
    return found[:limit] if limit else found


async def _labels(principal: Principal, source: QuerySource, params: Params) -> Any:
    start_ms, end_ms = _range(params)
    matches = meta.selectors(params.get("match[]", []), start_ms, end_ms)
    names = await meta.label_names(source, matches, start_ms, end_ms)
    limit = _limit(params)
    return names[:limit] if limit else names


def _label_values(name: str) -> Handler:
    async def handler(principal: Principal, source: QuerySource, params: Params) -> Any:
        if not name or not (name[0].isalpha() or name[0] == "_"):
            raise PromQLError(f'invalid label name: "{name}"')
        start_ms, end_ms = _range(params)
        matches = meta.selectors(params.get("match[]", []), start_ms, end_ms)
        values = await meta.label_values(source, name, matches, start_ms, end_ms)
        limit = _limit(params)
        return values[:limit] if limit else values

    return handler


async def _metadata(principal: Principal, source: QuerySource, params: Params) -> Any:
    start_ms, end_ms = _range(params)
    found = await meta.metadata(source, _one(params, "metric"), start_ms, end_ms)
    limit = _limit(params)
    if limit:
        found = dict(list(found.items())[:limit])
    return found


async def _exemplars(principal: Principal, source: QuerySource, params: Params) -> Any:
    text = _one(params, "query")
    if not text:
        raise PromQLError('invalid parameter "query": query must not be empty')
    start_ms, end_ms = _range(params)
    root = tree.parse(text, start_ms, end_ms)
    return await meta.exemplars(source, engine.selectors(root, start_ms, end_ms), start_ms, end_ms)


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
            return await _serve(request, h)

        return route

    router.add_api_route(path, _make(handler), methods=methods, include_in_schema=False)


@router.get("/api/v1/label/{name}/values", include_in_schema=False)
async def label_values(request: Request, name: str) -> Response:
    return await _serve(request, _label_values(name))


async def _static(request: Request, data: Any) -> Response:
    try:
        request.app.state.authenticator.check(request.headers.get("authorization"), "query")
    except (AuthError, PermissionDeniedError) as exc:
        return _translate(exc)
    return _success(data)


@router.get("/api/v1/status/buildinfo", include_in_schema=False)
async def buildinfo(request: Request) -> Response:
    return await _static(
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
    return await _static(request, {"groups": []})


@router.get("/api/v1/alerts", include_in_schema=False)
async def alerts(request: Request) -> Response:
    return await _static(request, {"alerts": []})
