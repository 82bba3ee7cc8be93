"""Compaction on a real Spark standalone cluster (a master and one worker on loopback)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.pipeline_data import metrics_table
from shoal.storage.store import TableStore
from tests.pipeline.conftest import T0_US, delta_rows, rows_multiset
from tests.pipeline.helpers import (
    child_env,
    kill_group,
    shoal_cmd,
    start,
    start_master,
    worker_args,
)

pytestmark = pytest.mark.spark


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and a worker from the pip-installed pyspark, on loopback."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp_path / "work"))
    master, url = start_master(env, tmp_path / "master.log")
    worker = None
    try:
        worker = start(worker_args(url, 2, "2g", tmp_path / "work"), env, tmp_path / "worker.log")
        yield url
    finally:
        if worker is not None:
            kill_group(worker)
        kill_group(master)


def test_compaction_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    table = TableStore(data_dir).open("acme", "metrics")
    for i in range(4):
        table.flush(metrics_table(300, start_us=T0_US, span_s=7000, series=10, seed=i), i + 1)
    before = rows_multiset(delta_rows(table.path))
    assert len(table.snapshot().files) == 8
    done = subprocess.run(
        shoal_cmd("compact", "--tenant", "acme", "--table", "metrics", "--master", cluster),
        env=child_env(data_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 files -> 2" in done.stdout
    fresh = TableStore(data_dir).open("acme", "metrics")
    assert len(fresh.snapshot().files) == 2
    assert rows_multiset(delta_rows(fresh.path)) == before
    # the work ran on the cluster's executor, not in the driver; the worker copies the
    # executor's stderr into its file by a thread of its own, which lags on a busy machine
    deadline = time.monotonic() + 60
    while True:
        logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "work").rglob("stderr"))
        if "Running task" in logs or "Finished task" in logs or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "Running task" in logs or "Finished task" in logs
