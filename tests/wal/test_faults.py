"""I/O failures injected through the file-operations protocol.

Each scenario ends with a reopen through the real operations and a replay
that must hold every acknowledged record, intact, and nothing whose append
was reported as failed.
"""

from __future__ import annotations

import errno
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from shoal.errors import WalAppendError, WalClosedError, WalError, WalFatalError
from shoal.wal import InMemoryWalMetrics, Wal
from tests.wal.helpers import FaultyOps, replay_all


@dataclass
class Outcome:
    acked: dict[int, bytes] = field(default_factory=dict)
    failed: list[bytes] = field(default_factory=list)  # WalAppendError: must be absent
    unknown: list[bytes] = field(default_factory=list)  # WalFatalError: may be present
    cut_below: int = 0  # truncate_before may have removed records below this


def _settle(outcome: Outcome, payload: bytes, fut: Future[int]) -> None:
    try:
        outcome.acked[fut.result(timeout=10)] = payload
    except WalAppendError:
        outcome.failed.append(payload)
    except WalFatalError:
        outcome.unknown.append(payload)


def _append(wal: Wal, outcome: Outcome, payload: bytes) -> Future[int] | None:
    try:
        return wal.append(payload)
    except (WalFatalError, WalClosedError):
        return None  # refused before anything was written


def _workload(wal: Wal, outcome: Outcome) -> None:
    """Sequential appends, a concurrent burst, a truncation, more appends."""
    counter = iter(range(10_000))

    def payload() -> bytes:
        i = next(counter)
        return f"payload-{i:05d}-".encode() * (20 + i % 40)

    for _ in range(10):
        p = payload()
        fut = _append(wal, outcome, p)
        if fut is not None:
            _settle(outcome, p, fut)
    burst = [(p, _append(wal, outcome, p)) for p in (payload() for _ in range(10))]
    for p, fut in burst:
        if fut is not None:
            _settle(outcome, p, fut)
    if outcome.acked:
        outcome.cut_below = sorted(outcome.acked)[len(outcome.acked) // 2]
        try:
            wal.truncate_before(outcome.cut_below)
        except WalError:
            pass
    for _ in range(8):
        p = payload()
        fut = _append(wal, outcome, p)
        if fut is not None:
            _settle(outcome, p, fut)


def _check_reopen(directory: Path, outcome: Outcome) -> None:
    got, wal = replay_all(directory, segment_bytes=4096)
    try:
        assert wal.recovery_report.clean, wal.recovery_report.damaged
        lsns = [lsn for lsn, _ in got]
        assert lsns == sorted(set(lsns))
        present = dict(got)
        for lsn, payload in outcome.acked.items():
            if lsn >= outcome.cut_below:
                assert present.get(lsn) == payload, f"acknowledged LSN {lsn} lost"
        failed = set(outcome.failed)
        unknown = set(outcome.unknown)
        for lsn, payload in got:
            assert payload not in failed, f"LSN {lsn} holds a record whose append failed"
            assert outcome.acked.get(lsn) == payload or payload in unknown
        # the log stays appendable after all that
        assert wal.append(b"after").result(timeout=10) > max(lsns, default=0)
    finally:
        wal.shutdown(10)


def _run(directory: Path, ops: FaultyOps) -> Outcome:
    outcome = Outcome()
    try:
        wal = Wal.open(directory, segment_bytes=4096, file_ops=ops)
    except WalError:
        return outcome
    try:
        _workload(wal, outcome)
    finally:
        wal.shutdown(10)
    return outcome


def test_enospc_fails_that_append_only(tmp_path: Path) -> None:
    # pwritev call 1 writes the first segment's header; call 4 is the third append
    ops = FaultyOps(fail_at=4, err=errno.ENOSPC, only=["pwritev"])
    metrics = InMemoryWalMetrics()
    wal = Wal.open(tmp_path, file_ops=ops, metrics=metrics)
    outcome = Outcome()
    try:
        for i in range(6):
            p = f"rec{i}".encode() * 50
            fut = wal.append(p)
            _settle(outcome, p, fut)
        assert outcome.failed == [b"rec2" * 50]
        assert sorted(outcome.acked) == [1, 2, 3, 4, 5]  # the failed one used no LSN
        assert metrics.failed == {"io": 1}
        assert wal.fatal_error is None
    finally:
        wal.shutdown(10)
    _check_reopen(tmp_path, outcome)


def test_short_write_then_enospc_leaves_no_partial_frame(tmp_path: Path) -> None:
    ops = FaultyOps(fail_at=3, err=errno.ENOSPC, only=["pwritev"], short=True)
    wal = Wal.open(tmp_path, file_ops=ops)
    outcome = Outcome()
    try:
        for i in range(5):
            p = f"short{i}".encode() * 80
            _settle(outcome, p, wal.append(p))
        assert outcome.failed == [b"short1" * 80]
    finally:
        wal.shutdown(10)
    _check_reopen(tmp_path, outcome)


def test_enospc_until_space_returns(tmp_path: Path) -> None:
    ops = FaultyOps(fail_at=3, forever=True, err=errno.ENOSPC, only=["pwritev"])
    wal = Wal.open(tmp_path, file_ops=ops)
    outcome = Outcome()
    try:
        for i in range(4):
            p = f"full{i}".encode() * 30
            _settle(outcome, p, wal.append(p))
        assert len(outcome.acked) == 1 and len(outcome.failed) == 3
        ops.fail_at = None  # space is back
        p = b"room again" * 10
        _settle(outcome, p, wal.append(p))
        assert outcome.acked[2] == p
    finally:
        wal.shutdown(10)
    _check_reopen(tmp_path, outcome)


def test_failed_truncate_back_rotates_to_a_new_segment(tmp_path: Path) -> None:
    ops = FaultyOps(short=True)
    wal = Wal.open(tmp_path, file_ops=ops, segment_bytes=1 << 20)
    outcome = Outcome()
    try:
        p0 = b"first" * 20
        _settle(outcome, p0, wal.append(p0))
        # from the next call on, the write (short, then EIO) and the cut-back fail
        ops.fail_at = ops.calls + 1
        ops.forever = True
        p1 = b"second" * 20
        _settle(outcome, p1, wal.append(p1))
        ops.fail_at = None
        assert outcome.failed == [p1]
        p2 = b"third" * 20
        _settle(outcome, p2, wal.append(p2))
        assert outcome.acked == {1: p0, 2: p2}
        assert wal.segment_count() == 2  # rotated away from the uncut tail
    finally:
        wal.shutdown(10)
    _check_reopen(tmp_path, outcome)


def test_fsync_failure_is_fatal(tmp_path: Path) -> None:
    # fdatasync call 1 is the new segment's header; call 3 is the second append
    ops = FaultyOps(fail_at=3, only=["fdatasync"])
    metrics = InMemoryWalMetrics()
    wal = Wal.open(tmp_path, file_ops=ops, metrics=metrics)
    outcome = Outcome()
    try:
        for i in range(2):
            p = f"sync{i}".encode() * 10
            _settle(outcome, p, wal.append(p))
        assert list(outcome.acked) == [1] and len(outcome.unknown) == 1
        with pytest.raises(WalFatalError):
            wal.append(b"refused")
        assert isinstance(wal.fatal_error, WalFatalError)
        assert metrics.failed.get("fatal") == 1
    finally:
        wal.shutdown(10)
    _check_reopen(tmp_path, outcome)


def test_fsync_failure_fails_every_pending_append(tmp_path: Path) -> None:
    ops = FaultyOps(fail_at=2, only=["fdatasync"])
    wal = Wal.open(tmp_path, file_ops=ops)
    futures = [wal.append(f"p{i}".encode()) for i in range(50)]
    wal_errors = 0
    for fut in futures:
        try:
            fut.result(timeout=10)
        except WalFatalError:
            wal_errors += 1
    wal.shutdown(10)
    assert wal_errors == 50


def _fault_free_op_count(tmp_path: Path) -> int:
    ops = FaultyOps()
    _run(tmp_path / "count", ops)
    return ops.calls


@pytest.mark.parametrize("forever", [False, True], ids=["once", "forever"])
def test_failing_the_nth_io_operation(tmp_path: Path, forever: bool) -> None:
    total = _fault_free_op_count(tmp_path)
    assert total > 40  # the workload exercises rotation, truncation and shutdown
    for n in range(1, total + 2):
        directory = tmp_path / f"n{n}"
        ops = FaultyOps(fail_at=n, forever=forever)
        outcome = _run(directory, ops)
        if n <= total:
            assert ops.failures >= 1, f"operation {n} was never reached"
        directory.mkdir(exist_ok=True)
        _check_reopen(directory, outcome)
