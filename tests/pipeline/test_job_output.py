"""What a user sees of a Spark job: its progress and result, not the JVM's log."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loadtest.pipeline_data import metrics_table
from shoal.storage.store import TableStore
from tests.pipeline.conftest import T0_US
from tests.pipeline.helpers import ROOT, child_env, shoal_cmd

pytestmark = pytest.mark.spark


def test_compact_shows_progress_and_result_and_logs_spark_to_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    table = TableStore(data).open("acme", "metrics")
    for lsn in (1, 2, 3):
        table.flush(metrics_table(50, start_us=T0_US + lsn, span_s=600, series=4), wal_lsn=lsn)
    done = subprocess.run(
        shoal_cmd("compact", "--master", "local[1]"),
        env=child_env(data),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "acme/metrics: version 4: 1 hours, 3 files -> 1, " in done.stdout
    assert "[1/1] acme/metrics: compacting..." in done.stderr
    noise = [
        line
        for line in done.stderr.splitlines()
        if any(w in line for w in ("WARN", "log4j", "NativeCodeLoader", "setLogLevel", "py4j"))
    ]
    # the one line the JVM itself prints about the module Spark 4 loads is not Spark's log
    noise = [line for line in noise if "incubator modules" not in line]
    assert noise == [], done.stderr
    log = data / "logs" / "spark.log"
    assert "SparkContext" in log.read_text()
