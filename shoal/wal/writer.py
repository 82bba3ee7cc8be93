"""The writer thread: the only owner of the active segment's file handle.

Appenders put records on a queue and get a ``concurrent.futures.Future``.
The thread takes everything waiting at once (group commit), writes it with
one ``pwritev`` per segment, fsyncs per the policy, tells ``on_durable`` and
only then resolves the futures with their LSNs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from shoal.errors import (
    ConfigError,
    WalAppendError,
    WalClosedError,
    WalCorruptionError,
    WalError,
    WalFatalError,
)
from shoal.wal.codec import FRAME_HEADER_SIZE, SEGMENT_HEADER_SIZE, encode_frame_header
from shoal.wal.fileops import Buffer
from shoal.wal.reporting import WalMetrics
from shoal.wal.segment import ActiveSegment, SegmentSet, create_segment

logger = logging.getLogger(__name__)

# Group-commit gathering: wait at most this long, and at most this fraction of
# the previous commit's duration, for acknowledged appenders to come back.
_GATHER_MAX_S = 0.002
_GATHER_FRACTION = 0.5

OnDurable = Callable[[Sequence[tuple[int, object]]], None]


@dataclass(frozen=True, slots=True)
class FsyncPolicy:
    """``always`` (fsync before ack), ``interval`` (ack after write, fsync every
    ``interval_s``) or ``never`` (ack after write, fsync only on rotation,
    flush and shutdown)."""

    mode: str
    interval_s: float = 0.0

    @classmethod
    def parse(cls, text: str) -> FsyncPolicy:
        value = text.strip().lower()
        if value in ("always", "never"):
            return cls(value)
        if value.startswith("interval:"):
            try:
                ms = int(value.split(":", 1)[1])
            except ValueError:
                ms = 0
            if ms > 0:
                return cls("interval", ms / 1000.0)
        raise ConfigError(f"WAL fsync policy must be always, never or interval:<ms>, got {text!r}")


@dataclass(frozen=True, slots=True)
class WalSettings:
    """How a log is written and recovered, checked when it is opened: when the writer
    fsyncs, the size past which it begins a new segment, the largest record, and what
    recovery does with damage (``skip-segment`` or ``stop``)."""

    fsync: FsyncPolicy
    segment_bytes: int
    max_record_bytes: int
    corruption_policy: str


class _Append:
    __slots__ = ("future", "payload", "rtype", "tag")

    def __init__(self, payload: bytes, rtype: int, tag: object, future: Future[int]) -> None:
        self.payload = payload
        self.rtype = rtype
        self.tag = tag
        self.future = future


class _Control:
    __slots__ = ("future", "stop")

    def __init__(self, stop: bool) -> None:
        self.stop = stop
        self.future: Future[None] = Future()
        self.future.set_running_or_notify_cancel()


class _Fatal(Exception):
    def __init__(self, error: WalFatalError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(eq=False, slots=True)
class Tail:
    """The end of the log, where appends go on: its segments, the one appended to, and the
    next LSN to hand out. Recovery finds it; then the writer thread alone moves it on.

    ``damage``: under policy ``stop``, the damage recovery found, which refuses every
    append (no segment is then appended to)."""

    segments: SegmentSet
    active: ActiveSegment | None
    next_lsn: int
    damage: WalCorruptionError | None = None


@dataclass(eq=False, kw_only=True)
class Writer:
    """Group-commit writer thread at the :class:`Tail` of a log."""

    tail: Tail
    settings: WalSettings
    metrics: WalMetrics
    on_durable: OnDurable | None
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False)
    _queue: list[_Append | _Control] = field(default_factory=list, init=False)
    _closed: bool = field(default=False, init=False)
    _fatal: WalFatalError | None = field(default=None, init=False)
    _unsynced_since: float = field(default=0.0, init=False)
    _concurrency: int = field(default=1, init=False)
    """Estimated appenders in flight (see :meth:`_gather`)."""
    _gather_target: int = field(default=0, init=False)
    _last_commit_s: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, name="shoal-wal-writer", daemon=True)

    # -- called from any thread ------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def last_lsn(self) -> int:
        """The LSN of the last record written (durable under policy always)."""
        return self.tail.next_lsn - 1

    @property
    def fatal(self) -> WalFatalError | None:
        return self._fatal

    def _check_open(self) -> None:
        if self._fatal is not None:
            raise WalFatalError(f"the WAL stopped after a fatal error: {self._fatal}")
        if self._closed:
            raise WalClosedError("the WAL is shut down")
        damage = self.tail.damage
        if damage is not None:
            raise WalCorruptionError(damage.segment, damage.offset, damage.reason)

    def submit(self, payload: bytes, rtype: int, tag: object) -> Future[int]:
        future: Future[int] = Future()
        future.set_running_or_notify_cancel()  # an acknowledgement cannot be cancelled
        item = _Append(payload, rtype, tag, future)
        with self._cond:
            self._check_open()
            self._queue.append(item)
            waiting = len(self._queue)
            if waiting == 1 or waiting == self._gather_target:
                self._cond.notify()
        return future

    def flush(self, timeout: float | None) -> None:
        control = _Control(stop=False)
        with self._cond:
            if self._fatal is not None or self._closed:
                self._check_open()
            self._queue.append(control)
            self._cond.notify()
        control.future.result(timeout)

    def shutdown(self, timeout: float) -> bool:
        """Stop accepting appends, drain, fsync, close. True if the thread ended."""
        with self._cond:
            if not self._closed:
                self._closed = True
                if self._fatal is None and self._thread.is_alive():
                    self._queue.append(_Control(stop=True))
                    self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("WAL writer did not stop within %.1f s", timeout)
            return False
        return True

    # -- the writer thread -----------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            logger.exception("WAL writer thread failed")
            self._go_fatal(WalFatalError(f"WAL writer thread failed: {exc!r}"), [])

    def _take(self) -> list[_Append | _Control]:
        with self._cond:
            while not self._queue:
                timeout = self._sync_timeout()
                if timeout is not None and timeout <= 0:
                    break
                self._cond.wait(timeout)
            self._gather()
            batch, self._queue = self._queue, []
        return batch

    def _gather(self) -> None:
        """Briefly wait for appenders that were just acknowledged (lock held).

        Without this, N appenders that each wait for their acknowledgement
        settle into two alternating groups of N/2: the records acknowledged by
        one fsync come back just after the next one started. The writer
        estimates the concurrency as the last group plus what queued during
        its commit, and waits for that many records, at most a fraction of
        the last commit's duration. A lone appender (estimate 1) never waits.
        """
        target = self._concurrency
        if len(self._queue) >= target or self.settings.fsync.mode != "always":
            return
        deadline = time.monotonic() + min(_GATHER_MAX_S, self._last_commit_s * _GATHER_FRACTION)
        self._gather_target = target
        try:
            while len(self._queue) < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        finally:
            self._gather_target = 0

    def _loop(self) -> None:
        while True:
            batch = self._take()
            pos = 0
            try:
                while pos < len(batch):
                    item = batch[pos]
                    if isinstance(item, _Control):
                        self._sync_active()  # on failure, _go_fatal fails this control too
                        pos += 1
                        if item.stop:
                            self._close_active()
                            item.future.set_result(None)
                            return
                        item.future.set_result(None)
                        continue
                    run: list[_Append] = []
                    while pos < len(batch):
                        nxt = batch[pos]
                        if not isinstance(nxt, _Append):
                            break
                        run.append(nxt)
                        pos += 1
                    started = time.monotonic()
                    fatal = self._commit(run)
                    if fatal is not None:
                        raise _Fatal(fatal)
                    self._last_commit_s = time.monotonic() - started
                    with self._cond:
                        self._concurrency = len(run) + len(self._queue)
                timeout = self._sync_timeout()
                if timeout is not None and timeout <= 0:
                    self._sync_active()
            except _Fatal as exc:
                self._go_fatal(exc.error, batch[pos:])
                return

    def _sync_timeout(self) -> float | None:
        active = self.tail.active
        if self.settings.fsync.mode != "interval" or active is None or not active.unsynced:
            return None
        return self._unsynced_since + self.settings.fsync.interval_s - time.monotonic()

    def _sync_active(self) -> None:
        active = self.tail.active
        if active is None or not active.unsynced:
            return
        try:
            active.sync()
        except OSError as exc:
            raise _Fatal(WalFatalError(f"fsync of {active.meta.path.name} failed: {exc}")) from exc

    def _close_active(self) -> None:
        tail = self.tail
        if tail.active is not None:
            tail.active.close()
            tail.active = None

    def _segment_for(self, frame_size: int) -> ActiveSegment:
        """The segment the next frame goes to, rotating when it would not fit."""
        tail = self.tail
        seg = tail.active
        if (
            seg is not None
            and not seg.poisoned
            and (
                seg.written == SEGMENT_HEADER_SIZE
                or seg.written + frame_size <= self.settings.segment_bytes
            )
        ):
            return seg
        self._sync_active()  # raises _Fatal
        lsn = tail.next_lsn
        new = create_segment(tail.segments.ops, tail.segments.directory, lsn, lsn - 1)
        self._close_active()
        tail.active = new
        tail.segments.add(new.meta)
        logger.debug("WAL rotated to %s", new.meta.path.name)
        return new

    def _commit(self, items: list[_Append]) -> WalFatalError | None:
        """Write, fsync and acknowledge ``items``; return the fatal error, if one happened."""
        durable: list[tuple[int, _Append]] = []
        failure: WalError | None = None
        fatal: WalFatalError | None = None
        always = self.settings.fsync.mode == "always"
        count = len(items)
        i = 0
        while i < count:
            try:
                seg = self._segment_for(FRAME_HEADER_SIZE + len(items[i].payload))
            except _Fatal as exc:
                fatal = exc.error
                break
            except OSError as exc:
                failure = WalAppendError(f"cannot start a new WAL segment: {exc}")
                break
            room = self.settings.segment_bytes - seg.written
            lsn = self.tail.next_lsn
            buffers: list[Buffer] = []
            nbytes = 0
            j = i
            while j < count:
                item = items[j]
                size = FRAME_HEADER_SIZE + len(item.payload)
                if nbytes and nbytes + size > room:
                    break
                buffers.append(encode_frame_header(lsn + j - i, item.rtype, item.payload))
                buffers.append(item.payload)
                nbytes += size
                j += 1
            was_unsynced = seg.unsynced
            try:
                seg.write(buffers, nbytes)
            except OSError as exc:
                failure = WalAppendError(f"write to {seg.meta.path.name} failed: {exc}")
                break
            fsync_seconds = 0.0
            if always:
                started = time.monotonic()
                try:
                    seg.sync()
                except OSError as exc:
                    fatal = WalFatalError(f"fsync of {seg.meta.path.name} failed: {exc}")
                    break
                fsync_seconds = time.monotonic() - started
            elif not was_unsynced:
                self._unsynced_since = time.monotonic()
            seg.meta.end = seg.written
            self.tail.next_lsn = lsn + j - i
            self.metrics.group_committed(j - i, nbytes, fsync_seconds)
            durable.extend(zip(range(lsn, lsn + j - i), items[i:j], strict=True))
            i = j
        if durable and self.on_durable is not None:
            try:
                self.on_durable([(lsn, item.tag) for lsn, item in durable])
            except Exception as exc:
                logger.exception("WAL on_durable callback raised; the WAL stops")
                fatal = fatal or WalFatalError(f"on_durable callback raised: {exc!r}")
                items = [item for _lsn, item in durable] + items[i:]
                durable, i, count = [], 0, len(items)
        if fatal is not None:
            self._mark_fatal(fatal)  # before any future resolves: appends now refuse
        for lsn, item in durable:
            item.future.set_result(lsn)
        if i < count:
            error: WalError = fatal or failure or WalAppendError("append failed")
            for item in items[i:]:
                item.future.set_exception(error)
            self.metrics.append_failed("fatal" if fatal is not None else "io", count - i)
            if fatal is None:
                logger.warning("WAL append of %d record(s) failed: %s", count - i, failure)
        return fatal

    def _mark_fatal(self, error: WalFatalError) -> None:
        with self._cond:
            if self._fatal is None:
                self._fatal = error

    def _go_fatal(self, error: WalFatalError, leftovers: Sequence[_Append | _Control]) -> None:
        logger.error("WAL is stopping: %s", error)
        with self._cond:
            if self._fatal is None:
                self._fatal = error
            queued, self._queue = self._queue, []
        failed = 0
        for item in [*leftovers, *queued]:
            if isinstance(item, _Append):
                item.future.set_exception(error)
                failed += 1
            elif item.stop:
                item.future.set_result(None)
            else:
                item.future.set_exception(error)
        if failed:
            self.metrics.append_failed("fatal", failed)
        self._close_active()
