"""The seam between the ingest front doors and the queue behind them.

A front door (OTLP over HTTP or gRPC, remote write) has a request decoded
(on a worker thread or in a decoding process) and hands the rows to an :class:`IngestSink` with an
:class:`Ack`; the sink (the server's bounded queue in front of the WAL)
resolves the ack once the rows are durable, and a whole WAL group of acks
is resolved with a single wake-up of each event loop (:func:`resolve_acks`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Protocol

import pyarrow as pa


def _settle(future: asyncio.Future[int], value: int, error: BaseException | None) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def _settle_many(items: list[tuple[asyncio.Future[int], int]]) -> None:
    for future, value in items:
        _settle(future, value, None)


class Ack:
    """The completion of one ingest request, resolvable from any thread.

    ``future`` (on the request's event loop) resolves to the WAL LSN once the
    rows are durable, to 0 when there was nothing to store, or fails with the
    error that refused the request. The worker thread fills in the decode
    outcome (``accepted``, ``rejected``, ``errors``) before handing it on.
    """

    __slots__ = ("accepted", "errors", "future", "loop", "rejected")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[int] = loop.create_future()
        self.accepted = 0
        self.rejected = 0
        self.errors: list[str] = []

    def resolve(self, lsn: int) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, lsn, None)

    def fail(self, error: BaseException) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, 0, error)


def resolve_acks(acks: Iterable[tuple[int, Ack]]) -> None:
    """Resolve many acks (a WAL group) with one wake-up per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], int]]] = {}
    for lsn, ack in acks:
        by_loop.setdefault(ack.loop, []).append((ack.future, lsn))
    for loop, items in by_loop.items():
        loop.call_soon_threadsafe(_settle_many, items)


BACKLOG_POLL_S = 0.005
"""How often a request held back by the flusher's backlog (:meth:`IngestSink.backlogged`)
looks at it again: a flush round frees a whole ``flush_max_bytes`` at once, and the
request goes on within this of it."""


class IngestSink(Protocol):
    """Where decoded data goes: the server's queue in front of the WAL."""

    def check_admission(self) -> None:
        """Raise (not ready, shutting down, queue full) before any work is spent."""
        ...

    @property
    def backlog_wait_s(self) -> float:
        """Longest a request is held back while :meth:`backlogged` before it is refused."""
        ...

    def backlogged(self) -> bool:
        """Whether rows not yet flushed are over their cap: requests are held back."""
        ...

    def append(
        self,
        tenant: str,
        signal: str,
        table: pa.Table,
        ack: Ack,
        payload: bytes | None = None,
        source: tuple[Any, bytes] | None = None,
        all_null: tuple[bool, ...] | None = None,
    ) -> None:
        """On a worker thread: admit, encode and append ``table`` for ``tenant``
        (``payload``, when given, is its WAL payload, already encoded; ``source``, the
        ``shoal.ingest.decoding.DecodeJob`` and body the rows were decoded from, which the sink
        may log instead of the rows; ``all_null``, per column, whether every row is
        null, when the decoder said).

        Raises if it is refused at once; otherwise ``ack`` is resolved with the
        WAL LSN once the rows are durable (and in the snapshot), or failed.
        """
        ...
