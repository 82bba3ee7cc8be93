"""The real FastAPI app (shoal.api.app.create_app) around a query service, for endpoint tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from shoal.api.app import AppServices, create_app
from shoal.auth import Authenticator, TokenStore
from shoal.sql.service import QueryService

from .helpers import Harness


class Tokens:
    def __init__(self, harness: Harness) -> None:
        self.store = TokenStore(harness.data_dir)

    def create(self, tenant: str, roles: str) -> dict[str, str]:
        token, _ = self.store.create(tenant, frozenset(roles.split(",")))
        return {"Authorization": f"Bearer {token}"}


class SyncClient:
    """An httpx client over the ASGI app, driven from synchronous tests on one event loop."""

    def __init__(self, app: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://shoal.test"
        )

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.loop.run_until_complete(self.client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@contextmanager
def client(harness: Harness, service: QueryService) -> Iterator[SyncClient]:
    with query_client(harness.data_dir, service) as tc:
        yield tc


@contextmanager
def query_client(
    data_dir: Path, service: QueryService, anonymous: bool = False
) -> Iterator[SyncClient]:
    """The app's query routes over ``service``, the tokens of ``data_dir`` checked."""
    services = AppServices(
        authenticator=Authenticator(TokenStore(data_dir), allow_anonymous=anonymous),
        ingest=None,  # type: ignore[arg-type]  # the query routes never touch ingest
        is_ready=lambda: True,
        metrics_exposition=lambda: (b"", "text/plain"),
        max_body_bytes=1 << 20,
        retry_after_s=1.0,
        query_service=service,
    )
    tc = SyncClient(create_app(services))
    try:
        yield tc
    finally:
        tc.close()
