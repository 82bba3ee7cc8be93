from __future__ import annotations

import datetime as dt
import os
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from shoal.errors import CommitConflictError, SchemaMismatchError, TableNotFoundError
from shoal.schema import LOGS_SCHEMA, TableSpec
from shoal.storage import layout
from shoal.storage.commit import Commit, NewFile
from shoal.storage.store import TableStore

from .helpers import BASE, BASE_US, logs_table, random_logs


def _bodies(table: pa.Table) -> list[str]:
    return sorted(table.column("body").to_pylist())


def test_flush_is_exactly_once_and_readable_by_delta_rs(store: TableStore) -> None:
    table = store.open("acme", "logs")
    assert table.committed_lsn() == 0
    rng = random.Random(7)
    written = []
    for lsn in (3, 5, 9):
        batch = random_logs(rng, 300, first_id=lsn * 1000, hours=3)
        written.append(batch)
        result = table.flush(batch, lsn)
        assert result is not None and result.rows_added == 300
    assert table.flush(random_logs(rng, 10, first_id=99), 5) is None
    assert table.flush(random_logs(rng, 10, first_id=99), 9) is None
    assert table.committed_lsn() == 9

    reader = DeltaTable(str(table.path))
    assert reader.transaction_version("shoal-wal") == 9
    back = reader.to_pyarrow_table()
    expected = pa.concat_tables(written)
    assert back.num_rows == expected.num_rows
    assert _bodies(back) == _bodies(expected)
    # every file sits in the directory of the hour its rows belong to, and reads standalone
    for uri in reader.file_uris():
        path = uri.removeprefix("file://")
        part = pq.read_table(path)
        assert part.schema.equals(LOGS_SCHEMA)
        hours = {
            layout.hour_dir(h)
            for h in (layout.time_as_us(part.column("timestamp")) // layout.HOUR_US).tolist()
        }
        assert hours == {Path(path).parent.name}


def test_reopen_reads_committed_lsn(store: TableStore) -> None:
    store.open("acme", "logs").flush(random_logs(random.Random(1), 50), 42)
    again = TableStore(store.data_dir).open("acme", "logs", create=False)
    assert again.committed_lsn() == 42
    assert again.snapshot().rows == 50


def test_missing_table(store: TableStore) -> None:
    with pytest.raises(TableNotFoundError):
        store.open("acme", "logs", create=False)
    with pytest.raises(TableNotFoundError):
        store.open("acme", "my_table")
    store.open("acme", "spans")
    store.open("beta", "metrics")
    assert store.tenants() == ["acme", "beta"]
    assert store.tables("acme") == ["spans"]


def test_snapshot_is_cached_and_sees_other_writers(store: TableStore) -> None:
    table = store.open("acme", "logs")
    table.flush(random_logs(random.Random(1), 20), 1)
    first = table.snapshot()
    assert table.snapshot() is first
    other = TableStore(store.data_dir).open("acme", "logs")
    other.flush(random_logs(random.Random(2), 30, first_id=100), 2)
    latest = table.snapshot()
    assert latest.version == first.version + 1
    assert latest.rows == 50 and latest.committed_lsn == 2
    assert all(os.path.isabs(f.path) and os.path.exists(f.path) for f in latest.files)


def test_scan_files_prune_by_time(store: TableStore) -> None:
    table = store.open("acme", "logs")
    table.flush(random_logs(random.Random(1), 200, hours=4), 1)
    assert len(table.snapshot().files) == 4
    one = table.scan_files(BASE + dt.timedelta(hours=1), BASE + dt.timedelta(hours=2))
    assert len(one) == 1
    assert one[0].min_time_us >= BASE_US + layout.HOUR_US
    assert one[0].max_time_us < BASE_US + 2 * layout.HOUR_US


def test_time_travel_and_history(store: TableStore) -> None:
    table = store.open("acme", "logs")
    table.flush(random_logs(random.Random(1), 10), 1)
    time.sleep(0.05)
    middle = dt.datetime.now(dt.UTC)
    time.sleep(0.05)
    table.flush(random_logs(random.Random(2), 15, first_id=50), 2)
    assert table.snapshot_at(version=1).rows == 10
    assert table.snapshot_at(version=1).committed_lsn == 1
    assert table.snapshot_at(timestamp=middle).rows == 10
    assert table.snapshot().rows == 25
    history = table.history()
    assert [h.version for h in history] == [2, 1, 0]
    assert [h.operation for h in history[:2]] == ["flush", "flush"]
    assert [h.rows_added for h in history[:2]] == [15, 10]
    assert [h.wal_lsn for h in history[:2]] == [2, 1]


def test_checkpoints_keep_the_lsn(tmp_path: Path) -> None:
    store = TableStore(tmp_path, checkpoint_interval=3)
    table = store.open("acme", "logs")
    for lsn in range(1, 8):
        table.flush(logs_table([BASE_US + lsn], ["api"], first_id=lsn), lsn)
    log = table.path / "_delta_log"
    assert (log / f"{3:020d}.checkpoint.parquet").exists()
    assert (log / f"{6:020d}.checkpoint.parquet").exists()
    again = TableStore(tmp_path).open("acme", "logs")
    assert again.committed_lsn() == 7 and again.snapshot().rows == 7


def test_schema_mismatch_is_clear(store: TableStore) -> None:
    table = store.open("acme", "logs")
    bad = random_logs(random.Random(1), 5).drop_columns(["body"])
    with pytest.raises(SchemaMismatchError, match="missing column 'body'"):
        table.flush(bad, 1)
    assert table.committed_lsn() == 0


def test_user_table_spec_is_kept(store: TableStore) -> None:
    schema = pa.schema(
        [pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False), pa.field("v", pa.int32())]
    )
    spec = TableSpec(name="trips", schema=schema, time_column="ts", sort_columns=("ts",))
    table = store.open("acme", "trips", spec)
    data = pa.table(
        {
            "ts": pa.array([BASE_US, BASE_US + 1], pa.int64()).cast(schema.field("ts").type),
            "v": pa.array([1, 2], pa.int32()),
        },
        schema=schema,
    )
    table.flush(data, 1)
    again = TableStore(store.data_dir).open("acme", "trips", create=False)
    assert again.spec.schema.equals(schema)
    assert again.spec.time_column == "ts"
    assert again.snapshot().rows == 2


def _compact(table_path: Path, files: list[str]) -> NewFile:
    merged = pa.concat_tables([pq.read_table(table_path / f) for f in files])
    rel = layout.hour_file_path(layout.hour_index(BASE_US))
    from shoal.schema import LOGS

    ((_, piece),) = layout.split_by_hour(merged, LOGS)
    layout.write_parquet(piece, table_path / rel, LOGS)
    return NewFile(rel)


def test_commit_compaction_survives_concurrent_append(store: TableStore) -> None:
    table = store.open("acme", "logs")
    for lsn in (1, 2):
        table.flush(logs_table([BASE_US + lsn], ["api"], first_id=lsn), lsn)
    snap = table.snapshot()
    rels = [os.path.relpath(f.path, table.path) for f in snap.files]
    new = _compact(table.path, rels)
    # a flush lands after the compaction read its version
    table.flush(logs_table([BASE_US + 10], ["api"], first_id=3), 3)
    result = table.commit(
        Commit("compact", (new,), tuple(rels), data_change=False, read_version=snap.version)
    )
    assert result.files_removed == 2 and result.files_added == 1
    after = table.snapshot()
    assert len(after.files) == 2 and after.rows == 3
    assert _bodies(DeltaTable(str(table.path)).to_pyarrow_table()) == ["row-1", "row-2", "row-3"]
    assert table.history(1)[0].operation == "compact"
    assert table.history(1)[0].rows_removed == 2


def test_commit_conflicts_when_a_file_was_removed(store: TableStore) -> None:
    table = store.open("acme", "logs")
    for lsn in (1, 2):
        table.flush(logs_table([BASE_US + lsn], ["api"], first_id=lsn), lsn)
    snap = table.snapshot()
    rels = [os.path.relpath(f.path, table.path) for f in snap.files]
    first = _compact(table.path, rels)
    second = _compact(table.path, rels)
    table.commit(
        Commit("compact", (first,), tuple(rels), data_change=False, read_version=snap.version)
    )
    with pytest.raises(CommitConflictError, match="refresh and retry"):
        table.commit(
            Commit("compact", (second,), tuple(rels), data_change=False, read_version=snap.version)
        )
    assert table.snapshot().rows == 2


def test_vacuum_removes_orphans_and_their_coverage(store: TableStore) -> None:
    table = store.open("acme", "logs")
    table.flush(logs_table([BASE_US], ["api"]), 1)
    orphan = table.path / layout.hour_file_path(layout.hour_index(BASE_US))
    layout.write_parquet(logs_table([BASE_US], ["api"]), orphan, table.spec)
    orphan_cov = table.path / layout.coverage_path(os.path.relpath(orphan, table.path))
    orphan_cov.write_bytes(b"x")
    deleted = table.vacuum(0)
    assert not orphan.exists() and not orphan_cov.exists()
    assert len(deleted) == 2
    assert table.snapshot().rows == 1
    assert all(os.path.exists(f.path) for f in table.snapshot().files)


def test_metrics_coverage_per_series_and_stats_from_the_caller(store: TableStore) -> None:
    from .helpers import metrics_table

    table = store.open("acme", "metrics")
    times = [BASE_US + i * 60_000_000 for i in range(6)]
    table.flush(metrics_table(times, [11, 22, 11, 22, 11, 22], ["m"] * 6), 1)
    result = table.coverage(BASE, BASE + dt.timedelta(minutes=6), series="11")
    assert result.covered_buckets == 3 and len(result.gaps) == 3
    # a commit whose NewFile carries precomputed stats uses them as given
    snap = table.snapshot()
    rels = [os.path.relpath(f.path, table.path) for f in snap.files]
    merged = pq.read_table(table.path / rels[0])
    rel = layout.hour_file_path(layout.hour_index(BASE_US))
    layout.write_parquet(merged, table.path / rel, table.spec)
    stats = layout.stats_for_file(table.path / rel, table.spec).to_json()
    table.commit(
        Commit(
            "compact",
            (NewFile(rel, stats=stats),),
            tuple(rels),
            data_change=False,
            read_version=snap.version,
        )
    )
    (only,) = table.snapshot().files
    assert (only.min_time_us, only.max_time_us) == (times[0], times[-1])
    assert table.coverage(BASE, BASE + dt.timedelta(minutes=6), series="22").covered_buckets == 3


def test_names_are_checked(store: TableStore) -> None:
    from shoal.errors import StorageError

    with pytest.raises(StorageError, match="invalid tenant"):
        store.open("../evil", "logs")
    with pytest.raises(StorageError, match="invalid table"):
        store.open("acme", "Logs/x")


def test_snapshot_after_own_commits_matches_a_fresh_load(store: TableStore) -> None:
    table = store.open("acme", "logs")
    table.snapshot()
    for lsn in (1, 2, 3):
        table.flush(random_logs(random.Random(lsn), 100, first_id=lsn * 1000, hours=1), lsn)
    snap = table.snapshot()
    rels = [os.path.relpath(f.path, table.path) for f in snap.files][:2]
    table.commit(
        Commit(
            "compact",
            (_compact(table.path, rels),),
            tuple(rels),
            data_change=False,
            read_version=snap.version,
        )
    )
    mine = table.snapshot()
    fresh = TableStore(store.data_dir).open("acme", "logs").snapshot()
    assert (mine.version, mine.committed_lsn) == (fresh.version, fresh.committed_lsn) == (4, 3)
    assert set(mine.files) == set(fresh.files)


def test_scan_paths_are_absolute_when_the_data_dir_is_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = TableStore(Path("data"))
    handle = store.open("t", "logs", create=True)
    handle.flush(random_logs(random.Random(1), 10), 1)
    monkeypatch.chdir("/")
    files = handle.snapshot().files
    assert files and all(os.path.isabs(f.path) and os.path.isfile(f.path) for f in files)
