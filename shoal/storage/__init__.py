"""Delta Lake tables per tenant and signal: commits, snapshots, coverage, import.

``TableStore(data_dir).open(tenant, table)`` gives a :class:`Table`; every
change to it is a :class:`Commit` (see :mod:`shoal.storage.commit`), landed
by the one loop in :mod:`shoal.storage.log`. docs/storage.md has the layout
on disk and the commit protocol.
"""

from shoal.storage.commit import Commit, NewFile, PreparedFile, Txn
from shoal.storage.coverage import Coverage
from shoal.storage.reporting import NOOP, NoopStorageMetrics, StorageMetrics
from shoal.storage.store import TableStore
from shoal.storage.table import Table
from shoal.storage.types import (
    WAL_APP_ID,
    CommitResult,
    CoverageResult,
    HistoryEntry,
    ScanFile,
    TableSnapshot,
)

__all__ = [
    "NOOP",
    "WAL_APP_ID",
    "Commit",
    "CommitResult",
    "Coverage",
    "CoverageResult",
    "HistoryEntry",
    "NewFile",
    "NoopStorageMetrics",
    "PreparedFile",
    "ScanFile",
    "StorageMetrics",
    "Table",
    "TableSnapshot",
    "TableStore",
    "Txn",
]
