"""The listener: TLS, refusal of plain passwords off loopback, and garbage on the socket."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import psycopg
import pytest

from loadtest.ingest import free_port
from shoal.auth import TokenStore

from .conftest import ROOT, PgServer, start_pg_server

DATA = Path(__file__).parent / "data"
"""A self-signed certificate for localhost/127.0.0.1 (valid until 2126), for tests only."""


@pytest.fixture(scope="module")
def tls_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    server = start_pg_server(
        tmp_path_factory.mktemp("pgtls"),
        env={
            "SHOAL_PG_TLS_CERT": str(DATA / "server.crt"),
            "SHOAL_PG_TLS_KEY": str(DATA / "server.key"),
            "SHOAL_PG_MAX_CONNECTIONS": "3",
        },
    )
    try:
        yield server
    finally:
        if server.process.proc is not None and server.process.proc.poll() is None:
            server.process.kill()


def test_tls_is_offered_and_used(tls_pg: PgServer) -> None:
    dsn = tls_pg.dsn(sslmode="verify-full", sslrootcert=str(DATA / "server.crt"))
    dsn = dsn.replace("host=127.0.0.1", "host=localhost hostaddr=127.0.0.1")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        assert conn.execute("SELECT count(*) FROM logs").fetchone() == (300,)
    with psycopg.connect(tls_pg.dsn(sslmode="disable"), autocommit=True) as plain:
        assert not plain.pgconn.ssl_in_use  # loopback: plain connections stay allowed
        assert plain.execute("SELECT 1 AS x").fetchone() == (1,)

    async def with_asyncpg() -> int:
        context = ssl.create_default_context(cafile=str(DATA / "server.crt"))
        conn = await asyncpg.connect(
            host="localhost",
            port=tls_pg.port,
            user="acme",
            password=tls_pg.tokens["acme"],
            database="shoal",
            ssl=context,
        )
        try:
            return int(await conn.fetchval("SELECT count(*) FROM spans"))
        finally:
            await conn.close()

    import asyncio

    assert asyncio.run(with_asyncpg()) == 100


def test_public_bind_without_tls_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    TokenStore(data).create("acme", frozenset({"query"}))
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        SHOAL_DATA_DIR=str(data),
        SHOAL_BIND="0.0.0.0",
        SHOAL_HTTP_PORT=str(free_port()),
        SHOAL_GRPC_PORT=str(free_port()),
        SHOAL_PG_PORT=str(free_port()),
        SHOAL_PG_ENABLED="true",
    )
    done = subprocess.run(
        [sys.executable, "-m", "shoal.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "without TLS" in done.stderr and "pg_tls_cert" in done.stderr


def _raw(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_garbage_and_truncated_messages_end_only_their_own_connection(pg: PgServer) -> None:
    with psycopg.connect(pg.dsn(), autocommit=True) as bystander:
        # a bad startup packet
        reply = _raw(pg.port, b"\x00\x00\x00\x05garbage")
        assert reply.startswith(b"E") and b"08P01" in reply
        # an unsupported protocol version
        reply = _raw(pg.port, struct.pack("!II", 8, 2 << 16))
        assert b"unsupported frontend protocol" in reply
        # a message before authentication ends the connection without an answer to it
        startup = b"user\x00acme\x00database\x00shoal\x00\x00"
        packet = struct.pack("!II", len(startup) + 8, 196608) + startup
        query = b"Q" + struct.pack("!I", 13) + b"SELECT 1\x00"
        reply = _raw(pg.port, packet + query)
        assert reply.startswith(b"R") and b"expected a password message" in reply
        # a cancel request with a wrong key is ignored
        _raw(pg.port, struct.pack("!IIii", 16, 80877102, 1, 2))
        # truncated and random bytes
        for junk in (packet[:7], os.urandom(64), b"\xff" * 4, struct.pack("!I", 2**31)):
            _raw(pg.port, junk)
        assert bystander.execute("SELECT count(*) FROM logs").fetchone() == (300,)
    # an authenticated session that sends an unknown message type gets an error
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        fd = conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
        sock.setblocking(True)
        sock.settimeout(10)
        try:
            sock.sendall(b"\x01" + struct.pack("!I", 4))
            reply = sock.recv(65536)
        finally:
            sock.close()
        assert b"08P01" in reply and b"unknown frontend message" in reply
    with psycopg.connect(pg.dsn(), autocommit=True) as after:
        assert after.execute("SELECT 9 AS x").fetchone() == (9,)


def test_connections_beyond_the_limit_are_refused_with_53300(tls_pg: PgServer) -> None:
    held = [psycopg.connect(tls_pg.dsn(), autocommit=True) for _ in range(3)]
    try:
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(tls_pg.dsn())
        assert held[0].execute("SELECT 1 AS x").fetchone() == (1,)
    finally:
        for conn in held:
            conn.close()
    with psycopg.connect(tls_pg.dsn(), autocommit=True) as conn:  # freed again
        assert conn.execute("SELECT 2 AS x").fetchone() == (2,)
