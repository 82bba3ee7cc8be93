"""SIGKILL maintenance jobs at random points: the table stays readable and correct."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadtest.pipeline_data import metrics_table
from shoal.storage.store import TableStore
from tests.pipeline.conftest import T0_US, delta_rows, rows_multiset
from tests.pipeline.helpers import child_env, kill_group, shoal_cmd, start

pytestmark = pytest.mark.spark


def _small_files(data_dir: Path) -> TableStore:
    store = TableStore(data_dir)
    table = store.open("acme", "metrics")
    for i in range(6):
        data = metrics_table(
            400, start_us=T0_US + i * 60_000_000, span_s=3 * 3600 - 600, series=20, seed=i
        )
        table.flush(data, wal_lsn=i + 1)
    return store


def _crash_loop(tmp_path: Path, kills: int, seed: int) -> None:
    data_dir = tmp_path / "data"
    store = _small_files(data_dir)
    table = store.open("acme", "metrics")
    original = rows_multiset(delta_rows(table.path))
    env = child_env(data_dir)
    log = tmp_path / "jobs.log"
    rng = random.Random(seed)
    for _ in range(kills):
        job = rng.choice(["compact", "rollup"])
        proc = start(shoal_cmd(job, "--tenant", "acme", "--master", "local[1]"), env, log)
        try:
            time.sleep(rng.uniform(2.0, 16.0))
        finally:
            kill_group(proc)
        # after every kill: readable by an independent reader, same rows
        assert rows_multiset(delta_rows(table.path)) == original
    for job in ("compact", "rollup"):
        done = subprocess.run(
            shoal_cmd(job, "--tenant", "acme", "--master", "local[1]"),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert rows_multiset(delta_rows(table.path)) == original
    fresh = TableStore(data_dir).open("acme", "metrics")
    assert len(fresh.snapshot().files) == 3  # one file per hour: the work was finished
    # the rollups are complete: every raw point is counted once in metrics_1h
    hourly = delta_rows(TableStore(data_dir).open("acme", "metrics_1h").path)
    assert sum(hourly.column("points").to_pylist()) == len(original)
    # leftovers of killed attempts are unreferenced; vacuum deletes them
    fresh.vacuum(0)
    referenced = {Path(f.path) for f in fresh.snapshot().files}
    on_disk = set(fresh.path.glob("hour=*/*.parquet"))
    assert on_disk == referenced
    assert all(pq.read_metadata(p).num_rows for p in on_disk)


def test_sigkill_jobs_then_rerun(tmp_path: Path) -> None:
    _crash_loop(tmp_path, kills=2, seed=1)


@pytest.mark.slow
def test_sigkill_jobs_many_times(tmp_path: Path) -> None:
    _crash_loop(tmp_path, kills=10, seed=int(time.time()))
