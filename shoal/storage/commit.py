"""A commit described as data: what it changes, and what must hold for it to land.

Every writer of a table (the flusher, import, and the Spark jobs) builds one
:class:`Commit` and hands it to ``Table.commit``, which runs the one retry
loop of :mod:`shoal.storage.log`. The requirements are checked on the
version the commit would land on, again after every lost race:

* ``txn``: the Delta transaction id recorded with the commit; when the table
  already holds ``txn.version`` or later for ``txn.app_id``, the commit is
  skipped (not an error: a flush replayed after a crash lands once);
* ``removes``: each file must still be in the table, or the commit raises
  ``CommitConflictError`` (refresh and retry);
* ``read_version``: the version the change was planned on, recorded in the
  log; it may not be newer than the table;
* ``no_overlap``: when not None, the coverage of each incoming input must not
  overlap what the table holds, nor each other (import), or the commit
  raises ``CoverageOverlapError``.

A concurrent append is never a conflict: commits that only add files land on
top of whatever version is newest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from shoal.storage.coverage import Coverage
from shoal.storage.layout import FileStats


@dataclasses.dataclass(frozen=True)
class Txn:
    """A Delta transaction id: ``version`` is monotonic per ``app_id``. ``after``: the
    version the commit's rows follow (a flush of WAL LSNs ``after + 1 .. version``);
    a table that holds a version between the two already has some of them."""

    app_id: str
    version: int
    after: int | None = None


@dataclasses.dataclass(frozen=True)
class NewFile:
    """A Parquet file already written inside the table directory, to be added by a commit.

    ``path`` is relative to the table root (``hour=.../part-....parquet``).
    ``stats`` is the Delta stats JSON (``shoal.storage.layout.stats_for_file``
    makes it); when None, the commit computes it from the file. The commit
    also writes the file's coverage if it is missing.
    """

    path: str
    size: int | None = None
    stats: str | None = None


@dataclasses.dataclass(frozen=True)
class PreparedFile:
    """A data file written and fsynced, with its statistics and coverage, not yet committed."""

    path: str
    size: int
    stats: FileStats
    coverage: Coverage


@dataclasses.dataclass(frozen=True)
class Commit:
    """One atomic change to a table's Delta log; see the module docstring."""

    operation: str
    adds: tuple[PreparedFile | NewFile, ...] = ()
    removes: tuple[str, ...] = ()
    data_change: bool = True
    """False when rows are only rearranged (compaction), True when they change."""
    txn: Txn | None = None
    read_version: int | None = None
    no_overlap: tuple[Coverage, ...] | None = None
    metadata: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """Extra entries for the commit's ``commitInfo`` (``shoal.walLsn``, ``shoal.sources``)."""
