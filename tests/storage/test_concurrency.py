"""Two processes committing to the same table at once."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from shoal.storage.store import TableStore

from .helpers import random_logs

CHILD = Path(__file__).with_name("child_writer.py")


def _start(data_dir: Path, app_id: str, inputs: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), app_id, "none", *inputs],
        stderr=subprocess.PIPE,
    )


def _race(data_dir: Path, jobs: list[tuple[str, list[str]]]) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "wait").touch()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.extend(_start(data_dir, app, inputs) for app, inputs in jobs)
        time.sleep(1.5)  # let both import and block on the start flag
        (data_dir / "go").touch()
        for proc in procs:
            _, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in procs:  # a child left running by a failure above
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def _versions(table_path: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (table_path / "_delta_log").glob("*.json"))


def test_two_writers_every_commit_lands_once(tmp_path: Path) -> None:
    rng = random.Random(5)
    batches: dict[str, list[str]] = {"writer-a": [], "writer-b": []}
    expected: list[pa.Table] = []
    for w, app in enumerate(batches):
        for lsn in range(1, 13):
            data = random_logs(rng, 50, first_id=(w * 100 + lsn) * 1000, hours=2)
            expected.append(data)
            path = tmp_path / f"{app}-{lsn}.parquet"
            pq.write_table(data, path)
            batches[app].append(f"{path}:{lsn}")
    data_dir = tmp_path / "data"
    _race(data_dir, list(batches.items()))

    table = TableStore(data_dir).open("t", "logs")
    assert _versions(table.path) == list(range(25))  # create + 24 commits, dense
    reader = DeltaTable(str(table.path))
    assert reader.transaction_version("writer-a") == 12
    assert reader.transaction_version("writer-b") == 12
    rows = reader.to_pyarrow_table().column("body").to_pylist()
    want = pa.concat_tables(expected).column("body").to_pylist()
    assert sorted(rows) == sorted(want)  # nothing lost, nothing twice, nothing overwritten
    assert len(set(rows)) == len(rows)
    assert {h.wal_lsn for h in table.history(100) if h.operation == "flush"} == set(range(1, 13))


def test_stores_creating_one_table_at_once_commit_one_create(tmp_path: Path) -> None:
    # Separate TableStores share nothing, as separate processes would; threads released
    # together by a barrier hit delta-rs's check-then-commit window far more often.
    for round_ in range(10):
        data_dir = tmp_path / f"data-{round_}"
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []

        def create(
            data_dir: Path = data_dir,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            barrier.wait()
            try:
                TableStore(data_dir).open("t", "logs")
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=create) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        # one CREATE TABLE, not one per store
        assert _versions(data_dir / "tenants" / "t" / "logs") == [0]


def test_two_writers_replaying_the_same_wal_commit_each_lsn_once(tmp_path: Path) -> None:
    rng = random.Random(6)
    inputs = []
    expected = []
    for lsn in range(1, 11):
        data = random_logs(rng, 40, first_id=lsn * 1000, hours=1)
        expected.extend(data.column("body").to_pylist())
        path = tmp_path / f"{lsn}.parquet"
        pq.write_table(data, path)
        inputs.append(f"{path}:{lsn}")
    data_dir = tmp_path / "data"
    _race(data_dir, [("shoal-wal", inputs), ("shoal-wal", inputs)])
    table = TableStore(data_dir).open("t", "logs")
    assert table.committed_lsn() == 10
    rows = DeltaTable(str(table.path)).to_pyarrow_table().column("body").to_pylist()
    assert sorted(rows) == sorted(expected)
    versions = _versions(table.path)
    assert versions == list(range(len(versions)))
