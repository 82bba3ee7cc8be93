"""Checks before the server binds: a taken port, a memory budget over the limit."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtest.ingest import ServerProcess, free_port
from shoal import config as config_mod
from shoal.errors import StartupError
from shoal.server import preflight
from tests.server.conftest import ServerFactory

SHOAL = str(Path(sys.executable).with_name("shoal"))
ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "shoal.service"
MiB = 1024 * 1024


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process (here: this one) listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.update(
        {
            "SHOAL_DATA_DIR": str(tmp_path / "data"),
            "SHOAL_HTTP_PORT": str(free_port()),
            "SHOAL_GRPC_PORT": str(free_port()),
            "SHOAL_PG_PORT": str(free_port()),
            "SHOAL_BIND": "127.0.0.1",
        }
    )
    full_env.update(env)
    return subprocess.run(
        [SHOAL, "serve"], env=full_env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("setting", ["http_port", "grpc_port", "pg_port"])
def test_a_taken_port_is_one_line_naming_the_setting_and_exit_2(
    tmp_path: Path, taken_port: int, setting: str
) -> None:
    # the PostgreSQL listener stops the start only when it is required (pg_enabled=true)
    done = _serve(
        tmp_path, SHOAL_PG_ENABLED="true", **{f"SHOAL_{setting.upper()}": str(taken_port)}
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr
    line = errors[0]
    assert line.startswith(f"shoal: error: port {taken_port} on 127.0.0.1 is already in use")
    assert setting in line and f"SHOAL_{setting.upper()}" in line
    assert "Traceback" not in done.stderr


def test_the_unit_does_not_restart_on_the_startup_exit_code() -> None:
    text = UNIT.read_text()
    prevent = re.search(r"^RestartPreventExitStatus=(.+)$", text, re.M)
    assert prevent is not None and "2" in prevent.group(1).split()
    assert re.search(r"^Restart=(always|on-failure)$", text, re.M)


def test_memory_budget_over_the_setting_refuses_to_start(tmp_path: Path) -> None:
    done = _serve(tmp_path, SHOAL_MEMORY_LIMIT_BYTES="1GiB")
    assert done.returncode == 2, done.stderr
    assert "memory_limit_bytes" in done.stderr
    assert "query_max_concurrency" in done.stderr and "768 MiB" in done.stderr
    assert "Traceback" not in done.stderr


def test_memory_budget_that_fits_starts(start_server: ServerFactory) -> None:
    env = {
        "SHOAL_MEMORY_LIMIT_BYTES": "1GiB",
        "SHOAL_QUERY_MAX_CONCURRENCY": "1",
        "SHOAL_FLUSH_MAX_BYTES": "32MiB",
        "SHOAL_PROMQL_CACHE_BYTES": "32MiB",
        "SHOAL_QUEUE_MAX_BYTES": "32MiB",
        "SHOAL_SERIES_INDEX_BYTES": "16MiB",
        "SHOAL_SERIES_CACHE_BYTES": "8MiB",
    }
    server = start_server(env=env)
    assert server.proc is not None and server.proc.poll() is None
    assert "memory budget" in server.log() and "fits 1024 MiB" in server.log()


def test_budget_adds_up_each_setting() -> None:
    cfg = config_mod.default().replace(
        query_memory_bytes=100 * MiB,
        query_max_concurrency=3,
        flush_max_bytes=10 * MiB,
        queue_max_bytes=7 * MiB,
        max_body_bytes=5 * MiB,
        promql_cache_bytes=11 * MiB,
        series_index_bytes=13 * MiB,
        series_cache_bytes=17 * MiB,
    )
    budget = preflight.memory_budget(cfg)
    assert budget.queries == 300 * MiB
    assert budget.unflushed == preflight.UNFLUSHED_LIMIT_FLUSHES * 10 * MiB
    assert budget.promql_cache == 11 * MiB
    snapshot = preflight.UNFLUSHED_LIMIT_FLUSHES * 10
    assert budget.series_index == 13 * MiB
    assert budget.series_caches == preflight.SERIES_CACHES * 17 * MiB
    caches = preflight.SERIES_CACHES * 17
    total = 300 + snapshot + 7 + 10 + 11 + 13 + caches
    assert budget.total == preflight.BASELINE_RSS_BYTES + total * MiB
    with_processes = preflight.memory_budget(cfg.replace(decode_processes=2))
    assert with_processes.series_caches == 2 * preflight.SERIES_CACHES * 17 * MiB
    assert with_processes.decoders == 2 * preflight.DECODE_PROCESS_BYTES
    with pytest.raises(StartupError, match="cgroup memory limit"):
        preflight.check_memory(cfg, cgroup_limit=budget.total - 1)
    assert preflight.check_memory(cfg, cgroup_limit=budget.total) == budget


def test_the_unit_memory_max_holds_the_default_budget() -> None:
    match = re.search(r"^MemoryMax=(\d+)([KMG])$", UNIT.read_text(), re.M)
    assert match is not None
    limit = int(match.group(1)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]
    assert preflight.memory_budget(config_mod.default()).total <= limit


def test_cgroup_v2_limit_is_the_smallest_on_the_path(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/shoal.service\n")
    leaf = tmp_path / "fs" / "system.slice" / "shoal.service"
    leaf.mkdir(parents=True)
    (leaf / "memory.max").write_text(f"{2048 * MiB}\n")
    (tmp_path / "fs" / "system.slice" / "memory.max").write_text("max\n")
    assert preflight.cgroup_memory_limit(proc, tmp_path / "fs") == 2048 * MiB
    (tmp_path / "fs" / "system.slice" / "memory.max").write_text(f"{1024 * MiB}\n")
    assert preflight.cgroup_memory_limit(proc, tmp_path / "fs") == 1024 * MiB
    (leaf / "memory.max").write_text("max\n")
    (tmp_path / "fs" / "system.slice" / "memory.max").write_text("max\n")
    assert preflight.cgroup_memory_limit(proc, tmp_path / "fs") is None


def test_cgroup_v1_limit(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/box\n3:cpu:/box\n")
    box = tmp_path / "fs" / "memory" / "box"
    box.mkdir(parents=True)
    (box / "memory.limit_in_bytes").write_text(f"{512 * MiB}\n")
    (tmp_path / "fs" / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert preflight.cgroup_memory_limit(proc, tmp_path / "fs") == 512 * MiB


def test_two_listeners_on_one_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    port = str(free_port())
    done = _serve(tmp_path, SHOAL_HTTP_PORT=port, SHOAL_GRPC_PORT=port)
    assert done.returncode == 2, done.stderr
    assert f"http_port and grpc_port are both {port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_logged_request_that_does_not_read_back_stops_the_start(tmp_path: Path) -> None:
    """A WAL record whose logged request no longer decodes (a decoder that changed, say)
    stops the start with one line naming the record; nothing is dropped or truncated."""
    from loadtest import remote_write
    from shoal.ingest import records
    from shoal.ingest.decoding import REMOTE_WRITE, DecodeJob
    from shoal.promwrite.decode import V1
    from shoal.wal import Wal

    job = DecodeJob("metrics", REMOTE_WRITE, V1, 1 << 20)
    good = remote_write.compress(remote_write.encode([({"__name__": "up"}, [(1_000, 1.0)])]))
    wal_dir = tmp_path / "data" / "wal"
    wal = Wal.open(wal_dir)
    for body in (good, b"\x05bad"):
        wal.append(records.encode_request("default", "metrics", job, body)).result()
    wal.shutdown()
    before = {p.name: p.read_bytes() for p in wal_dir.iterdir()}
    done = _serve(tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("shoal: error:")]
    assert len(errors) == 1, done.stderr
    assert "WAL record 2 cannot be read back" in errors[0]
    assert "not valid snappy" in errors[0]
    assert {p.name: p.read_bytes() for p in wal_dir.iterdir()} == before


def test_the_test_servers_start_again_on_other_ports_when_theirs_was_taken(
    tmp_path: Path,
) -> None:
    """Tests run side by side: a free port picked for one server can be taken (here by a
    listener answering what is not HTTP) before that server binds it."""
    server = ServerProcess(tmp_path / "data")
    taken = server.http_port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", taken))
        sock.listen()
        server.start()
        try:
            assert server.http_port != taken
            assert "is already in use" in server.log()
            assert server.terminate() == 0
        finally:
            server.kill()
