"""Slow and idle HTTP clients are cut off by the server (``http_read_timeout_s``)."""

from __future__ import annotations

import socket
import time
import urllib.request

from tests.server.conftest import ServerFactory


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _read_response(sock: socket.socket) -> bytes:
    """One whole response (header and Content-Length body) from a keep-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += sock.recv(4096)
    return head + b"\r\n\r\n" + rest


def test_idle_slow_header_and_slow_body_connections_are_closed(
    start_server: ServerFactory,
) -> None:
    server = start_server(env={"SHOAL_HTTP_READ_TIMEOUT_S": "1"})
    idle = _connect(server.http_port)
    header = _connect(server.http_port)
    header.sendall(b"POST /api/v1/sql HTTP/1.1\r\nHost: x\r\n")  # never finishes its header
    body = _connect(server.http_port)
    body.sendall(b"POST /api/v1/sql HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nSELE")
    started = time.monotonic()
    answers = []
    for sock in (idle, header, body):
        with sock:
            answers.append(_read_all(sock))
    elapsed = time.monotonic() - started
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"http_read_timeout_s" in answer
    assert elapsed < 8, elapsed
    # a client that sends its request in time is served, on the same listener
    with urllib.request.urlopen(f"{server.url}/api/v1/sql?q=SELECT%201", timeout=10) as resp:
        assert resp.status == 200


def test_a_keep_alive_connection_is_timed_per_request(start_server: ServerFactory) -> None:
    server = start_server(env={"SHOAL_HTTP_READ_TIMEOUT_S": "1"})
    with _connect(server.http_port) as sock:
        for _ in range(3):  # each request in time, with pauses longer than the limit between
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_response(sock).startswith(b"HTTP/1.1 200 ")
            time.sleep(1.5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # then a request that stalls
        assert _read_all(sock).startswith(b"HTTP/1.1 408 ")
