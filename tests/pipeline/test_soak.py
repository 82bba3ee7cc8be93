"""Concurrency soak: the server ingests under load while compaction, retention and
rollups run in a loop; afterwards every acknowledged point is there exactly once and
every Delta version is accounted for."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from loadtest.ingest import ServerProcess
from loadtest.pipeline_data import metrics_table
from shoal.storage.importer import import_files
from shoal.storage.store import TableStore
from tests.conftest import Track
from tests.pipeline.helpers import ROOT, child_env, shoal_cmd

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

LOAD_S = 240
POINTS_PER_REQUEST = 100
OLD_US = 1_735_689_600_000_000  # 2025-01-01: past the soak's 330-day retention


def _acked_requests(ack_dir: Path) -> list[int]:
    ids: list[int] = []
    for path in ack_dir.glob("*.acks"):
        ids.extend(int(line) for line in path.read_text().split())
    return ids


def test_soak_ingest_with_maintenance_loop(tmp_path: Path, children: Track) -> None:
    data = tmp_path / "data"
    # an old hour that retention must drop while the server flushes (imported, so
    # that no WAL LSN is recorded: the server's own LSNs start at 1)
    old = tmp_path / "old.parquet"
    pq.write_table(metrics_table(500, start_us=OLD_US, span_s=600, series=5), old)
    import_files(
        TableStore(data).open("default", "metrics"),
        [old],
        time_column=None,
        allow_overlap=False,
        progress=None,
    )
    env = {"SHOAL_FLUSH_MAX_AGE_S": "2", "SHOAL_RETENTION_DAYS": "330"}
    server = ServerProcess(data, env=env, log_path=tmp_path / "server.log")
    server.start(wait=False)
    assert server.proc is not None
    children(server.proc)  # stopped at teardown whatever happens from here on
    server.wait_ready()
    ack_dir = tmp_path / "acks"
    ack_dir.mkdir()
    load = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadtest",
            "ingest",
            "--url",
            server.url,
            "--duration",
            str(LOAD_S),
            "--workers",
            "2",
            "--points-per-request",
            str(POINTS_PER_REQUEST),
            "--series",
            "200",
            "--unique",
            "--ack-log",
            str(ack_dir),
        ],
        cwd=ROOT,
        stdout=(tmp_path / "load.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    children(load)
    jobs_env = child_env(data, SHOAL_RETENTION_DAYS="330")
    ran: list[tuple[str, int]] = []
    try:
        deadline = time.monotonic() + LOAD_S
        while time.monotonic() < deadline:
            for job in ("compact", "retention", "rollup"):
                # retention only touches metadata: no Spark, no --master
                spark = ("--master", "local[1]") if job != "retention" else ()
                done = subprocess.run(
                    shoal_cmd(job, *spark),
                    env=jobs_env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                assert done.returncode == 0, done.stdout + done.stderr
                ran.append((job, done.returncode))
        assert load.wait(timeout=LOAD_S + 120) == 0, (tmp_path / "load.log").read_text()
    finally:
        if load.poll() is None:
            load.kill()
        assert server.terminate(timeout=120) == 0, server.log()[-4000:]

    # a last round after the final flush
    for job in ("compact", "rollup"):
        subprocess.run(
            shoal_cmd(job, "--master", "local[1]"),
            env=jobs_env,
            check=True,
            capture_output=True,
            timeout=600,
        )
    acked = _acked_requests(ack_dir)
    assert len(acked) == len(set(acked)) > 0
    table_path = data / "tenants" / "default" / "metrics"
    rows = DeltaTable(str(table_path)).to_pyarrow_table(
        columns=["series_id", "time_unix_nano", "timestamp"]
    )
    # the old hour is gone, every acknowledged point is there once
    assert pc.min(rows.column("timestamp")).value > OLD_US + 3_600_000_000
    assert rows.num_rows == len(acked) * POINTS_PER_REQUEST
    distinct = rows.group_by(["series_id", "time_unix_nano"]).aggregate([]).num_rows
    assert distinct == rows.num_rows
    # every version accounted for: dense, each a known operation, rows add up
    history = TableStore(data).open("default", "metrics").history(limit=100_000)
    versions = sorted(h.version for h in history)
    assert versions == list(range(len(versions)))
    total = 0
    ops = {h.operation for h in history}
    assert {"flush", "OPTIMIZE", "RETENTION"} <= ops, ops
    for h in history:
        if h.operation == "OPTIMIZE":
            assert h.rows_added == h.rows_removed
        total += (h.rows_added or 0) - (h.rows_removed or 0)
    assert total == rows.num_rows
    # the rollups count each raw point once
    hourly = DeltaTable(str(data / "tenants" / "default" / "metrics_1h")).to_pyarrow_table()
    live = hourly.filter(
        pc.greater(pc.cast(hourly.column("timestamp"), "int64"), OLD_US + 3_600_000_000)
    )
    assert pc.sum(live.column("points")).as_py() == rows.num_rows
    assert len([j for j, _ in ran if j == "compact"]) >= 2
