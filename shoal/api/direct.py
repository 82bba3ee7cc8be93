"""The ingest endpoints, reached straight from the HTTP listener.

An ingest request (``POST /api/v1/write``, ``/v1/metrics``, ``/v1/logs``, ``/v1/traces``)
went through about a dozen ASGI layers before its endpoint ran: FastAPI's and
Starlette's exception and telemetry middlewares, the router, one included router per
module, the route and FastAPI's dependency solving. They held the interpreter lock for
most of the event loop's time at full remote-write speed (docs/benchmarks.md), for
endpoints that take a bare ``Request``, catch every exception themselves and answer a
``Response``.

:class:`DirectRoutes` is the ASGI app the listener runs (``shoal.api.app.front_door``):
it calls the endpoint of such a request itself, and hands every other request (another
method, another path) to the FastAPI app, so a ``GET /api/v1/write`` still gets
FastAPI's 405. The table is read off the routers (:func:`post_endpoints`), so the
endpoints are registered once and both ways reach the very same functions. An
exception that escaped an endpoint would reach uvicorn, which logs it and answers 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Endpoint = Callable[[Request], Awaitable[Response]]


def post_endpoints(*routers: APIRouter) -> dict[str, Endpoint]:
    """Path -> endpoint of every ``POST`` route of ``routers``: each of them must take a
    bare ``Request`` and answer every exception itself, as the ingest endpoints do.

    Raises TypeError for a route that asks FastAPI for more than the request (a
    dependency, a path, query, header, cookie or body parameter): called directly, it
    would not get it."""
    table: dict[str, Endpoint] = {}
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute) and "POST" in (route.methods or ()):
                _check_bare(route)
                table[route.path] = route.endpoint
    return table


def _check_bare(route: APIRoute) -> None:
    found = route.dependant
    wanted = [
        name
        for name, items in (
            ("dependencies", [*found.dependencies, *route.dependencies]),
            ("path parameters", found.path_params),
            ("query parameters", found.query_params),
            ("header parameters", found.header_params),
            ("cookie parameters", found.cookie_params),
            ("a body", found.body_params),
        )
        if items
    ]
    if found.request_param_name is None:
        wanted.append("no Request parameter")
    if wanted:
        raise TypeError(
            f"POST {route.path} cannot be called directly: its endpoint must take a bare "
            f"Request and nothing else from FastAPI ({', '.join(wanted)})"
        )


class DirectRoutes:
    """Pure ASGI app: ``POST`` to a path of ``routes`` runs its endpoint directly, with
    ``app`` as the request's app (its ``state``); anything else goes to ``app``."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, Endpoint]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = self.routes.get(scope["path"])
            if endpoint is not None:
                scope["app"] = self.app
                response = await endpoint(Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
