"""Optimistic concurrency for the maintenance jobs: plan, write, commit, retry.

Every job follows one loop. It reads the table's latest committed snapshot,
decides what to change and writes new files (an :class:`Attempt`), then commits
remove + add in one Delta commit through storage's ``Table.commit`` with
``read_version`` set to the version it planned from. When another writer
committed something that conflicts (for example retention removed a file
compaction merged), storage raises ``CommitConflictError``: the files this
attempt wrote are deleted (no commit references them) and the job starts over
from a fresh snapshot, at most ``attempts`` times, then gives up with
:class:`~shoal.errors.JobConflictError`. A concurrent flush (a plain append) is
not a conflict, so the server keeps flushing while jobs run and none of its
commits is lost or overwritten.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from shoal.errors import CommitConflictError, CoverageOverlapError, JobConflictError
from shoal.storage.types import CommitResult, NewFile, TableSnapshot

if TYPE_CHECKING:
    from shoal.storage.table import Table

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Change:
    """One commit a job wants to make."""

    adds: tuple[NewFile, ...]
    removes: tuple[str, ...]
    operation: str
    written: tuple[Path, ...] = ()
    """Files this attempt created (deleted again if the commit fails)."""
    data_change: bool = False
    """False when rows are only rearranged (compaction), True when they change."""
    app_txn: tuple[str, int] | None = None
    """An optional Delta transaction id recorded with the commit (rollup progress)."""
    check: Callable[[], None] | None = None
    """Run on the version the commit lands on; raises CoverageOverlapError to abandon it."""


Attempt = Callable[[TableSnapshot], Change | None]
"""Plans from a snapshot and writes files; None when there is nothing to do."""


def discard(paths: Sequence[Path]) -> None:
    """Delete files no commit references (best effort: vacuum catches leftovers)."""
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            logger.warning("could not delete uncommitted file %s; vacuum will", path)


def commit_change(table: Table, change: Change, read_version: int) -> CommitResult:
    """``Table.commit`` with the change's actions and optional transaction id."""
    return table.commit(
        list(change.adds),
        list(change.removes),
        operation=change.operation,
        read_version=read_version,
        data_change=change.data_change,
        app_txn=change.app_txn,
        check=change.check,
    )


def relative(table_root: Path, path: str) -> str:
    """A committed file's path relative to its table (how the Delta log names it)."""
    p, root = Path(path), Path(table_root)
    for candidate, base in ((p, root), (p.resolve(), root.resolve())):
        try:
            return candidate.relative_to(base).as_posix()
        except ValueError:
            continue
    return path


def run_with_retries(
    job: str, table: Table, attempt: Attempt, attempts: int
) -> CommitResult | None:
    """Plan, write and commit, starting over after each conflict (at most ``attempts`` times).

    Returns the commit's result, or None when the job found nothing to do.
    Files are deleted only after a conflict, which storage raises before
    anything is committed; after any other failure they stay for vacuum, since
    the commit may have landed.
    """
    name = table.label
    for number in range(1, attempts + 1):
        snapshot = table.snapshot()
        change = attempt(snapshot)
        if change is None:
            logger.info("%s %s: nothing to do at version %d", job, name, snapshot.version)
            return None
        try:
            result = commit_change(table, change, snapshot.version)
        except CoverageOverlapError:
            discard(change.written)  # refused before committing: nothing references them
            raise
        except CommitConflictError as exc:
            discard(change.written)
            logger.warning(
                "%s %s: attempt %d/%d lost a commit race (%s); re-reading the table",
                job,
                name,
                number,
                attempts,
                exc,
            )
            continue
        logger.info(
            "%s %s: committed version %d (%d files removed, %d added)",
            job,
            name,
            result.version,
            len(change.removes),
            len(change.adds),
        )
        return result
    raise JobConflictError(job, name, attempts)
