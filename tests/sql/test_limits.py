"""Limits: memory, time, size, concurrency and rows; a query over a limit fails alone."""

from __future__ import annotations

import asyncio
import time

import psutil
import pytest

from shoal.errors import QueryError, QueryLimitError
from shoal.sql.limits import Limits, check_sql, count_operators
from shoal.sql.service import QueryService

from .helpers import Harness, metric_rows

# 20M groups, each holding a list: far beyond a 32 MiB pool. The key is scrambled
# on purpose: grouping on range()'s own (sorted) column streams group by group in
# constant memory, which is DataFusion doing its job, not a memory hog.
BIG_GROUP_BY = (
    "SELECT (value * 7919) % 20000003 AS k, count(*) AS c, array_agg(value) AS v "
    "FROM range(20000000) GROUP BY k ORDER BY c DESC"
)
# ~9.6M rows out of a 3,100-row self cross join, grouped on a near-unique key.
CROSS_JOIN = (
    "SELECT a.value * b.value AS p, count(*) AS c FROM metrics a CROSS JOIN metrics b "
    "GROUP BY p ORDER BY c DESC"
)
SMALL = "SELECT metric_name, count(*) AS n FROM metrics GROUP BY metric_name ORDER BY 1"


async def _outcome(service: QueryService, tenant: str, sql: str) -> object:
    try:
        table, _ = await service.run(tenant, sql)
    except QueryError as exc:
        return exc
    return table


def test_memory_hogs_fail_with_the_memory_message_while_small_queries_succeed(
    harness: Harness,
) -> None:
    harness.ingest("t", "metrics", metric_rows(3000, seed=1))
    harness.flush("t", "metrics")
    harness.ingest("t", "metrics", metric_rows(100, seed=2))
    service = harness.service(memory_bytes=32 << 20, max_concurrency=4)

    async def main() -> list[object]:
        jobs = [BIG_GROUP_BY, CROSS_JOIN, SMALL, SMALL, BIG_GROUP_BY, SMALL, CROSS_JOIN, SMALL]
        return await asyncio.gather(*(_outcome(service, "t", q) for q in jobs))

    results = asyncio.run(main())
    service.shutdown()
    for i in (0, 1, 4, 6):
        exc = results[i]
        assert isinstance(exc, QueryLimitError), exc
        assert exc.limit == "memory"
        assert "memory limit of 32 MiB (query_memory_bytes)" in str(exc)
        assert "narrow the time range" in str(exc) and "LIMIT" in str(exc)
    for i in (2, 3, 5, 7):
        table = results[i]
        assert not isinstance(table, Exception), table
        assert sum(table.column("n").to_pylist()) == 3100  # type: ignore[attr-defined]


def test_time_limit_stops_a_runaway_query_and_its_cpu(harness: Harness) -> None:
    service = harness.service(timeout_s=1.0)
    proc = psutil.Process()
    started = time.monotonic()
    with pytest.raises(QueryLimitError) as info:
        service.run_sync("t", "SELECT count(*) FROM range(100000000000) WHERE value % 7 = 3")
    elapsed = time.monotonic() - started
    assert info.value.limit == "time"
    assert "time limit of 1 s (query_timeout_s)" in str(info.value)
    assert elapsed < 5, elapsed
    proc.cpu_percent()
    samples = []
    for _ in range(4):
        time.sleep(0.5)
        samples.append(proc.cpu_percent())
    assert min(samples) < 50, f"the abandoned query kept running: {samples}"
    # and the service keeps serving
    assert service.run_sync("t", "SELECT 1 AS one").column("one")[0].as_py() == 1
    service.shutdown()


def test_concurrency_limit_fails_the_waiting_query_with_a_clear_message(
    harness: Harness,
) -> None:
    service = harness.service(max_concurrency=1, timeout_s=1.5)

    async def main() -> None:
        holder = await service.execute(await service.aprepare("t", "SELECT * FROM range(10)"))
        with pytest.raises(QueryLimitError) as info:
            await service.run("t", "SELECT 1")
        assert info.value.limit == "concurrency"
        assert "query_max_concurrency=1" in str(info.value)
        holder.close()
        table, _ = await service.run("t", "SELECT 2 AS two")
        assert table.column("two")[0].as_py() == 2

    asyncio.run(main())
    service.shutdown()


def test_row_cap_truncates_with_a_message(harness: Harness) -> None:
    service = harness.service(max_rows=1000)

    async def main() -> None:
        table, result = await service.run("t", "SELECT value FROM range(5000)")
        assert table.num_rows == 1000
        assert result.truncated
        assert "truncated at 1000 rows (query_max_rows)" in (result.truncation_message or "")
        table, result = await service.run("t", "SELECT value FROM range(1000)")
        assert table.num_rows == 1000 and not result.truncated

    asyncio.run(main())
    service.shutdown()


def test_size_and_operator_caps() -> None:
    limits = Limits(max_sql_bytes=100)
    with pytest.raises(QueryLimitError, match="query_max_sql_bytes") as info:
        check_sql("SELECT " + "1" * 200, limits)
    assert info.value.limit == "size"
    with pytest.raises(QueryLimitError, match="operators") as info:
        check_sql("SELECT " + "+".join(["1"] * 1200), Limits())
    assert info.value.limit == "complexity"
    with pytest.raises(QueryError, match="empty query"):
        check_sql("  \n", limits)
    # operators inside strings, quoted identifiers and comments do not count
    assert count_operators("SELECT 'a+b-c' AS \"x*y\" -- 1+2+3\n /* 4*5 */ FROM t") == 0
    assert count_operators("SELECT a + b FROM t WHERE x >= 1 AND y <> 2 OR z = 'it''s+'") == 6
