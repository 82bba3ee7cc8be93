"""Fixtures: a real ``shoal serve`` with this checkout's code, and a real Prometheus."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus(tmp_path_factory.mktemp("prometheus"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def shoal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("shoal")
    server = ServerProcess(
        tmp / "data",
        env={"PYTHONPATH": str(REPO), "SHOAL_LOG_LEVEL": "info"},
        log_path=tmp / "server.log",
    )
    try:
        yield server.start()
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def remote_write_to(urls: list[str], series: Any) -> None:
    """Send ``series`` (``loadtest.remote_write.encode``'s input) in one remote-write 1.0
    request to each server of ``urls`` (Prometheus and shoal alike)."""
    from loadtest import remote_write

    body = remote_write.compress(remote_write.encode(series))
    headers = {
        "Content-Type": "application/x-protobuf",
        "Content-Encoding": "snappy",
        "X-Prometheus-Remote-Write-Version": "0.1.0",
    }
    for url in urls:
        status, answer = post(url + "/api/v1/write", body, headers)
        assert status in (200, 204), answer


def get_json(base: str, path: str, params: dict[str, Any] | list[tuple[str, Any]]) -> Any:
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{base}{path}?{query}", timeout=60) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())
