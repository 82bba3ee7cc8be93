"""A real ``shoal serve`` with two tenants' data, shared by the client tests of a module."""

from __future__ import annotations

import dataclasses
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest import payloads
from loadtest.ingest import ServerProcess
from shoal.auth import TokenStore

BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class PgServer:
    process: ServerProcess
    tokens: dict[str, str]

    @property
    def port(self) -> int:
        return self.process.pg_port

    def dsn(self, tenant: str = "acme", **extra: str) -> str:
        parts = {
            "host": "127.0.0.1",
            "port": str(self.port),
            "dbname": "shoal",
            "user": tenant,
            "password": self.tokens[tenant],
            "connect_timeout": "10",
            **extra,
        }
        return " ".join(f"{k}={v}" for k, v in parts.items())


def _post(server: ServerProcess, path: str, body: bytes, token: str) -> None:
    request = urllib.request.Request(
        server.url + path,
        data=body,
        headers={"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200


def _wait_for_parquet(data_dir: Path, tenant: str, table: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    path = data_dir / "tenants" / tenant / table
    while time.monotonic() < deadline:
        if path.is_dir() and any(path.rglob("*.parquet")):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{tenant}/{table} was not flushed within {timeout}s")


def start_pg_server(base: Path, env: dict[str, str] | None = None) -> PgServer:
    """A server with tenants ``acme`` and ``globex``, each with logs, spans and metrics
    (flushed to Parquet, so the other tenant's files exist on disk)."""
    data_dir = base / "data"
    store = TokenStore(data_dir)
    tokens = {
        tenant: store.create(tenant, frozenset({"ingest", "query"}))[0]
        for tenant in ("acme", "globex")
    }
    tokens["ingest-only"] = store.create("acme", frozenset({"ingest"}))[0]
    process = ServerProcess(
        data_dir,
        env={
            "SHOAL_LOG_LEVEL": "info",
            # the server runs this checkout's code, whichever checkout the venv was built from
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
            ),
            "SHOAL_FLUSH_MAX_AGE_S": "0.5",
            "SHOAL_QUERY_TIMEOUT_S": "20",
            **(env or {}),
        },
        log_path=base / "server.log",
    ).start()
    for seed, tenant in enumerate(("acme", "globex")):
        token = tokens[tenant]
        start = BASE_NS + seed * 1_000_000
        _post(
            process,
            "/v1/logs",
            payloads.logs_request(300, start_ns=start, seed=seed).SerializeToString(),
            token,
        )
        _post(
            process,
            "/v1/traces",
            payloads.traces_request(100, start_ns=start, seed=seed).SerializeToString(),
            token,
        )
        _post(
            process,
            "/v1/metrics",
            payloads.metrics_request(400, start_ns=start, seed=seed).SerializeToString(),
            token,
        )
    for tenant in ("acme", "globex"):
        for table in ("logs", "spans", "metrics"):
            _wait_for_parquet(data_dir, tenant, table)
    return PgServer(process, tokens)


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    server = start_pg_server(tmp_path_factory.mktemp("pg"))
    try:
        yield server
    finally:
        if server.process.proc is not None and server.process.proc.poll() is None:
            server.process.kill()
