"""The HTTP listener's protocol: uvicorn's, with a deadline for reading each request.

uvicorn closes a keep-alive connection that stays idle between requests, but it waits
without end for a request's header and body to arrive: a client that opens connections
and sends a byte now and then (or nothing at all) holds each of them, and its memory,
for as long as it likes. Here each request must arrive whole, header and body, within
``http_read_timeout_s`` of its first byte (of the connection, for the first request);
otherwise the server answers 408 if it has not answered yet, and closes the connection.
A request whose body has arrived is not timed any further: a slow query or a slow
reader of a streamed answer is the query limits' business. A WebSocket upgrade (Loki's
live tail) is a GET without a body: its message is complete, and the deadline disarmed,
before uvicorn hands the connection to its WebSocket protocol
(tests/logql/test_tail.py keeps a tail open past the deadline).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger(__name__)

_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 62\r\n"
    b"connection: close\r\n"
    b"\r\n"
    b"request not received in time (http_read_timeout_s); try again\n"
)


def protocol_class(read_timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a read deadline of ``read_timeout_s`` seconds."""

    class TimedProtocol(HttpToolsProtocol):
        _read_timer: asyncio.TimerHandle | None = None
        _headers_read = False

        def _arm(self) -> None:
            self._disarm()
            self._read_timer = self.loop.call_later(read_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _expired(self) -> None:
            self._read_timer = None
            if self.transport.is_closing():
                return
            if not self._headers_read or not self.cycle.response_started:
                self.transport.write(_TIMEOUT_RESPONSE)
            logger.info("closing a connection whose request did not arrive in time")
            self.transport.close()

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._headers_read = False
            self._arm()

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._headers_read = True

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

    return TimedProtocol
