"""Startup replay of the WAL into the snapshot: ``python -m loadtest.bench_replay``.

Builds a WAL of realistic server records, logged as the server logs them
(:mod:`shoal.ingest.records`): OTLP requests from :mod:`loadtest.payloads` and
remote-write requests as the peers benchmark sends them, each logged as the
request itself, or with ``--as-rows`` as its decoded rows (Arrow IPC). The WAL
holds ``--mib`` of rows as the flush threshold counts them
(:func:`shoal.ingest.records.rows_bytes`): what a server holds unflushed at
most while its flushes keep up. Then it times the server's own startup path,
:meth:`ServerRuntime.open_storage` (open the tables and read their committed
LSNs, open and recover the WAL, replay it into the snapshot), until the server
could become ready. The phases are timed separately too, with the same
functions, to show where the time goes.

The WAL files were just written, so they are in the page cache: this measures
the CPU side of replay, not the disk.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from loadtest import bench_peers as peers
from loadtest import payloads
from shoal import config as shoal_config
from shoal.config import MiB
from shoal.ingest import records
from shoal.ingest.decoding import OTLP, REMOTE_WRITE, DecodeJob, decode
from shoal.promwrite.decode import V1
from shoal.server.runtime import ServerRuntime
from shoal.wal import Wal

BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def sample_payloads(points: int, series: int, as_rows: bool) -> list[tuple[bytes, int]]:
    """WAL payloads of a realistic mix, each with the bytes its rows count for: mostly
    metrics (OTLP and remote write), some logs and spans, two tenants."""
    requests: list[tuple[DecodeJob, bytes]] = []
    for seed in range(4):
        msg = payloads.metrics_request(
            points=points, series=series, start_ns=BASE_NS + seed, seed=seed
        )
        requests.append((DecodeJob("metrics", OTLP), msg.SerializeToString()))
    requests += [
        (DecodeJob("metrics", REMOTE_WRITE, V1, 1 << 30), body)
        for body in peers.rw_bodies([0, 1], range(1), BASE_NS // 1_000_000)
    ]
    for seed in range(2):
        logs = payloads.logs_request(records=points, series=series, start_ns=BASE_NS, seed=seed)
        requests.append((DecodeJob("logs", OTLP), logs.SerializeToString()))
        spans = payloads.traces_request(spans=points, series=series, start_ns=BASE_NS, seed=seed)
        requests.append((DecodeJob("spans", OTLP), spans.SerializeToString()))
    out: list[tuple[bytes, int]] = []
    for i, (job, body) in enumerate(requests):
        table = decode(job, body).table
        tenant = "default" if i % 3 else "acme"
        if as_rows:
            payload = records.encode(tenant, job.signal, table)
        else:
            payload = records.encode_request(tenant, job.signal, job, body)
        out.append((payload, records.rows_bytes(tenant, job.signal, table)))
    return out


def build_wal(wal_dir: Path, target_bytes: int, samples: list[tuple[bytes, int]]) -> int:
    """Append the samples round-robin until their rows count ``target_bytes``; returns
    the records written."""
    wal = Wal.open(wal_dir, fsync="never", segment_bytes=64 * MiB)
    counted = count = 0
    try:
        while counted < target_bytes:
            payload, rows_bytes = samples[count % len(samples)]
            wal.append(payload, rtype=records.RTYPE_ROWS)
            counted += rows_bytes
            count += 1
        wal.flush()
    finally:
        wal.shutdown()
    return count


def wal_bytes(wal_dir: Path) -> int:
    return sum(p.stat().st_size for p in wal_dir.glob("*.wal"))


def time_startup(data_dir: Path) -> tuple[float, int, int]:
    """The server's startup replay; (seconds, snapshot rows, snapshot bytes)."""
    cfg = shoal_config.default().replace(data_dir=str(data_dir), wal_fsync="always")
    runtime = ServerRuntime(cfg)
    started = time.perf_counter()
    runtime.open_storage()
    seconds = time.perf_counter() - started
    rows, nbytes = runtime.unflushed.rows, runtime.unflushed.bytes
    runtime.wal.shutdown()
    runtime.executor.shutdown()
    return seconds, rows, nbytes


def time_phases(data_dir: Path) -> dict[str, float]:
    """Open (recovery scan), read frames, decode payloads: each with the real functions."""
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    wal = Wal.open(data_dir / "wal", fsync="always")
    phases["WAL open (recovery scan)"] = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        payloads_read = [r.payload for r in wal.replay(0)]
        phases["WAL replay (read frames)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for payload in payloads_read:
            records.decode(payload)
        phases["record decode"] = time.perf_counter() - t0
    finally:
        wal.shutdown()
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_replay", description=__doc__)
    parser.add_argument(
        "--mib", type=int, default=64, help="rows to replay, as flushes count them (default 64)"
    )
    parser.add_argument("--points", type=int, default=1000, help="points per request")
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="startups to time (default 5)")
    parser.add_argument("--target-s", type=float, default=3.0)
    parser.add_argument(
        "--as-rows", action="store_true", help="log every request as its rows (Arrow IPC)"
    )
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="shoal-bench-replay-"))
    try:
        data_dir = tmp / "data"
        samples = sample_payloads(args.points, args.series, args.as_rows)
        count = build_wal(data_dir / "wal", args.mib * MiB, samples)
        size = wal_bytes(data_dir / "wal")
        runs = [time_startup(data_dir) for _ in range(args.repeat)]
        phases = time_phases(data_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    seconds = [s for s, _rows, _bytes in runs]
    median = statistics.median(seconds)
    _s, rows, nbytes = runs[0]
    mib = size / MiB
    logged = "rows (Arrow IPC)" if args.as_rows else "requests"
    print(f"WAL: {count} records logged as {logged}, {args.mib} MiB of rows, {mib:.1f} MiB "
          f"on disk, {args.points} rows per OTLP record, 1,000 per remote-write record, "
          f"{len(samples)} distinct records (4 OTLP metrics, 2 remote write, 2 logs, "
          f"2 spans; 2 tenants)")  # fmt: skip
    print(f"snapshot after replay: {rows} rows, {nbytes / MiB:.1f} MiB of Arrow")
    print()
    print(f"{'startup replay (open_storage)':<32} {'seconds':>8} {'MiB/s':>8}")
    for i, s in enumerate(seconds):
        print(f"{'  run ' + str(i + 1):<32} {s:8.3f} {mib / s:8.0f}")
    print(f"{'  median':<32} {median:8.3f} {mib / median:8.0f}")
    print(f"{'  best':<32} {min(seconds):8.3f} {mib / min(seconds):8.0f}")
    print()
    print(f"{'phase (one pass)':<32} {'seconds':>8}")
    for name, s in phases.items():
        print(f"  {name:<30} {s:8.3f}")
    verdict = "met" if median <= args.target_s else "MISSED"
    print()
    print(f"target: {args.mib} MiB of rows in at most {args.target_s:.1f} s: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
