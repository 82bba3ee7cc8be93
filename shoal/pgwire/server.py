"""The PostgreSQL-protocol listener: connections, TLS, authentication, cancel requests.

A connection starts with an optional ``SSLRequest`` (answered ``S`` and
upgraded when a certificate is configured, else ``N``), then a startup packet
naming the user and the database (``shoal``). The password is a shoal token:
the server asks for it in cleartext, which it accepts only inside TLS or from
a loopback peer, and checks it with the same authenticator as the HTTP side
(the token decides the tenant; it needs the ``query`` role). With no tokens
configured and anonymous access allowed (a loopback bind), no password is
asked and the session acts as tenant ``default``. Nothing but the error is
answered before authentication succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import secrets
import ssl
from typing import Any

from shoal.auth import Authenticator
from shoal.errors import AuthError
from shoal.pgwire import codec, extended, simple, statements
from shoal.pgwire.session import Session
from shoal.sql.service import QueryService

logger = logging.getLogger(__name__)

DATABASE = "shoal"
READ_BYTES = 64 * 1024
AUTH_TIMEOUT_S = 30.0
"""A client must finish startup and authentication within this time."""


class _Closed(Exception):
    """The client went away (or was sent a fatal error)."""


def _loopback(peer: Any) -> bool:
    if not isinstance(peer, tuple) or not peer:
        return True  # a Unix socket
    try:
        return ipaddress.ip_address(str(peer[0]).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class Connection:
    def __init__(
        self,
        server: PgServer,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.decoder = codec.FrontendDecoder(server.max_message_bytes)
        self.tls = False
        self.session: Session | None = None

    async def _message(self) -> codec.FrontendMessage:
        while True:
            message = self.decoder.next()
            if message is not None:
                return message
            data = await self.reader.read(READ_BYTES)
            if not data:
                raise _Closed()
            self.decoder.feed(data)

    def _fatal(self, code: str, message: str) -> _Closed:
        self.writer.write(codec.error_response(code, message, fatal=True))
        return _Closed(message)

    async def _startup(self) -> codec.Startup | None:
        """Reads until the startup packet; None for a cancel request (already handled)."""
        while True:
            message = await self._message()
            if isinstance(message, codec.SSLRequest):
                if self.server.ssl_context is None or self.tls:
                    self.writer.write(b"N")
                    continue
                if self.decoder.buffered:
                    raise self._fatal("08P01", "data received after SSLRequest before TLS began")
                self.writer.write(b"S")
                await self.writer.drain()
                await self.writer.start_tls(self.server.ssl_context)
                self.tls = True
                continue
            if isinstance(message, codec.GSSEncRequest):
                self.writer.write(b"N")
                continue
            if isinstance(message, codec.CancelRequest):
                self.server.cancel(message.pid, message.secret)
                return None
            assert isinstance(message, codec.Startup)
            return message

    async def _authenticate(self, startup: codec.Startup) -> tuple[str, str]:
        """Returns (tenant, user name); raises _Closed after a fatal error."""
        if startup.params.get("replication"):
            raise self._fatal("28000", "shoal does not serve replication connections")
        user = startup.params.get("user", "")
        database = startup.params.get("database") or DATABASE
        if database != DATABASE:
            raise self._fatal(
                "3D000", f'database "{database}" does not exist: connect to database "shoal"'
            )
        peer = self.writer.get_extra_info("peername")
        try:
            principal = self.server.authenticator.check(None, "query")
            return principal.tenant, user
        except AuthError:
            pass
        if not self.tls and not _loopback(peer):
            raise self._fatal(
                "28000",
                "shoal accepts passwords (tokens) only over TLS from this address: "
                "connect with sslmode=require",
            )
        self.writer.write(codec.authentication_cleartext())
        await self.writer.drain()
        message = await self._message()
        if not isinstance(message, codec.Password):
            raise self._fatal("08P01", "expected a password message")
        token = message.password.strip()
        try:
            principal = self.server.authenticator.check(
                f"Bearer {token}" if token else None, "query"
            )
        except AuthError as exc:
            logger.info("pgwire authentication failed for user %r from %s: %s", user, peer, exc)
            raise self._fatal(
                "28P01", f'password authentication failed for user "{user}": {exc}'
            ) from None
        return principal.tenant, user

    async def run(self, refuse: bool = False) -> None:
        """Serve the client until it goes. ``refuse``: the server is full; the client is told
        so once its startup packet came."""
        try:
            try:
                startup = await asyncio.wait_for(self._startup(), AUTH_TIMEOUT_S)
                if startup is None:
                    return
                if refuse:
                    # answered after the startup packet, as PostgreSQL does when full
                    logger.warning("pgwire connection refused: pg_max_connections reached")
                    raise self._fatal(
                        "53300", "sorry, too many clients already (pg_max_connections)"
                    )
                tenant, user = await asyncio.wait_for(self._authenticate(startup), AUTH_TIMEOUT_S)
            except TimeoutError:
                raise self._fatal("08P01", "startup and authentication took too long") from None
            await self._serve(tenant, user, startup.params.get("application_name", ""))
        except _Closed:
            pass
        except codec.ProtocolError as exc:
            with contextlib.suppress(Exception):
                self.writer.write(codec.error_response(exc.code, str(exc), fatal=True))
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
            logger.debug("pgwire connection lost: %s", exc)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self.writer.write(
                    codec.error_response(
                        "57P01", "terminating connection: shoal is shutting down", fatal=True
                    )
                )
            raise
        except Exception:
            logger.exception("pgwire connection failed")
        finally:
            if self.session is not None:
                self.session.close()
                self.server.sessions.pop(self.session.pid, None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.drain(), 1.0)
            self.writer.close()

    async def _serve(self, tenant: str, user: str, application_name: str) -> None:
        pid, secret = self.server.new_key()
        settings = statements.initial_settings(user, application_name)
        transport = self.writer.transport
        session = Session(
            self.server.service,
            tenant,
            user,
            pid,
            settings,
            self.writer.write,
            self.writer.drain,
            transport.get_write_buffer_size,
            lambda: self.reader.at_eof() or transport.is_closing(),
        )
        self.session = session
        self.server.sessions[pid] = (secret, session)
        out = [codec.authentication_ok()]
        for name in statements.STARTUP_REPORTED:
            out.append(codec.parameter_status(name, settings[name.lower()]))
        out.append(codec.backend_key_data(pid, secret))
        out.append(session.ready())
        self.writer.write(b"".join(out))
        await self.writer.drain()
        logger.debug("pgwire session %d of tenant %s (user %r) started", pid, tenant, user)
        while True:
            message = await self._message()
            if message is codec.Signal.TERMINATE:
                return
            if isinstance(message, codec.Query):
                await simple.query(session, message.sql)
            elif isinstance(
                message, codec.Parse | codec.Bind | codec.Describe | codec.Execute | codec.Close
            ) or message in (codec.Signal.SYNC, codec.Signal.FLUSH):
                await extended.handle(session, message)
            elif isinstance(message, codec.CopyData | codec.CopyFail) or (
                message is codec.Signal.COPY_DONE
            ):
                continue  # stray COPY input: ignored, as PostgreSQL does outside COPY IN
            else:
                raise self._fatal("08P01", f"unexpected {type(message).__name__} message")


@dataclasses.dataclass(eq=False)
class PgServer:
    """The listener; :meth:`start` binds, :meth:`close` stops it and ends every session."""

    service: QueryService
    authenticator: Authenticator
    ssl_context: ssl.SSLContext | None = None
    max_message_bytes: int = 1 << 20
    max_connections: int = 64
    sessions: dict[int, tuple[int, Session]] = dataclasses.field(default_factory=dict, init=False)
    """By process id: the cancel key's secret, and the session."""
    port: int = dataclasses.field(default=0, init=False)
    _server: asyncio.Server | None = dataclasses.field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set, init=False)
    _next_pid: int = dataclasses.field(
        default_factory=lambda: 1000 + secrets.randbelow(1000), init=False
    )

    def new_key(self) -> tuple[int, int]:
        self._next_pid += 1
        return self._next_pid, secrets.randbits(31)

    def cancel(self, pid: int, secret: int) -> None:
        entry = self.sessions.get(pid)
        if entry is None or not secrets.compare_digest(
            entry[0].to_bytes(4, "big"), secret.to_bytes(4, "big", signed=True)
        ):
            logger.info("pgwire cancel request for unknown session %d ignored", pid)
            return
        if entry[1].cancel():
            logger.info("pgwire query of session %d cancelled", pid)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        full = len(self._tasks) >= self.max_connections
        self._tasks.add(task)
        try:
            await Connection(self, reader, writer).run(refuse=full)
        finally:
            self._tasks.discard(task)

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port, limit=READ_BYTES)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)
