"""The flusher: moves acknowledged rows from the unflushed rows into the Delta tables.

One thread. A round starts when the unflushed rows hold ``flush_max_bytes`` or its
oldest row is ``flush_max_age_s`` old (and on shutdown); the thresholds are
checked every 50 ms, since at full ingest rate a longer pause lets the unflushed rows
grow well past ``flush_max_bytes`` before the round starts. It takes an LSN
``L`` and every table's batches up to ``L`` in one step (``L`` is the last LSN,
or, when the unflushed rows hold more than ``flush_max_bytes``, the first at which
the rows up to it reach that: a round's sorted copies then stay one round's
worth, however far behind ingest the flusher is), writes and
commits each table with ``wal_lsn=L`` (no lock held), drops that table's
flushed batches from the unflushed rows, and once every table succeeded truncates the
WAL below ``L + 1``. A table whose flush fails keeps its rows among the unflushed rows
and the WAL and is retried next round: nothing is dropped. Before a table is written,
its committed LSN is read: a commit whose answer was lost (an object store that timed
out after it stored the entry) may have landed, and its rows are then dropped, not
written twice. While flushes fail, :attr:`Flusher.failure` says since when and why
(``/readyz`` and ``/metrics`` show it).

When a whole flush's worth of rows (``flush_max_bytes``) waits at the end of a
round (it arrived while the round was writing, or the round left it), the flusher
has fallen behind ingest, and the next round shares its
writing with ``helpers`` (two threads: the column takes side by side, the Parquet
encoding beside the summaries). A flusher that keeps up writes alone: the threads
would take CPU from the decoding thread, which then is the stage that limits
ingest (docs/rationale.md).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import pyarrow as pa

from shoal.schema import SIGNAL_TABLES
from shoal.storage.location import redact
from shoal.storage.types import CommitResult
from shoal.storage.unflushed import UnflushedRows

logger = logging.getLogger(__name__)


class FlushTable(Protocol):
    def flush(
        self,
        data: pa.Table,
        wal_lsn: int,
        *,
        helpers: concurrent.futures.Executor | None,
        after: int | None,
    ) -> CommitResult | None: ...

    def committed_lsn(self) -> int: ...


class FlushStore(Protocol):
    def open(self, tenant: str, table: str) -> FlushTable: ...


class Truncatable(Protocol):
    def truncate_before(self, lsn: int) -> object: ...


class FlushMetrics(Protocol):
    def flushed(self, tenant: str, table: str, rows: int, nbytes: int, seconds: float,
                version: int | None) -> None: ...  # fmt: skip

    def flush_failed(self, tenant: str, table: str) -> None: ...

    def flush_shared(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class FlushPolicy:
    """When a round starts: the unflushed rows hold ``max_bytes`` (the round then takes
    that much) or their oldest row is ``max_age_s`` old, looked at every ``poll_s``."""

    max_bytes: int
    max_age_s: float
    poll_s: float = 0.05


class Flusher:
    def __init__(
        self,
        unflushed: UnflushedRows,
        store: FlushStore,
        wal: Truncatable,
        policy: FlushPolicy,
        metrics: FlushMetrics,
        helpers: concurrent.futures.Executor | None = None,
        emptied: Callable[[], object] | None = None,
    ) -> None:
        self._unflushed = unflushed
        self._store = store
        self._wal = wal
        self._policy = policy
        self._metrics = metrics
        self._tables: dict[tuple[str, str], FlushTable] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._round_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="shoal-flusher", daemon=True)
        self.rounds = 0
        self._helpers = helpers
        self._emptied = emptied
        """Called after a round that left no rows unflushed (ingest stopped, or slow)."""
        self._behind = False
        """A flush's worth of rows waited at the end of the last round."""
        self.shared_rounds = 0
        """Rounds that shared their writing with the helpers."""
        self.failure: tuple[float, str] | None = None
        """While flushes fail: when the first failed (``time.time()``) and the last error."""

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        """Ask for a flush round now (used by tests and admin actions)."""
        self._wake.set()

    def _due(self) -> bool:
        if self._unflushed.rows == 0:
            return False
        return (
            self._unflushed.bytes >= self._policy.max_bytes
            or self._unflushed.oldest_age_s() >= self._policy.max_age_s
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self._policy.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            if woken or self._due():
                try:
                    self.flush(None if woken else self._policy.max_bytes)
                except Exception:
                    logger.exception("flush round failed; retrying next round")

    def _table(self, tenant: str, table: str) -> FlushTable:
        key = (tenant, table)
        found = self._tables.get(key)
        if found is None:
            found = self._tables[key] = self._store.open(tenant, table)
        return found

    def flush(self, max_bytes: int | None = None) -> bool:
        """One flush round; True when everything taken was committed and the WAL cut.

        ``max_bytes``: take only the rows up to the first LSN at which they reach it (the
        thread's rounds take a round's worth, ``flush_max_bytes``); else every row."""
        with self._round_lock:
            lsn, parts = self._unflushed.take(max_bytes)
            if not parts:
                return True
            helpers = self._helpers if self._behind else None
            if helpers is not None:
                self.shared_rounds += 1
                self._metrics.flush_shared()
            ok = True
            for (tenant, table), batches in sorted(parts.items()):
                started = time.perf_counter()
                try:
                    handle = self._table(tenant, table)
                    done = handle.committed_lsn()
                    if batches and batches[0].lsn <= done:
                        # a commit of an earlier round landed although it failed: its rows
                        # are in the table already
                        self._unflushed.drop_through(tenant, table, done)
                        batches = [b for b in batches if b.lsn > done]
                        if not batches:
                            continue
                    schema = SIGNAL_TABLES[table].schema if table in SIGNAL_TABLES else None
                    data = pa.Table.from_batches(
                        [b.batch for b in batches], schema=schema or batches[0].batch.schema
                    )
                    result = handle.flush(data, lsn, helpers=helpers, after=done)
                except Exception as exc:
                    ok = False
                    since = self.failure[0] if self.failure else time.time()
                    self.failure = (since, redact(f"{type(exc).__name__}: {exc}")[:300])
                    self._metrics.flush_failed(tenant, table)
                    logger.exception(
                        "flush of %s/%s through LSN %d failed; kept for the next round",
                        tenant, table, lsn,
                    )  # fmt: skip
                    continue
                self._unflushed.drop_through(tenant, table, lsn)
                seconds = time.perf_counter() - started
                self._metrics.flushed(
                    tenant, table, data.num_rows, sum(b.nbytes for b in batches), seconds,
                    result.version if result is not None else None,
                )  # fmt: skip
                logger.debug(
                    "flushed %s/%s: %d rows through LSN %d in %.3fs",
                    tenant, table, data.num_rows, lsn, seconds,
                )  # fmt: skip
            self.rounds += 1
            self._behind = self._unflushed.bytes >= self._policy.max_bytes
            if ok:
                self.failure = None
                self._wal.truncate_before(lsn + 1)
            if self._emptied is not None and self._unflushed.rows == 0:
                self._emptied()
            return ok

    def shutdown(self, timeout: float) -> bool:
        """Stop the thread and run a final flush; True if it committed everything."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        try:
            return self.flush()
        except Exception:
            logger.exception("final flush failed; the WAL keeps the rows for replay")
            return False
