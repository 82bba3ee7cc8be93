"""The server side of ingest: admission, WAL append, and waiting for the fsync.

:class:`Ingestor` implements :class:`shoal.ingest.ack.IngestSink`. On the
worker thread that decoded it, a table is admitted to the bounded queue,
encoded as a WAL payload and appended with the tag ``(tenant, table, rows,
ack, bytes)``: the WAL's ``on_durable`` callback (:meth:`Ingestor.on_durable`) adds
the rows to the snapshot without re-reading them and then resolves the whole
group's acks at once. The queue slot is released when the WAL resolves the
append, whatever the client does meanwhile.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Protocol, cast

import pyarrow as pa

from shoal.errors import NotReadyError, ShuttingDownError, WalFatalError
from shoal.ingest import records
from shoal.ingest.ack import Ack, resolve_acks
from shoal.ingest.decoding import Decoded, Source
from shoal.ingest.feed import RowFeed
from shoal.ingest.queue import IngestQueue

logger = logging.getLogger(__name__)


class Appender(Protocol):
    def append(self, payload: bytes, *, rtype: int = ..., tag: object = ...) -> Future[int]: ...


class UnflushedSink(Protocol):
    def add_many(
        self,
        records: Sequence[tuple[int, tuple[str, str, pa.Table]]],
        sizes: Sequence[int | None] | None = None,
    ) -> None: ...


DurableTag = tuple[str, str, pa.Table, Ack, int]
"""Tenant, table, rows, the request's ack and the bytes its rows hold."""


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"


@dataclasses.dataclass(eq=False)
class Ingestor:
    queue: IngestQueue
    unflushed: UnflushedSink
    """Where a durable group's rows go before its acks resolve."""
    on_fatal: Callable[[BaseException], None]
    """Told of a fatal WAL error (the WAL has stopped: a failed fsync, say)."""
    feed: RowFeed | None = None
    """Who follows the rows live (Loki's tail): handed each durable group's rows."""
    state: State = dataclasses.field(default=State.STARTING, init=False)
    _wal: Appender | None = dataclasses.field(default=None, init=False)

    def open(self, wal: Appender) -> None:
        """Start accepting: the WAL is open and replayed."""
        self._wal = wal
        self.state = State.READY

    def drain(self) -> None:
        """Stop accepting new requests; admitted ones still complete."""
        self.state = State.DRAINING

    async def admit(self) -> None:
        """Refuse a request when not ready or draining, else as the queue decides
        (:meth:`IngestQueue.admit`, which may hold it back first)."""
        self._check_state()
        await self.queue.admit()
        self._check_state()  # it may have been held back meanwhile

    def _check_state(self) -> None:
        if self.state is State.STARTING:
            raise NotReadyError("shoal is starting (replaying the WAL); retry shortly")
        if self.state is State.DRAINING:
            raise ShuttingDownError("shoal is shutting down; retry against the restarted server")

    def append(self, tenant: str, rows: Decoded, ack: Ack, source: Source) -> None:
        """Decoder's thread: admit, encode (unless ``rows.payload`` is the encoded rows),
        append; ``ack`` resolves in :meth:`on_durable`.

        A protobuf request (remote write, OTLP over HTTP or gRPC) is logged as
        ``source``, its job and body, instead of its rows (``records.encode_request``).
        Admission was checked before the body was read; here the queue's own bounds are
        (:meth:`IngestQueue.acquire`, which holds the request back while the flusher's
        backlog is over its cap)."""
        self._check_state()
        wal = self._wal
        assert wal is not None
        signal, table, payload = source[0].signal, rows.table, rows.payload
        # What the rows count for is the length of their encoded rows, also when they are
        # slices of larger buffers (a decoder's cache), whose buffer sizes would count
        # those whole, and when the request is logged instead.
        if payload is not None:
            nbytes = len(payload)
        elif source[0].wire in records.LOGGED_AS_REQUESTS:
            payload = records.encode_request(tenant, signal, *source)
            nbytes = records.rows_bytes(tenant, signal, table, rows.all_null)
        else:
            payload = records.encode(tenant, signal, table)
            nbytes = len(payload)
        self.queue.acquire(nbytes)
        try:
            tag: DurableTag = (tenant, signal, table, ack, nbytes)
            future = wal.append(payload, rtype=records.RTYPE_ROWS, tag=tag)
        except BaseException as exc:
            self.queue.release(nbytes)
            if isinstance(exc, WalFatalError):
                self.on_fatal(exc)
            raise
        future.add_done_callback(functools.partial(self._appended, nbytes, ack))

    def _appended(self, nbytes: int, ack: Ack, future: Future[int]) -> None:
        """The WAL resolved an append (writer thread): free its slot; report a failure."""
        self.queue.release(nbytes)
        error = future.exception()
        if error is not None:
            if isinstance(error, WalFatalError):
                self.on_fatal(error)
            ack.fail(error)

    def on_durable(self, items: Sequence[tuple[int, object]]) -> None:
        """The WAL's callback for a durable group, in LSN order: snapshot, then acks.

        The rows are visible to queries before any request is acknowledged (and handed to
        the live followers, :attr:`feed`), and the group's acks wake each event loop once.
        """
        tagged = cast(Sequence[tuple[int, DurableTag]], items)
        self.unflushed.add_many(
            [(lsn, (t[0], t[1], t[2])) for lsn, t in tagged], [t[4] for _, t in tagged]
        )
        if self.feed is not None:
            self.feed.publish([(t[0], t[1], t[2]) for _, t in tagged])
        resolve_acks((lsn, t[3]) for lsn, t in tagged)
