"""Shared helpers for the WAL tests: fault-injecting file operations, log builders."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from shoal.wal import OsFileOps, Wal
from shoal.wal.codec import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE
from shoal.wal.fileops import Buffer


class FaultyOps(OsFileOps):
    """Real file operations, except that chosen calls fail.

    ``fail_at`` counts every call (1-based); with ``forever`` every call from
    then on fails too. ``only`` restricts counting and failing to some
    operation names. ``short`` makes a failing ``pwritev`` first write half of
    what it was given (a short write), then raise.
    """

    def __init__(
        self,
        fail_at: int | None = None,
        *,
        forever: bool = False,
        err: int = errno.EIO,
        only: Sequence[str] = (),
        short: bool = False,
    ) -> None:
        self.fail_at = fail_at
        self.forever = forever
        self.err = err
        self.only = set(only)
        self.short = short
        self.calls = 0
        self.failures = 0
        self.log: list[str] = []
        self._lock = threading.Lock()  # the writer and the sync thread both call in

    def _should_fail(self, name: str) -> bool:
        if self.only and name not in self.only:
            return False
        with self._lock:
            self.calls += 1
            self.log.append(name)
            if self.fail_at is None:
                return False
            hit = self.calls == self.fail_at or (self.forever and self.calls >= self.fail_at)
            if hit:
                self.failures += 1
            return hit

    def _raise(self, name: str) -> None:
        raise OSError(self.err, f"injected failure of {name} (call {self.calls})")

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        if self._should_fail("open"):
            self._raise("open")
        return super().open(path, flags, mode)

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        if self._should_fail("pwritev"):
            if self.short:
                data = b"".join(bytes(b) for b in buffers)
                half = data[: max(1, len(data) // 2)]
                os.pwrite(fd, half, offset)
            self._raise("pwritev")
        return super().pwritev(fd, buffers, offset)

    def fdatasync(self, fd: int) -> None:
        if self._should_fail("fdatasync"):
            self._raise("fdatasync")
        super().fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        if self._should_fail("ftruncate"):
            self._raise("ftruncate")
        super().ftruncate(fd, length)

    def close(self, fd: int) -> None:
        if self._should_fail("close"):
            super().close(fd)  # the descriptor is gone either way, as with close(2)
            self._raise("close")
        super().close(fd)

    def rename(self, src: str, dst: str) -> None:
        if self._should_fail("rename"):
            self._raise("rename")
        super().rename(src, dst)

    def unlink(self, path: str) -> None:
        if self._should_fail("unlink"):
            self._raise("unlink")
        super().unlink(path)

    def fsync_dir(self, path: str) -> None:
        if self._should_fail("fsync_dir"):
            self._raise("fsync_dir")
        super().fsync_dir(path)


class ShortWriteOps(OsFileOps):
    """Every ``pwritev`` writes at most ``chunk`` bytes (legal, short, no error)."""

    def __init__(self, chunk: int = 7) -> None:
        self.chunk = chunk
        self.short_writes = 0

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        data = b"".join(bytes(b) for b in buffers)
        if len(data) > self.chunk:
            self.short_writes += 1
        return os.pwrite(fd, data[: self.chunk], offset)


class GatedSyncOps(OsFileOps):
    """Real file operations; once armed, the next ``fdatasync`` is held.

    It sets ``sync_entered`` and waits for ``release`` before it runs (or
    fails with EIO when ``fail`` is set), so a test can act while an fsync is
    in progress.
    """

    def __init__(self) -> None:
        self.sync_entered = threading.Event()
        self.release = threading.Event()
        self.fail = False
        self.armed = False

    def arm(self, *, fail: bool) -> None:
        self.fail = fail
        self.armed = True

    def fdatasync(self, fd: int) -> None:
        if self.armed:
            self.armed = False
            self.sync_entered.set()
            if not self.release.wait(30):
                raise AssertionError("the held fdatasync was never released")
            if self.fail:
                raise OSError(errno.EIO, "injected failure of the held fdatasync")
        super().fdatasync(fd)


class SyncOrderOps(OsFileOps):
    """Real file operations that record how far the data file was written
    when each completed ``fdatasync`` had started (``synced_upto``), and slow
    each fsync down so that many appends queue up meanwhile."""

    def __init__(self, delay: float = 0.003) -> None:
        self.delay = delay
        self._lock = threading.Lock()
        self.written_upto = 0
        self.synced_upto = 0

    def pwritev(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        done = super().pwritev(fd, buffers, offset)
        with self._lock:
            self.written_upto = max(self.written_upto, offset + done)
        return done

    def fdatasync(self, fd: int) -> None:
        with self._lock:
            upto = self.written_upto
        threading.Event().wait(self.delay)
        super().fdatasync(fd)
        with self._lock:
            self.synced_upto = max(self.synced_upto, upto)


def payload_for(i: int, size: int | None = None) -> bytes:
    """A payload that is recognisably record ``i`` (varied sizes)."""
    n = size if size is not None else (i * 37) % 300
    stem = f"record-{i}:".encode()
    return (stem * (n // len(stem) + 1))[:n] if n else b""


def write_log(directory: Path, payloads: Sequence[bytes], **options: object) -> None:
    """Append ``payloads`` (LSNs 1..n) and close the log."""
    wal = Wal.open(directory, fsync="never", **options)  # type: ignore[arg-type]
    try:
        for fut in [wal.append(p) for p in payloads]:
            fut.result(timeout=30)
    finally:
        wal.shutdown(30)


def frame_offsets(payloads: Sequence[bytes]) -> list[int]:
    """Offset of each record's frame in a single-segment log of ``payloads``."""
    offsets = []
    pos = SEGMENT_HEADER_SIZE
    for p in payloads:
        offsets.append(pos)
        pos += FRAME_HEADER_SIZE + len(p)
    return offsets


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.wal"))


def replay_all(directory: Path, **options: object) -> tuple[list[tuple[int, bytes]], Wal]:
    """Open the log, read every record; the caller shuts the returned WAL down."""
    wal = Wal.open(directory, **options)  # type: ignore[arg-type]
    return [(r.lsn, r.payload) for r in wal.replay()], wal
