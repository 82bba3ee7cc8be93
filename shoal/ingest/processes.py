"""Decoding processes: the interpreter work of ingest on a core of its own.

Decoding a request (protobuf into Arrow, the OTLP and remote-write mappings, the WAL
payload's Arrow IPC) needs the interpreter, and one interpreter runs one thread at a
time: the server's event loop, WAL writer and flusher share it already. With
``decode_processes`` above 0, each body goes to one of that many worker processes,
which decodes it and sends back the WAL payload; the server reads the rows out of the
payload without copying them (for the snapshot) and appends the payload itself, so the
WAL keeps its single writer, its order and fsync before the answer.

Per worker: a pipe, a thread that sends (a large body never blocks the event loop) and
a thread that receives. A worker that dies (killed, out of memory, a crash in native
code) fails the requests it held with a retryable 503 and is started again. A worker
exits when the server's end of its pipe closes, so a killed server leaves none behind.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import multiprocessing.connection
import pickle
import queue
import signal
import threading
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

import pyarrow as pa

from shoal.errors import DecoderLostError, ShuttingDownError
from shoal.ingest import records
from shoal.ingest.decoding import Decoded, DecodeJob, Done, decode, hand_over, limit_series_caches

logger = logging.getLogger(__name__)

_Item = tuple[int, DecodeJob, str, bytes]
_EMPTY = pa.table({})


def worker_main(
    conn: multiprocessing.connection.Connection, cache_bytes: int | None = None
) -> None:
    """A decoding process: jobs in, ``(id, error, counts)`` + payload out, until EOF;
    ``cache_bytes`` bounds its series caches (``series_cache_bytes``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the server to act on
    if cache_bytes is not None:
        limit_series_caches(cache_bytes)
    while True:
        try:
            item: _Item | None = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        job_id, job, tenant, body = item
        try:
            decoded = decode(job, body)
            rows = decoded.table.num_rows
            payload = records.encode(tenant, job.signal, decoded.table) if rows else b""
            counts = (
                rows,
                decoded.rejected,
                decoded.errors,
                decoded.samples,
                decoded.exemplars,
                decoded.histograms,
            )
        except BaseException as exc:
            conn.send((job_id, _portable(exc), None))
            continue
        conn.send((job_id, None, counts))
        conn.send_bytes(payload)


_Portable = tuple[type[BaseException], tuple[Any, ...], dict[str, Any]]


def _portable(exc: BaseException) -> _Portable:
    """An exception as class, args and attributes (rebuilt without calling ``__init__``,
    whose signature differs from ``args`` in many error classes)."""
    portable = (type(exc), exc.args, dict(vars(exc)))
    try:
        pickle.dumps(portable)
    except Exception:
        return RuntimeError, (f"{type(exc).__name__}: {exc}",), {}
    return portable


def _rebuild(portable: _Portable) -> BaseException:
    cls, args, attributes = portable
    exc = cls.__new__(cls)
    exc.args = args
    vars(exc).update(attributes)
    return exc


class _Worker:
    """One decoding process and the two threads that talk to it."""

    def __init__(
        self, context: Any, index: int, on_restart: Callable[[], None], cache_bytes: int | None
    ) -> None:
        self._context = context
        self._index = index
        self._cache_bytes = cache_bytes
        self._on_restart = on_restart
        self._lock = threading.Lock()
        self._jobs: dict[int, Done] = {}  # submitted and not answered
        self._outbox: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._ids = itertools.count()
        self._closing = False
        self._process, self._conn = self._spawn()
        self._sender = threading.Thread(
            target=self._send_loop, name=f"shoal-decode-send-{index}", daemon=True
        )
        self._receiver = threading.Thread(
            target=self._receive_loop, name=f"shoal-decode-receive-{index}", daemon=True
        )
        self._sender.start()
        self._receiver.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def load(self) -> int:
        return len(self._jobs)

    def _spawn(self) -> tuple[BaseProcess, multiprocessing.connection.Connection]:
        parent, child = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=worker_main,
            args=(child, self._cache_bytes),
            name=f"shoal-decode-{self._index}",
            daemon=True,
        )
        process.start()
        child.close()  # the worker's end lives in the worker only: its exit is our EOF
        return process, parent

    def submit(self, job: DecodeJob, tenant: str, body: bytes, done: Done) -> None:
        with self._lock:
            if self._closing:
                closing = True
            else:
                closing = False
                job_id = next(self._ids)
                self._jobs[job_id] = done
        if closing:
            done(ShuttingDownError("shoal is shutting down; retry against the restarted server"))
            return
        self._outbox.put((job_id, job, tenant, body))

    def _send_loop(self) -> None:
        while True:
            item = self._outbox.get()
            with self._lock:
                if item is not None and item[0] not in self._jobs:
                    continue  # failed with a worker that died meanwhile
                conn = self._conn
            try:
                conn.send(item)
            except (OSError, ValueError):
                pass  # the worker is gone: the receiving thread fails its jobs
            if item is None:
                return

    def _receive_loop(self) -> None:
        while True:
            conn = self._conn
            try:
                job_id, error, counts = conn.recv()
                payload = conn.recv_bytes() if error is None else b""
            except (EOFError, OSError):
                if self._lost():
                    continue
                return
            with self._lock:
                done = self._jobs.pop(job_id, None)
            if done is not None:
                _deliver(done, error, counts, payload)

    def _lost(self) -> bool:
        """The worker's pipe closed: fail its jobs; start another unless closing."""
        with self._lock:
            lost = list(self._jobs.values())
            self._jobs.clear()
            closing = self._closing
            old = self._process
            if not closing:
                self._process, self._conn = self._spawn()
        old.join(5)
        if old.is_alive():
            old.kill()
            old.join(5)
        error: BaseException
        if closing:
            error = ShuttingDownError("shoal is shutting down; retry against the restarted server")
        else:
            logger.warning(
                "decoding process %d exited (code %s); %d requests failed as retryable; "
                "started another",
                self._index, old.exitcode, len(lost),
            )  # fmt: skip
            self._on_restart()
            error = DecoderLostError("a decoding process exited while decoding; retry")
        for done in lost:
            done(error)
        return not closing

    def close(self, timeout: float) -> None:
        with self._lock:
            self._closing = True
        self._outbox.put(None)  # the worker finishes what it has, then exits
        self._sender.join(timeout)
        self._receiver.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._receiver.join(timeout)
        self._process.join(timeout)
        self._conn.close()


def _deliver(done: Done, error: Any, counts: Any, payload: bytes) -> None:
    def outcome() -> Decoded:
        if error is not None:
            raise _rebuild(error)
        rows, rejected, errors, samples, exemplars, histograms = counts
        table = records.decode(payload)[2] if rows else _EMPTY
        return Decoded(
            table, rejected, errors, samples, exemplars, payload or None, histograms=histograms
        )

    hand_over(outcome, done)


class ProcessDecoder:
    """A :class:`~shoal.ingest.decoding.DecodeRunner` over ``processes`` decoding processes;
    a job goes to the one with the fewest jobs outstanding; ``cache_bytes`` bounds each
    process's series caches (``series_cache_bytes``; None keeps the codecs' own bound)."""

    def __init__(
        self,
        processes: int,
        on_restart: Callable[[], None] = lambda: None,
        cache_bytes: int | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError("a ProcessDecoder needs at least one process")
        context = multiprocessing.get_context("spawn")  # never fork a threaded server
        self._workers = [_Worker(context, i, on_restart, cache_bytes) for i in range(processes)]

    @property
    def pids(self) -> list[int | None]:
        return [w.pid for w in self._workers]

    def submit(self, job: DecodeJob, tenant: str, body: bytes, done: Done) -> None:
        worker = min(self._workers, key=lambda w: w.load)
        worker.submit(job, tenant, body, done)

    def close(self, timeout: float = 10.0) -> None:
        for worker in self._workers:
            worker.close(timeout)
