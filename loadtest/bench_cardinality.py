"""How shoal's costs grow with active series, beside Prometheus in the same run.

``python -m loadtest.bench_cardinality [--size 16000,160000,1000000] [--duration 20]
[--paced-duration 150]`` (``make bench-cardinality``, ``BENCH_CARDINALITY_ARGS``)

Per size, Debian's ``prometheus`` (remote-write receiver on) and ``shoal serve`` each start
on a fresh data dir, shoal inside a memory cgroup limited to ``--memory-max`` (2 GiB: the
``MemoryMax=`` of deploy/'s systemd unit), and are sent remote write: the series of
bench_peers (50 metric names on ``size / 50`` hosts, 8 shards, 1,000 series a request).
Below ``--paced-from`` (1,000,000) the senders post as fast as they are acknowledged for
``--duration`` seconds, as bench_peers does; from it on they send at the rate a fleet
scraped every ``--interval`` (15) seconds sends, one sample per series per interval (about
67,000 samples/s at 1M), for ``--paced-duration`` seconds: long enough for steady state
and at least one flush (``flush_max_age_s`` is 60 s).

Printed per size and server: samples/s, ack p99, peak RSS, the idle RSS before the load and
the bytes per active series (peak RSS over that idle baseline, divided by the series),
shoal's flushes and their mean time (``shoal_flush_duration_seconds`` of its /metrics),
the bytes on disk per sample (after the final flush of a SIGTERM, as bench_peers measures
them; Prometheus: a TSDB snapshot of its head), and, for shoal, what its cgroup saw: times
the limit was hit (``memory.failcnt``), OOM kills, and how the process ended. Then the
metric browser's calls (bench_promql's list: the calls Grafana's Prometheus data source
makes, and a ``series?match[]`` on one host, a selective matcher) over the last hour after
the load, median and p99 of ``--calls`` calls each; last, the issue's targets, met or not.
"""

from __future__ import annotations

import argparse
import http.client
import math
import multiprocessing as mp
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from loadtest import bench_peers as peers
from loadtest import cgroup
from loadtest.bench_promql import _timed_get, browser_calls
from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from loadtest.stats import percentile

SIZES = (16_000, 160_000, 1_000_000)
SERVERS = ("prometheus", "shoal")
MAX_SAMPLES = 9_600_000
"""Samples the full-speed senders prepare, at most (bench_peers' cap)."""
BROWSER_TARGET_MS = 100.0
GiB = 1 << 30


def _paced_sender(args: tuple[Any, ...]) -> tuple[int, list[float], int, float]:
    """One sender process at a fleet's rate: its groups of series, each round spread
    evenly over ``interval`` seconds. Returns samples, latencies (ms), retries, and how far
    it fell behind its schedule at most (seconds)."""
    port, worker, workers, groups, start, duration, interval, ready = args
    mine = [g for g in range(groups) if g % workers == worker]
    labels = {g: peers.group_labels(g) for g in mine}
    ready.put(worker)
    start.wait()
    began, wall0_ms = time.monotonic(), int(time.time() * 1000)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies: list[float] = []
    sent = retries = 0
    behind = 0.0
    gap = interval / max(1, len(mine))
    for r in range(math.ceil(duration / interval)):
        for j, g in enumerate(mine):
            due = began + r * interval + j * gap
            now = time.monotonic()
            if due >= began + duration:
                break
            if due > now:
                time.sleep(due - now)
            behind = max(behind, now - due)
            body = peers.round_body(labels[g], wall0_ms + int(r * interval * 1000), r)
            t = time.perf_counter()
            retries += peers.post_acked(conn, "/api/v1/write", body, peers.RW_HEADERS)
            latencies.append((time.perf_counter() - t) * 1000)
            sent += peers.PER_REQUEST
    conn.close()
    return sent, latencies, retries, behind


def _rss(pid: int) -> int:
    """The resident memory of ``pid`` and its children (decoding processes)."""
    process = psutil.Process(pid)
    children = sum(int(c.memory_info().rss) for c in process.children(recursive=True))
    return int(process.memory_info().rss) + children


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        return str(resp.read().decode())


def metric_sum(text: str, name: str) -> float:
    """The sum of every sample of ``name`` (any labels) in Prometheus text format."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _load(port: int, size: int, args: argparse.Namespace, pid: int) -> dict[str, float]:
    """Send ``size`` series to the server on ``port``; the figures of the load."""
    groups = size // peers.PER_REQUEST
    paced = size >= args.paced_from
    with mp.Manager() as manager:
        start, ready = manager.Event(), manager.Queue()
        with mp.Pool(args.workers) as pool:
            if paced:
                jobs: list[tuple[Any, ...]] = [
                    (
                        port,
                        w,
                        args.workers,
                        groups,
                        start,
                        args.paced_duration,
                        args.interval,
                        ready,
                    )
                    for w in range(args.workers)
                ]
                result: Any = pool.map_async(_paced_sender, jobs)
            else:
                rounds = max(2, min(int(args.duration * 1_000_000 / size), MAX_SAMPLES // size))
                t0_ms = int(time.time() * 1000) - rounds * 1000 - 60_000
                jobs = [
                    (port, "/api/v1/write", peers.RW_HEADERS, "rw", w, args.workers, rounds,
                     start, args.duration, t0_ms, False, groups, ready)
                    for w in range(args.workers)
                ]  # fmt: skip
                result = pool.map_async(peers._sender, jobs)
            for _ in range(args.workers):  # each sender has encoded its bodies (or labels)
                ready.get(timeout=1800)
            peak = [0]
            stop = threading.Event()
            watcher = threading.Thread(target=peers._watch, args=(pid, stop, peak), daemon=True)
            watcher.start()
            cpu0, began = peers._cpu(pid), time.monotonic()
            start.set()
            try:
                outcomes = result.get()
            except Exception as exc:  # the server went away (an OOM kill) or refused
                stop.set()
                print(f"    the load failed: {exc!r}", file=sys.stderr, flush=True)
                return {"failed": 1.0, "peak RSS MB": peak[0] / 1e6}
            elapsed = time.monotonic() - began
            cpu = peers._cpu(pid) - cpu0
            stop.set()
    samples = sum(o[0] for o in outcomes)
    latencies = [x for o in outcomes for x in o[1]]
    return {
        "samples": float(samples),
        "samples/s": samples / elapsed,
        "ack p50 ms": percentile(latencies, 0.5),
        "ack p99 ms": percentile(latencies, 0.99),
        "server cores": cpu / elapsed,
        "peak RSS MB": peak[0] / 1e6,
        "retried": float(sum(o[2] for o in outcomes)),
        "behind s": max((o[3] for o in outcomes), default=0.0) if paced else math.nan,
    }


def _browser(url: str, calls: int) -> dict[str, tuple[float, float, int]]:
    """Per metric browser call: median and p99 ms of ``calls`` calls, and the items."""
    end = int(time.time())
    out = {}
    for name, path, params in browser_calls(
        str(end - 3600),
        str(end),
        ("instance", "shard"),
        ("bench_metric_0", "bench_metric_0"),
        ('{instance="host-7"}', '{instance="host-7"}'),
    ):
        times, data = [], None
        for _ in range(calls):
            try:
                elapsed, data = _timed_get(url, path, params)
            except (OSError, RuntimeError) as exc:  # the server went away (an OOM kill)
                print(f"    {name} failed: {exc!r}", file=sys.stderr, flush=True)
                out[name] = (math.nan, math.nan, -1)
                return out
            times.append(elapsed * 1000)
        items = len(data) if isinstance(data, list | dict) else 1
        out[name] = (statistics.median(times), percentile(times, 0.99), items)
    return out


def run_one(
    name: str, size: int, tmp: Path, args: argparse.Namespace
) -> tuple[dict[str, float], dict[str, tuple[float, float, int]]]:
    """One server at one size: the figures, and the metric browser's."""
    group: cgroup.MemoryCgroup | None = None
    if name == "prometheus":
        prom = Prometheus(tmp, admin=True).start()
        assert prom.proc is not None
        pid, port, url = prom.proc.pid, prom.port, prom.url
    else:
        if cgroup.available():
            group = cgroup.MemoryCgroup("shoal-bench", args.memory_max).create()
        server = ServerProcess(
            tmp / "data",
            env={"SHOAL_LOG_LEVEL": "warning"},
            cgroup=group.path if group is not None else None,
        ).start()
        assert server.proc is not None
        pid, port, url = server.proc.pid, server.http_port, server.url
    browser: dict[str, tuple[float, float, int]] = {}
    row: dict[str, float] = {}
    try:
        time.sleep(args.idle)
        idle = _rss(pid)
        row = _load(port, size, args, pid)
        row["idle RSS MB"] = idle / 1e6
        if "failed" not in row:
            row["bytes per series"] = (row["peak RSS MB"] * 1e6 - idle) / size
            if name == "shoal":
                text = _scrape(url)
                row["flushes"] = metric_sum(text, "shoal_flush_duration_seconds_count")
                total = metric_sum(text, "shoal_flush_duration_seconds_sum")
                row["flush s"] = total / row["flushes"] if row["flushes"] else math.nan
            browser = _browser(url, args.calls)
            if name == "prometheus":
                row["disk bytes per sample"] = prom.snapshot_bytes() / row["samples"]
    finally:
        if name == "prometheus":
            prom.stop()
        else:
            assert server.proc is not None
            exited = server.proc.poll()
            if exited is None:
                server.terminate()  # SIGTERM: the final flush
                if "samples" in row:
                    row["disk bytes per sample"] = peers._table_bytes(tmp / "data") / row["samples"]
            else:
                row["exit code"] = float(exited)
            server.kill()
            if group is not None:
                row["limit hit"] = float(group.failcnt())
                row["OOM kills"] = float(group.oom_kills())
                row["cgroup peak MB"] = group.max_usage() / 1e6
                group.remove()
    return row, browser


def _cell(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


COLUMNS = ("samples/s", "ack p99 ms", "server cores", "peak RSS MB", "idle RSS MB",
           "bytes per series", "flushes", "flush s", "disk bytes per sample", "behind s",
           "retried", "limit hit", "OOM kills", "cgroup peak MB", "exit code")  # fmt: skip


def targets(
    rows: dict[tuple[int, str], dict[str, float]],
    browsers: dict[tuple[int, str], dict[str, tuple[float, float, int]]],
    paced_from: int,
    interval: float,
) -> list[tuple[str, str, bool]]:
    """The issue's targets, as (what, measured, met), for the sizes that ran."""
    out = []
    for (size, name), row in sorted(rows.items()):
        if name != "shoal" or size < paced_from:
            continue
        offered = size / interval
        kept = row.get("samples/s", 0.0) >= 0.95 * offered and not row.get("behind s", 0) > interval
        oom = row.get("OOM kills", 0.0) > 0 or "exit code" in row or "failed" in row
        out.append(
            (
                f"{size:,} series at one sample per {interval:g} s, within the memory limit",
                f"{row.get('samples/s', 0):,.0f} of {offered:,.0f} samples/s, "
                f"cgroup peak {row.get('cgroup peak MB', math.nan):,.0f} MB, "
                f"{'OOM-killed' if oom else 'not killed'}",
                kept and not oom,
            )
        )
    ours, theirs = rows.get((160_000, "shoal")), rows.get((160_000, "prometheus"))
    if ours and theirs and "bytes per series" in ours and "bytes per series" in theirs:
        mine, peer = ours["bytes per series"], theirs["bytes per series"]
        out.append(
            (
                "memory per active series at 160,000 at most Prometheus'",
                f"{mine:,.0f} against {peer:,.0f} bytes",
                mine <= peer,
            )
        )
    for (size, name), calls in sorted(browsers.items()):
        if name != "shoal" or size < paced_from or not calls:
            continue
        p99 = {call: (v[1] if v[2] >= 0 else math.inf) for call, v in calls.items()}
        worst = max(p99, key=lambda call: p99[call])
        out.append(
            (
                f"metric browser calls under {BROWSER_TARGET_MS:.0f} ms at {size:,} series (p99)",
                f"slowest {worst}: "
                + (f"p99 {p99[worst]:,.0f} ms" if math.isfinite(p99[worst]) else "failed"),
                p99[worst] < BROWSER_TARGET_MS,
            )
        )
    return out


def _sizes(text: str) -> list[int]:
    sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    if not sizes or any(s <= 0 or s % peers.PER_REQUEST for s in sizes):
        raise argparse.ArgumentTypeError(
            f"sizes are positive multiples of {peers.PER_REQUEST} series (a request's worth)"
        )
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_cardinality")
    parser.add_argument("--size", type=_sizes, default=list(SIZES), help="comma-separated")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds at full speed")
    parser.add_argument(
        "--paced-duration", type=float, default=150.0, help="seconds at the fleet's rate"
    )
    parser.add_argument("--paced-from", type=int, default=1_000_000)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--calls", type=int, default=10, help="of each metric browser call")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before the load")
    parser.add_argument("--memory-max", type=int, default=2 * GiB, help="shoal's cgroup limit")
    parser.add_argument("--servers", default=",".join(SERVERS))
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.servers.split(",")]
    if set(chosen) - set(SERVERS):
        parser.error(f"servers are among {', '.join(SERVERS)}")
    if not cgroup.available():
        print("no memory cgroup here: shoal runs without its limit", file=sys.stderr)
    rows: dict[tuple[int, str], dict[str, float]] = {}
    browsers: dict[tuple[int, str], dict[str, tuple[float, float, int]]] = {}
    for size in args.size:
        for name in chosen:
            print(f"{size:,} series: {name} ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory(prefix="shoal-cardinality-") as tmp:
                row, browser = run_one(name, size, Path(tmp), args)
            rows[size, name], browsers[size, name] = row, browser
            print(f"    {row}\n    {browser}", file=sys.stderr, flush=True)
    print("| series | server | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---:|" * len(COLUMNS))
    for (size, name), row in rows.items():
        line = " | ".join(_cell(row.get(c)) for c in COLUMNS)
        print(f"| {size:,} | {name} | {line} |")
    print("\nmetric browser, last hour after the load: median / p99 ms (items)\n")
    print("| series | call | " + " | ".join(chosen) + " |")
    print("|---|---|" + "---|" * len(chosen))
    for size in args.size:
        names = next((list(browsers[size, n]) for n in chosen if browsers.get((size, n))), [])
        for call in names:
            cells = []
            for name in chosen:
                found = browsers.get((size, name), {}).get(call)
                if found is None or found[2] < 0:
                    cells.append("failed" if found else "-")
                else:
                    cells.append(f"{found[0]:,.1f} / {found[1]:,.1f} ({found[2]:,})")
            print(f"| {size:,} | {call} | " + " | ".join(cells) + " |")
    met = targets(rows, browsers, args.paced_from, args.interval)
    if met:
        print("\n| target | measured | met |\n|---|---|---|")
        for what, measured, ok in met:
            print(f"| {what} | {measured} | {'yes' if ok else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
