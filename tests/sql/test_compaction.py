"""A file removed by compaction after a query started does not break that query.

The query holds the file list of the version it started from. Compaction only
*removes* files from the Delta log; they are deleted from disk by vacuum, and
only once they were removed longer ago than ``vacuum_retention_hours``
(24 h by default), far past any query's ``query_timeout_s``.
"""

from __future__ import annotations

import asyncio
import os

import pyarrow as pa
import pyarrow.parquet as pq

from shoal.storage import layout
from shoal.storage.commit import Commit, NewFile

from .helpers import Harness, metric_rows


def _compact(harness: Harness, tenant: str, table: str) -> int:
    handle = harness.store.open(tenant, table)
    snap = handle.snapshot()
    merged = pa.concat_tables([pq.read_table(f.path) for f in snap.files])
    hour = layout.hour_index(snap.files[0].min_time_us)
    rel = layout.hour_file_path(hour)
    target = handle.path / rel
    layout.write_parquet(handle.conform(merged), target, handle.spec)
    removes = [os.path.relpath(f.path, handle.path) for f in snap.files]
    handle.commit(
        Commit(
            "compact", (NewFile(rel),), tuple(removes), data_change=False, read_version=snap.version
        )
    )
    return len(removes)


def test_compaction_during_a_query_does_not_break_it(harness: Harness) -> None:
    for seed in range(3):
        harness.ingest("t", "metrics", metric_rows(1000, seed=seed))
        harness.flush("t", "metrics")
    harness.ingest("t", "metrics", metric_rows(10, seed=9))
    service = harness.service()

    async def main() -> None:
        prepared = await service.aprepare("t", "SELECT count(*) AS n, sum(value) FROM metrics")
        old_files = [f.path for f in prepared.view.tables["metrics"].files]
        assert len(old_files) == 3
        result = await service.execute(prepared)  # planned on the three old files
        assert _compact(harness, "t", "metrics") == 3
        harness.store.open("t", "metrics").vacuum(24.0)  # the default window: nothing deleted
        assert all(os.path.exists(p) for p in old_files)
        table = await result.to_table()
        assert table.column("n")[0].as_py() == 3010
        # and a new query reads the single compacted file
        table, _ = await service.run("t", "SELECT count(*) AS n FROM metrics")
        assert table.column("n")[0].as_py() == 3010
        view = (await service.aprepare("t", "SELECT 1 FROM metrics")).view
        assert len(view.tables["metrics"].files) == 1

    asyncio.run(main())
    service.shutdown()


def test_session_cache_reuses_a_versions_view(harness: Harness) -> None:
    harness.ingest("t", "metrics", metric_rows(100, seed=1))
    harness.flush("t", "metrics")
    service = harness.service()
    for _ in range(3):
        assert service.run_sync("t", "SELECT count(*) FROM metrics").column(0)[0].as_py() == 100
    assert service.cache.misses == 1 and service.cache.hits == 2
    harness.ingest("t", "metrics", metric_rows(100, seed=2))
    harness.flush("t", "metrics")
    assert service.run_sync("t", "SELECT count(*) FROM metrics").column(0)[0].as_py() == 200
    assert service.cache.misses == 2
    service.shutdown()
