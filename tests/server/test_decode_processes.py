"""Decoding in worker processes (``decode_processes``): the same rows and errors as
decoding in the server, a worker killed with its jobs in hand fails them retryably and
is replaced, and a killed server leaves no worker behind."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from loadtest import payloads, remote_write
from shoal.errors import DecodeError, DecoderLostError, PayloadTooLargeError
from shoal.ingest.decoding import OTLP, OTLP_JSON, REMOTE_WRITE, Decoded, DecodeJob, decode
from shoal.ingest.processes import ProcessDecoder
from shoal.promwrite.decode import V1, V2
from tests.server.conftest import ServerFactory, metric_value, scrape


def _wait(decoder: ProcessDecoder, job: DecodeJob, body: bytes) -> Decoded | BaseException:
    done = threading.Event()
    box: list[Decoded | BaseException] = []

    def finish(outcome: Decoded | BaseException) -> None:
        box.append(outcome)
        done.set()

    decoder.submit(job, "acme", body, finish)
    assert done.wait(60), "the decoder never answered"
    return box[0]


def _rw(series: int, t_ms: int, prefix: str = "m") -> bytes:
    return remote_write.compress(
        remote_write.encode(
            [
                ({"__name__": f"{prefix}_{i % 7}", "job": "j", "k": str(i)}, [(t_ms, float(i))])
                for i in range(series)
            ]
        )
    )


@pytest.fixture
def decoder() -> ProcessDecoder:
    d = ProcessDecoder(1)
    yield d  # type: ignore[misc]
    d.close()


def test_a_process_decodes_what_the_server_would(decoder: ProcessDecoder) -> None:
    request = payloads.metrics_request(points=300, series=40, seed=3)
    cases = [
        (DecodeJob("metrics", OTLP), request.SerializeToString()),
        (DecodeJob("logs", OTLP), payloads.logs_request(records=50, seed=1).SerializeToString()),
        (DecodeJob("metrics", REMOTE_WRITE, V1, 1 << 20), _rw(500, 1_000)),
        (
            DecodeJob("metrics", REMOTE_WRITE, V2, 1 << 20),
            remote_write.compress(
                remote_write.encode_v2([({"__name__": "x", "a": "b"}, [(5, 1.5)], {"type": 1})])
            ),
        ),
    ]
    for job, body in cases:
        there = _wait(decoder, job, body)
        here = decode(job, body)
        assert isinstance(there, Decoded), there
        assert there.table.equals(here.table), job
        assert (there.rejected, there.errors) == (here.rejected, here.errors)
        assert (there.samples, there.exemplars) == (here.samples, here.exemplars)
        assert there.payload is not None  # the WAL payload, built by the worker


def test_errors_come_back_as_the_same_errors(decoder: ProcessDecoder) -> None:
    bad = _wait(decoder, DecodeJob("metrics", OTLP_JSON), b"{not json")
    assert isinstance(bad, DecodeError)
    with pytest.raises(DecodeError) as here:
        decode(DecodeJob("metrics", OTLP_JSON), b"{not json")
    assert str(bad) == str(here.value)
    big = _wait(decoder, DecodeJob("metrics", REMOTE_WRITE, V1, 100), _rw(50, 1))
    assert isinstance(big, PayloadTooLargeError) and "100 bytes" in str(big)
    # the worker is still there, and still right
    job = DecodeJob("metrics", REMOTE_WRITE, V1, 1 << 20)
    assert isinstance(_wait(decoder, job, _rw(3, 1)), Decoded)


def test_a_killed_worker_fails_its_jobs_retryably_and_is_replaced() -> None:
    restarts: list[int] = []
    decoder = ProcessDecoder(1, on_restart=lambda: restarts.append(1))
    try:
        job = DecodeJob("metrics", REMOTE_WRITE, V1, 1 << 20)
        assert isinstance(_wait(decoder, job, _rw(10, 1)), Decoded)
        (pid,) = decoder.pids
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # the job below reaches the worker and stays there
        box: list[Decoded | BaseException] = []
        done = threading.Event()

        def finish(outcome: Decoded | BaseException) -> None:
            box.append(outcome)
            done.set()

        decoder.submit(job, "acme", _rw(10, 2), finish)
        time.sleep(0.3)
        assert not done.is_set()
        os.kill(pid, signal.SIGKILL)
        assert done.wait(30)
        assert isinstance(box[0], DecoderLostError)
        assert restarts == [1]
        assert decoder.pids != [pid]
        assert isinstance(_wait(decoder, job, _rw(10, 3)), Decoded)
    finally:
        decoder.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _post_rw(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/api/v1/write",
            body=body,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"},
        )
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _count(url: str, prefix: str) -> int:
    query = f"SELECT count(*) AS n FROM metrics WHERE metric_name LIKE '{prefix}%'"
    request = urllib.request.Request(url + "/api/v1/sql", data=query.encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["rows"][0][0])


def _workers(pid: int) -> list[psutil.Process]:
    """The decoding processes (not multiprocessing's resource tracker beside them)."""
    return [c for c in psutil.Process(pid).children() if "spawn_main" in " ".join(c.cmdline())]


def test_killing_the_worker_under_load_loses_and_duplicates_nothing(
    start_server: ServerFactory,
) -> None:
    server = start_server(env={"SHOAL_DECODE_PROCESSES": "1"})
    assert server.proc is not None
    (worker,) = _workers(server.proc.pid)
    acked: list[int] = []
    statuses: list[int] = []
    killed = threading.Event()

    def send() -> None:
        for r in range(120):
            body = _rw(200, 1_000_000 + r * 1000, "load")
            while True:
                status = _post_rw(server.http_port, body)
                statuses.append(status)
                if status == 204:
                    acked.append(r)
                    break
                assert status == 503, status  # retryable, and retried
                time.sleep(0.05)
            if r == 40:
                worker.kill()
                killed.set()

    send()
    assert killed.is_set() and len(acked) == 120
    # every acknowledged sample once: the retried bodies were not stored twice
    assert _count(server.url, "load") == 120 * 200
    assert metric_value(scrape(server), "shoal_decode_process_restarts_total") == 1
    (replacement,) = _workers(server.proc.pid)
    assert replacement.pid != worker.pid


def test_a_killed_server_leaves_no_worker(start_server: ServerFactory, tmp_path: Path) -> None:
    server = start_server(env={"SHOAL_DECODE_PROCESSES": "2"})
    assert server.proc is not None
    workers = _workers(server.proc.pid)
    assert len(workers) == 2
    assert _post_rw(server.http_port, _rw(50, 5_000, "gone")) == 204
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, "a decoding process outlived the server"
