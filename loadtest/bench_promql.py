"""PromQL benchmark: shoal and a real Prometheus on the same samples, side by side.

``python -m loadtest.bench_promql`` (``make bench-promql``) starts ``shoal serve``
and Debian's ``prometheus`` (remote-write receiver on) on loopback ports, sends
both the same samples (``--series`` series over ``--hours`` hours at 15 s: host
gauges, request counters with resets, request-duration histograms; shoal by
OTLP/HTTP, Prometheus by remote write, in time order), then times a dashboard
of ten range-query panels at a 30 s step over the last hour and the last six
hours, and the metric browser calls. Each figure is the median of ``--repeat``
runs over HTTP, the two servers taking turns; ``ratio`` is shoal / Prometheus.
The metric browser table also shows shoal's first call, before any answer was
remembered. ``--browser-only`` skips the dashboards, for many series over a short
time (``--series 100000 --hours 0.1``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mpb

from loadtest import remote_write
from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus

STEP_MS = 15_000
WINDOW_POINTS = 20  # points per series in one request (5 minutes)
REQUEST_SAMPLES = 40_000  # samples in one request, at most (about)
CPUS = 4
CODES = ("200", "404", "500")
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
PER_HOST = CPUS + 1 + len(CODES) + len(BOUNDS) + 3  # gauges, counters, buckets+Inf, sum, count

PANELS = {
    "rate sum": "sum(rate(http_server_requests_total[5m]))",
    "rate by code": "sum by (code) (rate(http_server_requests_total[5m]))",
    "p99 all": "histogram_quantile(0.99, sum by (le) "
    "(rate(http_server_request_duration_seconds_bucket[5m])))",
    "p50 all": "histogram_quantile(0.5, sum by (le) "
    "(rate(http_server_request_duration_seconds_bucket[5m])))",
    "topk instances": "topk(5, sum by (instance) (rate(http_server_requests_total[5m])))",
    "error ratio": 'sum(rate(http_server_requests_total{code="500"}[5m])) '
    "/ sum(rate(http_server_requests_total[5m]))",
    "cpu topk": "topk(10, avg by (instance) (system_cpu_utilization_ratio))",
    "memory max": "max(system_memory_usage_bytes)",
    "increase 1h": "sum(increase(http_server_requests_total[1h]))",
    "busy count": "count(system_cpu_utilization_ratio > 0.5)",
}


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


class Data:
    """The samples: every value computed up front so both servers get the same numbers."""

    def __init__(self, series: int, hours: float, end_ms: int, seed: int = 1) -> None:
        self.hosts = max(1, series // PER_HOST)
        self.points = int(hours * 3_600_000 // STEP_MS)
        start = end_ms - self.points * STEP_MS
        self.start_ms = start - start % 1000 + 137  # off the query grid
        self.t = self.start_ms + np.arange(self.points, dtype=np.int64) * STEP_MS
        rng = np.random.default_rng(seed)
        h, p = self.hosts, self.points
        self.cpu = np.clip(rng.normal(0.4, 0.2, (h, CPUS, p)), 0, 1).round(4)
        self.memory = (4e9 + np.cumsum(rng.normal(0, 1e6, (h, p)), axis=1)).round()
        increments = rng.poisson(20, (h, len(CODES), p)).astype(np.float64)
        counters = np.cumsum(increments, axis=2)
        reset = p // 2  # every host restarts once, halfway
        counters[:, :, reset:] -= counters[:, :, reset - 1 : reset]
        self.requests = counters
        obs = rng.poisson(3, (h, len(BOUNDS) + 1, p)).astype(np.float64)
        self.buckets = np.cumsum(obs, axis=2)  # per bucket, cumulative over time
        self.hsum = np.cumsum(obs.sum(axis=1) * 0.07, axis=1).round(3)

    @property
    def series(self) -> int:
        return self.hosts * PER_HOST

    def otlp(self, a: int, b: int, hosts: range) -> bytes:
        req = ExportMetricsServiceRequest()
        times = [int(x) * 1_000_000 for x in self.t[a:b]]
        for host in hosts:
            rm = req.resource_metrics.add()
            rm.resource.attributes.extend(
                [_kv("service.name", "bench"), _kv("service.instance.id", f"host-{host}")]
            )
            sm = rm.scope_metrics.add()
            cpu = sm.metrics.add()
            cpu.name, cpu.unit = "system.cpu.utilization", "1"
            for c in range(CPUS):
                for i, t in enumerate(times):
                    dp = cpu.gauge.data_points.add(time_unix_nano=t)
                    dp.as_double = float(self.cpu[host, c, a + i])
                    dp.attributes.append(_kv("cpu", str(c)))
            mem = sm.metrics.add()
            mem.name, mem.unit = "system.memory.usage", "By"
            for i, t in enumerate(times):
                mem.gauge.data_points.add(
                    time_unix_nano=t, as_double=float(self.memory[host, a + i])
                )
            reqs = sm.metrics.add()
            reqs.name, reqs.unit = "http.server.requests", "{request}"
            reqs.sum.is_monotonic = True
            reqs.sum.aggregation_temporality = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE
            for k, code in enumerate(CODES):
                for i, t in enumerate(times):
                    dp = reqs.sum.data_points.add(time_unix_nano=t)
                    dp.as_double = float(self.requests[host, k, a + i])
                    dp.attributes.append(_kv("code", code))
            dur = sm.metrics.add()
            dur.name, dur.unit = "http.server.request.duration", "s"
            dur.histogram.aggregation_temporality = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE
            for i, t in enumerate(times):
                counts = self.buckets[host, :, a + i]
                dp = dur.histogram.data_points.add(
                    time_unix_nano=t, count=int(counts.sum()), sum=float(self.hsum[host, a + i])
                )
                dp.explicit_bounds.extend(BOUNDS)
                dp.bucket_counts.extend(int(x) for x in counts)
        return req.SerializeToString()

    def remote_write(self, a: int, b: int, hosts: range) -> bytes:
        ts = [int(x) for x in self.t[a:b]]
        out = []
        for host in hosts:
            ident = {"job": "bench", "instance": f"host-{host}"}
            for c in range(CPUS):
                out.append(
                    (
                        {"__name__": "system_cpu_utilization_ratio", "cpu": str(c), **ident},
                        list(zip(ts, self.cpu[host, c, a:b].tolist(), strict=True)),
                    )
                )
            out.append(
                (
                    {"__name__": "system_memory_usage_bytes", **ident},
                    list(zip(ts, self.memory[host, a:b].tolist(), strict=True)),
                )
            )
            for k, code in enumerate(CODES):
                out.append(
                    (
                        {"__name__": "http_server_requests_total", "code": code, **ident},
                        list(zip(ts, self.requests[host, k, a:b].tolist(), strict=True)),
                    )
                )
            cum = np.cumsum(self.buckets[host, :, a:b], axis=0)
            les = [repr(x) for x in BOUNDS] + ["+Inf"]
            name = "http_server_request_duration_seconds"
            for j, le in enumerate(les):
                out.append(
                    (
                        {"__name__": f"{name}_bucket", "le": le, **ident},
                        list(zip(ts, cum[j].tolist(), strict=True)),
                    )
                )
            out.append(
                (
                    {"__name__": f"{name}_count", **ident},
                    list(zip(ts, cum[-1].tolist(), strict=True)),
                )
            )
            out.append(
                (
                    {"__name__": f"{name}_sum", **ident},
                    list(zip(ts, self.hsum[host, a:b].tolist(), strict=True)),
                )
            )
        return remote_write.compress(remote_write.encode(out))


def _post(url: str, body: bytes, headers: dict[str, str]) -> None:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


def _load(data: Data, shoal: ServerProcess, prom: Prometheus) -> None:
    window = min(WINDOW_POINTS, data.points)
    per_request = max(1, REQUEST_SAMPLES // (PER_HOST * window))  # hosts per request
    for a in range(0, data.points, window):
        b = min(a + window, data.points)
        for h in range(0, data.hosts, per_request):
            hosts = range(h, min(h + per_request, data.hosts))
            _post(
                shoal.url + "/v1/metrics",
                data.otlp(a, b, hosts),
                {"Content-Type": "application/x-protobuf"},
            )
            _post(
                prom.url + "/api/v1/write",
                data.remote_write(a, b, hosts),
                {
                    "Content-Type": "application/x-protobuf",
                    "Content-Encoding": "snappy",
                    "X-Prometheus-Remote-Write-Version": "0.1.0",
                },
            )


def _timed_get(base: str, path: str, params: list[tuple[str, str]]) -> tuple[float, object]:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raw = exc.read()
    # the answer's last byte received: the client's own parsing is not the server's time
    elapsed = time.perf_counter() - started
    body = json.loads(raw)
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params} failed on {base}: {body}")
    return elapsed, body["data"]


Call = tuple[str, str, list[tuple[str, str]]]
"""A metric browser call: its name in the tables, its path, its parameters."""


def browser_calls(
    start: str, end: str, labels: tuple[str, ...], *matches: tuple[str, str]
) -> list[Call]:
    """The calls Grafana's Prometheus data source makes for its metric browser, over
    ``[start, end]`` (seconds): the metric names, the label names, the values of each of
    ``labels``, and the series of each ``(name, selector)`` of ``matches``."""
    rng = [("start", start), ("end", end)]
    calls: list[Call] = [
        ("label/__name__/values", "/api/v1/label/__name__/values", rng),
        ("labels", "/api/v1/labels", rng),
    ]
    calls += [(f"label/{label}/values", f"/api/v1/label/{label}/values", rng) for label in labels]
    calls += [(f"series?match[]={name}", "/api/v1/series", [("match[]", selector), *rng])
              for name, selector in matches]  # fmt: skip
    return calls


def _size(data: object) -> int:
    if isinstance(data, dict) and "result" in data:
        return len(data["result"])
    return len(data) if isinstance(data, list | dict) else 1


def _measure(
    name: str,
    path: str,
    params: list[tuple[str, str]],
    shoal: str,
    prom: str,
    repeat: int,
    first_column: bool = False,
) -> tuple[float, float]:
    ours, theirs = [], []
    sizes: tuple[int, int] = (0, 0)
    for _ in range(repeat):
        a, da = _timed_get(shoal, path, params)
        b, db = _timed_get(prom, path, params)
        ours.append(a)
        theirs.append(b)
        sizes = (_size(da), _size(db))
    o, t = statistics.median(ours), statistics.median(theirs)
    first = f" {ours[0] * 1000:.0f} |" if first_column else ""
    print(
        f"| {name} | {o * 1000:.0f} |{first} {t * 1000:.0f} | {o / t:.2f} | "
        f"{sizes[0]} / {sizes[1]} |",
        flush=True,
    )
    return o, t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=16_000)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--browser-only",
        action="store_true",
        help="time only the metric browser calls (for many series over a short time)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="shoal-bench-promql-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "prom").mkdir()
        root = Path(__file__).resolve().parents[1]
        shoal = ServerProcess(
            tmp / "data", env={"PYTHONPATH": str(root)}, log_path=tmp / "shoal.log"
        ).start()
        prom = Prometheus(tmp / "prom").start()
        try:
            end_ms = int(time.time() * 1000) // 1000 * 1000 - 60_000
            data = Data(args.series, args.hours, end_ms)
            started = time.perf_counter()
            _load(data, shoal, prom)
            print(
                f"loaded {data.series} series x {data.points} points "
                f"({data.series * data.points / 1e6:.1f}M samples) into both in "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
            end = str(data.t[-1] // 1000 + 1)
            targets: list[tuple[str, str, bool]] = []
            for hours in (1, 6):
                if hours > args.hours or args.browser_only:
                    continue
                start = str(int(end) - hours * 3600)
                print(f"\n{hours} h dashboard, step 30 s\n")
                print(
                    "| panel | shoal ms | shoal ms, first call | Prometheus ms | ratio "
                    "| series shoal / Prometheus |"
                )
                print("|---|---:|---:|---:|---:|---|")
                sums = [0.0, 0.0]
                worst = (0.0, "")
                for name, expr in PANELS.items():
                    o, t = _measure(
                        name,
                        "/api/v1/query_range",
                        [("query", expr), ("start", start), ("end", end), ("step", "30")],
                        shoal.url,
                        prom.url,
                        args.repeat,
                        first_column=True,
                    )
                    sums[0] += o
                    sums[1] += t
                    worst = max(worst, (o / t, name))
                total = sums[0] / sums[1]
                print(
                    f"| **total** | {sums[0] * 1000:.0f} | | {sums[1] * 1000:.0f} | {total:.2f} | |"
                )
                targets.append((f"{hours} h: total at most 1.0x Prometheus'", f"{total:.2f}x",
                                total <= 1.0))  # fmt: skip
                targets.append((f"{hours} h: every panel at most 1.5x Prometheus'",
                                f"worst {worst[1]} {worst[0]:.2f}x", worst[0] <= 1.5))  # fmt: skip
            start = str(int(data.t[0] // 1000))
            print("\nmetric browser\n")
            print(
                "| call | shoal ms | shoal ms, first call | Prometheus ms | ratio "
                "| items shoal / Prometheus |"
            )
            print("|---|---:|---:|---:|---:|---|")
            for name, path, params in browser_calls(
                start, end, ("instance", "cpu"), ("requests", "http_server_requests_total")
            ):
                _measure(name, path, params, shoal.url, prom.url, args.repeat, first_column=True)
            if targets:
                print("\n| target | measured | met |\n|---|---|---|")
                for what, measured, met in targets:
                    print(f"| {what} | {measured} | {'yes' if met else 'NO'} |")
        finally:
            prom.stop()
            shoal.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
