"""The bounded ingest queue: admission by requests and by bytes.

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

import threading
import time
from collections.abc import Callable

from shoal.ack import BACKLOG_POLL_S
from shoal.errors import OverloadedError


class IngestQueue:
    def __init__(
        self,
        max_requests: int,
        max_bytes: int,
        retry_after_s: float,
        on_overflow: Callable[[str], None] | None = None,
        backlog: Callable[[], int] | None = None,
        max_backlog_bytes: int = 0,
        backlog_wait_s: float = 0.0,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self._on_overflow = on_overflow
        self._backlog = backlog
        self.max_backlog_bytes = max_backlog_bytes
        self.backlog_wait_s = backlog_wait_s
        self._on_wait = on_wait
        self._lock = threading.Lock()
        self._requests = 0
        self._bytes = 0
        self._drained = threading.Condition(self._lock)

    @property
    def depth(self) -> int:
        return self._requests

    @property
    def bytes(self) -> int:
        return self._bytes

    def check(self) -> None:
        """Refuse early (before a body is read or decoded) when no request slot is free."""
        if self._requests >= self.max_requests:
            self._overflow("requests")
        if self.backlogged():
            self._overflow("snapshot")

    def backlogged(self) -> bool:
        """Whether the flusher's backlog is over its cap (ingest is held back, then refused)."""
        return (
            self._backlog is not None
            and self.max_backlog_bytes > 0
            and self._backlog() > self.max_backlog_bytes
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
            if self._on_wait is not None and self.backlog_wait_s > 0:
                self._on_wait(time.monotonic() - began)

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
        if self._on_overflow is not None:
            self._on_overflow(reason)
        raise OverloadedError(reason, self.retry_after_s)
