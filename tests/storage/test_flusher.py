"""UnflushedRows + flusher over the real WAL and Delta tables: every row visible exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS
from shoal import otlp
from shoal.errors import CommitConflictError
from shoal.ingest import records
from shoal.server.telemetry import ServerMetrics
from shoal.storage import faults
from shoal.storage.flusher import Flusher, FlushPolicy, FlushTable
from shoal.storage.store import TableStore
from shoal.storage.types import CommitResult
from shoal.storage.unflushed import UnflushedRows
from shoal.wal import Wal


def _rows(i: int, points: int = 50) -> pa.Table:
    body = payloads.metrics_request(points=points, series=5, start_ns=BASE_NS + i)
    return otlp.decode("metrics", body.SerializeToString()).table


class Rig:
    def __init__(
        self,
        tmp: Path,
        max_bytes: int = 1 << 30,
        max_age_s: float = 3600,
        helpers: Executor | None = None,
    ) -> None:
        self.unflushed = UnflushedRows()
        self.store = TableStore(tmp / "data")
        self.wal = Wal.open(tmp / "data" / "wal", on_durable=self.unflushed.add_many)
        self.metrics = ServerMetrics()
        self.flusher = Flusher(
            self.unflushed,
            self.store,
            self.wal,
            FlushPolicy(max_bytes, max_age_s, poll_s=0.01),
            self.metrics,
            helpers=helpers,
        )

    def append(self, tenant: str, table: str, data: pa.Table) -> int:
        payload = records.encode(tenant, table, data)
        return self.wal.append(payload, tag=(tenant, table, data)).result(30)

    def visible(self, tenant: str, table: str) -> int:
        """Count rows the way the query layer does: snapshot copy first, then Delta."""
        batches = self.unflushed.batches(tenant).get(table, [])
        snap = self.store.open(tenant, table).snapshot()
        in_files = sum(f.rows for f in snap.files)
        return in_files + sum(b.batch.num_rows for b in batches if b.lsn > snap.committed_lsn)

    def close(self) -> None:
        self.flusher.shutdown(30)
        self.wal.shutdown(30)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path, max_bytes=64 << 10, max_age_s=0.05)
    yield r
    r.close()


def test_counts_never_dip_or_double_while_flushing(rig: Rig) -> None:
    rig.store.open("default", "metrics")
    # decoded before the threads start: decoding beside a reader that never sleeps
    # spends most of its time waiting for the interpreter lock
    tables = [_rows(i) for i in range(120)]
    rig.flusher.start()
    acked = 0
    done = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        last = 0
        while not done.is_set():
            low = acked
            seen = rig.visible("default", "metrics")
            high = acked
            if seen < last:
                problems.append(f"count dipped from {last} to {seen}")
            if not low <= seen <= high + 50:
                problems.append(f"count {seen} outside acknowledged range {low}..{high}")
            last = seen

    thread = threading.Thread(target=reader)
    thread.start()
    # on a busy machine the flusher may get few turns while the appends run: keep
    # appending (within a bound) until it has flushed several rounds under the reader
    deadline = time.monotonic() + 60
    appended = 0
    while appended < len(tables) or (rig.flusher.rounds <= 3 and time.monotonic() < deadline):
        rig.append("default", "metrics", tables[appended % len(tables)])
        acked += 50
        appended += 1
    done.set()
    thread.join()
    assert not problems, problems[:5]
    assert rig.flusher.rounds > 3, "the flusher must have run during the test"
    assert rig.flusher.flush()
    assert rig.visible("default", "metrics") == acked
    assert rig.unflushed.rows == 0
    assert rig.wal.segment_count() == 1  # everything before the last LSN truncated


class _Counting(ThreadPoolExecutor):
    """Helpers that count the work handed to them."""

    def __init__(self) -> None:
        super().__init__(2)
        self.tasks = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.tasks += 1
        return super().submit(fn, *args, **kwargs)


def test_only_a_flusher_that_fell_behind_shares_its_writing(tmp_path: Path) -> None:
    """A round writes alone unless a whole flush's worth of rows arrived while the round
    before it was writing; then it hands the column takes and the Parquet encoding to the
    helpers, and writes the same rows in the same order as a round that writes alone."""
    helpers = _Counting()
    tables = [_rows(i) for i in range(8)]
    # what a request counts in the snapshot here: its buffers (UnflushedRows.add_many)
    one_request = max(sum(b.get_total_buffer_size() for b in t.to_batches()) for t in tables)
    rig = Rig(tmp_path / "a", helpers=helpers)
    alone = Rig(tmp_path / "b")
    stores = [_During(rig), _During(alone)]
    shared, single = (
        Flusher(r.unflushed, store, r.wal, FlushPolicy(3 * one_request, 3600), r.metrics, helpers=h)
        for r, store, h in ((rig, stores[0], helpers), (alone, stores[1], None))
    )

    def round_with(arriving: list[pa.Table]) -> None:
        for store in stores:
            store.arriving = list(arriving)
        assert shared.flush() and single.flush()

    try:
        for r in (rig, alone):
            r.append("acme", "metrics", tables[0])
        round_with(tables[1:3])  # short of a flush's worth arrives during the round
        round_with(tables[3:6])  # a flush's worth arrives during the next one
        assert (shared.shared_rounds, helpers.tasks) == (0, 0)
        round_with(tables[6:])  # behind: shared
        assert shared.shared_rounds == 1 and helpers.tasks > 1
        round_with([])  # less than a flush's worth arrived: alone again
        assert shared.shared_rounds == 1
        round_with([])
        assert shared.shared_rounds == 1 and rig.unflushed.rows == 0
        assert "shoal_flush_shared_rounds_total 1.0" in rig.metrics.exposition()[0].decode()
        read = [_read(r.store, "acme", "metrics") for r in (rig, alone)]
        assert read[0].num_rows == 8 * 50 and read[0].equals(read[1])
    finally:
        rig.close()
        alone.close()
        helpers.shutdown()


class _During:
    """A store whose tables acknowledge the requests of ``arriving`` while they flush."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.arriving: list[pa.Table] = []

    def open(self, tenant: str, table: str) -> FlushTable:
        inner, rig, store = self.rig.store.open(tenant, table), self.rig, self

        class Table:
            def flush(
                self, data: pa.Table, wal_lsn: int, *, helpers: Executor | None, after: int | None
            ) -> CommitResult | None:
                for request in store.arriving:
                    rig.append(tenant, table, request)
                store.arriving = []
                return inner.flush(data, wal_lsn, helpers=helpers, after=after)

            def committed_lsn(self) -> int:
                return inner.committed_lsn()

        return Table()


def _read(store: TableStore, tenant: str, table: str) -> pa.Table:
    """Every row of a table's files, file by file in commit order, as written."""
    files = store.open(tenant, table).snapshot().files
    return pa.concat_tables([pq.read_table(f.path) for f in files])


def test_a_failing_flush_keeps_the_rows_and_is_retried(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    failures = {"left": 2}

    def hook(name: str) -> None:
        if name == "parquet-written" and failures["left"] > 0:
            failures["left"] -= 1
            raise OSError("injected write failure")

    faults.install(hook)
    try:
        rig.append("acme", "metrics", _rows(1))
        rig.append("acme", "logs", otlp.decode("logs", payloads.logs_request(
            records=10, start_ns=BASE_NS).SerializeToString()).table)  # fmt: skip
        assert not rig.flusher.flush()  # both tables fail once: nothing dropped, WAL kept
        assert rig.visible("acme", "metrics") == 50
        assert rig.visible("acme", "logs") == 10
        assert rig.unflushed.rows == 60
        assert len(list(rig.wal.replay(0))) == 2
        assert rig.flusher.flush()
        assert rig.visible("acme", "metrics") == 50 and rig.visible("acme", "logs") == 10
        assert rig.unflushed.rows == 0
        text = rig.metrics.exposition()[0].decode()
        assert 'shoal_flush_failures_total{table="metrics",tenant="acme"} 1.0' in text
        assert 'shoal_flush_failures_total{table="logs",tenant="acme"} 1.0' in text
    finally:
        faults.install(None)
        rig.close()


def test_a_round_of_the_thread_takes_a_rounds_worth_and_leaves_the_rest(tmp_path: Path) -> None:
    """Behind by several rounds, a round takes the rows up to the LSN at which they reach
    ``flush_max_bytes`` and commits them with that LSN; the rest stays in the snapshot and
    the WAL, every row visible once, and the next rounds take it in order."""
    tables = [_rows(i) for i in range(6)]
    one_request = max(sum(b.get_total_buffer_size() for b in t.to_batches()) for t in tables)
    rig = Rig(tmp_path, max_bytes=2 * one_request)
    try:
        lsns = [rig.append("acme", "metrics", t) for t in tables]
        rig.flusher.flush(2 * one_request)
        taken = rig.store.open("acme", "metrics").committed_lsn()
        assert taken == lsns[1]  # two requests reach a round's worth
        assert rig.unflushed.rows == 4 * 50
        assert rig.visible("acme", "metrics") == 6 * 50
        # what a restart would replay past the table's commit is still in the WAL
        assert [r.lsn for r in rig.wal.replay(after_lsn=taken)] == lsns[2:]
        while rig.unflushed.rows:
            rig.flusher.flush(2 * one_request)
        assert rig.flusher.rounds == 3
        written = _read(rig.store, "acme", "metrics")
        expected = pa.concat_tables(tables)
        assert written.num_rows == expected.num_rows
        assert sorted(written.column("time_unix_nano").to_pylist()) == sorted(
            expected.column("time_unix_nano").to_pylist()
        )
    finally:
        rig.close()


class _LandsLate:
    """A store whose first flush fails with its commit still on the way (a request the
    object store timed out on), which then lands during the next round's write."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.late: tuple[pa.Table, int] | None = None
        self.conflicts = 0

    def open(self, tenant: str, table: str) -> FlushTable:
        inner, outer = self.rig.store.open(tenant, table), self

        class Table:
            def flush(
                self, data: pa.Table, wal_lsn: int, *, helpers: Executor | None, after: int | None
            ) -> CommitResult | None:
                if outer.late is None:
                    outer.late = (data, wal_lsn)
                    raise TimeoutError("the store did not answer in time")
                landing, outer.late = outer.late, (data, 0)
                if landing[1]:
                    inner.flush(landing[0], landing[1])  # the first attempt lands now
                try:
                    return inner.flush(data, wal_lsn, helpers=helpers, after=after)
                except CommitConflictError:
                    outer.conflicts += 1
                    raise

            def committed_lsn(self) -> int:
                return inner.committed_lsn()

        return Table()


def test_a_commit_that_lands_after_the_next_round_began_is_not_committed_twice(
    tmp_path: Path,
) -> None:
    """Round 1 fails, its commit still on the way; round 2 writes round 1's rows and
    more, and round 1's commit lands meanwhile: round 2's commit is refused, and round 3
    drops round 1's rows and commits only the rest."""
    rig = Rig(tmp_path)
    store = _LandsLate(rig)
    flusher = Flusher(rig.unflushed, store, rig.wal, FlushPolicy(1 << 30, 3600), rig.metrics)
    try:
        rig.append("acme", "metrics", _rows(1))
        assert not flusher.flush()  # timed out
        rig.append("acme", "metrics", _rows(2))
        assert not flusher.flush()  # round 1's commit landed under it: refused
        assert store.conflicts == 1
        assert rig.visible("acme", "metrics") == 100
        assert flusher.flush()
        assert rig.unflushed.rows == 0
        rows = _read(rig.store, "acme", "metrics")
        assert rows.num_rows == 100  # each row once
        assert rig.store.open("acme", "metrics").committed_lsn() == 2
    finally:
        rig.close()


def test_a_round_that_leaves_nothing_unflushed_says_so(tmp_path: Path) -> None:
    """The server hands freed memory back when a round leaves no rows unflushed (ingest
    stopped): told after such a round, not after one that leaves rows behind."""
    tables = [_rows(i) for i in range(4)]
    one_request = max(sum(b.get_total_buffer_size() for b in t.to_batches()) for t in tables)
    rig = Rig(tmp_path)
    emptied: list[int] = []
    flusher = Flusher(
        rig.unflushed, rig.store, rig.wal, FlushPolicy(1 << 30, 3600), rig.metrics,
        emptied=lambda: emptied.append(rig.unflushed.rows),
    )  # fmt: skip
    try:
        for t in tables:
            rig.append("acme", "metrics", t)
        assert flusher.flush(2 * one_request) and rig.unflushed.rows == 2 * 50
        assert emptied == []
        assert flusher.flush(2 * one_request) and rig.unflushed.rows == 0
        assert emptied == [0]
    finally:
        rig.close()
