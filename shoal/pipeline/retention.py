"""Retention: drop whole hourly partitions older than a table's retention.

A table keeps ``retention_days_<table>`` days (default: the ``retention_days``
setting), counted back from now and rounded down to an hour boundary. Files
all of whose rows lie before that boundary are removed in one commit
(``dataChange=true``); nothing is rewritten, so the job reads only the Delta
log and needs no Spark executors. A table's coverage is the union of the
coverage of its committed files, so the removed files' coverage leaves with
them; vacuum deletes the files and their coverage bitmaps later.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from shoal.config import Config
from shoal.pipeline.commit import run_with_retries
from shoal.pipeline.plan import expired_files, retention_cutoff_us
from shoal.storage.commit import Commit
from shoal.storage.types import TableSnapshot

if TYPE_CHECKING:
    from shoal.storage.table import Table

logger = logging.getLogger(__name__)

OPERATION = "RETENTION"


@dataclasses.dataclass(frozen=True)
class RetentionResult:
    table: str
    retention_days: int
    cutoff_us: int
    version: int | None
    files_removed: int
    rows_removed: int


def retention_days(config: Config, table: str) -> int:
    """Days kept for ``table``: ``retention_days_<table>`` if set, else ``retention_days``."""
    return config.retention_days_for(table)


def apply_retention(table: Table, config: Config, *, now_us: int | None = None) -> RetentionResult:
    """Remove the table's expired hours; safe while the server flushes into it."""
    days = retention_days(config, table.name)
    now = int(time.time() * 1_000_000) if now_us is None else now_us
    cutoff = retention_cutoff_us(now, days)
    removed_rows: list[int] = []

    def attempt(snapshot: TableSnapshot) -> Commit | None:
        expired = expired_files(snapshot.files, cutoff)
        if not expired:
            return None
        removed_rows[:] = [sum(f.rows for f in expired)]
        return Commit(
            operation=OPERATION,
            removes=tuple(table.place.rel(f.path) for f in expired),
            data_change=True,
        )

    result = run_with_retries("retention", table, attempt, int(config.maintenance_commit_attempts))
    return RetentionResult(
        table=table.label,
        retention_days=days,
        cutoff_us=cutoff,
        version=None if result is None else result.version,
        files_removed=0 if result is None else result.files_removed,
        rows_removed=removed_rows[0] if result is not None and removed_rows else 0,
    )
