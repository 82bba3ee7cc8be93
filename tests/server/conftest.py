"""Fixtures: a real ``shoal serve`` subprocess on free ports with a temporary data dir."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from loadtest.ingest import ServerProcess

ServerFactory = Callable[..., ServerProcess]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start servers (killed at teardown if still running); each call may pass env."""
    started: list[ServerProcess] = []

    def start(
        data_dir: Path | None = None, env: dict[str, str] | None = None, wait: bool = True
    ) -> ServerProcess:
        server = ServerProcess(
            data_dir or tmp_path / "data",
            env={"SHOAL_LOG_LEVEL": "info", **(env or {})},
            log_path=tmp_path / f"server-{len(started)}.log",
        )
        started.append(server)
        return server.start(wait=wait)

    yield start
    for server in started:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


@pytest.fixture
def server(start_server: ServerFactory) -> ServerProcess:
    return start_server()


def delta_rows(data_dir: Path, tenant: str, table: str) -> pa.Table:
    """A table's committed rows, read independently with delta-rs."""
    path = data_dir / "tenants" / tenant / table
    if not (path / "_delta_log").is_dir():
        return pa.table({})
    return DeltaTable(str(path)).to_pyarrow_table()


def scrape(server: ServerProcess, token: str | None = None) -> str:
    """``/metrics``; once tokens exist, ``token`` must hold the metrics or admin role."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(server.url + "/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=5) as resp:
        return str(resp.read().decode())


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total
