"""SIGKILL under load: after restart every acknowledged point is stored exactly once."""

from __future__ import annotations

import http.client
import itertools
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pytest

from loadtest import remote_write
from loadtest.ingest import BASE_NS, ID_STRIDE, WorkerSpec, run_load
from shoal.wal.codec import SEGMENT_HEADER_SIZE, FrameScanner
from shoal.wal.recovery import inspect_directory
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


SERIES = 200
"""Series per remote-write request: the same ones, in the same order, every request, so
that after the first the rows are slices of the decoder's series cache."""


def _wal_payloads(wal_dir: Path) -> list[bytes]:
    """The payloads in the WAL's segments, read as they are on disk."""
    out = []
    for seg in inspect_directory(wal_dir, 1 << 26):
        data = seg.path.read_bytes()[: seg.valid_end]
        for _lsn, _rtype, start, stop in FrameScanner(
            data, SEGMENT_HEADER_SIZE, seg.first_lsn, 1 << 26
        ):
            out.append(data[start:stop])
    return out


def _remote_write_body(request_id: int) -> bytes:
    # every sample of request r carries timestamp BASE_MS + r: which request it came from
    return remote_write.compress(
        remote_write.encode(
            (
                {"__name__": "crash_metric", "job": "crash", "series": str(s)},
                [(_BASE_MS + request_id, 1.0)],
            )
            for s in range(SERIES)
        )
    )


_BASE_MS = 1_700_000_000_000


def test_sigkill_under_remote_write_loses_and_duplicates_nothing(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    """Remote write with SIGKILL under load: every acknowledged request's samples are
    stored once after the restart (its WAL records are the requests themselves, decoded
    again when they are replayed)."""
    data = tmp_path / "data"
    env = {"SHOAL_FLUSH_MAX_BYTES": "512KiB", "SHOAL_FLUSH_MAX_AGE_S": "0.5"}
    server = start_server(data, env=env)
    acked: list[int] = []
    stop = threading.Event()

    def sender(worker: int) -> None:
        headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        for n in itertools.count():
            if stop.is_set():
                return
            request_id = n * 4 + worker
            try:
                conn.request("POST", "/api/v1/write", _remote_write_body(request_id), headers)
                response = conn.getresponse()
                response.read()
            except OSError:
                return  # the server is gone
            if response.status == 204:
                acked.append(request_id)

    senders = [threading.Thread(target=sender, args=(w,)) for w in range(4)]
    for thread in senders:
        thread.start()
    deadline = time.monotonic() + 60
    while len(acked) < 40 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(random.Random(7).uniform(0.2, 1.0))
    server.kill()
    stop.set()
    for thread in senders:
        thread.join(30)
    assert len(acked) >= 40
    versions = Counter(payload[0] for payload in _wal_payloads(data / "wal"))
    assert versions[3] and set(versions) == {3}, versions  # logged as requests

    restarted = start_server(data, env=env)
    assert restarted.terminate() == 0  # replays, then flushes everything on SIGTERM
    rows = delta_rows(data, "default", "metrics")
    per_request = Counter(
        (t - _BASE_MS * 1_000_000) // 1_000_000 for t in rows["time_unix_nano"].to_pylist()
    )
    missing = [r for r in acked if per_request.get(r, 0) != SERIES]
    assert not missing, f"acknowledged requests lost or duplicated: {missing[:10]}"
    assert all(n == SERIES for n in per_request.values()), "a request stored in part or twice"
    assert set(rows["attributes"].to_pylist()[0]) <= {("series", str(s)) for s in range(SERIES)}
