"""The ingest path's subscription hook (shoal.ingest.feed): followers get each durable
group's rows, bounded per follower, with what did not fit counted and sampled."""

from __future__ import annotations

import asyncio

import pyarrow as pa

from shoal.ingest.feed import DROPPED_SAMPLE_ROWS, RowFeed


def rows(n: int) -> pa.Table:
    return pa.table({"x": list(range(n))})


def test_followers_get_their_tables_rows_and_drops_are_counted() -> None:
    async def run() -> None:
        feed = RowFeed()
        loop = asyncio.get_running_loop()
        logs = feed.subscribe("acme", "logs", 10, loop)
        other = feed.subscribe("other", "logs", 10, loop)
        assert feed.subscribers == 2
        feed.publish([("acme", "logs", rows(4)), ("acme", "spans", rows(3))])
        assert await logs.wait(1.0)
        batches, dropped, count = logs.take()
        assert [b.num_rows for b in batches] == [4] and (dropped, count) == ([], 0)
        assert not await other.wait(0.05)  # another tenant's rows never reach it
        feed.publish([("acme", "logs", rows(8)), ("acme", "logs", rows(5))])
        await logs.wait(1.0)
        batches, dropped, count = logs.take()
        assert [b.num_rows for b in batches] == [8] and count == 5
        assert sum(d.num_rows for d in dropped) == 5
        feed.publish([("acme", "logs", rows(DROPPED_SAMPLE_ROWS + 50))])
        await logs.wait(1.0)
        _, dropped, count = logs.take()
        assert count == DROPPED_SAMPLE_ROWS + 50
        assert sum(d.num_rows for d in dropped) == DROPPED_SAMPLE_ROWS
        logs.close()
        other.close()
        assert feed.subscribers == 0
        feed.publish([("acme", "logs", rows(1))])  # nobody follows: nothing happens

    asyncio.run(run())
