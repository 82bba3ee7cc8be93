"""Crash points, each by SIGKILL of a child process at that point."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from shoal.storage import coverage as cov
from shoal.storage import layout
from shoal.storage.store import TableStore

from .helpers import BASE, random_logs

CHILD = Path(__file__).with_name("child_writer.py")


def run_child(data_dir: Path, app_id: str, point: str, inputs: list[str]) -> int:
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(data_dir), app_id, point, *inputs],
        capture_output=True,
        timeout=120,
        check=False,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(proc.stderr.decode())
    return proc.returncode


def _batch(tmp_path: Path, seed: int = 1) -> tuple[pa.Table, Path]:
    data = random_logs(random.Random(seed), 400, first_id=seed * 10_000, hours=3)
    path = tmp_path / f"batch{seed}.parquet"
    pq.write_table(data, path)
    return data, path


def _files_on_disk(table_path: Path) -> set[str]:
    return {str(p.relative_to(table_path)) for p in table_path.glob("hour=*/*.parquet")}


def _committed(table_path: Path) -> set[str]:
    return {
        os.path.relpath(u.removeprefix("file://"), table_path)
        for u in DeltaTable(str(table_path)).file_uris()
    }


@pytest.mark.parametrize("point", ["parquet-written", "coverage-partial", "coverage-written"])
def test_crash_before_commit_leaves_nothing_visible(tmp_path: Path, point: str) -> None:
    data_dir = tmp_path / "data"
    store = TableStore(data_dir)
    table = store.open("t", "logs")
    data, path = _batch(tmp_path)
    assert run_child(data_dir, "shoal-wal", point, [f"{path}:7"]) == -signal.SIGKILL

    orphans = _files_on_disk(table.path)
    assert len(orphans) == 3  # the files were written...
    assert table.committed_lsn() == 0  # ...but never committed
    assert table.snapshot().rows == 0
    assert DeltaTable(str(table.path)).to_pyarrow_table().num_rows == 0
    window = (BASE, BASE + dt.timedelta(hours=3))
    assert table.coverage(*window).covered == ()
    cov_files = list((table.path / layout.COVERAGE_DIR).glob("*.roar"))
    assert cov_files if point != "parquet-written" else not cov_files
    if point == "coverage-partial":  # a torn bitmap that nothing references
        with pytest.raises(cov.CoverageFormatError):
            cov.read(cov_files[0])

    # WAL replay after restart: the same LSN commits once, orphans stay invisible
    replayed = TableStore(data_dir).open("t", "logs")
    result = replayed.flush(data, 7)
    assert result is not None and result.rows_added == data.num_rows
    back = DeltaTable(str(table.path)).to_pyarrow_table()
    assert sorted(back.column("body").to_pylist()) == sorted(data.column("body").to_pylist())
    assert replayed.coverage(*window).covered_buckets == len(
        {t // 60_000_000 for t in layout.time_as_us(data.column("timestamp")).tolist()}
    )

    # vacuum removes the orphans (and their coverage) and nothing committed
    committed = _committed(table.path)
    deleted = replayed.vacuum(0)
    assert orphans <= set(deleted)
    assert _files_on_disk(table.path) == committed
    assert len(list((table.path / layout.COVERAGE_DIR).glob("*.roar"))) == len(committed)


def test_crash_after_commit_before_the_caller_knows(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    table = TableStore(data_dir).open("t", "logs")
    data, path = _batch(tmp_path)
    assert run_child(data_dir, "shoal-wal", "committed", [f"{path}:7"]) == -signal.SIGKILL
    restarted = TableStore(data_dir).open("t", "logs")
    assert restarted.committed_lsn() == 7
    assert restarted.flush(data, 7) is None  # replay commits nothing
    assert restarted.snapshot().version == 1
    back = DeltaTable(str(table.path)).to_pyarrow_table()
    assert sorted(back.column("body").to_pylist()) == sorted(data.column("body").to_pylist())
