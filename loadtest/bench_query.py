"""Query benchmark: shoal's SQL path against DuckDB and chDB on the same Parquet files.

``python -m loadtest.bench_query`` (``make bench-query``) writes, once, a
``metrics`` table of ``--points`` gauge points (400 series: 40 metrics x 10
hosts, 24 hourly files, written by shoal's own storage layer) into
``--cache-dir``, then holds ``--snapshot-rows`` more points in an in-memory
snapshot and times six queries:

* ``1h by metric``: one hour, grouped by metric;
* ``24h by metric,host``: every hour, grouped by metric and host;
* ``1m buckets 1 series``: one series over 24 hours in 1-minute buckets;
* ``7d select *``: every column of one metric over a 7-day range;
* ``1h + map lookup``: one hour of one host (``attributes['host']``), by metric;
* ``1h + string function``: one hour of one metric matched through ``upper()``.

shoal answers through :class:`shoal.sql.QueryService` (session building, the
union with the snapshot, limits); DuckDB and chDB read the committed Parquet
files directly (no snapshot, no tenancy), each with as many threads as
shoal's DataFusion sessions have partitions (the core count). Each figure is
the median of ``--repeat`` runs after one warm-up run of every engine (warm
OS and metadata caches on all sides); the engines take turns run by run, so
a change in the load of a shared machine hits all three alike. ``cpu`` is the
process CPU time per query (all three run in this process), a steadier
measure of the work done than wall time on a busy machine. A fourth column
times plain DataFusion (default settings, the same partitions) on the same
files as DuckDB and chDB, to show how much of shoal's ratio is the engine's, and a
last column shoal with every query run as written (no per-series plan,
:mod:`shoal.sql.series_plan`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import logging
import os
import resource
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from shoal.schema import METRICS_SCHEMA
from shoal.sql.limits import Limits
from shoal.sql.service import QueryService
from shoal.storage.reader import TenantReader
from shoal.storage.store import TableStore
from shoal.storage.unflushed import MemoryUnflushed

HOUR_US = 3_600_000_000
START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
METRICS = 40
HOSTS = 10
SERIES = METRICS * HOSTS
TENANT = "bench"


def _empty_maps(n: int) -> pa.Array:
    return pa.MapArray.from_arrays(
        pa.array(np.zeros(n + 1, dtype=np.int32)),
        pa.array([], pa.string()),
        pa.array([], pa.string()),
    )


def points(n: int, start_us: int, span_us: int, seed: int) -> pa.Table:
    """``n`` gauge points of the 400 series, uniformly over ``[start_us, start_us + span_us)``."""
    rng = np.random.default_rng(seed)
    sid = rng.integers(0, SERIES, n).astype(np.int64)
    ts = start_us + rng.integers(0, span_us, n).astype(np.int64)
    names = pa.array([f"metric_{i % METRICS}" for i in range(SERIES)], pa.string())
    hosts = pa.array([f"host-{i // METRICS}" for i in range(SERIES)], pa.string())
    idx = pa.array(sid)
    host_values = hosts.take(idx)
    attrs = pa.MapArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32)),
        pa.array(np.full(n, "host", dtype=object), pa.string()),
        host_values,
    )
    values: dict[str, pa.Array] = {
        "timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "time_unix_nano": pa.array(ts * 1000),
        "start_time_unix_nano": pa.array(np.zeros(n, dtype=np.int64)),
        "metric_name": names.take(idx),
        "metric_unit": pa.array(np.full(n, "ms", dtype=object), pa.string()),
        "metric_type": pa.array(np.full(n, "gauge", dtype=object), pa.string()),
        "series_id": idx,
        "attributes": attrs,
        "value": pa.array(rng.gamma(2.0, 20.0, n)),
        "flags": pa.array(np.zeros(n, dtype=np.int64)),
        "service_name": pa.array(np.full(n, "checkout", dtype=object), pa.string()),
    }
    arrays = []
    for field in METRICS_SCHEMA:
        if field.name in values:
            arrays.append(values[field.name])
        elif pa.types.is_map(field.type):
            arrays.append(_empty_maps(n))
        elif not field.nullable:
            arrays.append(pa.array(np.zeros(n, dtype=np.int64)).cast(field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(arrays, schema=METRICS_SCHEMA)


def ensure_data(cache_dir: Path, total: int) -> Path:
    """The cached data dir for ``total`` points (generated on first use)."""
    data_dir = cache_dir / f"metrics-{total}"
    done = data_dir / ".complete"
    if done.exists():
        return data_dir
    print(f"generating {total:,} points into {data_dir} (once) ...", flush=True)
    store = TableStore(data_dir)
    table = store.open(TENANT, "metrics", create=True)
    per_hour = total // 24
    for hour in range(24):
        t0 = time.perf_counter()
        rows = points(per_hour, START_US + hour * HOUR_US, HOUR_US, seed=hour)
        table.flush(rows, wal_lsn=hour + 1)
        print(f"  hour {hour:2d}: {per_hour:,} rows in {time.perf_counter() - t0:.1f}s", flush=True)
    done.write_text("ok\n")
    return data_dir


def _iso(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@dataclasses.dataclass(frozen=True)
class Query:
    name: str
    datafusion: str
    duckdb: str
    chdb: str


def queries() -> list[Query]:
    h0, h1 = _iso(START_US + 12 * HOUR_US), _iso(START_US + 13 * HOUR_US)
    d0, d1 = _iso(START_US), _iso(START_US + 24 * HOUR_US)
    w0, w1 = _iso(START_US + 24 * HOUR_US - 7 * 24 * HOUR_US), _iso(START_US + 24 * HOUR_US)
    series = 123
    metric = "metric_7"

    def ts(engine: str, text: str) -> str:
        if engine == "chdb":
            return f"toDateTime64('{text}', 6, 'UTC')"
        if engine == "duckdb":
            return f"TIMESTAMPTZ '{text}+00'"
        return f"TIMESTAMP '{text}Z'"

    def q1(e: str) -> str:
        return (
            "SELECT metric_name, avg(value) AS avg, min(value) AS min, max(value) AS max, "
            f"count(*) AS n FROM {{t}} WHERE timestamp >= {ts(e, h0)} AND timestamp < "
            f"{ts(e, h1)} GROUP BY metric_name ORDER BY metric_name"
        )

    def q2(e: str) -> str:
        host = "attributes['host']"
        return (
            f"SELECT metric_name, {host} AS host, avg(value) AS avg, count(*) AS n FROM {{t}} "
            f"WHERE timestamp >= {ts(e, d0)} AND timestamp < {ts(e, d1)} "
            "GROUP BY metric_name, host ORDER BY metric_name, host"
        )

    def q3(e: str) -> str:
        bucket = {
            "datafusion": "date_bin(INTERVAL '1 minute', timestamp)",
            "duckdb": "time_bucket(INTERVAL '1 minute', timestamp)",
            "chdb": "toStartOfMinute(timestamp)",
        }[e]
        return (
            f"SELECT {bucket} AS minute, avg(value) AS avg, max(value) AS max FROM {{t}} "
            f"WHERE series_id = {series} AND timestamp >= {ts(e, d0)} AND timestamp < "
            f"{ts(e, d1)} GROUP BY minute ORDER BY minute"
        )

    def q4(e: str) -> str:
        return (
            f"SELECT * FROM {{t}} WHERE metric_name = '{metric}' AND timestamp >= {ts(e, w0)} "
            f"AND timestamp < {ts(e, w1)}"
        )

    def q5(e: str) -> str:  # a time range and a map lookup in one WHERE
        return (
            "SELECT metric_name, avg(value) AS avg, count(*) AS n FROM {t} "
            f"WHERE timestamp >= {ts(e, h0)} AND timestamp < {ts(e, h1)} "
            "AND attributes['host'] = 'host-3' GROUP BY metric_name ORDER BY metric_name"
        )

    def q6(e: str) -> str:  # a time range and a string function in one WHERE
        upper = "upper" if e != "chdb" else "upperUTF8"
        return (
            "SELECT count(*) AS n, max(value) AS max FROM {t} "
            f"WHERE timestamp >= {ts(e, h0)} AND timestamp < {ts(e, h1)} "
            f"AND {upper}(metric_name) = 'METRIC_7'"
        )

    return [
        Query(name, f("datafusion"), f("duckdb"), f("chdb"))
        for name, f in (
            ("1h by metric", q1),
            ("24h by metric,host", q2),
            ("1m buckets 1 series", q3),
            ("7d select *", q4),
            ("1h + map lookup", q5),
            ("1h + string function", q6),
        )
    ]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _interleaved(fns: list[Callable[[], int]], repeat: int) -> list[tuple[float, float, int]]:
    """(median wall ms, median CPU ms, rows) of each of ``fns``, run in turns after a warm-up."""
    rows = [fn() for fn in fns]
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0, c0 = time.perf_counter(), _cpu_s()
            rows[i] = fn()
            wall[i].append(time.perf_counter() - t0)
            cpu[i].append(_cpu_s() - c0)
    return [
        (statistics.median(w) * 1000, statistics.median(c) * 1000, r)
        for w, c, r in zip(wall, cpu, rows, strict=True)
    ]


def _linked(cache_dir: Path, files: list[str]) -> Path:
    """A directory of links to exactly ``files`` (the table's committed data files, not its
    series index or coverage files beside them), for DataFusion's listing table."""
    linked = cache_dir / "plain-datafusion"
    shutil.rmtree(linked, ignore_errors=True)
    linked.mkdir(parents=True)
    for i, path in enumerate(files):
        (linked / f"{i:05d}.parquet").symlink_to(path)
    return linked


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING)
    cache_dir = Path(args.cache_dir)
    data_dir = ensure_data(cache_dir, args.points)
    files = sorted(
        str(p.absolute()) for p in (data_dir / "tenants" / TENANT / "metrics").rglob("*.parquet")
    )
    store = TableStore(data_dir)
    committed = store.open(TENANT, "metrics", create=False).snapshot()
    live = {f.path for f in committed.files}
    files = [f for f in files if f in live]

    snapshot = MemoryUnflushed()
    per_batch = 1000
    recent = points(args.snapshot_rows, START_US + 23 * HOUR_US, HOUR_US, seed=99)
    for i, batch in enumerate(recent.to_batches(max_chunksize=per_batch)):
        # a copy, as each decoded request's batch has buffers of its own (a slice
        # would keep the whole table's buffers, which the server never holds)
        snapshot.add(TENANT, "metrics", 1000 + i, pa.concat_batches([batch]))
    limits = Limits(max_rows=50_000_000, timeout_s=600, memory_bytes=1 << 30)
    service = QueryService(TenantReader(store, snapshot), limits)
    written = QueryService(TenantReader(store, snapshot), limits, series_first=False)

    import chdb
    import duckdb

    threads = os.cpu_count() or 1  # DataFusion's target_partitions default
    duck = duckdb.connect()
    duck.execute("SET TimeZone = 'UTC'")
    duck.execute(f"SET threads = {threads}")
    duck_src = "read_parquet([" + ",".join(f"'{f}'" for f in files) + "])"
    glob = str(data_dir / "tenants" / TENANT / "metrics" / "hour=*" / "*.parquet")
    # chDB reads by glob, which is right here: the bench table has no removed files.
    chdb_src = f"file('{glob}', Parquet)"

    # The engine alone: DataFusion on the same files as DuckDB and chDB, without the
    # snapshot, tenancy or shoal's planning, so each run shows how much of shoal's ratio
    # is the engine's own.
    from datafusion import SessionConfig, SessionContext

    plain = SessionContext(SessionConfig().with_target_partitions(threads))
    plain.register_listing_table(
        "metrics", str(_linked(cache_dir, files)), file_extension=".parquet", schema=METRICS_SCHEMA
    )

    loop = asyncio.new_event_loop()

    def shoal_q(sql: str, via: QueryService = service) -> Callable[[], int]:
        def go() -> int:
            table, _ = loop.run_until_complete(via.run(TENANT, sql))
            return int(table.num_rows)

        return go

    def duck_q(sql: str) -> Callable[[], int]:
        return lambda: int(duck.sql(sql).to_arrow_table().num_rows)

    def plain_q(sql: str) -> Callable[[], int]:
        return lambda: int(plain.sql(sql).to_arrow_table().num_rows)

    def chdb_q(sql: str) -> Callable[[], int]:
        settings = f" SETTINGS max_threads = {threads}"
        return lambda: int(chdb.query(sql + settings, "ArrowTable").num_rows)

    header = (
        f"{'query':<22} {'shoal ms':>9} {'duckdb ms':>10} {'chdb ms':>9} "
        f"{'vs best':>8} {'cpu ms shoal/duck/ch':>22} {'rows shoal/duck/ch':>26} "
        f"{'datafusion ms':>14} {'vs best':>8} {'as written ms':>14}"
    )
    print(
        f"\n{args.points:,} points in {len(files)} Parquet files + {args.snapshot_rows:,} "
        f"snapshot rows; median of {args.repeat} runs; {threads} threads each"
    )
    print(header)
    print("-" * len(header))
    worst = 0.0
    engine_worst = 0.0
    hour_ms = float("nan")
    for q in queries():
        (s_ms, s_cpu, s_rows), (d_ms, d_cpu, d_rows), (c_ms, c_cpu, c_rows), *rest = _interleaved(
            [
                shoal_q(q.datafusion.format(t="metrics")),
                duck_q(q.duckdb.format(t=duck_src)),
                chdb_q(q.chdb.format(t=chdb_src)),
                plain_q(q.datafusion.format(t="metrics")),
                shoal_q(q.datafusion.format(t="metrics"), written),
            ],
            args.repeat,
        )
        (p_ms, _, _), (w_ms, _, _) = rest
        if q.name == "1h by metric":
            hour_ms = s_ms
        ratio = s_ms / min(d_ms, c_ms)
        engine = p_ms / min(d_ms, c_ms)
        worst = max(worst, ratio)
        engine_worst = max(engine_worst, engine)
        print(
            f"{q.name:<22} {s_ms:9.1f} {d_ms:10.1f} {c_ms:9.1f} {ratio:7.2f}x "
            f"{f'{s_cpu:.0f}/{d_cpu:.0f}/{c_cpu:.0f}':>22} {f'{s_rows}/{d_rows}/{c_rows}':>26} "
            f"{p_ms:14.1f} {engine:7.2f}x {w_ms:14.1f}"
        )
    print(f"worst ratio to the faster of DuckDB and chDB: {worst:.2f}x (target <= 1.0x)")
    print(f"1-hour aggregation: {hour_ms:.1f} ms (target < 50 ms)")
    print(
        f"plain DataFusion (same files, no snapshot or tenancy), worst ratio: {engine_worst:.2f}x"
    )
    loop.close()
    service.shutdown()
    written.shutdown()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.bench_query",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--points", type=int, default=20_000_000)
    parser.add_argument("--snapshot-rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cache-dir", default=".bench/query")
    parser.add_argument(
        "--quick", action="store_true", help="2M points and 100k snapshot rows (a fast smoke run)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.points, args.snapshot_rows = 2_000_000, 100_000
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
