"""The ingest endpoints reached without FastAPI's routing (shoal/api/direct.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from shoal.api import otlp_http, remote_write
from shoal.api.app import AppServices, create_app, front_door
from shoal.api.direct import DirectRoutes, post_endpoints
from shoal.auth import Authenticator, TokenStore
from shoal.ingest.handler import IngestHandler


class _Inner:
    """The rest of the ASGI stack: records what reached it and answers 299."""

    def __init__(self) -> None:
        self.paths: list[tuple[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.paths.append((scope.get("method", scope["type"]), scope.get("path", "")))
        await PlainTextResponse("inner", 299)(scope, receive, send)


async def _endpoint(request: Request) -> Response:
    body = await request.body()
    return PlainTextResponse(f"direct {request.url.path} {len(body)}", 202)


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def test_only_a_post_to_a_listed_path_skips_the_stack() -> None:
    inner = _Inner()
    app = DirectRoutes(inner, {"/in": _endpoint})

    async def run() -> list[httpx.Response]:
        async with _client(app) as c:
            return [
                await c.post("/in", content=b"12345"),
                await c.get("/in"),
                await c.put("/in", content=b"x"),
                await c.post("/in/", content=b"x"),
                await c.post("/other", content=b"x"),
            ]

    direct, get, put, slash, other = asyncio.run(run())
    assert (direct.status_code, direct.text) == (202, "direct /in 5")
    assert [r.status_code for r in (get, put, slash, other)] == [299] * 4
    assert inner.paths == [("GET", "/in"), ("PUT", "/in"), ("POST", "/in/"), ("POST", "/other")]


def test_a_direct_endpoint_sees_the_app_it_bypasses() -> None:
    """The endpoints read their services off ``request.app.state``: the app below."""
    inner = _Inner()
    seen: list[Any] = []

    async def endpoint(request: Request) -> Response:
        seen.append(request.app)
        return PlainTextResponse("ok")

    async def run() -> httpx.Response:
        async with _client(DirectRoutes(inner, {"/in": endpoint})) as c:
            return await c.post("/in", content=b"x")

    assert asyncio.run(run()).status_code == 200
    assert seen == [inner] and inner.paths == []


def test_the_table_names_the_routers_own_endpoints() -> None:
    """The ingest endpoints are called directly by the very functions the routers would
    call: the two ways to reach an endpoint cannot answer differently."""
    table = post_endpoints(otlp_http.router, remote_write.router)
    assert table == {
        "/v1/metrics": otlp_http.export_metrics,
        "/api/v1/otlp/v1/metrics": otlp_http.export_metrics,
        "/v1/logs": otlp_http.export_logs,
        "/v1/traces": otlp_http.export_traces,
        "/api/v1/write": remote_write.write,
    }


class _Unreached:
    """A sink no request here reaches: each is refused at authentication."""

    async def admit(self) -> None:
        raise AssertionError("an unauthenticated request reached the sink")

    def append(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("an unauthenticated request reached the sink")


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return front_door(
        create_app(
            AppServices(
                authenticator=Authenticator(TokenStore(tmp_path), allow_anonymous=False),
                ingest=IngestHandler(_Unreached()),
                is_ready=lambda: True,
                metrics_exposition=lambda: (b"", "text/plain"),
                max_body_bytes=1 << 20,
                retry_after_s=1.0,
            )
        )
    )


def test_the_app_answers_ingest_directly_and_the_rest_as_before(app: Any) -> None:
    assert isinstance(app, DirectRoutes) and not app.app.user_middleware

    async def run() -> list[httpx.Response]:
        async with _client(app) as c:
            return [
                await c.post("/api/v1/write", content=b"x"),
                await c.post("/v1/metrics", content=b"x"),
                await c.get("/api/v1/write"),
                await c.get("/v1/metrics"),
                await c.get("/healthz"),
            ]

    write, metrics, get_write, get_metrics, health = asyncio.run(run())
    # no token: the endpoints' own answers (remote write's text, OTLP's Status)
    assert write.status_code == 401 and "token" in write.text.lower()
    assert metrics.status_code == 401
    assert metrics.headers["content-type"].startswith("application/json")
    # other methods still reach FastAPI's router
    assert (get_write.status_code, get_metrics.status_code) == (405, 405)
    assert health.text == "ok\n"


def test_every_direct_endpoint_answers_what_it_refuses(app: Any) -> None:
    """No layer above catches what a directly called endpoint raises: each one of the
    table answers a request without a token itself, with its own 401."""
    paths = sorted(post_endpoints(otlp_http.router, remote_write.router))

    async def run() -> list[tuple[str, int, str]]:
        async with _client(app) as c:
            answers = [await c.post(path, content=b"\xff") for path in paths]
        return [(p, r.status_code, r.text.lower()) for p, r in zip(paths, answers, strict=True)]

    answered = asyncio.run(run())
    assert len(answered) == 5
    assert all(status == 401 and "token" in text for _, status, text in answered), answered


async def _with_query(request: Request, limit: int = 10) -> Response:
    return PlainTextResponse(str(limit))


def _needs_token(request: Request) -> str:
    return "t"


async def _with_dependency(request: Request, token: str = Depends(_needs_token)) -> Response:
    return PlainTextResponse(token)


async def _without_request() -> Response:
    return PlainTextResponse("")


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        (_with_query, "query parameters"),
        (_with_dependency, "dependencies"),
        (_without_request, "no Request parameter"),
    ],
)
def test_a_route_that_needs_more_than_the_request_is_refused(endpoint: Any, why: str) -> None:
    """Called directly, an endpoint gets the request and nothing FastAPI would have
    worked out for it: such a route is refused when the table is built, not served
    wrong."""
    router = APIRouter()
    router.add_api_route("/in", _endpoint, methods=["POST"])
    router.add_api_route("/needy", endpoint, methods=["POST"])
    router.add_api_route("/needy", endpoint, methods=["GET"])  # other methods: not checked
    with pytest.raises(TypeError, match=rf"POST /needy .*{why}"):
        post_endpoints(router)
    fine = APIRouter()
    fine.add_api_route("/in", _endpoint, methods=["POST"])
    fine.add_api_route("/needy", endpoint, methods=["GET"])
    assert post_endpoints(fine) == {"/in": _endpoint}
