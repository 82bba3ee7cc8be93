"""Every maintenance job on a Spark standalone cluster, against tables in a bucket,
while a real server ingests into them and answers queries.

A master and two workers run as separate processes (pyspark's own jars). Each
worker has its own empty working directory and a mount namespace of its own in
which the server's and the jobs' data directories are empty: the executors share
nothing with the server but the bucket (the S3-compatible server of the tests,
reached with the credentials in the workers' environment, as an instance profile
would give them). ``shoal compact``, ``import --engine spark``, ``rollup``,
``retention`` and ``vacuum`` run (the Spark jobs with ``--master spark://...``,
the metadata-only ones on the driver, against the same bucket) while the server
keeps ingesting and flushing; every acknowledged row is in the table exactly once
afterwards, and every flush's LSN committed exactly once.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from loadtest import payloads
from loadtest.ingest import ServerProcess
from loadtest.pipeline_data import metrics_table
from shoal.storage.location import StorageLocation
from shoal.storage.store import TableStore
from tests.pipeline.helpers import (
    child_env,
    kill_group,
    shoal_cmd,
    start,
    start_master,
    worker_args,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PB = {"Content-Type": "application/x-protobuf"}
POINTS = 200
HOUR_NS = 3_600_000_000_000
DAY_US = 86_400_000_000


def _hidden(dirs: list[Path], args: list[str]) -> list[str]:
    """``args`` run in a mount namespace of their own where each of ``dirs`` is empty."""
    mounts = [f'mount -t tmpfs -o size=1m shoal-hidden "${i + 1}"' for i in range(len(dirs))]
    script = " && ".join([*mounts, f"shift {len(dirs)}", 'exec "$@"'])
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    return [*unshare, *map(str, dirs), *args]


@pytest.fixture()
def cluster(tmp_path: Path, s3_server: Any) -> Iterator[tuple[str, list[Path], list[int]]]:
    """The master's URL, the workers' working directories and process ids."""
    hidden = [tmp_path / "server", tmp_path / "jobs"]
    for d in hidden:
        d.mkdir()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", **s3_server.env())
    master, url = start_master(env, tmp_path / "master.log")
    workers: list[subprocess.Popen[bytes]] = []
    dirs = [tmp_path / f"worker{i}" for i in (1, 2)]
    try:
        for work in dirs:
            work.mkdir()
            args = _hidden(hidden, worker_args(url, 1, "1g", work))
            log = work.with_suffix(".log")
            workers.append(start(args, dict(env, SPARK_WORKER_DIR=str(work)), log))
        yield url, dirs, [w.pid for w in workers]
    finally:
        for worker in workers:
            kill_group(worker)
        kill_group(master)


class Load:
    """Ingest into the server and check its SQL answers, on a thread, until stopped."""

    def __init__(self, server: ServerProcess, start_ns: int) -> None:
        self.server = server
        self.start_ns = start_ns
        self.acked = 0
        self.sent = 0
        self.queries = 0
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def since(self) -> str:
        return dt.datetime.fromtimestamp(self.start_ns / 1e9, tz=dt.UTC).isoformat()

    def count(self) -> int:
        sql = f"SELECT count(*) FROM metrics WHERE timestamp >= TIMESTAMP '{self.since()}'"
        answer = httpx.post(self.server.url + "/api/v1/sql", content=sql, timeout=60)
        if answer.status_code != 200:
            raise AssertionError(f"query failed: {answer.status_code} {answer.text[:300]}")
        return int(answer.json()["rows"][0][0])

    def _send(self) -> None:
        seq = self.sent
        self.sent += 1
        # distinct times per request (two 10 s steps each)
        body = payloads.metrics_request(
            points=POINTS, series=20, start_ns=self.start_ns + seq * 20_000_000_000, seed=seq
        )
        answer = httpx.post(
            self.server.url + "/v1/metrics",
            content=body.SerializeToString(),
            headers=PB,
            timeout=60,
        )
        if answer.status_code == 200:
            self.acked += POINTS
        elif answer.status_code not in (429, 503):
            self.problems.append(f"ingest answered {answer.status_code}: {answer.text[:200]}")

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.sent < 1400:
                self._send()
                if self.sent % 5 == 0:
                    got = self.count()
                    self.queries += 1
                    if got != self.acked:
                        self.problems.append(f"SQL counted {got} rows, {self.acked} acknowledged")
                time.sleep(0.3)
        except Exception as exc:
            self.problems.append(f"{type(exc).__name__}: {exc}")

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


def _job(tmp_path: Path, url: str, s3_url: str, *args: str, **env: str) -> str:
    # output to a file, not a pipe: a process the job leaves behind cannot hold it open
    out = tmp_path / f"job-{args[0]}-{time.monotonic_ns()}.log"
    with out.open("w") as sink:
        done = subprocess.run(
            shoal_cmd(*args, *(() if args[0] in ("retention", "vacuum") else ("--master", url))),
            env=child_env(tmp_path / "jobs", SHOAL_STORAGE_URL=s3_url, **env),
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    text = out.read_text()
    assert done.returncode == 0, text[-4000:]
    return text


def _bucket(url: str, version: int | None = None) -> DeltaTable:
    return DeltaTable(url, version=version, storage_options={"AWS_ALLOW_HTTP": "true"})


def _keys(url: str) -> tuple[int, set[tuple[Any, ...]]]:
    rows = _bucket(url).to_pyarrow_table(columns=["series_id", "time_unix_nano", "metric_name"])
    keys = set(zip(*(rows.column(c).to_pylist() for c in rows.column_names), strict=True))
    return rows.num_rows, keys


@pytest.mark.timeout(1800)
def test_the_jobs_on_a_cluster_against_the_bucket_while_the_server_ingests(
    tmp_path: Path,
    s3_url: str,
    s3_server: Any,
    cluster: tuple[str, list[Path], list[int]],
) -> None:
    url, work_dirs, worker_pids = cluster
    server_dir = tmp_path / "server"
    # the workers see nothing of the server's data directory
    (server_dir / "marker").write_text("the server's")
    for pid in worker_pids:
        seen = subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "ls", "-A", str(server_dir)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert seen.returncode == 0 and seen.stdout.strip() == "", seen
    table_url = f"{s3_url}/default/metrics"
    now = time.time_ns()
    start_ns = (now // HOUR_NS - 9) * HOUR_NS  # 1,400 requests of 20 s: 7.8 hours
    server = ServerProcess(
        server_dir / "data",
        env={
            "SHOAL_STORAGE_URL": s3_url,
            "SHOAL_FLUSH_MAX_AGE_S": "0.5",
            "SHOAL_STORAGE_POLL_S": "0.5",
        },
        log_path=tmp_path / "server.log",
    ).start()
    try:
        with Load(server, start_ns) as load:
            deadline = time.monotonic() + 120
            while load.acked < 20 * POINTS:  # a few flushes: several small files per hour
                time.sleep(0.5)
                assert not load.problems, load.problems
                assert time.monotonic() < deadline
            # history to import, from the bucket: one file older than the retention
            # (30 days), one inside it
            location = StorageLocation.parse(s3_url, tmp_path)
            inputs = []
            for name, age_days in (("old", 40), ("recent", 5)):
                t0 = (now // 1000 // DAY_US - age_days) * DAY_US
                data = metrics_table(300, start_us=t0, span_s=5400, series=6, seed=age_days)
                fs, path = location.input(f"{s3_url}-incoming/{name}.parquet")
                with fs.open_output_stream(path) as out:
                    pq.write_table(data, out)
                inputs.append(f"{s3_url}-incoming/{name}.parquet")
            imported = _job(
                tmp_path, url, s3_url, "import", *inputs, "--tenant", "default",
                "--table", "metrics", "--engine", "spark",
            )  # fmt: skip
            assert "600 rows imported (spark)" in imported, imported
            compacted = _job(tmp_path, url, s3_url, "compact", "--table", "metrics")
            assert " files -> " in compacted, compacted
            rolled = _job(tmp_path, url, s3_url, "rollup")
            source_version = int(rolled.split("(source version ")[1].split(")")[0])
            points = _bucket(f"{s3_url}/default/metrics_1m").to_pyarrow_table(columns=["points"])
            rolled_rows = _bucket(table_url, source_version).to_pyarrow_table(columns=["series_id"])
            assert sum(points.column("points").to_pylist()) == rolled_rows.num_rows
            dropped = _job(tmp_path, url, s3_url, "retention", "--table", "metrics")
            assert re.search(r"dropped \d+ files, 300 rows", dropped), dropped
            vacuumed = _job(tmp_path, url, s3_url, "vacuum")  # the default window: nothing yet
            assert "deleted 0 files" in vacuumed, vacuumed
            sent, deadline = load.sent, time.monotonic() + 60
            while load.sent < sent + 10 and time.monotonic() < deadline:  # ingest goes on
                assert not load.problems, load.problems
                time.sleep(0.5)
            assert load.sent >= sent + 10
        assert not load.problems, load.problems
        assert load.queries >= 20
        # everything flushed, then the removed files deleted (a window of 0 hours is safe
        # only while nothing flushes: a file uploaded but not yet committed is no older)
        deadline = time.monotonic() + 120
        while _keys(table_url)[0] < load.acked + 300:
            assert time.monotonic() < deadline, "the server did not flush everything"
            time.sleep(0.5)
        # (the setting takes whole hours above zero; storage's vacuum takes 0)
        table = TableStore(tmp_path / "jobs", location=StorageLocation.parse(s3_url, tmp_path))
        deleted = table.open("default", "metrics").vacuum(0)
        removed = int(re.findall(r"(\d+) files -> ", compacted)[0])
        assert len([d for d in deleted if "/part-" in d]) >= removed >= 2, deleted
        # every acknowledged row exactly once, with the recent import; the old one dropped
        rows, keys = _keys(table_url)
        assert rows == len(keys) == load.acked + 300
        assert load.count() == load.acked
        history = _bucket(table_url).history()
        lsns = [int(h["shoal.walLsn"]) for h in history if h.get("shoal.operation") == "flush"]
        assert len(lsns) == len(set(lsns))  # no flush committed twice
        versions = sorted(int(h["version"]) for h in history)
        assert versions == list(range(len(versions)))
        operations = {h.get("shoal.operation") for h in history}
        assert {"flush", "import", "OPTIMIZE", "RETENTION"} <= operations
    finally:
        server.terminate()
    # the tasks ran on both workers' executors
    for work in work_dirs:
        logs = "".join(p.read_text(errors="replace") for p in work.rglob("stderr"))
        assert "Finished task" in logs or "Running task" in logs, work
