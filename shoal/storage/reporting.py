"""What the storage layer reports; the server adapts it to Prometheus."""

from __future__ import annotations

from typing import Protocol


class StorageMetrics(Protocol):
    """Callbacks from storage; the bodies do nothing (subclass to override some)."""

    def commit_done(
        self, tenant: str, table: str, operation: str, seconds: float, rows: int, files: int
    ) -> None:
        """One commit landed: its operation (flush, import, compact, ...), duration and size."""
        return None

    def commit_retry(self, tenant: str, table: str) -> None:
        """A commit lost the race for a version to another writer and is retried."""
        return None

    def checkpoint_done(self, tenant: str, table: str, seconds: float) -> None:
        """A Delta checkpoint was written."""
        return None


class NoopStorageMetrics(StorageMetrics):
    """Reports nothing."""


NOOP: StorageMetrics = NoopStorageMetrics()
