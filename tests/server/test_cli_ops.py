"""The command line as an operator uses it against a real server and data dir."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS, ServerProcess
from tests.server.conftest import ServerFactory

PB = {"Content-Type": "application/x-protobuf"}


def _shoal(*args: str, data: Path | None = None, **env: str) -> subprocess.CompletedProcess[bytes]:
    full_env = dict(os.environ)
    if data is not None:
        full_env["SHOAL_DATA_DIR"] = str(data)
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "shoal.cli", *args],
        env=full_env,
        capture_output=True,
        timeout=120,
    )


@pytest.fixture
def busy(start_server: ServerFactory) -> ServerProcess:
    """A server holding 3 requests of logs, none flushed yet."""
    server = start_server(env={"SHOAL_FLUSH_MAX_AGE_S": "3600"})
    for i in range(3):
        body = payloads.logs_request(records=10, series=2, start_ns=BASE_NS + i)
        sent = httpx.post(server.url + "/v1/logs", content=body.SerializeToString(), headers=PB)
        assert sent.status_code == 200
    return server


def test_sql_prints_no_client_log_lines(busy: ServerProcess) -> None:
    done = _shoal("sql", "--url", busy.url, "SELECT count(*) AS n FROM logs")
    assert done.returncode == 0, done.stderr
    assert b"30" in done.stdout
    assert done.stderr == b"", done.stderr


def test_sql_format_arrow_writes_an_ipc_stream(busy: ServerProcess, tmp_path: Path) -> None:
    sql = "SELECT severity_text, count(*) AS n FROM logs GROUP BY 1 ORDER BY 1"
    remote = _shoal("sql", "--url", busy.url, "--format", "arrow", sql)
    assert remote.returncode == 0, remote.stderr
    table = pa.ipc.open_stream(remote.stdout).read_all()
    assert table.column_names == ["severity_text", "n"]
    assert sum(table.column("n").to_pylist()) == 30
    busy.terminate()  # flushes, so --local sees the rows
    local = _shoal("sql", "--local", "--format", "arrow", sql, data=busy.data_dir)
    assert local.returncode == 0, local.stderr
    assert pa.ipc.open_stream(local.stdout).read_all().equals(table)


def test_table_history_of_a_table_with_unflushed_rows_only(busy: ServerProcess) -> None:
    # the operator's settings, as the server has them
    done = _shoal(
        "table", "history", "--table", "logs", data=busy.data_dir, SHOAL_FLUSH_MAX_AGE_S="3600"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert "default/logs: no committed version yet: 3 WAL record(s)" in out
    assert "flush_max_age_s (3600 s)" in out
    missing = _shoal("table", "history", "--table", "spans", data=busy.data_dir)
    assert missing.returncode == 2
    assert b"no table 'spans' for tenant 'default'" in missing.stderr
    busy.terminate()
    flushed = _shoal("table", "history", "--table", "logs", data=busy.data_dir)
    assert flushed.returncode == 0 and b"flush" in flushed.stdout


def test_wal_verify_defaults_to_the_data_dir(busy: ServerProcess, tmp_path: Path) -> None:
    done = _shoal("wal", "verify", data=busy.data_dir)
    assert done.returncode == 0, done.stderr
    assert f"WAL {busy.data_dir / 'wal'}".encode() in done.stdout
    assert b"3 readable record(s)" in done.stdout
    nowhere = _shoal("wal", "verify", data=tmp_path / "none")
    assert nowhere.returncode == 2
    assert b"no WAL directory at" in nowhere.stderr and b"SHOAL_DATA_DIR" in nowhere.stderr


def test_help_and_flags_say_what_commands_do() -> None:
    top = _shoal("--help").stdout.decode()
    retention = next(line for line in top.splitlines() if line.strip().startswith("retention"))
    assert "Spark" not in retention.replace("no Spark", "") and "metadata only" in retention
    imp = _shoal("import", "--help").stdout.decode()
    for fragment in ("Parquet files", "whose table receives", "timestamp column", "Spark job"):
        assert fragment in imp, fragment
    for command in ("retention", "vacuum"):
        done = _shoal(command, "--master", "local[1]")
        assert done.returncode == 2 and b"unrecognized arguments: --master" in done.stderr
    assert b"--master" in _shoal("compact", "--help").stdout


def test_sql_format_arrow_refuses_a_terminal(busy: ServerProcess) -> None:
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "shoal.cli", "sql", "--url", busy.url, "--format", "arrow",
             "SELECT 1"],
            stdout=secondary, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
    finally:
        os.close(secondary)
        os.close(primary)
    assert done.returncode == 2
    assert b"binary Arrow IPC stream; redirect it" in done.stderr
