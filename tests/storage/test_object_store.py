"""Tables in an S3-compatible bucket (a real server on loopback: moto's server mode).

The same Table code as on local disk, through delta-rs (the log, with conditional
puts) and pyarrow's S3 filesystem (data, coverage and series files).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from shoal.storage.location import StorageLocation
from shoal.storage.store import TableStore

from .helpers import random_logs

CHILD = Path(__file__).with_name("child_writer.py")


def s3_store(tmp_path: Path, url: str, **kwargs: Any) -> TableStore:
    location = StorageLocation.parse(url, tmp_path / "data")
    return TableStore(tmp_path / "data", location=location, **kwargs)


def delta(url: str) -> DeltaTable:
    """The table read independently, by delta-rs alone."""
    return DeltaTable(url, storage_options={"AWS_ALLOW_HTTP": "true"})


def test_a_flush_lands_in_the_bucket_and_reads_back(tmp_path: Path, s3_url: str) -> None:
    store = s3_store(tmp_path, s3_url)
    table = store.open("acme", "logs")
    data = random_logs(random.Random(1), 300, first_id=0, hours=3)
    result = table.flush(data, 7)
    assert result is not None and result.rows_added == 300 and result.files_added == 3
    assert table.flush(data, 7) is None  # the same LSN again: nothing committed twice
    assert table.committed_lsn() == 7
    snap = table.snapshot()
    assert all(f.path.startswith(s3_url + "/acme/logs/hour=") for f in snap.files)
    # nothing of the table on local disk
    assert not (tmp_path / "data" / "tenants").exists()
    # an independent reader (delta-rs) sees exactly the rows
    rows = delta(f"{s3_url}/acme/logs").to_pyarrow_table()
    assert sorted(rows.column("body").to_pylist()) == sorted(data.column("body").to_pylist())
    # a fresh store (another process's view) finds the tenant, table, LSN and coverage
    again = s3_store(tmp_path, s3_url)
    assert again.tenants() == ["acme"] and again.tables("acme") == ["logs"]
    reopened = again.open("acme", "logs")
    assert reopened.committed_lsn() == 7
    assert reopened.covered().buckets == table.covered().buckets
    assert len(reopened.covered().buckets) > 0
    assert [h.wal_lsn for h in reopened.history() if h.operation == "flush"] == [7]


def test_the_series_index_and_vacuum_work_in_the_bucket(tmp_path: Path, s3_url: str) -> None:
    from tests.storage.helpers import BASE_US, metrics_table

    store = s3_store(tmp_path, s3_url)
    table = store.open("acme", "metrics")
    table.flush(metrics_table([BASE_US, BASE_US + 1, BASE_US + 2], [1, 2, 1], ["a", "b", "a"]), 1)
    series = table.series(table.snapshot())
    assert series.num_rows == 2
    fresh = s3_store(tmp_path, s3_url).open("acme", "metrics")
    assert fresh.series(fresh.snapshot()).num_rows == series.num_rows
    # a file written but never committed is vacuumed
    table.place.write("hour=2020-01-01T00/part-orphan.parquet", b"x")
    deleted = table.vacuum(0)
    assert any(d.endswith("part-orphan.parquet") for d in deleted), deleted
    assert not table.place.exists("hour=2020-01-01T00/part-orphan.parquet")


def test_a_read_trusts_its_version_for_poll_s_then_sees_another_writer(
    tmp_path: Path, s3_url: str
) -> None:
    # poll_s well above a flush's time on a loaded machine (at 0.5 s a slow flush let
    # the first read's version expire before the second read)
    reader = s3_store(tmp_path, s3_url, poll_s=2.0).open("acme", "logs")
    writer = s3_store(tmp_path, s3_url).open("acme", "logs")
    rng = random.Random(2)
    writer.flush(random_logs(rng, 10, first_id=0, hours=1), 1)
    first = reader.snapshot()
    writer.flush(random_logs(rng, 10, first_id=100, hours=1), 2)
    assert reader.snapshot().version == first.version  # within poll_s: no request
    time.sleep(2.1)
    assert reader.snapshot().version == first.version + 1
    own = reader.flush(random_logs(rng, 10, first_id=200, hours=1), 3)
    assert own is not None and reader.snapshot().version == own.version  # its own: at once


def test_a_server_read_past_poll_s_looks_behind_and_never_waits_for_the_store(
    tmp_path: Path, s3_url: str, s3_server: Any
) -> None:
    """In the server (background looks), a read past ``poll_s`` answers from the version
    it has while one look runs behind it; a later read gets what the look found."""
    store = s3_store(tmp_path, s3_url, poll_s=0.3, background=True)
    reader = store.open("acme", "logs")
    writer = s3_store(tmp_path, s3_url).open("acme", "logs")
    rng = random.Random(9)
    writer.flush(random_logs(rng, 10, first_id=0, hours=1), 1)
    assert store.tables("acme") == ["logs"]
    first = reader.snapshot()
    writer.flush(random_logs(rng, 10, first_id=100, hours=1), 2)
    time.sleep(0.4)
    s3_server.fault(delay_s=3)  # every request answered 3 s late
    started = time.monotonic()
    assert reader.snapshot().version == first.version
    assert store.tables("acme") == ["logs"]
    assert time.monotonic() - started < 1.5  # neither waited for an answer
    s3_server.fault()
    deadline = time.monotonic() + 30
    while reader.snapshot().version != first.version + 1:
        assert time.monotonic() < deadline, "the look never brought the new version"
        time.sleep(0.1)
    assert reader.committed_lsn() == 2


def _race(tmp_path: Path, url: str, jobs: list[tuple[str, list[str]]]) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "wait").touch()
    env = {**os.environ, "SHOAL_STORAGE_URL": url}
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(data_dir), app, "none", *inputs],
            stderr=subprocess.PIPE,
            env=env,
        )
        for app, inputs in jobs
    ]
    try:
        time.sleep(1.5)
        (data_dir / "go").touch()
        for proc in procs:
            _, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err.decode()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


@pytest.mark.slow  # about 20 s (make test-slow); the held PUTs below are the quick proof
def test_two_processes_racing_on_s3_land_every_commit_exactly_once(
    tmp_path: Path, s3_url: str, s3_server: Any
) -> None:
    """A flusher and a compacting maintenance writer, separate processes, on one table in
    the bucket: S3 has no rename, and delta-rs's conditional put decides each version."""
    rng = random.Random(5)
    inputs: list[str] = []
    expected: list[str] = []
    for lsn in range(1, 16):
        data = random_logs(rng, 40, first_id=lsn * 1000, hours=1)
        expected.extend(data.column("body").to_pylist())
        path = tmp_path / f"{lsn}.parquet"
        pq.write_table(data, path)
        inputs.append(f"{path}:{lsn}")
    store = s3_store(tmp_path, s3_url)
    store.open("t", "logs")  # created before the race
    before = s3_server.stats()
    _race(
        tmp_path,
        s3_url,
        [("shoal-wal", inputs), ("shoal-wal", inputs), ("compact:6", [])],
    )
    after = s3_server.stats()
    table = s3_store(tmp_path, s3_url).open("t", "logs")
    assert table.committed_lsn() == 15
    reader = delta(f"{s3_url}/t/logs")
    rows = reader.to_pyarrow_table().column("body").to_pylist()
    assert sorted(rows) == sorted(expected)  # nothing lost, nothing twice
    history = table.history(200)
    flushes = [h.wal_lsn for h in history if h.operation == "flush"]
    assert sorted(flushes) == list(range(1, 16))  # each LSN committed once, by one writer
    assert sum(h.operation == "compact" for h in history) == 6
    versions = sorted(h.version for h in history)
    assert versions == list(range(len(versions)))  # dense: no version overwritten
    assert after.get("PUT", 0) > before.get("PUT", 0)


def test_two_writers_putting_one_version_at_once_both_land_once(
    tmp_path: Path, s3_url: str, s3_server: Any
) -> None:
    """Two writers' PUTs of the same log entry held at the server until both are in
    flight: the conditional put lets one in and refuses the other, which commits on
    top. Without the condition the second entry would replace the first commit."""
    import concurrent.futures

    first = s3_store(tmp_path, s3_url).open("acme", "logs")
    second = s3_store(tmp_path, s3_url).open("acme", "logs")
    rng = random.Random(10)
    batches = [random_logs(rng, 20, first_id=i * 100, hours=1) for i in range(3)]
    first.flush(batches[0], 1)
    assert second.snapshot().version == 1
    entry = "/acme/logs/_delta_log/00000000000000000002.json"
    s3_server.fault(methods=["PUT"], keys=entry, delay_s=2)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        one = pool.submit(first.flush, batches[1], 2)
        time.sleep(0.5)  # the first PUT waits at the server; the second aims at it too
        other = pool.submit(second.flush, batches[2], 1, app_id="backfill")
        results = [one.result(timeout=120), other.result(timeout=120)]
    assert sorted(r.version for r in results if r is not None) == [2, 3]
    rows = delta(f"{s3_url}/acme/logs").to_pyarrow_table().column("body").to_pylist()
    assert sorted(rows) == sorted(b for t in batches for b in t.column("body").to_pylist())
    fresh = s3_store(tmp_path, s3_url).open("acme", "logs")
    assert fresh.committed_lsn() == 2 and fresh.committed_lsn("backfill") == 1


def test_a_commit_whose_answer_is_lost_counts_once(tmp_path: Path, s3_url: str) -> None:
    """The log entry's PUT lands but the writer is told it failed (its retry finds the
    key taken): the entry holds the commit's id, so it counts as done, not as a loss."""
    from deltalake.exceptions import CommitFailedError

    table = s3_store(tmp_path, s3_url).open("acme", "logs")
    data = random_logs(random.Random(3), 50, first_id=0, hours=1)
    real = table.log._dt.create_write_transaction

    def lands_then_fails(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        raise CommitFailedError("Failed to commit transaction: version already exists")

    table.log._dt.create_write_transaction = lands_then_fails  # type: ignore[method-assign]
    try:
        result = table.flush(data, 1)
    finally:
        table.log._dt.create_write_transaction = real  # type: ignore[method-assign]
    assert result is not None and result.version == 1
    rows = delta(f"{s3_url}/acme/logs").to_pyarrow_table()
    assert rows.num_rows == 50  # once: not retried on top of itself, files not deleted
    assert all(table.place.exists(table.place.rel(f.path)) for f in table.snapshot().files)


@pytest.mark.parametrize("url", ["file"])
def test_a_file_url_puts_the_tables_in_that_directory(tmp_path: Path, url: str) -> None:
    root = tmp_path / "elsewhere"
    store = s3_store(tmp_path, f"file://{root}")
    table = store.open("acme", "logs")
    table.flush(random_logs(random.Random(4), 20, first_id=0, hours=1), 1)
    assert (root / "acme" / "logs" / "_delta_log").is_dir()
    assert not (tmp_path / "data" / "tenants").exists()
    assert DeltaTable(str(root / "acme" / "logs")).to_pyarrow_table().num_rows == 20
    assert pa.types.is_timestamp(table.spec.schema.field("timestamp").type)


def _days_back(table: pa.Table, days: int) -> pa.Table:
    at = table.schema.get_field_index("timestamp")
    moved = pc.subtract(table.column(at), pa.scalar(dt.timedelta(days=days)))
    return table.set_column(at, table.schema.field(at), moved)


def test_shoal_import_appends_local_files_to_a_table_in_the_bucket(
    tmp_path: Path, s3_url: str
) -> None:
    """``shoal import`` (no Spark) into a bucket table: a file of the table's exact schema
    is copied as it is, another rewritten; an overlap is refused and changes nothing."""
    data = tmp_path / "data"
    store = s3_store(tmp_path, s3_url)
    table = store.open("acme", "logs")
    live = random_logs(random.Random(6), 50, first_id=0, hours=1)
    table.flush(live, 1)
    history = random_logs(random.Random(7), 80, first_id=1000, hours=2)
    shifted = _days_back(history, 1)
    exact = tmp_path / "exact.parquet"
    pq.write_table(shifted, exact)
    loose = tmp_path / "loose.parquet"  # another column order: rewritten
    later = random_logs(random.Random(8), 30, first_id=2000, hours=1)
    moved = _days_back(later, 2)
    pq.write_table(moved.select(list(reversed(moved.column_names))), loose)
    env = {**os.environ, "SHOAL_DATA_DIR": str(data), "SHOAL_STORAGE_URL": s3_url}

    def run(*files: Path) -> subprocess.CompletedProcess[str]:
        args = ["import", *map(str, files), "--tenant", "acme", "--table", "logs"]
        return subprocess.run(
            [sys.executable, "-m", "shoal.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = run(exact, loose)
    assert done.returncode == 0, done.stderr
    assert "110 rows imported" in done.stdout
    rows = delta(f"{s3_url}/acme/logs").to_pyarrow_table()
    assert sorted(rows.column("body").to_pylist()) == sorted(
        [*live.column("body").to_pylist(), *shifted.column("body").to_pylist(),
         *moved.column("body").to_pylist()]
    )  # fmt: skip
    assert not (data / "tenants").exists()
    version = s3_store(tmp_path, s3_url).open("acme", "logs").snapshot().version
    again = run(exact)  # the same minutes again: refused, nothing committed
    assert again.returncode != 0 and "overlaps existing data" in again.stderr
    assert s3_store(tmp_path, s3_url).open("acme", "logs").snapshot().version == version
