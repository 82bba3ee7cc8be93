"""The bounded ingest queue: admission by requests and by bytes, and the flusher's backlog.

This is ingest's one admission and backpressure path, at its two moments: every door
awaits :meth:`IngestQueue.admit` before it reads or decodes a request, and the ingestor
calls :meth:`IngestQueue.acquire` for the decoded rows before their WAL append.

The queue is the budget in front of the WAL writer. A request holds a slot
from admission (after decoding) until the WAL has fsynced it; a request that
does not fit is refused at once with :class:`~shoal.errors.OverloadedError`
(HTTP 429, 503 to remote write / gRPC UNAVAILABLE), never parked, so memory stays
bounded under any offered load. A single request larger than the byte budget is admitted
only into an empty queue, so it cannot starve.

The queue also holds requests back while the flusher's backlog (the snapshot's
bytes, read through ``backlog``) is above ``max_backlog_bytes``: acknowledged rows
wait in memory until a flush commits them, so a flusher that falls behind must slow
ingest down rather than let the snapshot grow without bound. A request that finds
the backlog over its cap when it is appended waits, up to ``backlog_wait_s``, for the
flusher to bring it back under (the one decoded request is all that waits; the
requests behind it wait for the ingest thread), and is refused only if it does not
(docs/rationale.md, "The flusher's backlog holds ingest back before it refuses it").

Depth and bytes are read on scrape; overflows are counted by reason.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable

from shoal.errors import OverloadedError

BACKLOG_POLL_S = 0.005
"""How often a request held back by the flusher's backlog looks at it again: a flush
round frees a whole ``flush_max_bytes`` at once, and the request goes on within this
of it."""

MAX_HELD = 64
"""Most requests held back at once before their bodies are read; more are refused at
once (each holds its connection, and over gRPC its message)."""


@dataclasses.dataclass(eq=False)
class IngestQueue:
    """The bounds (requests and bytes in flight, the backlog's cap and wait) and the
    callbacks that report what the queue does (overflows by reason, waits)."""

    max_requests: int
    max_bytes: int
    retry_after_s: float
    on_overflow: Callable[[str], None] | None = None
    backlog: Callable[[], int] | None = None
    """The flusher's backlog in bytes (the unflushed rows'), read when it matters."""
    max_backlog_bytes: int = 0
    backlog_wait_s: float = 0.0
    on_wait: Callable[[float], None] | None = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, init=False)
    _requests: int = dataclasses.field(default=0, init=False)
    _bytes: int = dataclasses.field(default=0, init=False)
    _held: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        self._drained = threading.Condition(self._lock)

    @property
    def depth(self) -> int:
        return self._requests

    @property
    def bytes(self) -> int:
        return self._bytes

    async def admit(self) -> None:
        """Before a request's body is read or decoded: while the backlog is over its cap,
        hold the request back (on the event loop) for up to ``backlog_wait_s``, then
        refuse it (OverloadedError) if no slot is free or the backlog is still over.

        A sender held back here, its body still unread, is slowed down by the flusher's
        pace instead of refused: refused, it would sleep its whole backoff however soon
        the flush round ended (docs/rationale.md)."""
        if self.backlog_wait_s > 0 and self._held < MAX_HELD and self.backlogged():
            began = time.monotonic()
            self._held += 1
            try:
                while self.backlogged() and time.monotonic() - began < self.backlog_wait_s:
                    await asyncio.sleep(BACKLOG_POLL_S)
            finally:
                self._held -= 1
                if self.on_wait is not None:
                    self.on_wait(time.monotonic() - began)
        self.check()

    def check(self) -> None:
        """Refuse early (before a body is read or decoded) when no request slot is free."""
        if self._requests >= self.max_requests:
            self._overflow("requests")
        if self.backlogged():
            self._overflow("snapshot")

    def backlogged(self) -> bool:
        """Whether the flusher's backlog is over its cap (ingest is held back, then refused)."""
        return (
            self.backlog is not None
            and self.max_backlog_bytes > 0
            and self.backlog() > self.max_backlog_bytes
        )

    def acquire(self, nbytes: int) -> None:
        """Take a slot for a decoded request of ``nbytes``, waiting up to
        ``backlog_wait_s`` while the backlog is over its cap; raises OverloadedError when
        no slot is free, or the backlog is still over its cap after the wait."""
        if self.backlogged() and not self._wait_backlog():
            self._overflow("snapshot")
        with self._lock:
            if self._requests >= self.max_requests:
                reason = "requests"
            elif self._bytes + nbytes > self.max_bytes and self._requests > 0:
                reason = "bytes"
            else:
                self._requests += 1
                self._bytes += nbytes
                return
        self._overflow(reason)

    def _wait_backlog(self) -> bool:
        """Sleep until the backlog is under its cap (True) or ``backlog_wait_s`` passed."""
        began = time.monotonic()
        deadline = began + self.backlog_wait_s
        try:
            while self.backlogged():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(BACKLOG_POLL_S, left))
            return True
        finally:
            if self.on_wait is not None and self.backlog_wait_s > 0:
                self.on_wait(time.monotonic() - began)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._requests -= 1
            self._bytes -= nbytes
            if self._requests == 0:
                self._drained.notify_all()

    def wait_empty(self, timeout: float) -> bool:
        """Block until no request is in flight; False on timeout."""
        with self._lock:
            return self._drained.wait_for(lambda: self._requests == 0, timeout)

    def _overflow(self, reason: str) -> None:
        if self.on_overflow is not None:
            self.on_overflow(reason)
        raise OverloadedError(reason, self.retry_after_s)
