"""Compaction on a real Spark standalone cluster (a master and one worker on loopback)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.pipeline_data import metrics_table
from shoal.storage.store import TableStore
from tests.pipeline.conftest import T0_US, delta_rows, rows_multiset
from tests.pipeline.helpers import child_env, kill_group, shoal_cmd, start

pytestmark = pytest.mark.spark


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and a worker from the pip-installed pyspark, on loopback."""
    port = 7077 if _port_free(7077) else _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp_path / "work"))
    master = start(
        [
            _spark_class(),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(_free_port()),
        ],
        env,
        tmp_path / "master.log",
    )
    worker = None
    try:
        _wait_for_port(port, 60)
        url = f"spark://127.0.0.1:{port}"
        worker = start(
            [
                _spark_class(),
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "2",
                "--memory",
                "2g",
                "--webui-port",
                str(_free_port()),
            ],
            env,
            tmp_path / "worker.log",
        )
        yield url
    finally:
        if worker is not None:
            kill_group(worker)
        kill_group(master)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


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
    # the work ran on the cluster's executor, not in the driver
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "work").rglob("stderr"))
    assert "Running task" in logs or "Finished task" in logs
