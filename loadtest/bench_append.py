"""Daily-append benchmark: one day of trip-like Parquet per append, five engines side by side.

    python -m loadtest.bench_append [--days 30] [--rows-per-day 700000] [--engines ...]

The synthetic dataset (24 columns, sorted by pickup time) is generated once
into ``.bench/trips/`` and reused. Each engine appends the same files day by
day into its own fresh store under ``.bench/run/``; every append is timed
from "here is a Parquet file" to "durably committed" as far as the engine
offers it. Then it compares a coverage question answered from shoal's
bitmaps against the same answer computed by scanning the Parquet files, and
the time to open a table with many commits with and without checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from loadtest.stats import percentile
from shoal.storage.importer import import_files, spec_for_file
from shoal.storage.store import TableStore

ROOT = Path(".bench")
DAY0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
ZONES = [f"zone-{i:03d}" for i in range(265)]


# -- the dataset ---------------------------------------------------------------


def make_day(day: int, rows: int) -> pa.Table:
    rng = np.random.default_rng(1000 + day)
    start_us = int((DAY0 + dt.timedelta(days=day)).timestamp()) * 1_000_000
    pickup = np.sort(rng.integers(start_us, start_us + 86_400_000_000, rows))
    duration = rng.integers(60_000_000, 3_600_000_000, rows)
    fare = np.round(rng.gamma(2.0, 7.0, rows), 2)
    tip = np.round(fare * rng.uniform(0, 0.3, rows), 2)
    ts = pa.timestamp("us", tz="UTC")
    cols: dict[str, Any] = {
        "trip_id": pa.array(np.arange(rows, dtype=np.int64) + day * 10_000_000),
        "vendor_id": pa.array(rng.integers(1, 3, rows).astype(np.int32)),
        "pickup_at": pa.array(pickup).cast(ts),
        "dropoff_at": pa.array(pickup + duration).cast(ts),
        "passenger_count": pa.array(rng.integers(1, 7, rows).astype(np.int32)),
        "trip_distance": pa.array(np.round(rng.gamma(1.5, 2.0, rows), 2)),
        "pickup_longitude": pa.array(rng.uniform(-74.05, -73.75, rows)),
        "pickup_latitude": pa.array(rng.uniform(40.60, 40.90, rows)),
        "rate_code": pa.array(rng.integers(1, 7, rows).astype(np.int32)),
        "store_and_fwd": pa.array(np.where(rng.random(rows) < 0.01, "Y", "N")),
        "dropoff_longitude": pa.array(rng.uniform(-74.05, -73.75, rows)),
        "dropoff_latitude": pa.array(rng.uniform(40.60, 40.90, rows)),
        "payment_type": pa.array(rng.choice(["card", "cash", "no_charge", "dispute"], rows)),
        "fare_amount": pa.array(fare),
        "extra": pa.array(rng.choice([0.0, 0.5, 1.0], rows)),
        "mta_tax": pa.array(np.full(rows, 0.5)),
        "tip_amount": pa.array(tip),
        "tolls_amount": pa.array(np.where(rng.random(rows) < 0.05, 6.55, 0.0)),
        "improvement_surcharge": pa.array(np.full(rows, 0.3)),
        "total_amount": pa.array(np.round(fare + tip + 0.8, 2)),
        "congestion_surcharge": pa.array(rng.choice([0.0, 2.5], rows)),
        "airport_fee": pa.array(rng.choice([0.0, 1.25], rows)),
        "pickup_zone": pa.array(rng.choice(ZONES, rows)),
        "dropoff_zone": pa.array(rng.choice(ZONES, rows)),
    }
    return pa.table(cols)


def dataset(days: int, rows: int) -> list[Path]:
    out = ROOT / f"trips-{rows}"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for day in range(days):
        path = out / f"day-{day:03d}.parquet"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            pq.write_table(make_day(day, rows), tmp)
            tmp.rename(path)
        paths.append(path)
    return paths


# -- engines -------------------------------------------------------------------

Appender = Callable[[Path], None]


@contextlib.contextmanager
def shoal_engine(where: Path, rewrite: bool) -> Iterator[Appender]:
    store = TableStore(where)

    def append(path: Path) -> None:
        if not store.exists("bench", "trips"):
            store.open("bench", "trips", spec_for_file("trips", path, "pickup_at"))
        import_files(store.open("bench", "trips"), [path], rewrite=rewrite)

    yield append


@contextlib.contextmanager
def deltars_engine(where: Path) -> Iterator[Appender]:
    from deltalake import write_deltalake

    def append(path: Path) -> None:
        write_deltalake(str(where), pq.read_table(path), mode="append")

    yield append


@contextlib.contextmanager
def duckdb_engine(where: Path) -> Iterator[Appender]:
    import duckdb

    where.mkdir(parents=True)
    con = duckdb.connect(str(where / "bench.duckdb"))
    created = False

    def append(path: Path) -> None:
        nonlocal created
        if not created:
            con.execute(f"CREATE TABLE trips AS SELECT * FROM read_parquet('{path}') LIMIT 0")
            created = True
        con.execute(f"INSERT INTO trips SELECT * FROM read_parquet('{path}')")

    try:
        yield append
    finally:
        con.close()


@contextlib.contextmanager
def chdb_engine(where: Path) -> Iterator[Appender]:
    from chdb import session as chs

    session_cls: Any = chs.Session  # chdb ships no type hints
    sess = session_cls(str(where))
    created = False

    def append(path: Path) -> None:
        nonlocal created
        if not created:
            sess.query(
                "CREATE TABLE trips ENGINE = MergeTree ORDER BY pickup_at "
                "SETTINGS allow_nullable_key = 1 "
                f"EMPTY AS SELECT * FROM file('{path}', Parquet)"
            )
            created = True
        sess.query(f"INSERT INTO trips SELECT * FROM file('{path}', Parquet)")

    try:
        yield append
    finally:
        sess.close()


_PG_TYPES = {
    "int64": "bigint",
    "int32": "integer",
    "double": "double precision",
    "string": "text",
    "timestamp[us, tz=UTC]": "timestamptz",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def postgres_engine(where: Path) -> Iterator[Appender]:
    """A private PostgreSQL cluster on loopback (initdb + pg_ctl), COPY FROM STDIN as CSV."""
    import psycopg

    as_user: list[str] = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    pgdir = Path(tempfile.mkdtemp(prefix="shoal-bench-pg-"))
    data = pgdir / "data"
    if as_user:
        shutil.chown(pgdir, "postgres", "postgres")
    port = _free_port()
    subprocess.run(
        [*as_user, "initdb", "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {pgdir} -c fsync=on"
    subprocess.run(
        [*as_user, "pg_ctl", "-D", str(data), "-o", opts, "-w", "-l", str(pgdir / "log"), "start"],
        check=True,
        capture_output=True,
    )
    conn = psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres")
    conn.autocommit = True
    created = False

    def append(path: Path) -> None:
        nonlocal created
        table = pq.read_table(path)
        if not created:
            cols = ", ".join(f"{f.name} {_PG_TYPES[str(f.type)]}" for f in table.schema)
            conn.execute(f"CREATE TABLE trips ({cols})")
            created = True
        buf = io.BytesIO()
        pacsv.write_csv(table, buf, pacsv.WriteOptions(include_header=False))
        with conn.cursor() as cur, cur.copy("COPY trips FROM STDIN WITH (FORMAT csv)") as copy:
            copy.write(buf.getbuffer())

    try:
        yield append
    finally:
        conn.close()
        subprocess.run(
            [*as_user, "pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(pgdir, ignore_errors=True)


ENGINES: dict[str, Callable[[Path], contextlib.AbstractContextManager[Appender]]] = {
    "shoal": lambda p: shoal_engine(p, rewrite=False),
    "shoal-rewrite": lambda p: shoal_engine(p, rewrite=True),
    "delta-rs": deltars_engine,
    "duckdb": duckdb_engine,
    "chdb": chdb_engine,
    "postgres": postgres_engine,
}
NOTES = {
    "shoal": "import: schema check, time column read, coverage, file copied + fsynced, commit",
    "shoal-rewrite": "import --rewrite: decode, split by hour, sort, zstd re-encode, fsync",
    "delta-rs": "write_deltalake(mode=append) of pq.read_table(file); no fsync",
    "duckdb": "INSERT INTO t SELECT * FROM read_parquet(file)",
    "chdb": "INSERT INTO MergeTree SELECT * FROM file(file, Parquet)",
    "postgres": "CSV conversion + COPY FROM STDIN, fsync=on",
}


def run_engine(name: str, files: list[Path]) -> list[float]:
    where = ROOT / "run" / name
    shutil.rmtree(where, ignore_errors=True)
    where.parent.mkdir(parents=True, exist_ok=True)
    times = []
    with ENGINES[name](where) as append:
        for path in files:
            started = time.perf_counter()
            append(path)
            times.append(time.perf_counter() - started)
    return times


def p95(values: list[float]) -> float:
    return percentile(values, 0.95)


# -- coverage against a Parquet scan ------------------------------------------------


def coverage_vs_scan(repeat: int = 3) -> tuple[float, float, float, int]:
    """Seconds for: coverage cold (new Table), coverage warm, Parquet scan; and buckets."""
    where = ROOT / "run" / "shoal"
    table = TableStore(where).open("bench", "trips", create=False)
    snap = table.snapshot()
    lo = min(f.min_time_us for f in snap.files)
    hi = max(f.max_time_us for f in snap.files) + 1
    start = dt.datetime.fromtimestamp(lo / 1e6, dt.UTC)
    end = dt.datetime.fromtimestamp(hi / 1e6, dt.UTC)
    cold, warm, scan = [], [], []
    answer = 0
    for _ in range(repeat):
        fresh = TableStore(where).open("bench", "trips", create=False)
        t0 = time.perf_counter()
        result = fresh.coverage(start, end)
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fresh.coverage(start, end)
        warm.append(time.perf_counter() - t0)
        answer = result.covered_buckets
        t0 = time.perf_counter()
        seen: set[int] = set()
        for f in snap.files:
            col = pq.read_table(f.path, columns=["pickup_at"]).column(0)
            us = col.cast(pa.int64()).to_numpy()
            seen.update(np.unique(us // 60_000_000).tolist())
        scan.append(time.perf_counter() - t0)
        if len(seen) != answer:
            raise AssertionError(f"coverage says {answer} buckets, the scan {len(seen)}")
    return min(cold), min(warm), min(scan), answer


# -- opening a table with many commits ----------------------------------------------


def open_times(commits: int, interval: int) -> tuple[float, float]:
    """Seconds to open a table of ``commits`` commits with and without checkpoints."""
    with_cp = ROOT / "run" / "open-checkpointed"
    without = ROOT / "run" / "open-plain"
    for p in (with_cp, without):
        shutil.rmtree(p, ignore_errors=True)
    store = TableStore(with_cp, checkpoint_interval=interval)
    spec = spec_for_file("trips", dataset(1, 1000)[0], "pickup_at")
    table = store.open("bench", "trips", spec)
    one = pq.read_table(dataset(1, 1000)[0]).slice(0, 1)
    schema = table.spec.schema
    one = one.cast(schema)
    for lsn in range(1, commits + 1):
        table.flush(one, lsn)
    shutil.copytree(with_cp, without)
    log = without / "tenants" / "bench" / "trips" / "_delta_log"
    for p in log.iterdir():
        if "checkpoint" in p.name:
            p.unlink()

    def timed(root: Path) -> float:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            TableStore(root).open("bench", "trips", create=False).snapshot()
            best = min(best, time.perf_counter() - t0)
        return best

    return timed(with_cp), timed(without)


# -- main ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rows-per-day", type=int, default=700_000)
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    parser.add_argument("--open-commits", type=int, default=1000)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    files = dataset(args.days, args.rows_per_day)
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    print(
        f"dataset: {args.days} days x {args.rows_per_day} rows, 24 columns, "
        f"{size_mb:.0f} MB Parquet (ready in {time.perf_counter() - t0:.1f}s)"
    )
    results: dict[str, list[float]] = {}
    for name in args.engines.split(","):
        results[name] = run_engine(name, files)
        print(f"  {name}: done ({sum(results[name]):.1f}s)", flush=True)
    best = min(statistics.mean(v) for v in results.values())
    print()
    print(f"{'engine':14} {'mean s':>8} {'p95 s':>8} {'x fastest':>10}  what one append does")
    for name, values in sorted(results.items(), key=lambda kv: statistics.mean(kv[1])):
        mean = statistics.mean(values)
        print(f"{name:14} {mean:8.3f} {p95(values):8.3f} {mean / best:10.1f}  {NOTES[name]}")
    if "shoal" in results:
        cold, warm, scan, buckets = coverage_vs_scan()
        print()
        print(f"coverage of {buckets} one-minute buckets over {args.days} days:")
        print(f"  shoal coverage(), cold (reads _coverage/): {cold * 1000:8.1f} ms")
        print(f"  shoal coverage(), cached bitmaps:          {warm * 1000:8.1f} ms")
        print(f"  Parquet scan of the time column:           {scan * 1000:8.1f} ms")
        print(f"  scan / cold coverage: {scan / cold:.0f}x   scan / cached: {scan / warm:.0f}x")
    if args.open_commits:
        with_cp, without = open_times(args.open_commits, 100)
        print()
        print(f"open + snapshot of a table with {args.open_commits} commits:")
        print(f"  checkpoint every 100 commits: {with_cp * 1000:8.1f} ms")
        print(f"  no checkpoint:                {without * 1000:8.1f} ms")
        print(f"  ratio: {without / with_cp:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
