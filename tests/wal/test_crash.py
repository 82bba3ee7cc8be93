"""SIGKILL a process that appends under group commit; every acknowledged
record must be present and intact after reopening."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from shoal.wal import Wal
from tests.wal.crash_writer import SEGMENT_BYTES, payload_of

CHILD = Path(__file__).with_name("crash_writer.py")
ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(directory: Path, run: int, rng: random.Random) -> list[tuple[int, int, int]]:
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(run), "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()))  # type: ignore[union-attr]
    try:
        ready = proc.stdout.readline()
        assert ready == b"ready\n", proc.stderr.read() if proc.stderr else ready
        reader.start()
        time.sleep(rng.uniform(0.05, 0.6))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    reader.join(timeout=30)
    if proc.stderr is not None:
        proc.stderr.close()
    text = b"".join(chunks).decode()
    lines = text.split("\n")[:-1]  # a last line without newline may be cut short
    acked = []
    for line in lines:
        lsn, thread, seq = line.split()
        acked.append((int(lsn), int(thread), int(seq)))
    return acked


def _crash_loop(directory: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    expected: dict[int, bytes] = {}
    total_acked = 0
    for run in range(rounds):
        acked = _run_and_kill(directory, run, rng)
        total_acked += len(acked)
        for lsn, thread, seq in acked:
            assert lsn not in expected, f"LSN {lsn} acknowledged twice"
            expected[lsn] = payload_of(run, thread, seq)
        wal = Wal.open(directory, segment_bytes=SEGMENT_BYTES)
        try:
            report = wal.recovery_report
            assert report.clean, report.damaged
            records = {r.lsn: r.payload for r in wal.replay()}
            lsns = sorted(records)
            assert lsns == list(range(1, len(lsns) + 1))
            for lsn, payload in expected.items():
                assert records.get(lsn) == payload, f"run {run}: acknowledged LSN {lsn} lost"
        finally:
            wal.shutdown(10)
    assert total_acked > rounds  # the children did get records acknowledged


def test_sigkill_during_group_commit_3_times(tmp_path: Path) -> None:
    _crash_loop(tmp_path, rounds=3, seed=1)


@pytest.mark.slow
def test_sigkill_during_group_commit_20_times(tmp_path: Path) -> None:
    _crash_loop(tmp_path, rounds=20, seed=2)
