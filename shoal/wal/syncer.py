"""The sync thread (policy ``always``): fsyncs what the writer thread wrote.

The writer thread writes a group and hands it here; while this thread runs
``fdatasync``, the writer already writes the next group. When an fsync
starts, this thread takes every group whose write has completed, so a group
is acknowledged only after an fsync that started after its write returned.
Then it calls ``on_durable`` with all of them in LSN order and only then
resolves their futures, in one pass.

A failed fsync (or a raising ``on_durable``) is fatal: this thread fails
every group it holds or that is handed to it later, tells the writer (which
fails everything still queued and refuses new appends) and stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from shoal.errors import WalFatalError
from shoal.wal.metrics import WalMetrics
from shoal.wal.segment import ActiveSegment

logger = logging.getLogger(__name__)

OnDurable = Callable[[Sequence[tuple[int, object]]], None]


class Written:
    """Records written to ``segment`` up to byte ``end``, waiting for an fsync."""

    __slots__ = ("end", "first_lsn", "futures", "nbytes", "segment", "tags")

    def __init__(
        self,
        segment: ActiveSegment,
        end: int,
        first_lsn: int,
        futures: list[Future[int]],
        tags: list[object],
        nbytes: int,
    ) -> None:
        self.segment = segment
        self.end = end
        self.first_lsn = first_lsn
        self.futures = futures
        self.tags = tags
        self.nbytes = nbytes


class SyncFailed(Exception):
    """Raised to the writer thread when the sync thread stopped on a fatal error."""

    def __init__(self, error: WalFatalError) -> None:
        super().__init__(str(error))
        self.error = error


class Syncer:
    """The fsync-and-acknowledge half of the pipeline under policy ``always``.

    ``on_fatal`` is called (from this thread) with the error before any
    future fails, so that appends are refused by the time anyone sees the
    failure.
    """

    def __init__(
        self,
        *,
        metrics: WalMetrics,
        on_durable: OnDurable | None,
        on_fatal: Callable[[WalFatalError], None],
    ) -> None:
        self._metrics = metrics
        self._on_durable = on_durable
        self._on_fatal = on_fatal
        self._cond = threading.Condition()
        self._pending: list[Written] = []
        self._pending_records = 0
        self._concurrency = 1  # records in the last fsync + written meanwhile
        self._last_sync_s = 0.0
        self._busy = False
        self._stopping = False
        self._fatal: WalFatalError | None = None
        self._thread = threading.Thread(target=self._run, name="shoal-wal-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- called by the writer thread ----------------------------------------------

    def hand_off(self, group: Written) -> WalFatalError | None:
        """Queue a written group for the next fsync; the fatal error if stopped.

        On an error the group was not taken: the caller fails its futures.
        """
        with self._cond:
            if self._fatal is not None:
                return self._fatal
            self._pending.append(group)
            self._pending_records += len(group.futures)
            if not self._busy:
                self._cond.notify_all()
        return None

    def wait_idle(self) -> None:
        """Return once every group handed off is fsynced and acknowledged.

        Raises :class:`SyncFailed` if the sync thread stopped on a fatal error.
        """
        with self._cond:
            while (self._pending or self._busy) and self._fatal is None:
                self._cond.wait()
            if self._fatal is not None:
                raise SyncFailed(self._fatal)

    def abort(self, error: WalFatalError) -> None:
        """Stop after the fsync in progress; everything held or handed off fails."""
        with self._cond:
            if self._fatal is None:
                self._fatal = error
            self._cond.notify_all()
        self.join()

    def stop(self) -> None:
        """Stop once idle (the writer drained it first)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self.join()

    def join(self) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    # -- the sync thread -----------------------------------------------------------

    def _run(self) -> None:
        groups: list[Written] = []
        try:
            while True:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()  # wake a writer waiting in wait_idle
                    while not self._pending and not self._stopping and self._fatal is None:
                        self._cond.wait()
                    if self._fatal is not None:
                        groups, self._pending = self._pending, []
                        error = self._fatal
                        break
                    if not self._pending:
                        return  # stopping, and everything is acknowledged
                    groups, self._pending = self._pending, []
                    records, self._pending_records = self._pending_records, 0
                    self._busy = True
                started = time.monotonic()
                error_or_none = self._sync(groups)
                self._last_sync_s = time.monotonic() - started
                with self._cond:
                    self._concurrency = records + self._pending_records
                if error_or_none is not None:
                    error = error_or_none
                    break
        except BaseException as exc:
            logger.exception("WAL sync thread failed")
            error = WalFatalError(f"WAL sync thread failed: {exc!r}")
        self._stop_fatal(error, groups)

    def gather_hint(self) -> tuple[int, float] | None:
        """For the writer's group gathering: None while an fsync is pending or
        running (then the writer writes at once, overlapping it); otherwise
        the records in flight around the last fsync (its group plus what was
        written while it ran) and that fsync's duration in seconds."""
        with self._cond:
            if self._busy or self._pending:
                return None
            return self._concurrency, self._last_sync_s

    def _sync(self, groups: list[Written]) -> WalFatalError | None:
        """fsync, on_durable, resolve; the fatal error instead, if one happened."""
        segment = groups[-1].segment  # the writer drains before it rotates: one segment
        started = time.monotonic()
        try:
            segment.ops.fdatasync(segment.fd)
        except OSError as exc:
            return WalFatalError(f"fsync of {segment.meta.path.name} failed: {exc}")
        seconds = time.monotonic() - started
        with self._cond:
            if self._fatal is not None:  # aborted meanwhile: acknowledge nothing more
                return self._fatal
        segment.meta.end = groups[-1].end
        records = sum(len(g.futures) for g in groups)
        self._metrics.group_committed(records, sum(g.nbytes for g in groups), seconds)
        if self._on_durable is not None:
            durable: list[tuple[int, object]] = []
            for g in groups:
                lsns = range(g.first_lsn, g.first_lsn + len(g.tags))
                durable.extend(zip(lsns, g.tags, strict=True))
            try:
                self._on_durable(durable)
            except Exception as exc:
                logger.exception("WAL on_durable callback raised; the WAL stops")
                return WalFatalError(f"on_durable callback raised: {exc!r}")
        for g in groups:
            lsn = g.first_lsn
            for future in g.futures:
                future.set_result(lsn)
                lsn += 1
        groups.clear()
        return None

    def _stop_fatal(self, error: WalFatalError, held: list[Written]) -> None:
        with self._cond:
            if self._fatal is None:
                self._fatal = error
            error = self._fatal
            leftovers, self._pending = self._pending, []
            self._busy = False
            self._cond.notify_all()
        self._on_fatal(error)  # before any future fails: appends now refuse
        failed = 0
        for g in [*held, *leftovers]:
            for future in g.futures:
                if not future.done():
                    future.set_exception(error)
                    failed += 1
        if failed:
            self._metrics.append_failed("fatal", failed)
