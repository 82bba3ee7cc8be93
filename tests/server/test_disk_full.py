"""WAL disk full: 503 / UNAVAILABLE, nothing acknowledged lost, ingest resumes with space."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pyarrow.compute as pc
import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS, GRPC_METHODS, ServerProcess
from tests.server.conftest import ServerFactory, delta_rows

POINTS = 200


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("mount(8) is not available")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _body(request_id: int) -> bytes:
    request = payloads.metrics_request(
        points=POINTS, metrics=4, series=20, start_ns=BASE_NS + request_id
    )
    return request.SerializeToString()


class Sender:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.next_id = 0
        self.acked: set[int] = set()
        self.statuses: Counter[str] = Counter()
        self.channel = grpc.insecure_channel(server.grpc_target)
        self.call = self.channel.unary_unary(GRPC_METHODS["metrics"])

    def send(self, protocol: str) -> str:
        request_id = self.next_id
        self.next_id += 1
        if protocol == "http":
            conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=30)
            conn.request(
                "POST", "/v1/metrics", _body(request_id), {"Content-Type": "application/x-protobuf"}
            )
            resp = conn.getresponse()
            resp.read()
            conn.close()
            status = str(resp.status)
            ok = resp.status == 200
        else:
            try:
                self.call(_body(request_id), timeout=30)
                status, ok = "OK", True
            except grpc.RpcError as exc:
                status, ok = exc.code().name, False
        self.statuses[status] += 1
        if ok:
            self.acked.add(request_id)
        return status


def test_wal_disk_full_refuses_retryably_and_recovers(
    start_server: ServerFactory, small_tmpfs: Path
) -> None:
    data = small_tmpfs / "data"
    env = {
        "SHOAL_WAL_SEGMENT_BYTES": "512KiB",
        "SHOAL_FLUSH_MAX_AGE_S": "3600",
        "SHOAL_FLUSH_MAX_BYTES": "1GiB",
    }
    server = start_server(data, env=env)
    sender = Sender(server)
    # Fill the disk through the WAL until both protocols are refused.
    for _ in range(2000):
        sender.send("http")
        sender.send("grpc")
        if sender.statuses["503"] >= 3 and sender.statuses["UNAVAILABLE"] >= 3:
            break
    assert sender.statuses["503"] >= 3, sender.statuses
    assert sender.statuses["UNAVAILABLE"] >= 3, sender.statuses
    assert sender.acked, "nothing was accepted before the disk filled"
    with urllib.request.urlopen(server.url + "/healthz", timeout=5) as resp:
        assert resp.status == 200
    assert server.proc is not None and server.proc.poll() is None

    # Space returns: ingest resumes without a restart.
    subprocess.run(["mount", "-o", "remount,size=256m", str(small_tmpfs)], check=True)
    resumed = [sender.send(p) for p in ("http", "grpc", "http", "grpc")]
    assert resumed == ["200", "OK", "200", "OK"]

    assert server.terminate() == 0
    rows = delta_rows(data, "default", "metrics")
    ids = Counter(
        v % 10_000_000_000 for v in pc.subtract(rows["time_unix_nano"], BASE_NS).to_pylist()
    )
    lost = [i for i in sender.acked if ids.get(i) != POINTS]
    assert not lost, f"acknowledged requests lost or duplicated: {lost[:10]}"
    assert all(n == POINTS for n in ids.values())
