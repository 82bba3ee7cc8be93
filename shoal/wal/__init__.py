"""shoal's write-ahead log: CRC32C-framed records in segment files, group commit.

The contract the server codes against::

    wal = Wal.open(directory, fsync="always", on_durable=...)
    for record in wal.replay(after_lsn):   # WalRecord(lsn, rtype, payload)
        ...
    lsn = await asyncio.wrap_future(wal.append(payload, rtype=1, tag=obj))
    wal.truncate_before(flushed_lsn + 1)
    wal.shutdown(timeout)

docs/wal-format.md describes the bytes on disk and the recovery rules.
"""

from shoal.wal.fileops import OS_FILE_OPS, FileOps, OsFileOps
from shoal.wal.recovery import RecoveryReport, SegmentStatus, inspect_directory
from shoal.wal.replay import WalRecord
from shoal.wal.reporting import NOOP_METRICS, InMemoryWalMetrics, NoopWalMetrics, WalMetrics
from shoal.wal.wal import Wal
from shoal.wal.writer import FsyncPolicy

__all__ = [
    "NOOP_METRICS",
    "OS_FILE_OPS",
    "FileOps",
    "FsyncPolicy",
    "InMemoryWalMetrics",
    "NoopWalMetrics",
    "OsFileOps",
    "RecoveryReport",
    "SegmentStatus",
    "Wal",
    "WalMetrics",
    "WalRecord",
    "inspect_directory",
]
