"""The server side of ingest: admission, WAL append, and waiting for the fsync.

:class:`Ingestor` implements :class:`shoal.api.ingest.IngestSink`. A decoded
table is admitted to the bounded queue, encoded as a WAL payload (off the
event loop), appended with the tag ``(tenant, table, rows)`` so the WAL's
``on_durable`` callback can add it to the snapshot without re-reading, and
the request waits for the fsync. Its queue slot is released when the WAL
resolves the append, whatever the client does meanwhile.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Protocol

import pyarrow as pa

from shoal.errors import NotReadyError, ShuttingDownError, WalFatalError
from shoal.server import records
from shoal.server.queue import IngestQueue

logger = logging.getLogger(__name__)


class Appender(Protocol):
    def append(self, payload: bytes, rtype: int = ..., tag: object = ...) -> Future[int]: ...


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"


class Ingestor:
    def __init__(
        self,
        queue: IngestQueue,
        executor: Executor,
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self.queue = queue
        self._executor = executor
        self._on_fatal = on_fatal
        self._wal: Appender | None = None
        self.state = State.STARTING

    def open(self, wal: Appender) -> None:
        """Start accepting: the WAL is open and replayed."""
        self._wal = wal
        self.state = State.READY

    def drain(self) -> None:
        """Stop accepting new requests; admitted ones still complete."""
        self.state = State.DRAINING

    def check_admission(self) -> None:
        if self.state is State.STARTING:
            raise NotReadyError("shoal is starting (replaying the WAL); retry shortly")
        if self.state is State.DRAINING:
            raise ShuttingDownError("shoal is shutting down; retry against the restarted server")
        self.queue.check()

    async def submit(self, tenant: str, signal: str, table: pa.Table) -> int:
        self.check_admission()
        wal = self._wal
        assert wal is not None
        nbytes = table.nbytes
        self.queue.acquire(nbytes)
        try:
            loop = asyncio.get_running_loop()
            payload = await loop.run_in_executor(
                self._executor, records.encode, tenant, signal, table
            )
            future = wal.append(payload, rtype=records.RTYPE_ROWS, tag=(tenant, signal, table))
        except BaseException as exc:
            self.queue.release(nbytes)
            if isinstance(exc, WalFatalError):
                self._on_fatal(exc)
            raise
        future.add_done_callback(lambda _: self.queue.release(nbytes))
        try:
            # Shielded: a client that goes away must not cancel the WAL's future.
            return await asyncio.shield(asyncio.wrap_future(future))
        except WalFatalError as exc:
            self._on_fatal(exc)
            raise
