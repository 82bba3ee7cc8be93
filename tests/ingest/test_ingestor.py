"""The ingest path in one process: worker-thread decode + append, acks resolved per WAL group."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from loadtest import payloads
from shoal.errors import DecodeError, OverloadedError, WalError
from shoal.ingest import records
from shoal.ingest.decoding import DecodeJob, ThreadDecoder
from shoal.ingest.handler import IngestHandler, IngestMetrics, IngestOutcome
from shoal.ingest.ingestor import Ingestor
from shoal.ingest.queue import IngestQueue
from shoal.storage.unflushed import UnflushedRows
from shoal.wal import Wal

METRICS = DecodeJob("metrics")


class _Waits(IngestMetrics):
    def __init__(self) -> None:
        self.seconds: list[float] = []

    def waited(self, seconds: float) -> None:
        self.seconds.append(seconds)


class _Parts:
    def __init__(
        self,
        tmp: Path,
        max_requests: int = 64,
        max_backlog_bytes: int = 0,
        backlog_wait_s: float = 0.0,
    ) -> None:
        self.unflushed = UnflushedRows()
        self.waits = _Waits()
        self.queue = IngestQueue(
            max_requests,
            1 << 30,
            1.0,
            backlog=lambda: self.unflushed.bytes,
            max_backlog_bytes=max_backlog_bytes,
            backlog_wait_s=backlog_wait_s,
            on_wait=self.waits.waited,
        )
        self.fatal: list[BaseException] = []
        self.ingestor = Ingestor(self.queue, self.unflushed, on_fatal=self.fatal.append)
        self.wal = Wal.open(tmp / "wal", fsync="always", on_durable=self.ingestor.on_durable)
        self.ingestor.open(self.wal)
        self.executor = ThreadPoolExecutor(2)
        self.handler = IngestHandler(self.ingestor, ThreadDecoder(self.executor), self.waits)

    async def send(self, job: DecodeJob, body: bytes) -> IngestOutcome:
        """What a door does with a request of tenant ``acme``: admit it, then ingest it."""
        await self.handler.admit()
        return await self.handler.ingest("acme", job, body)

    def close(self) -> None:
        self.executor.shutdown()
        self.wal.shutdown()


def _body(points: int, seed: int) -> bytes:
    return payloads.metrics_request(points=points, series=10, seed=seed).SerializeToString()


def test_concurrent_requests_are_durable_visible_and_released(tmp_path: Path) -> None:
    parts = _Parts(tmp_path)
    seen_before_ack: list[int] = []

    async def one(seed: int) -> None:
        outcome = await parts.send(METRICS, _body(50, seed))
        assert (outcome.accepted, outcome.rejected) == (50, 0)
        # The rows were in the snapshot before the request was acknowledged.
        seen_before_ack.append(parts.unflushed.rows)

    async def main() -> None:
        await asyncio.gather(*(one(seed) for seed in range(16)))

    try:
        asyncio.run(main())
        assert parts.unflushed.rows == 16 * 50
        assert min(seen_before_ack) >= 50
        assert parts.queue.wait_empty(5) and parts.queue.bytes == 0
        replayed = [records.decode(r.payload) for r in parts.wal.replay(0)]
        assert len(replayed) == 16
        assert sum(t.num_rows for _tenant, _table, t in replayed) == 16 * 50
        assert {(tenant, table) for tenant, table, _t in replayed} == {("acme", "metrics")}
        assert parts.fatal == []
    finally:
        parts.close()


def test_refusals_reach_the_caller(tmp_path: Path) -> None:
    parts = _Parts(tmp_path, max_requests=1)
    try:
        with pytest.raises(DecodeError):
            asyncio.run(parts.send(METRICS, b"\xff\xff\xff"))
        parts.queue.acquire(1)  # the one request slot is taken
        with pytest.raises(OverloadedError):
            asyncio.run(parts.send(METRICS, _body(5, 1)))
        parts.queue.release(1)
        empty = asyncio.run(parts.send(METRICS, b""))
        assert (empty.accepted, empty.rejected) == (0, 0)
        parts.wal.shutdown()
        with pytest.raises(WalError):
            asyncio.run(parts.send(METRICS, _body(5, 2)))
        assert parts.unflushed.rows == 0
        assert parts.queue.depth == 0
    finally:
        parts.close()


def test_rows_shared_with_the_series_cache_count_the_bytes_they_hold(tmp_path: Path) -> None:
    """Remote-written rows of series seen before are slices of the decoder's cache; the
    queue and the snapshot count them by the length of their encoded rows, not by the
    cache's buffers, though the WAL logs the requests themselves."""
    from loadtest import remote_write
    from shoal.ingest.decoding import REMOTE_WRITE
    from shoal.promwrite.decode import V1

    def body(count: int, t_ms: int) -> bytes:
        return remote_write.compress(
            remote_write.encode(
                ({"__name__": "m", "shard": str(i)}, [(t_ms, 1.0)]) for i in range(count)
            )
        )

    job = DecodeJob("metrics", REMOTE_WRITE, V1, 1 << 26)
    parts = _Parts(tmp_path)
    try:
        for count, t_ms in ((4000, 1), (100, 2), (100, 3)):
            outcome = asyncio.run(parts.send(job, body(count, t_ms)))
            assert outcome.accepted == count
        payloads = [r.payload for r in parts.wal.replay(0)]
        encoded = [len(records.encode(*records.decode(p))) for p in payloads]
        assert parts.unflushed.bytes == sum(encoded)
        assert sum(len(p) for p in payloads) * 10 < sum(encoded)  # the requests are logged
        # what the buffer sizes would have said: the 4,000 series' cache rows, three times
        held = [b.batch.get_total_buffer_size() for b in parts.unflushed.batches("acme")["metrics"]]
        assert min(held[1:]) > 2 * max(encoded[1:])
        assert parts.queue.wait_empty(5) and parts.queue.bytes == 0
    finally:
        parts.close()


def test_a_request_is_held_back_while_the_flusher_is_behind_and_goes_on_when_it_catches_up(
    tmp_path: Path,
) -> None:
    """Over the backlog's cap, a request is neither refused nor decoded: it waits, and is
    taken in full once a flush round has brought the unflushed rows back under it."""
    parts = _Parts(tmp_path, max_backlog_bytes=1, backlog_wait_s=30.0)

    async def main() -> None:
        first = await parts.send(METRICS, _body(50, 1))
        assert first.accepted == 50 and parts.queue.backlogged()  # over its 1-byte cap
        held = asyncio.create_task(parts.send(METRICS, _body(40, 2)))
        await asyncio.sleep(0.3)
        assert not held.done() and parts.unflushed.rows == 50  # held, not yet decoded
        parts.unflushed.drop_through("acme", "metrics", parts.wal.last_lsn)  # flushed
        second = await asyncio.wait_for(held, 30)
        assert (second.accepted, second.rejected) == (40, 0)

    try:
        asyncio.run(main())
        assert parts.unflushed.rows == 40
        assert len(parts.waits.seconds) == 1 and parts.waits.seconds[0] >= 0.3
        assert parts.fatal == []
    finally:
        parts.close()


def test_a_request_held_back_for_all_of_backlog_wait_s_is_refused_retryably(
    tmp_path: Path,
) -> None:
    parts = _Parts(tmp_path, max_backlog_bytes=1, backlog_wait_s=0.2)
    try:
        asyncio.run(parts.send(METRICS, _body(50, 1)))
        with pytest.raises(OverloadedError) as info:
            asyncio.run(parts.send(METRICS, _body(40, 2)))
        assert info.value.reason == "snapshot"
        assert parts.unflushed.rows == 50 and parts.queue.depth == 0
        assert len(parts.waits.seconds) == 1 and parts.waits.seconds[0] >= 0.2
    finally:
        parts.close()


def test_a_decoded_request_is_held_back_on_the_ingest_thread_then_appended(
    tmp_path: Path,
) -> None:
    """The backlog can go over its cap between a request's admission and its append (the
    rows of requests decoded meanwhile): the queue holds it back there too."""
    parts = _Parts(tmp_path, max_backlog_bytes=1, backlog_wait_s=30.0)
    try:
        asyncio.run(parts.send(METRICS, _body(50, 1)))
        timer = threading.Timer(
            0.3, parts.unflushed.drop_through, args=("acme", "metrics", parts.wal.last_lsn)
        )
        timer.start()
        parts.queue.acquire(7)  # what the ingest thread does for a decoded request
        timer.join()
        assert (parts.queue.depth, parts.queue.bytes) == (1, 7)
        # held until the timer let it go (the timer starts just before the wait does)
        assert len(parts.waits.seconds) == 1 and parts.waits.seconds[0] >= 0.2
        parts.queue.release(7)
    finally:
        parts.close()
