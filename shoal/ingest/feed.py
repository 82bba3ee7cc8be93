"""Rows as they are acknowledged, for whoever follows them live (Loki's tail).

:class:`RowFeed` is the subscription hook of the ingest path: the ingestor's
``on_durable`` hands it each durable group's rows right after adding them to the
unflushed rows and before resolving the group's acks (:meth:`Ingestor.on_durable`), so a
subscriber is given every row the moment it is acknowledged, without polling any table.
Publishing costs one dictionary lookup when nobody follows a tenant's table, and no more
than appending a reference per follower otherwise: the WAL writer thread never waits on a
subscriber.

Each :class:`Subscription` buffers at most ``capacity`` rows. When a follower reads more
slowly than rows arrive, a batch that does not fit is dropped whole; the subscription
counts the dropped rows and keeps a bounded sample of them (their times and streams), so
that the follower can say what it missed, as Loki's ``dropped_entries`` do.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
from collections.abc import Sequence

import pyarrow as pa

DROPPED_SAMPLE_ROWS = 1000
"""How many dropped rows a subscription keeps (the rest are only counted)."""


@dataclasses.dataclass(eq=False)
class Subscription:
    """One follower of one tenant's table: a bounded buffer of row batches."""

    feed: RowFeed
    tenant: str
    table: str
    capacity: int
    loop: asyncio.AbstractEventLoop
    """The follower's event loop, woken when rows arrive."""
    dropped: int = dataclasses.field(default=0, init=False)
    """Rows dropped since the last :meth:`take` (all of them, sampled or not)."""
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, init=False)
    _batches: collections.deque[pa.Table] = dataclasses.field(
        default_factory=collections.deque, init=False
    )
    _rows: int = dataclasses.field(default=0, init=False)
    _dropped: list[pa.Table] = dataclasses.field(default_factory=list, init=False)
    _dropped_kept: int = dataclasses.field(default=0, init=False)
    _ready: asyncio.Event = dataclasses.field(default_factory=asyncio.Event, init=False)
    _waking: bool = dataclasses.field(default=False, init=False)

    def offer(self, rows: pa.Table) -> None:
        """Writer thread: buffer ``rows``, or drop them when they do not fit."""
        with self._lock:
            if self._rows + rows.num_rows > self.capacity:
                self.dropped += rows.num_rows
                room = DROPPED_SAMPLE_ROWS - self._dropped_kept
                if room > 0:
                    kept = rows.slice(0, room)
                    self._dropped.append(kept)
                    self._dropped_kept += kept.num_rows
            else:
                self._batches.append(rows)
                self._rows += rows.num_rows
            if self._waking:
                return
            self._waking = True
        self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._ready.set()

    async def wait(self, timeout: float) -> bool:
        """Until rows (or drops) are waiting, or ``timeout`` seconds; whether any are."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def take(self) -> tuple[list[pa.Table], list[pa.Table], int]:
        """The buffered batches, the sample of dropped rows and how many rows were dropped,
        all since the last call; the buffer is then empty."""
        with self._lock:
            batches, self._batches = list(self._batches), collections.deque()
            dropped, self._dropped = self._dropped, []
            count, self.dropped = self.dropped, 0
            self._rows = 0
            self._dropped_kept = 0
            self._waking = False
            self._ready.clear()
        return batches, dropped, count

    def close(self) -> None:
        self.feed.unsubscribe(self)


class RowFeed:
    """Who follows which tenant's table, and the hand-over of durable rows to them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._followers: dict[tuple[str, str], tuple[Subscription, ...]] = {}

    def subscribe(
        self, tenant: str, table: str, capacity: int, loop: asyncio.AbstractEventLoop
    ) -> Subscription:
        subscription = Subscription(self, tenant, table, capacity, loop)
        with self._lock:
            key = (tenant, table)
            self._followers[key] = (*self._followers.get(key, ()), subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            key = (subscription.tenant, subscription.table)
            left = tuple(s for s in self._followers.get(key, ()) if s is not subscription)
            if left:
                self._followers[key] = left
            else:
                self._followers.pop(key, None)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._followers.values())

    def publish(self, records: Sequence[tuple[str, str, pa.Table]]) -> None:
        """Writer thread: hand each durable record's rows to the followers of its table."""
        followers = self._followers  # replaced whole under the lock, read without it
        if not followers:
            return
        for tenant, table, rows in records:
            for subscription in followers.get((tenant, table), ()):
                subscription.offer(rows)
