"""What the WAL reports about itself, as a protocol with a no-op default.

The WAL never imports a metrics library; the server adapts this protocol to
Prometheus. :class:`InMemoryWalMetrics` counts in plain attributes, for tests
and tools.
"""

from __future__ import annotations

import threading
from typing import Protocol


class WalMetrics(Protocol):
    """Callbacks from the WAL. Each must be quick and must not raise.

    The bodies do nothing: a class that subclasses this protocol and overrides
    nothing is the no-op (:class:`NoopWalMetrics`).
    """

    def group_committed(self, records: int, nbytes: int, fsync_seconds: float) -> None:
        """A group of records was written (and, under policy always, fsynced)."""
        return None

    def append_failed(self, reason: str, records: int) -> None:
        """Appends failed; ``reason`` is ``io`` (ENOSPC, short write), ``fatal`` or ``closed``."""
        return None

    def corruption_found(self, segment: str, reason: str) -> None:
        """Mid-log corruption was found in ``segment`` while opening the log."""
        return None

    def torn_tail_cut(self, segment: str, nbytes: int) -> None:
        """A torn tail of ``nbytes`` bytes was cut from ``segment`` while opening the log."""
        return None


class NoopWalMetrics(WalMetrics):
    """Reports nothing."""


NOOP_METRICS: WalMetrics = NoopWalMetrics()


class InMemoryWalMetrics:
    """Counts everything in attributes (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.groups = 0
        self.records = 0
        self.bytes = 0
        self.fsync_seconds = 0.0
        self.failed: dict[str, int] = {}
        self.corruptions: list[tuple[str, str]] = []
        self.torn_tails: list[tuple[str, int]] = []

    def group_committed(self, records: int, nbytes: int, fsync_seconds: float) -> None:
        with self._lock:
            self.groups += 1
            self.records += records
            self.bytes += nbytes
            self.fsync_seconds += fsync_seconds

    def append_failed(self, reason: str, records: int) -> None:
        with self._lock:
            self.failed[reason] = self.failed.get(reason, 0) + records

    def corruption_found(self, segment: str, reason: str) -> None:
        with self._lock:
            self.corruptions.append((segment, reason))

    def torn_tail_cut(self, segment: str, nbytes: int) -> None:
        with self._lock:
            self.torn_tails.append((segment, nbytes))
