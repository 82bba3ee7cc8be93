"""Ordering around fsyncs: acknowledgements come only after an fsync that
started after the record's write, in LSN order, on_durable before the
futures; a failed fsync fails everything pending, including a flush waiting
behind it; shutdown and rotation during slow fsyncs lose nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest

from shoal.errors import WalFatalError
from shoal.wal import InMemoryWalMetrics, Wal
from shoal.wal.codec import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE
from tests.wal.helpers import GatedSyncOps, SyncOrderOps, payload_for, replay_all, segments


def test_acknowledged_only_after_an_fsync_that_started_after_the_write(tmp_path: Path) -> None:
    size = 500
    ops = SyncOrderOps(delay=0.003)
    violations: list[int] = []
    seen: list[int] = []

    def on_durable(group: Sequence[tuple[int, object]]) -> None:
        for lsn, _tag in group:
            end = SEGMENT_HEADER_SIZE + lsn * (FRAME_HEADER_SIZE + size)
            if end > ops.synced_upto:
                violations.append(lsn)
            seen.append(lsn)

    wal = Wal.open(tmp_path, file_ops=ops, on_durable=on_durable)
    futures: list[Future[int]] = []
    lock = threading.Lock()
    try:
        barrier = threading.Barrier(4)

        def worker(k: int) -> None:
            # appends arrive independently of acknowledgements, as requests do
            barrier.wait()
            for i in range(120):
                fut = wal.append(payload_for(k * 1000 + i, size))
                with lock:
                    futures.append(fut)
                time.sleep(0.0005)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        acked = [fut.result(timeout=10) for fut in futures]
    finally:
        wal.shutdown(10)
    assert not violations, f"acknowledged before an fsync covered them: {violations[:10]}"
    assert seen == list(range(1, 481))
    assert sorted(acked) == seen


def test_fsync_failing_fails_the_appends_queued_behind_it(tmp_path: Path) -> None:
    ops = GatedSyncOps()
    metrics = InMemoryWalMetrics()
    durable: list[int] = []
    wal = Wal.open(
        tmp_path,
        file_ops=ops,
        metrics=metrics,
        on_durable=lambda group: durable.extend(lsn for lsn, _ in group),
    )
    try:
        assert wal.append(b"before").result(timeout=10) == 1
        ops.arm(fail=True)
        first = wal.append(b"first")
        assert ops.sync_entered.wait(10)
        second = [wal.append(f"second-{i}".encode()) for i in range(5)]
        assert not first.done() and not any(f.done() for f in second)
        ops.release.set()
        for fut in [first, *second]:
            with pytest.raises(WalFatalError):
                fut.result(timeout=10)
        with pytest.raises(WalFatalError):
            wal.append(b"refused")
        with pytest.raises(WalFatalError):
            wal.flush(timeout=10)
        assert durable == [1]  # nothing after the failed fsync reached on_durable
        assert metrics.failed == {"fatal": 6}
    finally:
        wal.shutdown(10)
    got, wal = replay_all(tmp_path)
    try:
        assert wal.recovery_report.clean
        assert got[0] == (1, b"before")
        # the failed record was written and may be present, but only in order
        assert [lsn for lsn, _ in got] == list(range(1, len(got) + 1))
        assert wal.append(b"after").result(timeout=10) == len(got) + 1
    finally:
        wal.shutdown(10)


def test_an_append_made_during_an_fsync_waits_for_the_next_fsync(tmp_path: Path) -> None:
    ops = GatedSyncOps()
    order: list[str] = []
    wal = Wal.open(
        tmp_path,
        file_ops=ops,
        on_durable=lambda group: order.extend(f"durable {lsn}" for lsn, _ in group),
    )
    try:
        ops.arm(fail=False)
        first = wal.append(b"first")
        assert ops.sync_entered.wait(10)
        second = wal.append(b"second")
        time.sleep(0.05)  # the fsync is held: nothing may be acknowledged
        assert not first.done() and not second.done() and order == []
        first.add_done_callback(lambda _f: order.append("future 1"))
        second.add_done_callback(lambda _f: order.append("future 2"))
        ops.release.set()
        assert first.result(timeout=10) == 1
        assert second.result(timeout=10) == 2
    finally:
        wal.shutdown(10)
    assert order == ["durable 1", "future 1", "durable 2", "future 2"]


@pytest.mark.parametrize("policy", ["always", "never"])
def test_flush_whose_fsync_fails_raises_instead_of_hanging(tmp_path: Path, policy: str) -> None:
    ops = GatedSyncOps()
    wal = Wal.open(tmp_path, file_ops=ops, fsync=policy)
    outcome: list[BaseException | None] = []
    try:
        ops.arm(fail=True)
        fut = wal.append(b"doomed")
        if policy == "never":
            assert fut.result(timeout=10) == 1  # acknowledged after the write

        def flush() -> None:
            try:
                wal.flush()  # no timeout: it must not wait forever
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        flusher = threading.Thread(target=flush, daemon=True)
        flusher.start()
        assert ops.sync_entered.wait(10)  # the group's fsync, or the flush's own
        time.sleep(0.05)
        ops.release.set()
        flusher.join(15)
        assert not flusher.is_alive(), "flush() hung after its fsync failed"
        assert len(outcome) == 1 and isinstance(outcome[0], WalFatalError)
        if policy == "always":
            with pytest.raises(WalFatalError):
                fut.result(timeout=10)
    finally:
        wal.shutdown(10)


def test_shutdown_during_an_fsync_acknowledges_and_closes(tmp_path: Path) -> None:
    ops = GatedSyncOps()
    wal = Wal.open(tmp_path, file_ops=ops)
    ops.arm(fail=False)
    first = wal.append(b"first")
    assert ops.sync_entered.wait(10)
    second = wal.append(b"second")
    stopper = threading.Thread(target=wal.shutdown, args=(10,))
    stopper.start()
    time.sleep(0.05)
    ops.release.set()
    stopper.join(15)
    assert not stopper.is_alive()
    assert (first.result(timeout=1), second.result(timeout=1)) == (1, 2)
    got, wal = replay_all(tmp_path)
    wal.shutdown(10)
    assert got == [(1, b"first"), (2, b"second")]


def test_rotation_under_concurrent_appends_with_slow_fsyncs(tmp_path: Path) -> None:
    ops = SyncOrderOps(delay=0.002)
    seen: list[int] = []
    wal = Wal.open(
        tmp_path,
        file_ops=ops,
        segment_bytes=4096,
        on_durable=lambda group: seen.extend(lsn for lsn, _ in group),
    )
    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    try:
        barrier = threading.Barrier(8)

        def worker(k: int) -> None:
            barrier.wait()
            for i in range(30):
                payload = payload_for(k * 100 + i, 200 + (i * 53) % 700)
                fut: Future[int] = wal.append(payload)
                lsn = fut.result(timeout=10)
                with lock:
                    acked[lsn] = payload

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        wal.shutdown(10)
    assert seen == list(range(1, 241))
    assert len(segments(tmp_path)) > 10
    got, wal = replay_all(tmp_path, segment_bytes=4096)
    try:
        assert wal.recovery_report.clean, wal.recovery_report.damaged
        assert dict(got) == acked
    finally:
        wal.shutdown(10)
