"""The FastAPI application: OTLP/HTTP, the Prometheus API, health, self-metrics, tokens
and SQL.

What answers without a token is only ``/healthz`` and ``/readyz``, and the same two at
Prometheus' paths, ``/-/healthy`` and ``/-/ready`` (no tenant, path or version in them);
``/metrics`` needs the ``metrics`` or ``admin`` role once tokens exist.

The app is built from plain objects the server hands in (:class:`AppServices`);
it knows nothing of the WAL, the snapshot or prometheus_client.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from shoal.api import (
    loki,
    loki_push,
    loki_tail,
    otlp_http,
    prom_status,
    prometheus,
    remote_read,
    remote_write,
    sql,
    tempo,
    tokens,
)
from shoal.api.direct import DirectRoutes, post_endpoints
from shoal.api.status import classify
from shoal.auth import Authenticator
from shoal.errors import QueryError, ShoalError, TableNotFoundError
from shoal.ingest.feed import RowFeed
from shoal.ingest.handler import IngestHandler
from shoal.logql.service import LogQLService
from shoal.promql.service import PromQLService
from shoal.sql.service import QueryService
from shoal.traceql.service import TraceQLService
from shoal.traceql.servicegraph import ServiceGraph

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class AppServices:
    """Everything the routes need, provided by the server (or a test)."""

    authenticator: Authenticator
    ingest: IngestHandler
    is_ready: Callable[[], bool]
    metrics_exposition: Callable[[], tuple[bytes, str]]
    max_body_bytes: int
    retry_after_s: float
    query_service: QueryService | None = None
    promql: PromQLService | None = None
    """PromQL over the same tables; by default over ``query_service``'s reader."""
    logql: LogQLService | None = None
    """LogQL over the same tables; by default over ``query_service``."""
    feed: RowFeed | None = None
    """Rows as they are acknowledged, for Loki's live tail."""
    traceql: TraceQLService | None = None
    """Tempo's API over the same tables; by default over ``query_service``'s reader."""
    trouble: Callable[[], str | None] = lambda: None
    """What is wrong while the server still accepts data (flushes failing), for /readyz."""


def _error_status(exc: ShoalError, retry_after_s: float) -> int:
    if isinstance(exc, TableNotFoundError):
        return 404
    if isinstance(exc, QueryError):
        return 400
    return classify(exc, retry_after_s).http


def create_app(services: AppServices) -> FastAPI:
    app = FastAPI(
        title="shoal",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.authenticator = services.authenticator
    app.state.ingest = services.ingest
    app.state.max_body_bytes = services.max_body_bytes
    app.state.retry_after_s = services.retry_after_s
    app.state.query_service = services.query_service
    app.state.promql = services.promql
    if services.promql is None and services.query_service is not None:
        service = services.query_service
        app.state.promql = PromQLService(
            service.reader, service, derived=ServiceGraph(service.reader)
        )
    app.state.logql = services.logql
    if services.logql is None and services.query_service is not None:
        app.state.logql = LogQLService(services.query_service)
    app.state.traceql = services.traceql
    if services.traceql is None and services.query_service is not None:
        service = services.query_service
        app.state.traceql = TraceQLService(service.reader, service)
    app.state.ready = services.is_ready
    app.state.feed = services.feed
    app.include_router(otlp_http.router)
    app.include_router(prometheus.router)
    app.include_router(prom_status.router)
    app.include_router(remote_write.router)
    app.include_router(loki_push.router)
    app.include_router(loki.router)
    app.include_router(loki_tail.router)
    app.include_router(remote_read.router)
    app.include_router(tokens.router)
    app.include_router(tempo.router)

    @app.exception_handler(ShoalError)
    async def shoal_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ShoalError)
        status = _error_status(exc, services.retry_after_s)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        message = str(exc)
        if status >= 500:
            logger.error("%s %s failed: %s", request.method, request.url.path, exc)
            if status == 500:  # paths and internals stay in the log
                message = "internal error; the server log has the details"
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return PlainTextResponse("ok\n")

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        if services.is_ready():
            trouble = services.trouble()
            return PlainTextResponse("ready\n" + (f"degraded: {trouble}\n" if trouble else ""))
        return PlainTextResponse("not ready\n", status_code=503)

    # Prometheus' own health paths, for probes and tools written for a Prometheus: its
    # status codes and its words, GET and HEAD, no token (like /healthz and /readyz)
    @app.api_route("/-/healthy", methods=["GET", "HEAD"], include_in_schema=False)
    async def healthy() -> Response:
        return PlainTextResponse("shoal is Healthy.\n")

    @app.api_route("/-/ready", methods=["GET", "HEAD"], include_in_schema=False)
    async def ready() -> Response:
        if services.is_ready():
            return PlainTextResponse("shoal is Ready.\n")
        return PlainTextResponse("Service Unavailable", status_code=503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        # tenant names and volumes: a scrape needs a metrics (or admin) token
        services.authenticator.check(request.headers.get("authorization"), "metrics")
        body, content_type = services.metrics_exposition()
        return Response(body, media_type=content_type)

    app.include_router(sql.router)
    return app


def front_door(app: FastAPI) -> DirectRoutes:
    """The ASGI app the HTTP listener runs: the ingest endpoints called straight from
    the listener, every other request handed to ``app`` (shoal/api/direct.py)."""
    return DirectRoutes(
        app, post_endpoints(otlp_http.router, remote_write.router, loki_push.router)
    )
