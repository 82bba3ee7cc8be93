"""OTLP ingest load generator: N worker processes over OTLP/HTTP or OTLP/gRPC.

    python -m loadtest ingest --duration 60 --workers 4 --protocol http \\
        --points-per-request 1000 --series 1000

Without ``--url`` it starts its own ``shoal serve`` on free ports with a
temporary data dir (fsync policy ``always``) and stops it afterwards. It
reports acknowledged points/s, ack latency p50/p99/max, 429 and UNAVAILABLE
counts, and the server's peak RSS.

Every request is distinguishable: with ``--unique`` request ``k`` of worker
``w`` carries timestamps offset by ``w * 10**6 + k`` nanoseconds, and
``--ack-log DIR`` records each acknowledged request id, one file per worker,
so a crash test can check that every acknowledged point is stored exactly
once. Without ``--unique`` workers cycle through a pool of prebuilt bodies
(building a request costs more than the server spends on it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import http.client
import multiprocessing
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import psutil

from loadtest import payloads
from loadtest.stats import percentile

BASE_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
ID_STRIDE = 1_000_000  # request ids per worker
HTTP_PATHS = {"metrics": "/v1/metrics", "logs": "/v1/logs", "spans": "/v1/traces"}
GRPC_METHODS = {
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "spans": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
}


# -- the server under test -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def directory_bytes(path: Path) -> int:
    """The bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (each socket stays bound until all are chosen: the kernel
    may hand out a port it just gave back)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            sockets.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


_PORT_ATTEMPTS = 3


class PortTakenError(RuntimeError):
    """The server exited at startup: a port it was given is in use by another process."""


class ServerProcess:
    """``shoal serve`` as a subprocess on free ports."""

    def __init__(
        self,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        http_port: int | None = None,
        grpc_port: int | None = None,
        log_path: Path | None = None,
        pg_port: int | None = None,
        shoal: Path | None = None,
        cgroup: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.cgroup = cgroup
        """A cgroup directory the server joins before it runs (its ``cgroup.procs``)."""
        # the ``shoal`` entry point beside the interpreter running this code
        self.shoal = shoal or Path(sys.executable).with_name("shoal")
        self._chosen = (http_port, grpc_port, pg_port)
        self._pick_ports()
        self.extra_env = dict(env or {})
        self.log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def _pick_ports(self) -> None:
        """Free ports for those not chosen by the caller."""
        spare = iter(free_ports(3))
        http_port, grpc_port, pg_port = self._chosen
        self.http_port = http_port or next(spare)
        self.grpc_port = grpc_port or next(spare)
        self.pg_port = pg_port or next(spare)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, wait: bool = True, timeout: float = 60.0) -> ServerProcess:
        """Start the server (and with ``wait``, until it is ready). A free port picked here
        can be taken by another process before the server binds it (tests run side by
        side): the server then exits saying so, and starts again on other free ports."""
        for attempt in range(_PORT_ATTEMPTS):
            self._spawn()
            if not wait:
                return self
            try:
                self.wait_ready(timeout)
                return self
            except PortTakenError:
                self.kill()
                if attempt == _PORT_ATTEMPTS - 1 or all(self._chosen):
                    raise
                self._pick_ports()
            except BaseException:
                self.kill()  # never leave a half-started server behind
                raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        env = dict(os.environ)
        env.update(
            {
                "SHOAL_DATA_DIR": str(self.data_dir),
                "SHOAL_HTTP_PORT": str(self.http_port),
                "SHOAL_GRPC_PORT": str(self.grpc_port),
                "SHOAL_PG_PORT": str(self.pg_port),
                "SHOAL_BIND": "127.0.0.1",
            }
        )
        env.update(self.extra_env)
        log = self.log_path.open("ab")
        procs = self.cgroup / "cgroup.procs" if self.cgroup is not None else None
        self.proc = subprocess.Popen(
            [str(self.shoal), "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            # in the child, before exec: the server starts inside its cgroup, so that its
            # start-up checks read the cgroup's memory limit
            preexec_fn=None if procs is None else lambda: procs.write_text(str(os.getpid())),
        )
        log.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                log = self.log()[-4000:]
                error = (
                    PortTakenError
                    if "is already in use by another process" in log
                    else RuntimeError
                )
                raise error(f"shoal exited with {self.proc.returncode} during startup:\n{log}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (OSError, http.client.HTTPException):
                pass  # not listening yet, or another process on the port: it exits
            time.sleep(0.05)
        raise TimeoutError(f"shoal not ready after {timeout}s:\n{self.log()[-4000:]}")

    def rss(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return 0
        try:
            return int(psutil.Process(self.proc.pid).memory_info().rss)
        except psutil.Error:
            return 0

    def cpu_seconds(self) -> float:
        """User + system CPU time the server has used so far (all its threads)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        try:
            times = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return 0.0
        return float(times.user + times.system)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


# -- workers -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    worker: int
    protocol: str
    signal: str
    url: str
    grpc_target: str
    token: str
    points: int
    series: int
    metrics: int
    attributes: int
    duration_s: float
    requests: int
    gzip: bool
    unique: bool
    ack_log: str | None
    pool: int = 8
    retry_overload: bool = True
    rate: float = 0.0
    """Requests per second this worker sends on a fixed schedule (0: as fast as acked)."""
    latency_log: str | None = None
    """File for this worker's ``send time (Unix s), latency ms, status`` lines."""


@dataclasses.dataclass
class WorkerResult:
    acked_requests: int = 0
    acked_points: int = 0
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    statuses: Counter[str] = dataclasses.field(default_factory=Counter)
    elapsed_s: float = 0.0
    cpu_s: float = 0.0


def _cpu_now() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _build(spec: WorkerSpec, request_id: int) -> Any:
    start = BASE_NS + request_id
    seed = spec.worker
    if spec.signal == "metrics":
        return payloads.metrics_request(
            points=spec.points, metrics=spec.metrics, attributes=spec.attributes,
            series=spec.series, start_ns=start, seed=seed,
        )  # fmt: skip
    if spec.signal == "logs":
        return payloads.logs_request(
            records=spec.points, attributes=spec.attributes, series=spec.series,
            start_ns=start, seed=seed,
        )  # fmt: skip
    return payloads.traces_request(
        spans=spec.points, attributes=spec.attributes, series=spec.series, start_ns=start, seed=seed
    )


def _restamp(template: Any, signal_name: str, offset: int) -> None:
    """Shift every timestamp of a prebuilt request by ``offset`` ns (cheap uniqueness)."""
    if signal_name != "metrics":
        raise ValueError("--unique restamping supports metrics only")
    for rm in template.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points = (
                    metric.sum.data_points if metric.HasField("sum") else metric.gauge.data_points
                )
                for dp in points:
                    dp.time_unix_nano += offset


class _Bodies:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        first = spec.worker * ID_STRIDE
        if spec.unique:
            self.template = _build(spec, first)
            self.last = first
            self.pool: list[bytes] = []
        else:
            self.pool = [self._encode(_build(spec, first + i).SerializeToString())
                         for i in range(spec.pool)]  # fmt: skip

    def _encode(self, raw: bytes) -> bytes:
        return gzip.compress(raw, 1) if self.spec.gzip else raw

    def body(self, seq: int) -> bytes:
        if not self.spec.unique:
            return self.pool[seq % len(self.pool)]
        request_id = self.spec.worker * ID_STRIDE + seq
        _restamp(self.template, self.spec.signal, request_id - self.last)
        self.last = request_id
        return self._encode(self.template.SerializeToString())


class _HttpSender:
    def __init__(self, spec: WorkerSpec) -> None:
        parsed = urllib.parse.urlsplit(spec.url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 4318
        self.path = HTTP_PATHS[spec.signal]
        self.headers = {"Content-Type": "application/x-protobuf"}
        if spec.gzip:
            self.headers["Content-Encoding"] = "gzip"
        if spec.token:
            self.headers["Authorization"] = f"Bearer {spec.token}"
        self.conn: http.client.HTTPConnection | None = None

    def send(self, body: bytes) -> tuple[str, float]:
        """(status, retry-after seconds)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            self.conn.request("POST", self.path, body, self.headers)
            resp = self.conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            return "conn_error", 0.05
        retry = resp.getheader("Retry-After")
        return str(resp.status), float(retry) if retry else 0.0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class _GrpcSender:
    def __init__(self, spec: WorkerSpec) -> None:
        options = [("grpc.max_send_message_length", 64 << 20)]
        self.channel = grpc.insecure_channel(spec.grpc_target, options=options)
        self.call = self.channel.unary_unary(GRPC_METHODS[spec.signal])
        self.metadata = (("authorization", f"Bearer {spec.token}"),) if spec.token else None
        self.compression = grpc.Compression.Gzip if spec.gzip else None

    def send(self, body: bytes) -> tuple[str, float]:
        try:
            self.call(body, timeout=30, metadata=self.metadata, compression=self.compression)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
            return code.name, 0.05
        return "OK", 0.0

    def close(self) -> None:
        self.channel.close()


def run_worker(spec: WorkerSpec) -> WorkerResult:
    """One worker's loop (runs in its own process)."""
    result = WorkerResult()
    bodies = _Bodies(spec)
    sender: _HttpSender | _GrpcSender = (
        _HttpSender(spec) if spec.protocol == "http" else _GrpcSender(spec)
    )
    ack_log = open(spec.ack_log, "a", buffering=1) if spec.ack_log else None
    series: list[tuple[float, float, str]] = []
    started = time.perf_counter()
    # wall clock of ``started``, to put latencies on the server log's time axis
    wall_offset = time.time() - started
    cpu_started = _cpu_now()
    deadline = started + spec.duration_s if spec.duration_s > 0 else float("inf")
    seq = 0
    try:
        while time.perf_counter() < deadline and (spec.requests <= 0 or seq < spec.requests):
            body = bodies.body(seq)
            scheduled = 0.0
            if spec.rate > 0:
                # a fixed schedule; latency counts from the scheduled time, so a slow
                # answer that delays later requests shows in their latency too
                scheduled = started + seq / spec.rate
                pause = scheduled - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            while True:
                t0 = scheduled or time.perf_counter()
                scheduled = 0.0
                status, retry_after = sender.send(body)
                result.statuses[status] += 1
                if spec.latency_log is not None:
                    series.append((t0, time.perf_counter() - t0, status))
                if status in ("200", "OK"):
                    result.latencies_ms.append((time.perf_counter() - t0) * 1000)
                    result.acked_requests += 1
                    result.acked_points += spec.points
                    if ack_log is not None:
                        ack_log.write(f"{spec.worker * ID_STRIDE + seq}\n")
                    break
                if not spec.retry_overload or time.perf_counter() >= deadline:
                    break
                time.sleep(min(retry_after, 0.2) if retry_after else 0.05)
            seq += 1
    finally:
        sender.close()
        if ack_log is not None:
            ack_log.close()
        if spec.latency_log is not None:
            _write_series(spec.latency_log, series, wall_offset)
    result.elapsed_s = time.perf_counter() - started
    result.cpu_s = _cpu_now() - cpu_started
    return result


def _write_series(path: str, series: list[tuple[float, float, str]], wall_offset: float) -> None:
    with open(path, "w") as out:
        out.write("sent_unix_s,latency_ms,status\n")
        for t0, seconds, status in series:
            out.write(f"{t0 + wall_offset:.6f},{seconds * 1000:.3f},{status}\n")


def _worker_entry(spec: WorkerSpec, out: Any) -> None:
    with contextlib.suppress(KeyboardInterrupt):
        out.put(run_worker(spec))


# -- the run -----------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    protocol: str
    workers: int
    points_per_request: int
    series: int
    elapsed_s: float
    acked_requests: int
    acked_points: int
    latencies_ms: list[float]
    statuses: Counter[str]
    peak_rss: int
    generator_cpu_s: float = 0.0
    server_cpu_s: float | None = None
    wal_fsyncs: WalFsyncs | None = None

    @property
    def points_per_s(self) -> float:
        return self.acked_points / self.elapsed_s if self.elapsed_s else 0.0

    def percentile(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    def table(self) -> str:
        overload = self.statuses.get("429", 0)
        unavailable = self.statuses.get("UNAVAILABLE", 0) + self.statuses.get("503", 0)
        errors = sum(
            n
            for s, n in self.statuses.items()
            if s not in ("200", "OK", "429", "UNAVAILABLE", "503")
        )
        rows = [
            ("protocol", self.protocol),
            ("workers", str(self.workers)),
            ("points/request", str(self.points_per_request)),
            ("series", str(self.series)),
            ("duration s", f"{self.elapsed_s:.1f}"),
            ("acked requests", str(self.acked_requests)),
            ("acked points", str(self.acked_points)),
            ("points/s", f"{self.points_per_s:,.0f}"),
            ("ack p50 ms", f"{self.percentile(0.5):.1f}"),
            ("ack p99 ms", f"{self.percentile(0.99):.1f}"),
            ("ack max ms", f"{max(self.latencies_ms, default=float('nan')):.1f}"),
            ("429", str(overload)),
            ("UNAVAILABLE/503", str(unavailable)),
            ("other errors", str(errors)),
            ("server peak RSS MiB", f"{self.peak_rss / 2**20:.0f}" if self.peak_rss else "n/a"),
            ("generator CPU cores", f"{self.generator_cpu_s / self.elapsed_s:.2f}"),
            (
                "server CPU cores",
                f"{self.server_cpu_s / self.elapsed_s:.2f}" if self.server_cpu_s else "n/a",
            ),
        ]
        if self.wal_fsyncs is not None:
            rows.extend(self.wal_fsyncs.rows())
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


SLOW_FSYNC_S = (0.025, 0.05, 0.1)
"""Bounds (of the server's fsync histogram) for the slow-fsync counts in the report."""


@dataclasses.dataclass(frozen=True)
class WalFsyncs:
    """The server's WAL fsyncs during a run, from ``shoal_wal_fsync_seconds``.

    A request's acknowledgement waits for the fsync of its group, so each
    fsync slower than the latency target delays every request waiting on it:
    these counts tell a slow disk from a slow server.
    """

    total: int
    over: dict[float, int]

    def rows(self) -> list[tuple[str, str]]:
        rows = [("WAL fsyncs", str(self.total))]
        rows.extend((f"WAL fsyncs > {b * 1000:g} ms", str(n)) for b, n in sorted(self.over.items()))
        return rows

    def minus(self, before: WalFsyncs) -> WalFsyncs:
        return WalFsyncs(
            self.total - before.total, {b: n - before.over.get(b, 0) for b, n in self.over.items()}
        )


def parse_wal_fsyncs(text: str) -> WalFsyncs | None:
    """The fsync histogram's total and counts above each of :data:`SLOW_FSYNC_S`."""
    buckets: dict[float, float] = {}
    total: float | None = None
    for line in text.splitlines():
        if line.startswith("shoal_wal_fsync_seconds_count"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("shoal_wal_fsync_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[float(le)] = float(line.rsplit(" ", 1)[1])
    if total is None:
        return None
    over = {b: int(total - buckets[b]) for b in SLOW_FSYNC_S if b in buckets}
    return WalFsyncs(int(total), over)


def scrape_wal_fsyncs(base_url: str) -> WalFsyncs | None:
    """Read the fsync counts from a server's ``/metrics`` (None if it has none)."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=5) as resp:
            return parse_wal_fsyncs(resp.read().decode())
    except OSError:
        return None


def run_load(
    specs: list[WorkerSpec], rss_of: Any = None, cpu_of: Any = None, fsyncs_of: Any = None
) -> Report:
    """Run the workers as processes; ``rss_of()`` is sampled for the server's peak RSS.

    ``cpu_of()`` (the server's CPU seconds so far) is read when the first
    worker reports and once more at the end, so the server's CPU use is
    reported in cores over the run; ``fsyncs_of()`` (the server's WAL fsync
    counts) is read before the workers start and after they end.
    """
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker_entry, args=(s, out), daemon=True) for s in specs]
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            if rss_of is not None:
                peak = max(peak, int(rss_of()))
            stop.wait(0.25)

    fsyncs_start = fsyncs_of() if fsyncs_of is not None else None
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for p in procs:
        p.start()
    cpu_start = cpu_of() if cpu_of is not None else 0.0
    results = [out.get() for _ in procs]
    cpu_end = cpu_of() if cpu_of is not None else 0.0
    for p in procs:
        p.join()
    stop.set()
    sampler.join()
    fsyncs_end = fsyncs_of() if fsyncs_of is not None else None
    fsyncs = (
        fsyncs_end.minus(fsyncs_start)
        if fsyncs_end is not None and fsyncs_start is not None
        else None
    )
    statuses: Counter[str] = Counter()
    latencies: list[float] = []
    for r in results:
        statuses.update(r.statuses)
        latencies.extend(r.latencies_ms)
    first = specs[0]
    return Report(
        protocol=first.protocol,
        workers=len(specs),
        points_per_request=first.points,
        series=first.series,
        elapsed_s=max(r.elapsed_s for r in results),
        acked_requests=sum(r.acked_requests for r in results),
        acked_points=sum(r.acked_points for r in results),
        latencies_ms=latencies,
        statuses=statuses,
        peak_rss=peak,
        generator_cpu_s=sum(r.cpu_s for r in results),
        server_cpu_s=cpu_end - cpu_start if cpu_of is not None else None,
        wal_fsyncs=fsyncs,
    )


def specs_from_args(args: argparse.Namespace, url: str, grpc_target: str) -> list[WorkerSpec]:
    ack_dir = Path(args.ack_log) if args.ack_log else None
    if ack_dir is not None:
        ack_dir.mkdir(parents=True, exist_ok=True)
    latency_dir = Path(args.latency_log) if args.latency_log else None
    if latency_dir is not None:
        latency_dir.mkdir(parents=True, exist_ok=True)
    return [
        WorkerSpec(
            worker=w,
            protocol=args.protocol,
            signal=args.signal,
            url=url,
            grpc_target=grpc_target,
            token=args.token or "",
            points=args.points_per_request,
            series=args.series,
            metrics=args.metrics,
            attributes=args.attributes,
            duration_s=args.duration if args.requests <= 0 else 0.0,
            requests=args.requests,
            gzip=args.gzip,
            unique=args.unique,
            ack_log=str(ack_dir / f"worker-{w}.acks") if ack_dir else None,
            rate=args.rate / args.points_per_request / args.workers if args.rate else 0.0,
            latency_log=str(latency_dir / f"worker-{w}.csv") if latency_dir else None,
        )
        for w in range(args.workers)
    ]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, default=60.0, help="seconds to run (default 60)")
    p.add_argument(
        "--requests", type=int, default=0, help="requests per worker (overrides --duration)"
    )
    p.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="offered load in points/s, sent on a fixed schedule (default: as fast as acked)",
    )
    p.add_argument("--protocol", choices=["http", "grpc"], default="http")
    p.add_argument("--signal", choices=["metrics", "logs", "spans"], default="metrics")
    p.add_argument("--points-per-request", type=int, default=1000)
    p.add_argument("--series", type=int, default=1000, help="distinct series (cardinality)")
    p.add_argument("--metrics", type=int, default=8, help="metric names per request")
    p.add_argument("--attributes", type=int, default=4, help="attributes per point")
    p.add_argument("--gzip", action="store_true", help="gzip request bodies")
    p.add_argument("--unique", action="store_true", help="distinct timestamps in every request")
    p.add_argument("--ack-log", default=None, help="directory for per-worker acknowledged ids")
    p.add_argument(
        "--latency-log",
        default=None,
        help="directory for per-worker CSV time series: send time (Unix s), latency ms, status",
    )
    p.add_argument(
        "--server-log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="log level of the started server (its log file is kept with --latency-log)",
    )
    p.add_argument("--url", default=None, help="OTLP/HTTP base URL of a running server")
    p.add_argument("--grpc-target", default=None, help="host:port of a running server's gRPC")
    p.add_argument("--token", default=os.environ.get("SHOAL_TOKEN", ""))
    p.add_argument("--server-pid", type=int, default=None, help="pid of a running server (RSS)")
    p.add_argument("--fsync", default="always", help="WAL fsync policy of the started server")


@contextlib.contextmanager
def _own_server(args: argparse.Namespace) -> Iterator[ServerProcess]:
    with tempfile.TemporaryDirectory(prefix="shoal-bench-") as tmp:
        log_path = Path(args.latency_log) / "server.log" if args.latency_log else None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        server = ServerProcess(
            Path(tmp) / "data",
            env={"SHOAL_WAL_FSYNC": args.fsync, "SHOAL_LOG_LEVEL": args.server_log_level},
            log_path=log_path,
        ).start()
        try:
            yield server
        finally:
            code = server.terminate()
            if code != 0:
                print(f"server exited with {code}:\n{server.log()[-2000:]}", file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    if args.url:
        url = args.url
        target = args.grpc_target or f"{urllib.parse.urlsplit(url).hostname}:4317"
        rss_of = cpu_of = None
        if args.server_pid:
            process = psutil.Process(args.server_pid)
            rss_of = lambda: process.memory_info().rss  # noqa: E731
            cpu_of = lambda: sum(process.cpu_times()[:2])  # noqa: E731
        report = run_load(
            specs_from_args(args, url, target), rss_of, cpu_of, lambda: scrape_wal_fsyncs(url)
        )
    else:
        with _own_server(args) as server:
            specs = specs_from_args(args, server.url, server.grpc_target)
            report = run_load(
                specs, server.rss, server.cpu_seconds, lambda: scrape_wal_fsyncs(server.url)
            )
    print(report.table())
    return 0
