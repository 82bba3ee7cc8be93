"""The write-ahead log: open (recover), append, replay, truncate, shut down."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType

from shoal.config import MiB
from shoal.errors import (
    ConfigError,
    RecordTooLargeError,
    WalCorruptionError,
    WalError,
    WalFatalError,
)
from shoal.wal.codec import MAX_RTYPE, MIN_RTYPE, SEGMENT_HEADER_SIZE
from shoal.wal.fileops import OS_FILE_OPS, FileOps
from shoal.wal.recovery import POLICIES, Recovered, RecoveryReport, recover
from shoal.wal.replay import WalRecord, read_records
from shoal.wal.reporting import NOOP_METRICS, WalMetrics
from shoal.wal.segment import SegmentSet, create_segment, open_segment
from shoal.wal.writer import FsyncPolicy, OnDurable, Tail, WalSettings, Writer

logger = logging.getLogger(__name__)

LOCK_FILE = "LOCK"


class Wal:
    """A write-ahead log in one directory of segment files.

    Use :meth:`open`. ``append`` may be called from any thread; one writer
    thread owns the file. See docs/wal-format.md for the format and the
    recovery rules.
    """

    def __init__(
        self,
        *,
        writer: Writer,
        segments: SegmentSet,
        report: RecoveryReport,
        settings: WalSettings,
        lock_fd: int,
    ) -> None:
        self._writer = writer
        self._segments = segments
        self._report = report
        self._settings = settings
        self._lock_fd: int | None = lock_fd

    @classmethod
    def open(
        cls,
        directory: Path | str,
        *,
        fsync: str = "always",
        segment_bytes: int = 64 * MiB,
        max_record_bytes: int = 128 * MiB,
        corruption_policy: str = "skip-segment",
        metrics: WalMetrics = NOOP_METRICS,
        on_durable: OnDurable | None = None,
        file_ops: FileOps | None = None,
        min_next_lsn: int = 1,
    ) -> Wal:
        """Recover the log in ``directory`` (created if missing) and start the writer.

        Torn tails are cut; damaged segments are copied to ``<name>.broken``,
        logged at ERROR and counted, then ``corruption_policy`` applies:
        ``skip-segment`` replays the valid prefix of a damaged segment and
        continues with the next one; ``stop`` replays nothing after the damage
        and refuses appends (:class:`WalCorruptionError`) until an operator
        has dealt with it. ``min_next_lsn`` raises the first LSN handed out
        (for a caller that knows higher LSNs were already used, for example
        committed to a table).

        ``on_durable`` is called by the writer thread with ``[(lsn, tag), ...]``
        in LSN order once a group is durable (written, under policies
        interval and never), before the group's futures resolve. It must be
        quick and must not raise: if it raises, the WAL treats it as fatal.
        """
        policy = FsyncPolicy.parse(fsync)
        if corruption_policy not in POLICIES:
            raise ConfigError(
                f"WAL corruption policy must be one of {', '.join(POLICIES)}, "
                f"got {corruption_policy!r}"
            )
        if segment_bytes < 4096:
            raise ConfigError(f"WAL segment size must be at least 4096 bytes, got {segment_bytes}")
        if not 0 < max_record_bytes < 2**32:
            raise ConfigError(f"WAL max record size must be in 1..2^32-1, got {max_record_bytes}")
        settings = WalSettings(policy, segment_bytes, max_record_bytes, corruption_policy)
        ops = file_ops if file_ops is not None else OS_FILE_OPS
        path = Path(directory)
        if not path.is_dir():
            try:
                path.mkdir(parents=True, exist_ok=True)
                ops.fsync_dir(str(path.parent))
            except OSError as exc:
                raise WalFatalError(f"cannot create the WAL directory {path}: {exc}") from exc
        lock_fd = _lock_directory(path)
        try:
            return cls._open_locked(path, settings, metrics, on_durable, ops, min_next_lsn, lock_fd)
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def _open_locked(
        cls,
        path: Path,
        settings: WalSettings,
        metrics: WalMetrics,
        on_durable: OnDurable | None,
        ops: FileOps,
        min_next_lsn: int,
        lock_fd: int,
    ) -> Wal:
        try:
            found = recover(
                path, ops, settings.corruption_policy, settings.max_record_bytes, metrics
            )
        except OSError as exc:
            raise WalFatalError(f"cannot recover the WAL in {path}: {exc}") from exc
        report = found.report
        segments = SegmentSet(ops, path, found.metas)
        tail = _tail(found, segments, settings.corruption_policy, min_next_lsn)
        writer = Writer(tail=tail, settings=settings, metrics=metrics, on_durable=on_durable)
        wal = cls(
            writer=writer, segments=segments, report=report, settings=settings, lock_fd=lock_fd
        )
        writer.start()
        logger.info(
            "WAL %s opened: %d segment(s), %d record(s) to replay, next LSN %d%s",
            path,
            len(found.metas),
            report.records_kept,
            tail.next_lsn,
            "" if report.clean else f", {len(report.damaged)} damaged segment(s)",
        )
        return wal

    # -- appending ---------------------------------------------------------------

    def append(self, payload: bytes, *, rtype: int = 1, tag: object = None) -> Future[int]:
        """Queue one record; the future resolves to its LSN once it is durable.

        Raises :class:`RecordTooLargeError` at once for an oversized payload,
        :class:`WalClosedError` after shutdown and :class:`WalFatalError` after
        a failed fsync. The future fails with :class:`WalAppendError` when the
        write failed (ENOSPC, short write) and with :class:`WalFatalError`
        when the fsync did. ``payload`` must not change until then.
        """
        if not MIN_RTYPE <= rtype <= MAX_RTYPE:
            raise ValueError(f"record type must be in {MIN_RTYPE}..{MAX_RTYPE}, got {rtype}")
        if len(payload) > self._settings.max_record_bytes:
            raise RecordTooLargeError(len(payload), self._settings.max_record_bytes)
        return self._writer.submit(payload, rtype, tag)

    def flush(self, timeout: float | None = None) -> None:
        """Return once everything appended so far is fsynced (whatever the policy)."""
        self._writer.flush(timeout)

    # -- reading -----------------------------------------------------------------

    def replay(self, after_lsn: int = 0) -> Iterator[WalRecord]:
        """Acknowledged records with LSN above ``after_lsn``, in LSN order.

        Works while the log is open and appended to; it reads what was
        acknowledged when each segment is reached.
        """
        metas = self._segments.snapshot()
        limit = self._report.stopped_after_lsn
        return read_records(metas, after_lsn, limit, self._settings.max_record_bytes)

    def truncate_before(self, lsn: int) -> int:
        """Remove whole segments whose records all have LSNs below ``lsn``.

        The last segment always stays (it carries the LSN to continue from).
        Returns how many segments were removed; the directory is fsynced.
        """
        try:
            return self._segments.truncate_before(lsn)
        except OSError as exc:
            raise WalError(f"removing WAL segments below LSN {lsn} failed: {exc}") from exc

    # -- state -------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._segments.directory

    @property
    def last_lsn(self) -> int:
        """The last LSN handed out (0 for an empty, new log)."""
        return self._writer.last_lsn

    @property
    def recovery_report(self) -> RecoveryReport:
        return self._report

    @property
    def fatal_error(self) -> WalFatalError | None:
        """The error that stopped the WAL, if one did."""
        return self._writer.fatal

    def segment_count(self) -> int:
        return len(self._segments.snapshot())

    # -- closing -----------------------------------------------------------------

    def shutdown(self, timeout: float = 30.0, *, retire: bool = False) -> None:
        """Refuse new appends, write and fsync what is queued, close the files.

        ``retire``: the caller has committed every record elsewhere (the server after
        a final flush that took everything). The log is then left as one empty segment
        that continues its LSNs: the next start replays nothing, and it reads alike for
        any version of the server that knows the segment format, whatever the records'
        payloads were (docs/operations.md, going back to an earlier version). A log
        whose replay stopped at damage (policy ``stop``) is never retired: the records
        after the damage were not replayed, so nothing committed them."""
        if not self._writer.shutdown(timeout):
            return
        if retire and self._writer.fatal is None and self._report.stopped_after_lsn is None:
            self._retire()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _retire(self) -> None:
        """Start an empty segment after the last LSN and remove every segment before it."""
        last = self.last_lsn
        metas = self._segments.snapshot()
        if not metas:
            return
        tail = metas[-1]
        try:
            if tail.first_lsn != last + 1 or tail.end != SEGMENT_HEADER_SIZE:
                fresh = create_segment(self._segments.ops, self.directory, last + 1, last)
                fresh.close()
                self._segments.add(fresh.meta)
            removed = self.truncate_before(last + 1)
        except (OSError, WalError):
            logger.exception("leaving the WAL as it is: its records replay at the next start")
            return
        logger.info("WAL retired: %d segment(s) removed, next LSN %d", removed, last + 1)

    def __enter__(self) -> Wal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()


def _tail(
    found: Recovered, segments: SegmentSet, corruption_policy: str, min_next_lsn: int
) -> Tail:
    """Where appends go on after recovery: the last segment when the next LSN continues it,
    else a new one; under policy ``stop``, a damaged log refuses appends instead."""
    next_lsn = max(found.max_lsn + 1, min_next_lsn, 1)
    damaged = found.report.damaged
    if corruption_policy == "stop" and damaged:
        first = damaged[0]
        damage = WalCorruptionError(
            first.name,
            first.valid_end,
            f"{first.reason}; policy stop refuses appends until the damage is dealt with "
            "(see `shoal wal verify`)",
        )
        return Tail(segments, None, next_lsn, damage)
    ops = segments.ops
    try:
        last = found.last
        if last is not None and next_lsn == last.last_lsn + 1:
            active = open_segment(ops, found.metas[-1])
        else:
            # The header's previous LSN lets the next open check that
            # nothing is missing between the last segment and this one.
            prev = last.last_lsn if last is not None else next_lsn - 1
            active = create_segment(ops, segments.directory, next_lsn, prev)
            segments.add(active.meta)
    except OSError as exc:
        raise WalFatalError(f"cannot open the WAL for appending: {exc}") from exc
    return Tail(segments, active, next_lsn)


def _lock_directory(path: Path) -> int:
    """Hold an exclusive lock so two processes never append to one log."""
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise WalError(f"WAL directory {path} is in use by another process") from exc
    return fd
