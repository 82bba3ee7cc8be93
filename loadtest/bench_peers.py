"""shoal beside Prometheus and VictoriaMetrics on the same remote-write samples.

``python -m loadtest.bench_peers [--duration 20] [--repeat 2] [--workers 4] [--shuffled]``
(``--decode-only``: shoal's remote-write decoder alone, with and without its series cache,
and its OTLP metrics decoder on the benchmark's OTLP bodies;
``--shuffled``: each remote-write request sends its series in another order;
``--bucket``: shoal's tables in a loopback S3 bucket, moto's server, each server under
its own prefix, so that its flusher commits to object storage while it ingests;
``--stages``: shoal's CPU per sample also by stage of its path, from py-spy's samples,
:mod:`loadtest.stages`)

16,000 series, 1,000 samples per request (a thousand series, one sample each, the
sixteen groups in turn, timestamps advancing each round); shoal by OTLP gets the same
samples as OTLP/HTTP protobuf gauges, ``job`` and ``instance`` as resource attributes.
The bodies are encoded before each run by the sender processes; then the senders post
them as fast as they are acknowledged, over keep-alive connections, for ``--duration``
seconds. Each server (Debian's ``prometheus`` with its remote-write receiver,
``victoria-metrics``, and ``shoal serve`` by remote write and by OTLP/HTTP) starts on a
fresh data dir, in turn, ``--repeat`` times interleaved. A sender answered 429 or 503
retries the request after a backoff that doubles from 30 ms, as Prometheus' own sender
does; a request's latency runs from its first attempt to its acknowledgement. Printed
per run: samples/s, ack p50/p99, the server's CPU per million samples and its peak RSS;
then the median per server, with the retries and the bytes on disk per sample: after a
flush (Prometheus: a TSDB snapshot of its head; VictoriaMetrics:
``/internal/force_flush``; shoal: the final flush of a SIGTERM, the Parquet files its
Delta logs hold) and, for shoal, after ``shoal compact``. Then the targets, met or not:
shoal by remote write at least 1.0x Prometheus' samples/s and by OTLP 0.8x (the median
of the ratios to Prometheus' run of the same repetition), remote write's ack p99 at most
Prometheus', and a peak RSS under 600 MB in every run. Last, shoal's CPU per sample by
thread (psutil's thread times, the names from ``py-spy dump``).
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import multiprocessing as mp
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.compute

from loadtest import payloads, remote_write, stages
from loadtest.ingest import ServerProcess, directory_bytes, free_port
from loadtest.prometheus import Prometheus
from loadtest.stats import percentile

SERIES = 16_000
PER_REQUEST = 1_000
GROUPS = SERIES // PER_REQUEST
MIN_BACKOFF_S = 0.03
MAX_BACKOFF_S = 1.0
RW_HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
              "X-Prometheus-Remote-Write-Version": "0.1.0"}  # fmt: skip


def _series_labels(g: int, i: int) -> dict[str, str]:
    """The labels of series ``i`` of group ``g``: 50 metric names on each of 320 hosts."""
    k = g * PER_REQUEST + i
    return {
        "__name__": f"bench_metric_{k % 50}",
        "job": "bench",
        "instance": f"host-{k // 50}",
        "shard": str(i % 8),
    }


def _sample_value(r: int, i: int) -> float:
    """The value of series ``i`` of a group in round ``r``."""
    return float((r + i) % 997)


def group_labels(g: int) -> list[bytes]:
    """The encoded labels of each series of group ``g`` (a request's worth)."""
    return [
        b"".join(
            remote_write.field(1, remote_write.label(k, v))
            for k, v in sorted(_series_labels(g, i).items())
        )
        for i in range(PER_REQUEST)
    ]


def round_body(labels: list[bytes], t_ms: int, r: int, order: list[int] | None = None) -> bytes:
    """The compressed remote-write body of one group's series (``labels``, from
    :func:`group_labels`) in round ``r``, one sample each at ``t_ms``, in ``order``."""
    body = b"".join(
        remote_write.field(
            1, labels[i] + remote_write.field(2, remote_write.sample(t_ms, _sample_value(r, i)))
        )
        for i in (range(len(labels)) if order is None else order)
    )
    return remote_write.compress(body)


def rw_bodies(groups: list[int], rounds: range, t0_ms: int, shuffled: bool = False) -> list[bytes]:
    """Remote-write bodies; each series' labels are encoded once, its samples per round
    (``shuffled``: each round in another order of the group's series)."""
    out = []
    for g in groups:
        labels = group_labels(g)
        for r in rounds:
            order = list(range(len(labels)))
            if shuffled:
                random.Random(g * 1000 + r).shuffle(order)
            out.append(round_body(labels, t0_ms + r * 1000, r, order))
    return out


Marked = tuple[bytes, list[int]]
"""Encoded bytes and the offsets in them of each point's time."""


def _join(parts: list[Marked]) -> Marked:
    marks, size = [], 0
    for data, own in parts:
        marks += [size + m for m in own]
        size += len(data)
    return b"".join(data for data, _ in parts), marks


def _wrap(number: int, part: Marked) -> Marked:
    """``part`` as the length-delimited field ``number``, its marks moved along."""
    data = remote_write.field(number, part[0])
    return data, [m + len(data) - len(part[0]) for m in part[1]]


def _attribute(key: str, value: str) -> bytes:
    f = remote_write.field
    return f(1, key.encode()) + f(2, f(1, value.encode()))  # KeyValue{key, string_value}


def _otlp_bodies(groups: list[int], rounds: range, t0_ms: int) -> list[bytes]:
    """OTLP/HTTP protobuf bodies of the very samples of :func:`rw_bodies`: per request one
    group's 1,000 series, one gauge point each, in the same order, with the same times
    and values. ``job`` and ``instance`` are the resource's ``service.name`` and
    ``service.instance.id`` (as shoal maps remote write, docs/remote-write.md), so a
    request holds a resource per host, each with its 50 metrics; ``shard`` is the
    point's attribute. A group's body is encoded once; each round writes its time and
    values into a copy."""
    out = []
    for g in groups:
        hosts: dict[str, list[Marked]] = {}
        for i in range(PER_REQUEST):
            labels = _series_labels(g, i)
            # NumberDataPoint: attributes (7), time_unix_nano (3, fixed64), as_double (4)
            attrs = remote_write.field(7, _attribute("shard", labels["shard"]))
            point: Marked = (attrs + b"\x19" + bytes(8) + b"\x21" + bytes(8), [len(attrs) + 1])
            gauge = _wrap(1, point)
            name = remote_write.field(1, labels["__name__"].encode())
            metric = _join([(name, []), _wrap(5, gauge)])  # Metric: name (1), gauge (5)
            hosts.setdefault(labels["instance"], []).append(_wrap(2, metric))
        blocks = []
        for instance, metrics in hosts.items():
            # in the order the remote-write decoder gives them (by key)
            resource = remote_write.field(1, _attribute("service.instance.id", instance))
            resource += remote_write.field(1, _attribute("service.name", "bench"))
            scope = _wrap(2, _join(metrics))  # ResourceMetrics: resource (1), scope_metrics (2)
            blocks.append(_wrap(1, _join([(remote_write.field(1, resource), []), scope])))
        body, marks = _join(blocks)
        for r in rounds:
            copy = bytearray(body)
            t_ns = (t0_ms + r * 1000) * 1_000_000
            for i, mark in enumerate(marks):
                struct.pack_into("<Q", copy, mark, t_ns)
                struct.pack_into("<d", copy, mark + 9, _sample_value(r, i))
            out.append(bytes(copy))
    return out


def post_acked(
    conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str]
) -> int:
    """POST ``body`` until it is acknowledged; returns the retries it took. Answered 429
    or 503, it retries after a backoff that doubles from 30 ms, as Prometheus' own sender
    does; any other status of 300 or more raises."""
    backoff = MIN_BACKOFF_S
    retries = 0
    while True:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status not in (429, 503):
            break
        retries += 1
        time.sleep(backoff)
        backoff = min(backoff * 2, MAX_BACKOFF_S)
    if response.status >= 300:
        raise RuntimeError(f"{path} answered {response.status}")
    return retries


def _sender(args: tuple[Any, ...]) -> tuple[int, list[float], int]:
    port, path, headers, kind, worker, workers, rounds, start, duration, t0_ms, shuffled = args[:11]
    groups = args[11] if len(args) > 11 else GROUPS
    ready = args[12] if len(args) > 12 else None
    """A queue told when this sender's bodies are encoded, or None."""
    # each worker its own groups, round after round: samples of a series stay in order
    mine = [g for g in range(groups) if g % workers == worker]
    per_group = (
        rw_bodies(mine, range(rounds), t0_ms, shuffled)
        if kind == "rw"
        else _otlp_bodies(mine, range(rounds), t0_ms)
    )
    bodies = [per_group[i * rounds + r] for r in range(rounds) for i in range(len(mine))]
    if ready is not None:
        ready.put(worker)
    start.wait()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    latencies: list[float] = []
    sent = 0
    deadline = time.monotonic() + duration
    retries = 0
    for body in bodies:
        if time.monotonic() >= deadline:
            break
        began = time.perf_counter()
        retries += post_acked(conn, path, body, headers)
        latencies.append((time.perf_counter() - began) * 1000)
        sent += PER_REQUEST
    conn.close()
    return sent, latencies, retries


def _watch(pid: int, stop: threading.Event, peak: list[int]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        try:
            rss = process.memory_info().rss
            for child in process.children(recursive=True):
                rss += child.memory_info().rss
        except psutil.Error:
            return
        peak[0] = max(peak[0], rss)
        time.sleep(0.2)


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


THREADS: dict[str, list[dict[str, float]]] = {}
"""Per server, per run: CPU µs per sample by thread (shoal's threads by name)."""
STAGES: dict[str, list[dict[str, float]]] = {}
"""With ``--stages``, per shoal server, per run: CPU µs per sample by stage."""


def _thread_cpu(pid: int) -> dict[int, float]:
    try:
        return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}
    except psutil.Error:
        return {}


def _thread_names(pid: int, wanted: set[int]) -> dict[int, str]:
    """Thread id -> Python thread name, from ``py-spy dump`` (the [bench] extra); asked
    up to five times, half a second apart, until every thread of ``wanted`` is named (a
    dump can miss a thread that is busy in native code, such as the flusher's last round)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    names: dict[int, str] = {}
    for attempt in range(5):
        if attempt:
            time.sleep(0.5)
        try:
            out = subprocess.run(
                [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return names
        for line in out.splitlines():
            found = re.match(r'Thread (0x[0-9a-fA-F]+|\d+) \(\w+\): "(.*)"', line)
            if found:
                # the ingest pool's threads are numbered (shoal-ingest_0, ...): one row for all
                names[int(found.group(1), 0)] = re.sub(r"_\d+$", "", found.group(2))
        if wanted <= names.keys():
            break
    return names


def _table_bytes(data_dir: Path) -> float:
    """The bytes of the Parquet files the ``metrics`` tables' Delta logs hold."""
    from deltalake import DeltaTable

    total = 0
    for table in (data_dir / "tenants").glob("*/metrics"):
        actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))
        total += int(pa.compute.sum(actions.column("size_bytes")).as_py() or 0)
    return float(total)


def _compacted_bytes(data_dir: Path) -> float:
    """``shoal compact`` on the stopped server's data dir (Spark, local mode), then
    :func:`_table_bytes`; NaN where PySpark is not installed."""
    if importlib.util.find_spec("pyspark") is None:
        return float("nan")
    shoal = Path(sys.executable).with_name("shoal")
    subprocess.run(
        [str(shoal), "compact", "--data-dir", str(data_dir)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return _table_bytes(data_dir)


def _victoria(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("victoria-metrics")
    assert binary, "victoria-metrics is not installed (apt-get install victoria-metrics)"
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"-storageDataPath={tmp / 'vm'}", f"-httpListenAddr=127.0.0.1:{port}",
         "-retentionPeriod=100y", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("victoria-metrics did not start")


BUCKET: list[str] = []
"""With ``--bucket``: the ``s3://`` URL under which shoal's servers keep their tables."""


def run_one(
    name: str,
    tmp: Path,
    duration: float,
    workers: int,
    shuffled: bool = False,
    profile: bool = False,
) -> dict[str, float]:
    stop_server: Callable[[], None]
    # what the data takes on disk once flushed: (flushed, compacted) bytes; shoal alone
    # compacts (the peers' own compaction runs hours later)
    disk: Callable[[], tuple[float, float]]
    if name == "prometheus":
        prom = Prometheus(tmp, admin=True).start()
        assert prom.proc is not None
        pid, port, path, headers, kind = prom.proc.pid, prom.port, "/api/v1/write", RW_HEADERS, "rw"
        stop_server = prom.stop

        def disk() -> tuple[float, float]:
            return prom.snapshot_bytes(), float("nan")
    elif name == "victoria-metrics":
        proc, port = _victoria(tmp)
        pid, path, headers, kind = proc.pid, "/api/v1/write", RW_HEADERS, "rw"

        def stop_server() -> None:
            proc.terminate()
            proc.wait(30)

        def disk() -> tuple[float, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/internal/force_flush"):
                pass
            return directory_bytes(tmp / "vm"), float("nan")
    else:
        env = {"SHOAL_LOG_LEVEL": "warning"}
        if BUCKET:  # each server its own prefix of the bucket, as its own data dir
            env["SHOAL_STORAGE_URL"] = f"{BUCKET[0]}/{tmp.name}"
        server = ServerProcess(tmp / "data", env=env).start()
        assert server.proc is not None
        pid, port = server.proc.pid, server.http_port
        if name == "shoal (remote write)":
            path, headers, kind = "/api/v1/write", RW_HEADERS, "rw"
        else:
            path, headers, kind = "/v1/metrics", {"Content-Type": "application/x-protobuf"}, "otlp"
        stop_server = server.kill

        def disk() -> tuple[float, float]:
            server.terminate()  # SIGTERM: the final flush
            return _table_bytes(tmp / "data"), _compacted_bytes(tmp / "data")

    try:
        # at most 9.6M samples: a peer faster than that sends them all before the end
        rounds = min(max(2, int(duration * 1_000_000 / SERIES)), 600)
        t0_ms = int(time.time() * 1000) - rounds * 1000 - 60_000
        with mp.Manager() as manager:
            start = manager.Event()
            with mp.Pool(workers) as pool:
                shared = (rounds, start, duration, t0_ms, shuffled)
                jobs = [(port, path, headers, kind, w, workers, *shared) for w in range(workers)]
                result = pool.map_async(_sender, jobs)
                time.sleep(3)  # the senders encode their bodies
                while not result.ready() and _encoding(pool):
                    time.sleep(0.5)
                peak = [0]
                stop = threading.Event()
                watcher = threading.Thread(target=_watch, args=(pid, stop, peak), daemon=True)
                watcher.start()
                threads0 = _thread_cpu(pid)
                recorder = stages.Recorder(pid).start() if profile else None
                cpu0, began = _cpu(pid), time.monotonic()
                start.set()
                outcomes = result.get()
                elapsed = time.monotonic() - began
                cpu = _cpu(pid) - cpu0
                shares = recorder.stop() if recorder is not None else {}
                threads1 = _thread_cpu(pid)
                busy = {t for t, v in threads1.items() if v - threads0.get(t, 0.0) > 0.05 * cpu}
                names = _thread_names(pid, busy) if name.startswith("shoal") else {}
                stop.set()
        flushed, compacted = disk()
    finally:
        stop_server()
    samples = sum(s for s, _, _ in outcomes)
    latencies = [x for _, lat, _ in outcomes for x in lat]
    by_thread: dict[str, float] = {}
    for tid, seconds in threads1.items():
        thread = names.get(tid, "other")
        by_thread[thread] = by_thread.get(thread, 0.0) + seconds - threads0.get(tid, 0.0)
    THREADS.setdefault(name, []).append({k: v / samples * 1e6 for k, v in by_thread.items()})
    if shares:
        STAGES.setdefault(name, []).append({k: v * cpu / samples * 1e6 for k, v in shares.items()})
    return {
        "samples/s": samples / elapsed,
        "ack p50 ms": percentile(latencies, 0.5),
        "ack p99 ms": percentile(latencies, 0.99),
        "CPU s per 1M samples": cpu / samples * 1e6,
        "server cores": cpu / elapsed,
        "peak RSS MB": peak[0] / 1e6,
        "retried (429/503)": sum(r for _, _, r in outcomes),
        "disk bytes per sample": flushed / samples,
        "compacted": compacted / samples,
    }


def _encoding(pool: Any) -> bool:
    """Whether the sender processes still use CPU (they encode before the start)."""
    try:
        children = [psutil.Process(p.pid) for p in pool._pool]
        return sum(c.cpu_percent(interval=0.3) for c in children) > 20
    except psutil.Error:
        return False


SERVERS = ("prometheus", "victoria-metrics", "shoal (remote write)", "shoal (OTLP)")


def decode_only(rounds: int = 8) -> None:
    """Time shoal's remote-write decoder alone on the benchmark's bodies (one group of
    1,000 series per request): without the series cache, and with it (the first round,
    where every series is new, and the rounds after it, in the same order and shuffled)."""
    from shoal.promwrite import decode as promwrite
    from shoal.promwrite import snappy
    from shoal.rows.known import KnownSeries

    per_group = rw_bodies(list(range(GROUPS)), range(rounds), 0)  # group after group
    bodies = [  # round after round: bodies[:GROUPS] is the first round
        snappy.decompress(per_group[g * rounds + r], 1 << 26)
        for r in range(rounds)
        for g in range(GROUPS)
    ]
    promwrite.decode(bodies[0], promwrite.V1, None)  # imports, descriptors
    known = KnownSeries(200_000, 64 << 20)
    shuffled_per_group = rw_bodies(list(range(GROUPS)), range(rounds), 0, shuffled=True)
    shuffled = [
        snappy.decompress(shuffled_per_group[g * rounds + r], 1 << 26)
        for r in range(1, rounds)
        for g in range(GROUPS)
    ]
    for label, cache, part in (
        ("without the cache", None, bodies),
        ("with the cache, first round", known, bodies[:GROUPS]),
        ("with the cache, later rounds", known, bodies[GROUPS:]),
        ("with the cache, later rounds, series shuffled in each", known, shuffled),
    ):
        began = time.perf_counter()
        for body in part:
            promwrite.decode(body, promwrite.V1, cache)
        per_request = (time.perf_counter() - began) / len(part)
        us = per_request / PER_REQUEST * 1e6
        print(
            f"decode {label}: {per_request * 1e3:.2f} ms per request of {PER_REQUEST} "
            f"samples ({us:.2f} us per sample, {len(part)} requests)"
        )
    _otlp_decode_only(rounds)


def _otlp_decode_only(rounds: int) -> None:
    """Time shoal's OTLP metrics decoder alone on the benchmark's OTLP bodies: the first
    round (nothing of these senders kept yet) and the rounds after it."""
    from shoal import otlp

    otlp.decode("metrics", payloads.metrics_request(points=1, seed=-1).SerializeToString())
    per_group = _otlp_bodies(list(range(GROUPS)), range(rounds), 1_700_000_000_000)
    bodies = [per_group[g * rounds + r] for r in range(rounds) for g in range(GROUPS)]
    for label, part in (("first round", bodies[:GROUPS]), ("later rounds", bodies[GROUPS:])):
        began = time.perf_counter()
        for body in part:
            result = otlp.decode("metrics", body)
            if result.rejected:
                raise SystemExit(f"the benchmark's OTLP body was refused: {result.errors}")
        per_request = (time.perf_counter() - began) / len(part)
        us = per_request / PER_REQUEST * 1e6
        print(
            f"OTLP decode, {label}: {per_request * 1e3:.2f} ms per request of {PER_REQUEST} "
            f"points ({us:.2f} us per point, {len(part)} requests)"
        )


RATE_TARGETS = {"shoal (remote write)": 1.0, "shoal (OTLP)": 0.8}
"""shoal's samples/s over Prometheus' in the same repetition, at least: the ingest targets."""
RSS_TARGET_MB = 600.0


def targets(results: dict[str, list[dict[str, float]]]) -> list[tuple[str, str, bool]]:
    """The targets as (what, measured, met), for the shoal rows run beside Prometheus.

    A rate is compared with Prometheus' in the same repetition (the servers of one
    repetition run one after another, so they share the machine's state), and the
    median of those ratios is what must reach the target. Ack p99 is compared as the
    table's medians (the target is remote write's); peak RSS is the largest of any run."""
    peer = results.get("prometheus")
    out: list[tuple[str, str, bool]] = []
    if not peer:
        return out
    for name, rows in results.items():
        target = RATE_TARGETS.get(name)
        if target is None or not rows:
            continue
        ratios = [r["samples/s"] / p["samples/s"] for r, p in zip(rows, peer, strict=True)]
        ratio = statistics.median(ratios)
        runs = ", ".join(f"{x:.2f}x" for x in ratios)
        out.append(
            (
                f"{name}: at least {target:.1f}x Prometheus' samples/s",
                f"{ratio:.2f}x (runs {runs})",
                ratio >= target,
            )
        )
        rss = max(r["peak RSS MB"] for r in rows)
        out.append(
            (f"{name}: peak RSS under {RSS_TARGET_MB:.0f} MB", f"{rss:.0f} MB", rss < RSS_TARGET_MB)
        )
        if name == "shoal (remote write)":
            mine = statistics.median(r["ack p99 ms"] for r in rows)
            theirs = statistics.median(p["ack p99 ms"] for p in peer)
            out.append(
                (
                    f"{name}: ack p99 at most Prometheus'",
                    f"{mine:.1f} against {theirs:.1f} ms",
                    mine <= theirs,
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench_peers")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--servers", default=",".join(SERVERS), help="comma-separated, of " + ", ".join(SERVERS)
    )
    parser.add_argument(
        "--shuffled",
        action="store_true",
        help="remote-write requests send their series in another order each round",
    )
    parser.add_argument(
        "--decode-only", action="store_true", help="time shoal's remote-write decoder alone"
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="sample shoal's stacks with py-spy and print its CPU per sample by stage",
    )
    parser.add_argument(
        "--bucket",
        action="store_true",
        help="shoal's tables in a loopback S3 bucket (moto's server) instead of on local disk",
    )
    args = parser.parse_args(argv)
    if args.decode_only:
        decode_only()
        return 0
    chosen = [s.strip() for s in args.servers.split(",")]
    unknown = [s for s in chosen if s not in SERVERS]
    if unknown:
        parser.error(f"unknown server(s) {', '.join(map(repr, unknown))}; choose from {SERVERS}")
    if not args.bucket:
        return _run(args, chosen)
    from loadtest.s3server import S3Server

    with tempfile.TemporaryDirectory(prefix="shoal-peers-s3-") as work:
        s3 = S3Server(free_port(), log=Path(work) / "s3.log").start()
        os.environ.update(s3.env())
        BUCKET[:] = ["s3://shoal/peers"]
        try:
            return _run(args, chosen)
        finally:
            s3.stop()


def _run(args: argparse.Namespace, chosen: list[str]) -> int:
    results: dict[str, list[dict[str, float]]] = {s: [] for s in chosen}
    for repetition in range(args.repeat):
        for name in chosen:
            with tempfile.TemporaryDirectory(prefix="shoal-peers-") as tmp:
                print(f"[{repetition + 1}/{args.repeat}] {name} ...", file=sys.stderr, flush=True)
                row = run_one(
                    name, Path(tmp), args.duration, args.workers, args.shuffled, args.stages
                )
                results[name].append(row)
                print(
                    f"    {row['samples/s']:,.0f} samples/s, p99 {row['ack p99 ms']:.1f} ms, "
                    f"peak RSS {row['peak RSS MB']:.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
    keys = list(next(iter(results.values()))[0])
    print("| server | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, rows in results.items():
        cells = []
        for k in keys:
            values = [r[k] for r in rows]
            med = statistics.median(values)
            cells.append(f"{med:,.0f}" if med >= 100 else f"{med:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    met = targets(results)
    if met:
        print("\n| target | measured | met |\n|---|---|---|")
        for what, measured, ok in met:
            print(f"| {what} | {measured} | {'yes' if ok else 'NO'} |")
    for name, runs in THREADS.items():
        if not name.startswith("shoal"):
            continue
        threads = sorted({t for run in runs for t in run}, key=lambda t: -runs[0].get(t, 0.0))
        print(f"\n{name}: CPU µs per sample by thread (median of the runs)")
        print("| thread | µs per sample |\n|---|---|")
        for thread in threads:
            median = statistics.median(run.get(thread, 0.0) for run in runs)
            print(f"| {thread} | {median:.2f} |")
    for name, runs in STAGES.items():
        print(f"\n{name}: CPU µs per sample by stage (py-spy's samples; median of the runs)")
        print(stages.table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
