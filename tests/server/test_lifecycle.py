"""Startup checks, readiness after replay, graceful SIGTERM."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS, free_port
from tests.server.conftest import ServerFactory, delta_rows, metric_value, scrape

SHOAL = str(Path(sys.executable).with_name("shoal"))


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ)
    full_env.update(
        {
            "SHOAL_DATA_DIR": str(tmp_path / "data"),
            "SHOAL_HTTP_PORT": str(free_port()),
            "SHOAL_GRPC_PORT": str(free_port()),
        }
    )
    full_env.update(env)
    return subprocess.run(
        [SHOAL, "serve", *args], env=full_env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SHOAL_HTTP_PORT": "99999"}, "http_port"),
        ({"SHOAL_QUEUE_MAX_REQUESTS": "0"}, "queue_max_requests"),
        ({"SHOAL_WAL_FSYNC": "sometimes"}, "wal_fsync"),
        ({"SHOAL_MAX_BODY_BYTES": "lots"}, "max_body_bytes"),
    ],
)
def test_bad_settings_exit_2_with_a_clear_message(
    tmp_path: Path, env: dict[str, str], fragment: str
) -> None:
    done = _serve(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert fragment in done.stderr and "invalid value" in done.stderr


def test_non_loopback_without_tokens_refuses_unless_insecure(tmp_path: Path) -> None:
    done = _serve(tmp_path, SHOAL_BIND="0.0.0.0")
    assert done.returncode == 2
    assert "--insecure" in done.stderr and "no tokens" in done.stderr


def _post(port: int, request_id: int, points: int = 100) -> int:
    body = payloads.metrics_request(points=points, series=10, start_ns=BASE_NS + request_id)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request(
        "POST", "/v1/metrics", body.SerializeToString(), {"Content-Type": "application/x-protobuf"}
    )
    status = conn.getresponse().status
    conn.close()
    return status


def test_ready_only_after_replay_and_sigterm_flushes(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    env = {"SHOAL_FLUSH_MAX_AGE_S": "3600", "SHOAL_WAL_SEGMENT_BYTES": "256KiB"}
    server = start_server(data, env=env)
    for i in range(60):
        assert _post(server.http_port, i) == 200
    server.kill()  # nothing flushed: everything lives in the WAL

    restarted = start_server(data, env=env, wait=False)
    early = 0  # requests accepted in the instant between the two checks
    while True:
        try:
            with urllib.request.urlopen(restarted.url + "/readyz", timeout=2) as resp:
                ready = resp.status == 200
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
            # ingest is refused while replaying (or accepted if replay just finished)
            status = _post(restarted.http_port, 10_000 + early)
            assert status in (200, 503)
            early += status == 200
            continue
        except OSError:
            continue
        if ready:
            break
    # When /readyz first says ready, the whole WAL is already in the snapshot.
    assert metric_value(scrape(restarted), "shoal_snapshot_rows") == (60 + early) * 100

    assert _post(restarted.http_port, 60) == 200
    assert restarted.terminate() == 0
    assert "stopped" in restarted.log()
    assert delta_rows(data, "default", "metrics").num_rows == (61 + early) * 100
    # After a final flush that took everything, the WAL is one empty segment that
    # continues the LSNs: nothing to replay, nothing only this version can read.
    last_lsn = 61 + early
    assert _wal_files(data) == [(f"{last_lsn + 1:020d}.wal", 40)]
    third = start_server(data, env=env)
    assert metric_value(scrape(third), "shoal_snapshot_rows") == 0
    # the series index is read at the start, before any query asks for it
    deadline = time.monotonic() + 30
    while "series index of default/metrics read" not in third.log():
        assert time.monotonic() < deadline, third.log()
        time.sleep(0.05)
    assert _post(third.http_port, 61) == 200  # LSN last_lsn + 1, into that segment
    third.kill()
    fourth = start_server(data, env=env)
    assert metric_value(scrape(fourth), "shoal_snapshot_rows") == 100  # replayed
    assert fourth.terminate() == 0
    assert delta_rows(data, "default", "metrics").num_rows == (62 + early) * 100
    assert _wal_files(data) == [(f"{last_lsn + 2:020d}.wal", 40)]


def _wal_files(data: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_size) for p in (data / "wal").glob("*.wal"))


def test_a_failed_final_flush_leaves_the_wal_to_replay(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    env = {"SHOAL_FLUSH_MAX_AGE_S": "3600"}
    server = start_server(data, env=env)
    for i in range(5):
        assert _post(server.http_port, i) == 200
    # the tenant's directory cannot be made: the flush at SIGTERM fails
    (data / "tenants").mkdir(exist_ok=True)
    (data / "tenants" / "default").write_bytes(b"in the way")
    assert server.terminate() == 0
    assert "final flush incomplete" in server.log()
    (data / "tenants" / "default").unlink()
    assert [size > 40 for _, size in _wal_files(data)] == [True]
    restarted = start_server(data, env=env)
    assert metric_value(scrape(restarted), "shoal_snapshot_rows") == 500
    assert restarted.terminate() == 0
    assert delta_rows(data, "default", "metrics").num_rows == 500


def test_the_server_leaves_after_its_writers_without_the_interpreters_teardown(
    tmp_path: Path,
) -> None:
    """``shoal serve`` ends with ``os._exit`` once stopped (the native libraries' teardown
    aborted a clean stop now and then): a series index thread still writing is waited
    for, an idle pool worker is not (it waits for the teardown), the log is flushed, and
    the exit code is the server's."""
    written, log = tmp_path / "written", tmp_path / "log"
    script = f"""
import concurrent.futures, logging, pathlib, time
from shoal.commands.serve import leave
from shoal.storage import series
logging.getLogger().addHandler(logging.FileHandler({str(log)!r}))
def write():
    time.sleep(0.3)
    pathlib.Path({str(written)!r}).write_text("done")
series._thread(write, (), "series-checkpoint t")
pool = concurrent.futures.ThreadPoolExecutor(2)
pool.submit(int).result()  # an idle worker left, its pool still referenced
logging.getLogger().warning("stopped")
leave(3)
"""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert done.returncode == 3
    assert time.monotonic() - started < 20  # not held by the idle worker
    assert written.read_text() == "done"
    assert "stopped" in log.read_text()
