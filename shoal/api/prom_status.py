"""The Prometheus API's status and expression endpoints, at Prometheus' paths.

* ``/api/v1/status/tsdb``: cardinality of the tenant's series (:mod:`shoal.promql.cardinality`);
* ``/api/v1/status/runtimeinfo``, ``/status/flags``, ``/status/config``: shoal's own
  facts in Prometheus' shapes, each field's choice in docs/rationale.md;
* ``/api/v1/format_query``: Prometheus' formatting (:mod:`shoal.promql.format`);
* ``/api/v1/parse_query``: the expression's tree (:mod:`shoal.promql.ast_json`).

All need a ``query`` token and answer in the Prometheus JSON envelope, as the other
Prometheus routes (shoal/api/prometheus.py, whose request helpers these share).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from typing import Any

import psutil
from fastapi import APIRouter, Request, Response

from shoal import __version__
from shoal.api.prometheus import PROMETHEUS_VERSION, Params, one, serve, static, time_range
from shoal.config import Config
from shoal.errors import PromQLError
from shoal.promql.service import PromQLService, duration_text
from shoal.promwrite import remote_read

router = APIRouter()

MAX_TSDB_LIMIT = 10_000
LOOKBACK = "5m"


def _limit(params: Params) -> int:
    text = one(params, "limit")
    if not text:
        return 10
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1:
        raise PromQLError("limit must be a positive number")
    if limit > MAX_TSDB_LIMIT:
        raise PromQLError(f"limit must not exceed {MAX_TSDB_LIMIT}")
    return limit


async def _tsdb(promql: PromQLService, tenant: str, params: Params) -> Any:
    start_ms, end_ms = time_range({})  # every series the tenant's tables hold
    return await promql.tsdb_status(tenant, start_ms, end_ms, _limit(params))


def _query_text(params: Params) -> str:
    text = one(params, "query")
    if text is None:
        raise PromQLError('invalid parameter "query": query must not be empty')
    return text


async def _format(promql: PromQLService, tenant: str, params: Params) -> Any:
    return promql.format_query(_query_text(params))


async def _parse(promql: PromQLService, tenant: str, params: Params) -> Any:
    return promql.parse_query(_query_text(params))


def _rfc3339(seconds: float) -> str:
    when = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _duration(seconds: float) -> str:
    ms = round(seconds * 1000)
    return duration_text(dt.timedelta(milliseconds=ms))


def runtime_info(settings: Config | None, damaged_segments: int) -> dict[str, Any]:
    """``/api/v1/status/runtimeinfo``: Go runtime fields get their nearest Python facts
    (threads for goroutines, usable CPUs for GOMAXPROCS) or their neutral value."""
    started = _rfc3339(psutil.Process().create_time())
    return {
        "startTime": started,
        "CWD": "",  # the server's paths stay out of tenants' answers
        "reloadConfigSuccess": True,  # settings are read once, at start
        "lastConfigTime": started,
        "corruptionCount": damaged_segments,
        "goroutineCount": threading.active_count(),
        "GOMAXPROCS": len(os.sched_getaffinity(0)),
        "GOGC": "",
        "GODEBUG": "",
        "storageRetention": f"{settings.retention_days}d" if settings is not None else "",
    }


def flags(settings: Config | None) -> dict[str, str]:
    """``/api/v1/status/flags``: the Prometheus flags whose meaning shoal has, with
    shoal's values."""
    if settings is None:
        return {"query.lookback-delta": LOOKBACK}
    return {
        "query.lookback-delta": LOOKBACK,
        "query.max-concurrency": str(settings.query_max_concurrency),
        "query.max-samples": str(settings.promql_max_samples),
        "query.timeout": _duration(settings.query_timeout_s),
        "storage.remote.read-max-bytes-in-frame": str(remote_read.MAX_FRAME_BYTES),
        "storage.remote.read-sample-limit": str(settings.promql_max_samples),
        "storage.tsdb.retention.time": f"{settings.retention_days}d",
        "web.enable-remote-write-receiver": "true",
    }


def config_yaml() -> str:
    """``/api/v1/status/config``: a Prometheus configuration that says what shoal is."""
    return (
        f"# shoal {__version__}: the Prometheus HTTP API (query semantics of Prometheus "
        f"{PROMETHEUS_VERSION})\n"
        "# over metrics received by OTLP and remote write, read back by remote read.\n"
        "# It scrapes nothing and evaluates no rules, so those lists are empty; its own\n"
        "# settings are shoal's (docs/configuration.md), some of them in /api/v1/status/flags.\n"
        "global:\n"
        "  evaluation_interval: 1m\n"
        "scrape_configs: []\n"
        "rule_files: []\n"
    )


@router.get("/api/v1/status/tsdb", include_in_schema=False)
async def tsdb(request: Request) -> Response:
    return await serve(request, _tsdb)


@router.get("/api/v1/status/runtimeinfo", include_in_schema=False)
async def runtimeinfo(request: Request) -> Response:
    settings = getattr(request.app.state, "settings", None)
    damaged = int(getattr(request.app.state, "wal_damaged_segments", 0))
    return await static(request, runtime_info(settings, damaged))


@router.get("/api/v1/status/flags", include_in_schema=False)
async def status_flags(request: Request) -> Response:
    return await static(request, flags(getattr(request.app.state, "settings", None)))


@router.get("/api/v1/status/config", include_in_schema=False)
async def status_config(request: Request) -> Response:
    return await static(request, {"yaml": config_yaml()})


@router.api_route("/api/v1/format_query", methods=["GET", "POST"], include_in_schema=False)
async def format_query(request: Request) -> Response:
    return await serve(request, _format)


@router.api_route("/api/v1/parse_query", methods=["GET", "POST"], include_in_schema=False)
async def parse_query(request: Request) -> Response:
    return await serve(request, _parse)
