"""Plain data passed between the storage layer and its readers (query, pipeline)."""

from __future__ import annotations

import dataclasses
import datetime

import pyarrow as pa

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
    schema: pa.Schema | None = None
    """The table's Arrow schema (for metrics/logs/spans exactly the frozen schema)."""
    time_column: str = "timestamp"

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

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


@dataclasses.dataclass(frozen=True)
class HistoryEntry:
    """One version of a table, as ``shoal table history`` lists it."""

    version: int
    timestamp: datetime.datetime
    operation: str
    rows_added: int | None
    rows_removed: int | None
    files_added: int | None
    files_removed: int | None
    wal_lsn: int | None


@dataclasses.dataclass(frozen=True)
class CoverageResult:
    """Which buckets of ``[start, end)`` hold data (``covered``) and which do not (``gaps``).

    Ranges are ``(start, end)`` pairs on bucket boundaries, clipped to the
    asked range; ``series`` is the series asked about, or None for the table.
    """

    start: datetime.datetime
    end: datetime.datetime
    bucket_s: int
    series: str | None
    covered_buckets: int
    total_buckets: int
    covered: tuple[tuple[datetime.datetime, datetime.datetime], ...]
    gaps: tuple[tuple[datetime.datetime, datetime.datetime], ...]

    @property
    def complete(self) -> bool:
        return self.covered_buckets == self.total_buckets
