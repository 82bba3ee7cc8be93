"""The one commit path: requirements checked on the landing version, files of a refused
commit deleted, files of a commit that may have landed kept."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from shoal.errors import CommitConflictError, CoverageOverlapError, StorageError
from shoal.schema import LOGS
from shoal.storage import layout
from shoal.storage import log as log_mod
from shoal.storage.commit import Commit, NewFile, Txn
from shoal.storage.store import TableStore
from shoal.storage.table import Table

from .helpers import BASE_US, logs_table


def _write(table: Table, first_id: int) -> NewFile:
    """A data file written inside the table directory (as a Spark job would), uncommitted."""
    rows = logs_table([BASE_US + first_id], ["api"], first_id=first_id)
    ((hour, piece),) = layout.split_by_hour(rows, LOGS)
    rel = layout.hour_file_path(hour)
    (table.path / rel).parent.mkdir(parents=True, exist_ok=True)
    layout.write_parquet(piece, table.path / rel, LOGS)
    return NewFile(rel)


def _on_disk(table: Table, add: NewFile) -> tuple[bool, bool]:
    """Whether the data file and its coverage file exist."""
    return (
        (table.path / add.path).exists(),
        (table.path / layout.coverage_path(add.path)).exists(),
    )


def _committed(table: Table) -> set[str]:
    fresh = DeltaTable(str(table.path))
    return {os.path.normpath(p) for p in fresh.file_uris()}


def test_a_conflicting_remove_deletes_the_files_it_would_have_added(
    store: TableStore,
) -> None:
    table = store.open("acme", "logs")
    table.flush(logs_table([BASE_US], ["api"]), 1)
    snap = table.snapshot()
    (victim,) = (os.path.relpath(f.path, table.path) for f in snap.files)
    table.commit(Commit("RETENTION", removes=(victim,), read_version=snap.version))
    late = _write(table, 5)
    with pytest.raises(CommitConflictError, match="refresh and retry"):
        table.commit(Commit("OPTIMIZE", (late,), (victim,), data_change=False))
    assert _on_disk(table, late) == (False, False)
    assert table.snapshot().version == snap.version + 1


def test_a_held_transaction_id_commits_nothing_and_deletes_the_files(
    store: TableStore,
) -> None:
    table = store.open("acme", "logs")
    table.flush(logs_table([BASE_US], ["api"]), 7)
    again = _write(table, 2)
    version = table.snapshot().version
    assert table.commit(Commit("flush", (again,), txn=Txn("shoal-wal", 7))) is None
    assert _on_disk(table, again) == (False, False)
    assert table.snapshot().version == version
    # a newer id lands, and its file and coverage stay
    newer = _write(table, 3)
    result = table.commit(Commit("flush", (newer,), txn=Txn("shoal-wal", 8)))
    assert result is not None and result.version == version + 1
    assert _on_disk(table, newer) == (True, True)
    assert table.committed_lsn() == 8


def test_an_overlap_found_on_the_landing_version_refuses_the_commit(
    store: TableStore,
) -> None:
    table = store.open("acme", "logs")
    incoming = _write(table, 4)
    coverage = table.files.coverage_of_file(table.path / incoming.path)
    # another writer commits the same minute of the same service first
    table.flush(logs_table([BASE_US + 4], ["api"], first_id=100), 1)
    with pytest.raises(CoverageOverlapError, match="overlaps existing data"):
        table.commit(Commit("import", (incoming,), no_overlap=(coverage,)))
    assert _on_disk(table, incoming) == (False, False)
    # another service in that minute is not an overlap
    other = _write(table, 6)
    pq.write_table(logs_table([BASE_US + 6], ["billing"], first_id=6), table.path / other.path)
    ok = table.files.coverage_of_file(table.path / other.path)
    assert table.commit(Commit("import", (other,), no_overlap=(ok,))) is not None


def test_a_plan_newer_than_the_table_is_refused(store: TableStore) -> None:
    table = store.open("acme", "logs")
    add = _write(table, 1)
    with pytest.raises(StorageError, match="newer than the table"):
        table.commit(Commit("OPTIMIZE", (add,), read_version=table.snapshot().version + 5))
    assert _on_disk(table, add) == (False, False)


def test_a_failure_after_the_commit_landed_keeps_its_files(
    store: TableStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = store.open("acme", "logs")
    real = log_mod.fsync_file

    def failing(path: str | os.PathLike[str]) -> None:
        if str(path).endswith(".json"):
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(log_mod, "fsync_file", failing)
    with pytest.raises(OSError, match="Input/output"):
        table.flush(logs_table([BASE_US], ["api"]), 1)
    monkeypatch.setattr(log_mod, "fsync_file", real)
    # the version landed before the fsync failed: its files must still be there
    committed = _committed(table)
    assert len(committed) == 1
    assert all(Path(p).exists() for p in committed)
    assert TableStore(store.data_dir).open("acme", "logs").committed_lsn() == 1
