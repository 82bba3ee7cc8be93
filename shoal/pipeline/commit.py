"""Optimistic concurrency for the maintenance jobs: plan, write, commit, retry.

Every job follows one loop. It reads the table's latest committed snapshot,
decides what to change and writes new files (an :data:`Attempt`), then hands
storage a :class:`~shoal.storage.commit.Commit` planned on that snapshot's
version. When another writer committed something that conflicts (for example
retention removed a file compaction merged), storage deletes the files this
attempt wrote and raises ``CommitConflictError``; the job then starts over
from a fresh snapshot, at most ``attempts`` times, and gives up with
:class:`~shoal.errors.JobConflictError`. A concurrent flush (a plain append)
is not a conflict, so the server keeps flushing while jobs run and none of
its commits is lost or overwritten.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from shoal.errors import CommitConflictError, JobConflictError
from shoal.storage.commit import Commit
from shoal.storage.table import Table
from shoal.storage.types import CommitResult, TableSnapshot

logger = logging.getLogger(__name__)

Attempt = Callable[[TableSnapshot], Commit | None]
"""Plans from a snapshot and writes files; None when there is nothing to do."""


def run_with_retries(
    job: str, table: Table, attempt: Attempt, attempts: int
) -> CommitResult | None:
    """Plan, write and commit, starting over after each conflict (at most ``attempts`` times).

    Returns the commit's result, or None when the job found nothing to do.
    """
    name = table.label
    for number in range(1, attempts + 1):
        snapshot = table.snapshot()
        planned = attempt(snapshot)
        if planned is None:
            logger.info("%s %s: nothing to do at version %d", job, name, snapshot.version)
            return None
        commit = dataclasses.replace(planned, read_version=snapshot.version)
        try:
            result = table.commit(commit)
            if result is None:  # its transaction id landed meanwhile: plan again
                raise CommitConflictError(name, snapshot.version, "transaction already committed")
        except CommitConflictError as exc:
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
            len(commit.removes),
            len(commit.adds),
        )
        return result
    raise JobConflictError(job, name, attempts)
