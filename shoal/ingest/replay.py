"""Recovery at start: the WAL's acknowledged records back among the unflushed rows.

Every record above its table's committed WAL LSN (the Delta transaction id of that
table's last flush) is read back, exactly as it was acknowledged, into the unflushed
rows; the records at or below it are in the table already. Nothing is skipped: a
record that cannot be read back stops the start.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

from shoal.errors import WalError
from shoal.ingest import records
from shoal.storage.unflushed import UnflushedRows
from shoal.wal.replay import WalRecord


class CommittedLsns(Protocol):
    """The part of the table store replay reads: which tables exist, and each one's
    committed WAL LSN."""

    def exists(self, tenant: str, table: str) -> bool: ...

    def committed_lsn(self, tenant: str, table: str) -> int: ...


class Replayed(NamedTuple):
    records: int
    """Records added to the unflushed rows."""
    committed: int
    """Records already in their tables."""


def replay(log: Iterable[WalRecord], store: CommittedLsns, unflushed: UnflushedRows) -> Replayed:
    """Add the records of ``log`` (the whole WAL, from its start) that their tables do not
    hold yet to ``unflushed``.

    The log is read from its start, not from the smallest committed LSN: a table whose
    first flush failed has no Delta log yet, so no committed LSN to start from."""
    committed: dict[tuple[str, str], int] = {}
    replayed = skipped = 0
    for record in log:
        header = records.decode_header(record.payload)
        key = (header.tenant, header.table)
        if key not in committed:
            committed[key] = store.committed_lsn(*key) if store.exists(*key) else 0
        if record.lsn <= committed[key]:
            unflushed.note_lsn(record.lsn)
            skipped += 1
            continue
        try:
            tenant, table, data = records.decode(record.payload)
        except WalError as exc:  # nothing is skipped: the start stops here
            raise WalError(
                f"WAL record {record.lsn} cannot be read back ({exc}); the server "
                "does not start without it (`shoal wal verify` lists the segments)"
            ) from None
        unflushed.add(tenant, table, record.lsn, data, records.rows_bytes(tenant, table, data))
        replayed += 1
    return Replayed(replayed, skipped)
