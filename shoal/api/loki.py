"""Loki's HTTP API at Loki's own paths (LogQL over the logs table), for Grafana's Loki data
source: queries, the label browser, series, index stats and volume, detected labels and
fields, format_query, buildinfo and ``/ready``. The live tail is ``loki_tail.py``.

Routes translate HTTP only: parameters from the query string and, for POST, a
form-encoded body; everything else is :class:`~shoal.logql.service.LogQLService`. The
token decides the tenant (``query`` role); ``X-Scope-OrgID`` is ignored. Answers are
Loki's JSON envelope; errors are Loki's plain-text message with its status (400 for a
query that cannot be answered, 504 past the time limit).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse

from shoal.api.prometheus import Params, call, one
from shoal.errors import AuthError, PermissionDeniedError, QueryError, QueryLimitError
from shoal.logql import params as p
from shoal.logql.output import CATEGORIZE
from shoal.logql.service import LogQLService

logger = logging.getLogger(__name__)

router = APIRouter()

LOKI_VERSION = "3.5.0"
"""The Loki release whose API shoal answers as (buildinfo reports it)."""

Handler = Callable[[LogQLService, str, Params, Request], Awaitable[Any]]


def _error(message: str, status: int) -> Response:
    return PlainTextResponse(message.rstrip("\n") + "\n", status_code=status)


async def serve(request: Request, handler: Handler, envelope: bool = True) -> Response:
    """Check the token, read the parameters, run ``handler`` within the query time limit,
    and answer its data (in ``{"status": "success", "data": ...}`` when ``envelope``)."""
    service: LogQLService = request.app.state.logql
    try:
        data = await call(
            request,
            service.timeout_s,
            lambda tenant, params: handler(service, tenant, params, request),
        )
    except TimeoutError:
        return _error(
            f"the query took over its time limit (query_timeout_s = {service.timeout_s:g} s); "
            "narrow the time range or the selector",
            504,
        )
    except PermissionDeniedError as exc:
        return _error(str(exc), 403)
    except AuthError as exc:
        return _error(str(exc), 401)
    except QueryLimitError as exc:
        return _error(str(exc), 504 if exc.limit in ("time", "concurrency") else 400)
    except QueryError as exc:
        return _error(str(exc), 400)
    body = msgspec.json.encode({"status": "success", "data": data} if envelope else data)
    return Response(body, media_type="application/json")


def _categorize(request: Request) -> bool:
    flags = request.headers.get("x-loki-response-encoding-flags", "")
    return CATEGORIZE in {f.strip() for f in flags.split(",")}


def _required(params: Params, name: str) -> str:
    value = one(params, name)
    if not value:
        raise QueryError(f"missing parameter {name!r}")
    return value


async def _query_range(svc: LogQLService, tenant: str, params: Params, request: Request) -> Any:
    start, end = p.bounds(one(params, "start"), one(params, "end"), one(params, "since"))
    step_text = one(params, "step")
    step = p.seconds_or_duration(step_text, "step") if step_text else p.default_step(start, end)
    return await svc.query_range(
        tenant, _required(params, "query"), start, end, step, p.limit(one(params, "limit")),
        p.forward(one(params, "direction")), _categorize(request),
    )  # fmt: skip


async def _query(svc: LogQLService, tenant: str, params: Params, request: Request) -> Any:
    t = p.timestamp(one(params, "time"), time.time_ns(), "time")
    return await svc.query(
        tenant, _required(params, "query"), t, p.limit(one(params, "limit")),
        p.forward(one(params, "direction")), _categorize(request),
    )  # fmt: skip


def _range(params: Params) -> tuple[int, int]:
    return p.bounds(one(params, "start"), one(params, "end"), one(params, "since"))


async def _labels(svc: LogQLService, tenant: str, params: Params, _r: Request) -> Any:
    return await svc.labels(tenant, *_range(params), one(params, "query"))


async def _series(svc: LogQLService, tenant: str, params: Params, _r: Request) -> Any:
    matches = params.get("match[]", []) or params.get("match", [])
    return await svc.series(tenant, matches, *_range(params))


async def _index_stats(svc: LogQLService, tenant: str, params: Params, _r: Request) -> Any:
    return await svc.index_stats(tenant, _required(params, "query"), *_range(params))


async def _volume(
    svc: LogQLService, tenant: str, params: Params, _r: Request, *, step: bool
) -> Any:
    start, end = _range(params)
    targets = [t for t in (one(params, "targetLabels") or "").split(",") if t]
    by_labels = (one(params, "aggregateBy") or "series") == "labels"
    step_ns = 0
    if step:
        text = one(params, "step")
        step_ns = p.seconds_or_duration(text, "step") if text else p.default_step(start, end)
    return await svc.volume(
        tenant, _required(params, "query"), start, end, p.limit(one(params, "limit")),
        targets, by_labels, step_ns,
    )  # fmt: skip


async def _label_values(svc: LogQLService, tenant: str, params: Params, r: Request) -> Any:
    name = r.path_params["name"]
    return await svc.label_values(tenant, name, *_range(params), one(params, "query"))


async def _detected_labels(svc: LogQLService, tenant: str, params: Params, _r: Request) -> Any:
    found = await svc.detected_labels(tenant, one(params, "query"), *_range(params))
    return {"detectedLabels": found}


async def _detected_fields(svc: LogQLService, tenant: str, params: Params, _r: Request) -> Any:
    start, end = _range(params)
    limit = p.limit(one(params, "limit") or one(params, "field_limit") or "1000")
    line_limit = p.limit(one(params, "line_limit") or "1000")
    found = await svc.detected_fields(
        tenant, _required(params, "query"), start, end, line_limit, limit
    )
    return {"fields": found, "limit": limit}


async def _format_query(svc: LogQLService, _tenant: str, params: Params, _r: Request) -> Any:
    return svc.format_query(_required(params, "query"))


async def _buildinfo(_svc: LogQLService, _tenant: str, _params: Params, _r: Request) -> Any:
    return {"version": LOKI_VERSION, "revision": "", "branch": "", "buildUser": "",
            "buildDate": "", "goVersion": ""}  # fmt: skip


_GET = ["GET"]
_BOTH = ["GET", "POST"]

ROUTES: tuple[tuple[str, list[str], Handler, bool], ...] = (
    # path, methods, handler, whether the answer is wrapped in Loki's envelope
    ("/loki/api/v1/query_range", _BOTH, _query_range, True),
    ("/loki/api/v1/query", _BOTH, _query, True),
    ("/loki/api/v1/label", _GET, _labels, True),
    ("/loki/api/v1/labels", _GET, _labels, True),
    ("/loki/api/v1/label/{name}/values", _GET, _label_values, True),
    ("/loki/api/v1/series", _BOTH, _series, True),
    ("/loki/api/v1/index/stats", _BOTH, _index_stats, False),
    ("/loki/api/v1/index/volume", _BOTH, functools.partial(_volume, step=False), True),
    ("/loki/api/v1/index/volume_range", _BOTH, functools.partial(_volume, step=True), True),
    ("/loki/api/v1/detected_labels", _GET, _detected_labels, False),
    ("/loki/api/v1/detected_fields", _GET, _detected_fields, False),
    ("/loki/api/v1/format_query", _BOTH, _format_query, True),
    ("/loki/api/v1/status/buildinfo", _GET, _buildinfo, False),
)
"""Loki's API: every route but ``/ready`` is one :data:`Handler` that :func:`serve` runs."""


def _endpoint(handler: Handler, envelope: bool) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await serve(request, handler, envelope)

    return endpoint


for path, methods, handler, envelope in ROUTES:
    router.add_api_route(
        path, _endpoint(handler, envelope), methods=methods, include_in_schema=False
    )


@router.get("/ready", include_in_schema=False)
async def ready(request: Request) -> Response:
    if request.app.state.logql is not None and request.app.state.ready():
        return PlainTextResponse("ready\n")
    return PlainTextResponse("not ready\n", status_code=503)
