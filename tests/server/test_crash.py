"""SIGKILL under load: after restart every acknowledged point is stored exactly once."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest

from loadtest.ingest import BASE_NS, ID_STRIDE, WorkerSpec, run_load
from tests.server.conftest import ServerFactory, delta_rows

POINTS = 200


def _acked_ids(ack_dir: Path) -> set[int]:
    ids: set[int] = set()
    for path in ack_dir.glob("*.acks"):
        ids.update(int(line) for line in path.read_text().split())
    return ids


def crash_once(start_server: ServerFactory, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    data = tmp_path / f"data-{seed}"
    ack_dir = tmp_path / f"acks-{seed}"
    ack_dir.mkdir()
    # Small flush thresholds so kills land before, during and after flushes.
    env = {"SHOAL_FLUSH_MAX_BYTES": "256KiB", "SHOAL_FLUSH_MAX_AGE_S": "0.5"}
    server = start_server(data, env=env)
    specs = [
        WorkerSpec(
            worker=w,
            protocol="http" if w % 2 == 0 else "grpc",
            signal="metrics",
            url=server.url,
            grpc_target=server.grpc_target,
            token="",
            points=POINTS,
            series=20,
            metrics=4,
            attributes=2,
            duration_s=5.0,
            requests=0,
            gzip=w == 1,
            unique=True,
            ack_log=str(ack_dir / f"worker-{w}.acks"),
            retry_overload=False,
        )
        for w in range(3)
    ]
    delay = rng.uniform(0.3, 2.0)

    def kill_under_load() -> None:
        # Kill only once acknowledgements flow, so the kill lands under load however
        # long the workers take to start on a busy machine.
        deadline = time.monotonic() + 60
        while len(_acked_ids(ack_dir)) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(delay)
        server.kill()

    killer = threading.Thread(target=kill_under_load)
    killer.start()
    report = run_load(specs)
    killer.join()
    acked = _acked_ids(ack_dir)
    assert report.acked_requests == len(acked) > 0

    restarted = start_server(data, env=env)
    assert restarted.terminate() == 0  # replays, then flushes everything on SIGTERM
    rows = delta_rows(data, "default", "metrics")
    request_ids = pc.subtract(rows["time_unix_nano"], BASE_NS)
    # a request's points all carry the request id in the low digits of their timestamps
    counts = Counter(v % 10_000_000_000 for v in request_ids.to_pylist())
    missing = [i for i in acked if counts.get(i, 0) != POINTS]
    assert not missing, f"acknowledged requests lost or duplicated: {missing[:10]}"
    for request_id, n in counts.items():
        assert n == POINTS, f"request {request_id} stored {n} points, not {POINTS}"
        assert request_id // ID_STRIDE < len(specs)


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_under_load_loses_and_duplicates_nothing(
    start_server: ServerFactory, tmp_path: Path, seed: int
) -> None:
    crash_once(start_server, tmp_path, seed)


@pytest.mark.slow
def test_sigkill_under_load_ten_consecutive_runs(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    for seed in range(100, 110):
        crash_once(start_server, tmp_path, seed)
