"""Plain data passed between the storage layer and its readers (query, pipeline)."""

from __future__ import annotations

import dataclasses

WAL_APP_ID = "shoal-wal"
"""Delta transaction app id under which flushes record the WAL LSN they cover."""


@dataclasses.dataclass(frozen=True)
class ScanFile:
    """One committed Parquet file of a table.

    ``path`` is absolute; ``min_time_us``/``max_time_us`` bound the table's
    time column in the file (microseconds since the epoch, UTC), from the
    Delta log's statistics.
    """

    path: str
    size: int
    rows: int
    min_time_us: int
    max_time_us: int


@dataclasses.dataclass(frozen=True)
class TableSnapshot:
    """A table as of one Delta version: its files and the WAL LSN it covers."""

    tenant: str
    table: str
    version: int
    committed_lsn: int
    files: tuple[ScanFile, ...]

    def files_between(self, start_us: int | None, end_us: int | None) -> list[ScanFile]:
        """Files that can hold rows with ``start_us <= time < end_us``."""
        return [
            f
            for f in self.files
            if (start_us is None or f.max_time_us >= start_us)
            and (end_us is None or f.min_time_us < end_us)
        ]


@dataclasses.dataclass(frozen=True)
class CommitResult:
    """What one commit did: the new version, files added and rows added."""

    version: int
    files_added: int
    rows_added: int
    files_removed: int = 0
