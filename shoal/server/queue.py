"""The bounded ingest queue: admission by requests and by bytes.

The queue is the budget in front of the WAL writer. A request holds a slot
from admission (after decoding) until the WAL has fsynced it; a request that
does not fit is refused at once with :class:`~shoal.errors.OverloadedError`
(HTTP 429 / gRPC UNAVAILABLE), never parked, so memory stays bounded under
any offered load. A single request larger than the byte budget is admitted
only into an empty queue, so it cannot starve.

The queue also refuses while the flusher's backlog (the snapshot's bytes, read
through ``backlog``) is above ``max_backlog_bytes``: acknowledged rows wait in
memory until a flush commits them, so a flusher that falls behind must slow
ingest down rather than let the snapshot grow without bound.

Depth and bytes are read on scrape; overflows are counted by reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

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
    ) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self._on_overflow = on_overflow
        self._backlog = backlog
        self.max_backlog_bytes = max_backlog_bytes
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
        if self._backlogged():
            self._overflow("snapshot")

    def _backlogged(self) -> bool:
        return (
            self._backlog is not None
            and self.max_backlog_bytes > 0
            and self._backlog() > self.max_backlog_bytes
        )

    def acquire(self, nbytes: int) -> None:
        if self._backlogged():
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
