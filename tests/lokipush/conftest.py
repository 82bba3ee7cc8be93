"""A real ``shoal serve`` for the Loki tests, tokens for two tenants, and the HTTP calls
they make."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadtest import loki as push
from loadtest.ingest import ServerProcess
from shoal.auth import TokenStore

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Loki:
    server: ServerProcess
    token: str
    """tenant acme, ingest and query"""
    other: str
    """tenant other, ingest and query"""
    reader: str
    """tenant acme, query only"""

    @property
    def url(self) -> str:
        return self.server.url


def serve(tmp: Path, env: dict[str, str] | None = None) -> Iterator[Loki]:
    """A server on ``tmp/data`` with tokens for tenants acme (ingest and query; query
    only) and other (ingest and query), stopped when the generator is closed."""
    store = TokenStore(tmp / "data")
    token = store.create("acme", frozenset({"ingest", "query"}))[0]
    other = store.create("other", frozenset({"ingest", "query"}))[0]
    reader = store.create("acme", frozenset({"query"}))[0]
    server = ServerProcess(
        tmp / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_LOG_LEVEL": "warning", **(env or {})},
        log_path=tmp / "server.log",
    )
    try:
        yield Loki(server.start(), token, other, reader)
    finally:
        server.kill()


@pytest.fixture(scope="module")
def loki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loki]:
    yield from serve(tmp_path_factory.mktemp("loki"))


def push_streams(loki: Loki, streams: list[push.Stream], token: str | None = None) -> None:
    """Push ``streams`` as Promtail does (protobuf, snappy); it must be accepted whole."""
    status, _, text = post(
        f"{loki.url}/loki/api/v1/push",
        push.compress(push.encode(streams)),
        {
            "Authorization": f"Bearer {token or loki.token}",
            "Content-Type": "application/x-protobuf",
        },
    )
    assert status == 204, text


def post(
    url: str, body: bytes, headers: dict[str, str], timeout: float = 30
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def get(
    base: str,
    path: str,
    params: list[tuple[str, str]] | dict[str, str] | None = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """GET ``path`` with ``params``; the status and the JSON answer (or the text)."""
    all_headers = dict(headers or {})
    if token:
        all_headers["Authorization"] = f"Bearer {token}"
    query = urllib.parse.urlencode(params or [])
    request = urllib.request.Request(f"{base}{path}?{query}", headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def sql(loki: Loki, text: str, token: str | None = None) -> list[list[Any]]:
    status, _, raw = post(
        f"{loki.url}/api/v1/sql",
        text.encode(),
        {"Authorization": f"Bearer {token or loki.token}"},
    )
    assert status == 200, raw
    rows: list[list[Any]] = json.loads(raw)["rows"]
    return rows
