"""Snapshot + flusher over the real WAL and Delta tables: every row visible exactly once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from loadtest import payloads
from loadtest.ingest import BASE_NS
from shoal import otlp
from shoal.server import records
from shoal.server.flusher import TRIM_EVERY_S, Flusher, FlushStore, FlushTable
from shoal.server.telemetry import ServerMetrics
from shoal.storage import faults
from shoal.storage.snapshot import Snapshot
from shoal.storage.store import TableStore
from shoal.storage.types import CommitResult
from shoal.wal import Wal


def _rows(i: int, points: int = 50) -> pa.Table:
    body = payloads.metrics_request(points=points, series=5, start_ns=BASE_NS + i)
    return otlp.decode("metrics", body.SerializeToString()).table


class Rig:
    def __init__(self, tmp: Path, max_bytes: int = 1 << 30, max_age_s: float = 3600) -> None:
        self.snapshot = Snapshot()
        self.store = TableStore(tmp / "data")
        self.wal = Wal.open(tmp / "data" / "wal", on_durable=self.snapshot.add_many)
        self.metrics = ServerMetrics()
        self.flusher = Flusher(
            self.snapshot, self.store, self.wal, max_bytes, max_age_s, self.metrics, poll_s=0.01
        )

    def append(self, tenant: str, table: str, data: pa.Table) -> int:
        payload = records.encode(tenant, table, data)
        return self.wal.append(payload, tag=(tenant, table, data)).result(30)

    def visible(self, tenant: str, table: str) -> int:
        """Count rows the way the query layer does: snapshot copy first, then Delta."""
        batches = self.snapshot.batches(tenant).get(table, [])
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
    for table in tables:
        rig.append("default", "metrics", table)
        acked += 50
    done.set()
    thread.join()
    assert not problems, problems[:5]
    assert rig.flusher.rounds > 3, "the flusher must have run during the test"
    assert rig.flusher.flush()
    assert rig.visible("default", "metrics") == acked
    assert rig.snapshot.rows == 0
    assert rig.wal.segment_count() == 1  # everything before the last LSN truncated


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
        assert rig.snapshot.rows == 60
        assert len(list(rig.wal.replay(0))) == 2
        assert rig.flusher.flush()
        assert rig.visible("acme", "metrics") == 50 and rig.visible("acme", "logs") == 10
        assert rig.snapshot.rows == 0
        text = rig.metrics.exposition()[0].decode()
        assert 'shoal_flush_failures_total{table="metrics",tenant="acme"} 1.0' in text
        assert 'shoal_flush_failures_total{table="logs",tenant="acme"} 1.0' in text
    finally:
        faults.install(None)
        rig.close()


class _Arriving:
    """A store whose tables let one more request be acknowledged during each flush, as
    under steady load: every round leaves rows in the snapshot."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig

    def open(self, tenant: str, table: str) -> FlushTable:
        inner, rig = self.rig.store.open(tenant, table), self.rig

        class Table:
            def flush(self, data: pa.Table, wal_lsn: int) -> CommitResult | None:
                rig.append(tenant, table, _rows(1000 + wal_lsn))
                return inner.flush(data, wal_lsn)

            def committed_lsn(self) -> int:
                return inner.committed_lsn()

        return Table()


def test_unused_pages_go_back_every_few_seconds_and_when_the_load_stops(tmp_path: Path) -> None:
    """Under steady load the allocator's unused pages are handed back every TRIM_EVERY_S,
    not after every round (the next round reuses them); a round that empties the snapshot
    hands them back at once."""
    now = [0.0]
    trims: list[float] = []
    rig = Rig(tmp_path)

    def flusher(store: FlushStore) -> Flusher:
        return Flusher(
            rig.snapshot, store, rig.wal, 1 << 30, 3600, rig.metrics,
            trim=lambda: trims.append(now[0]), clock=lambda: now[0],
        )  # fmt: skip

    steady = flusher(_Arriving(rig))
    try:
        rig.append("default", "metrics", _rows(0))
        for second in range(7):
            now[0] = float(second)
            assert steady.flush() and rig.snapshot.rows > 0
        assert trims == [TRIM_EVERY_S]
        now[0] = 7.0
        assert flusher(rig.store).flush() and rig.snapshot.rows == 0
        assert trims == [TRIM_EVERY_S, 7.0]
    finally:
        rig.close()
