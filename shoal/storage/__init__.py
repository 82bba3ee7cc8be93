"""Delta Lake tables per tenant and signal: flushes, commits, snapshots, coverage, import.

``TableStore(data_dir).open(tenant, table)`` gives a :class:`Table`; see
docs/storage.md for the layout on disk and the commit protocol.
"""

from shoal.storage.coverage import Coverage
from shoal.storage.metrics import NOOP, NoopStorageMetrics, StorageMetrics
from shoal.storage.store import TableStore
from shoal.storage.table import Table
from shoal.storage.types import (
    WAL_APP_ID,
    CommitResult,
    CoverageResult,
    HistoryEntry,
    NewFile,
    ScanFile,
    TableSnapshot,
)

__all__ = [
    "NOOP",
    "WAL_APP_ID",
    "CommitResult",
    "Coverage",
    "CoverageResult",
    "HistoryEntry",
    "NewFile",
    "NoopStorageMetrics",
    "ScanFile",
    "StorageMetrics",
    "Table",
    "TableSnapshot",
    "TableStore",
]
