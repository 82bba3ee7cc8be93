"""Real Loki shippers against a real ``shoal serve``: ``loki-logger-handler`` (PyPI, JSON
and gzip), ``winston-loki`` (npm, protobuf + snappy and JSON) and ``pino-loki`` (npm, JSON
with structured metadata), run by Debian's Node. What they sent reads back through SQL."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from loki_logger_handler.loki_logger_handler import LokiLoggerHandler

from tests.lokipush.conftest import Loki, sql

NODE_DIR = Path(__file__).parent / "node"


@pytest.fixture(scope="module")
def node_clients() -> Path:
    """The npm clients of tests/lokipush/node, installed from its lock file once."""
    assert shutil.which("node") and shutil.which("npm"), "Node and npm (Debian: nodejs npm)"
    if not (NODE_DIR / "node_modules" / "winston-loki").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=300
        )
    return NODE_DIR


def wait_for(loki: Loki, query: str, expected: int, timeout: float = 20) -> list[list[object]]:
    deadline = time.monotonic() + timeout
    while True:
        rows = sql(loki, query)
        if (rows and rows[0][0] == expected) or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


@pytest.fixture
def handler(loki: Loki) -> Iterator[LokiLoggerHandler]:
    handler = LokiLoggerHandler(
        url=f"{loki.url}/loki/api/v1/push",
        labels={"app": "py-handler", "env": "test"},
        additional_headers={"Authorization": f"Bearer {loki.token}"},
        timeout=1,
        compressed=True,
        enable_self_errors=True,
        enable_structured_loki_metadata=True,
        loki_metadata={"region": "eu"},
    )
    yield handler
    handler.close() if hasattr(handler, "close") else None


def test_loki_logger_handler(loki: Loki, handler: LokiLoggerHandler) -> None:
    log = logging.getLogger("shop.checkout")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        for i in range(25):
            log.error("payment %d failed", i) if i % 5 == 0 else log.info("payment %d ok", i)
        handler.flush() if hasattr(handler, "flush") else None
        rows = wait_for(loki, "SELECT count(*) FROM logs WHERE service_name = 'py-handler'", 25)
    finally:
        log.removeHandler(handler)
    assert rows == [[25]]
    found = sql(
        loki,
        "SELECT attributes['region'], attributes['detected_level'], count(*) FROM logs "
        "WHERE service_name = 'py-handler' GROUP BY 1, 2 ORDER BY 2",
    )
    assert found == [["eu", "error", 5], ["eu", "info", 20]]


@pytest.mark.parametrize("json", ["0", "1"])
def test_winston_loki(loki: Loki, node_clients: Path, json: str) -> None:
    env = {**os.environ, "LOKI_URL": loki.url, "LOKI_TOKEN": loki.token, "LOKI_COUNT": "30",
           "LOKI_JSON": json}  # fmt: skip
    done = subprocess.run(
        ["node", "send_winston.js"], cwd=node_clients, env=env, timeout=60,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # winston-loki's stream labels: its own, the record's, and the level
    rows = sql(
        loki,
        "SELECT resource_attributes['level'], resource_attributes['shard'], count(*) FROM logs "
        "WHERE service_name = 'winston-shop' AND resource_attributes['env'] = 'test' "
        f"AND resource_attributes['body'] = '{'json' if json == '1' else 'protobuf'}' "
        "GROUP BY 1, 2 ORDER BY 1, 2",
    )
    total = sum(int(r[2]) for r in rows)
    assert total == 30, rows
    assert {r[0] for r in rows} == {"error", "info"}


def test_pino_loki(loki: Loki, node_clients: Path) -> None:
    env = {**os.environ, "LOKI_URL": loki.url, "LOKI_TOKEN": loki.token, "LOKI_COUNT": "12"}
    done = subprocess.run(
        ["node", "send_pino.js"], cwd=node_clients, env=env, timeout=60,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = wait_for(loki, "SELECT count(*) FROM logs WHERE service_name = 'pino-shop'", 12)
    assert rows == [[12]], done.stderr
    found = sql(
        loki,
        "SELECT resource_attributes['level'], attributes['n'], trace_id, body FROM logs "
        "WHERE service_name = 'pino-shop' AND attributes['n'] = '3'",
    )
    assert found[0][:3] == ["warning", "3", "0af7651916cd43dd8448eb211c80319c"]
    assert "pino message 3" in found[0][3]
