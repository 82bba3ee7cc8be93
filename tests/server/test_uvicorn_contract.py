"""What shoal's HTTP listener takes from uvicorn beyond its public API.

shoal/server/http.py subclasses uvicorn's httptools protocol (a class of a module
uvicorn does not document) to put a deadline on reading each request, and
shoal/server/runtime.py's ``_QuietServer`` replaces ``uvicorn.Server.capture_signals``
so the runtime, not uvicorn, owns SIGTERM. Neither is covered by uvicorn's
compatibility promises: each test here names one thing they rely on, so an upgrade
that moves it fails with a message saying what broke and which shoal code to change,
instead of a timeout in a slow-client test or a server that ignores SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import re
import signal
import socket
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn

from loadtest.ingest import free_port
from shoal.server import http
from shoal.server.runtime import _QuietServer

PROTOCOL_MODULE = "uvicorn.protocols.http.httptools_impl"
HTTP_PY = "shoal/server/http.py (protocol_class)"
RUNTIME_PY = "shoal/server/runtime.py (_QuietServer, Runtime.serve)"

# methods TimedProtocol overrides and calls through super(), with the parameters it passes
OVERRIDDEN = {
    "connection_made": ["self", "transport"],
    "connection_lost": ["self", "exc"],
    "on_message_begin": ["self"],
    "on_headers_complete": ["self"],
    "on_message_complete": ["self"],
}


def _module() -> Any:
    try:
        return importlib.import_module(PROTOCOL_MODULE)
    except ImportError as exc:  # pragma: no cover - the failure this test exists for
        pytest.fail(f"uvicorn no longer has {PROTOCOL_MODULE} ({exc}): {HTTP_PY} subclasses it")


def _params(func: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(func).parameters)


def test_the_httptools_protocol_class_is_where_shoal_imports_it() -> None:
    module = _module()
    base = getattr(module, "HttpToolsProtocol", None)
    assert inspect.isclass(base), f"{PROTOCOL_MODULE}.HttpToolsProtocol is gone: {HTTP_PY}"
    assert issubclass(http.protocol_class(1.0), base)


@pytest.mark.parametrize("name", sorted(OVERRIDDEN))
def test_overridden_methods_keep_their_parameters(name: str) -> None:
    base = _module().HttpToolsProtocol
    method = getattr(base, name, None)
    assert callable(method), (
        f"HttpToolsProtocol.{name} is gone: {HTTP_PY} overrides it and calls it through "
        "super(); the read deadline would never be armed or disarmed"
    )
    assert _params(method) == OVERRIDDEN[name], (
        f"HttpToolsProtocol.{name}{inspect.signature(method)} changed its parameters; "
        f"{HTTP_PY} calls it with {OVERRIDDEN[name][1:]}"
    )


@pytest.mark.parametrize(
    ("where", "attribute", "used_as"),
    [
        ("HttpToolsProtocol.__init__", "loop", "self.loop.call_later(...) arms the deadline"),
        ("HttpToolsProtocol.connection_made", "transport", "transport.write/close: the 408"),
        ("HttpToolsProtocol.on_headers_complete", "cycle", "self.cycle: the request's cycle"),
        ("RequestResponseCycle.__init__", "response_started", "whether a 408 may be written"),
    ],
)
def test_attributes_the_protocol_reads_are_still_set(
    where: str, attribute: str, used_as: str
) -> None:
    """Each attribute is set where TimedProtocol relies on it being set by the time it
    reads it: the assignment must still be in that method of uvicorn's."""
    cls, method = where.split(".")
    source = inspect.getsource(getattr(getattr(_module(), cls), method))
    assert re.search(rf"self\.{attribute}\s*[:=]", source), (
        f"uvicorn's {where} no longer sets self.{attribute}; {HTTP_PY} reads it: {used_as}"
    )


def test_server_signal_hook_and_the_attributes_the_runtime_drives() -> None:
    hook = getattr(uvicorn.Server, "capture_signals", None)
    assert callable(hook), (
        f"uvicorn.Server.capture_signals is gone: {RUNTIME_PY} overrides it so that uvicorn "
        "installs no SIGINT/SIGTERM handlers of its own"
    )
    assert _params(hook) == ["self"], f"capture_signals{inspect.signature(hook)}: {RUNTIME_PY}"
    serve = inspect.getsource(uvicorn.Server.serve)
    assert "capture_signals" in serve, (
        f"uvicorn.Server.serve no longer enters capture_signals(): {RUNTIME_PY}'s override "
        "would not stop uvicorn from taking the signals"
    )
    assert _params(uvicorn.Server.serve) == ["self", "sockets"], (
        f"uvicorn.Server.serve{inspect.signature(uvicorn.Server.serve)}: {RUNTIME_PY} calls "
        "serve(sockets=[...]) with its pre-bound socket"
    )
    server = uvicorn.Server(uvicorn.Config(app=_noop_app))
    for attribute in ("should_exit", "started"):
        assert hasattr(server, attribute), f"uvicorn.Server().{attribute} is gone: {RUNTIME_PY}"
    config = _params(uvicorn.Config.__init__)
    for name in ("http", "lifespan", "timeout_graceful_shutdown", "timeout_keep_alive",
                 "server_header", "proxy_headers", "log_config", "access_log"):  # fmt: skip
        assert name in config, f"uvicorn.Config takes no {name}= any more: {RUNTIME_PY}"


async def _noop_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_the_subclasses_together_time_out_a_silent_client_and_leave_signals_alone() -> None:
    """The two subclasses running on the installed uvicorn: a connection that sends
    nothing gets 408 after the deadline, and serving installs no signal handler."""
    port = free_port()
    listener = socket.create_server(("127.0.0.1", port))

    async def run() -> bytes:
        before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        server = _QuietServer(
            uvicorn.Config(
                _noop_app, http=http.protocol_class(0.3), lifespan="off", log_config=None
            )
        )
        task = asyncio.create_task(server.serve(sockets=[listener]))
        try:
            async with asyncio.timeout(10):
                while not server.started:
                    await asyncio.sleep(0.01)
                assert {s: signal.getsignal(s) for s in before} == before, (
                    f"uvicorn installed signal handlers despite {RUNTIME_PY}"
                )
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                answer = await reader.read()  # until the server closes the connection
                writer.close()
                return answer
        finally:
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)

    try:
        answer = asyncio.run(run())
    finally:
        listener.close()
    assert answer.startswith(b"HTTP/1.1 408 "), f"{HTTP_PY}: a silent client got {answer!r}"
