"""A request's acknowledgement, resolved from any thread once its rows are durable.

The ingest handler (:mod:`shoal.ingest.handler`) has a request decoded (on a worker
thread or in a decoding process) and hands the rows to the ingestor with an
:class:`Ack`; the ingestor resolves the ack once the rows are durable, and a whole WAL
group of acks is resolved with a single wake-up of each event loop
(:func:`resolve_acks`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


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
