"""The samples the comparison test loads into shoal (OTLP) and Prometheus (remote write).

Timestamps sit off any evaluation grid (odd milliseconds, jittered intervals);
counters reset, one series stops for longer than the lookback and starts
again, one is sparse, histograms have cumulative buckets.
"""

from __future__ import annotations

import numpy as np

from .otlp_data import STALE_NAN, GaugeSeries, HistSeries, Metric, Resource

STEP_MS = 15_000
POINTS = 240  # one hour at 15 s


def _times(rng: np.random.Generator, base: int, n: int, every: int = STEP_MS) -> list[int]:
    jitter = rng.integers(-1500, 1500, n)
    return [int(base + i * every + j) for i, j in enumerate(jitter)]


def _counter(rng: np.random.Generator, n: int, resets: tuple[int, ...] = ()) -> list[float]:
    value = float(rng.integers(0, 50))
    out = []
    for i in range(n):
        if i in resets:
            value = float(rng.integers(0, 5))
        value += float(rng.integers(0, 40)) + round(float(rng.random()), 3)
        out.append(value)
    return out


def build(base_ms: int, seed: int = 7) -> list[Resource]:
    rng = np.random.default_rng(seed)
    n = POINTS

    def counter_series(attrs: dict[str, str], resets: tuple[int, ...] = ()) -> GaugeSeries:
        t = _times(rng, base_ms + int(rng.integers(0, 5000)), n)
        return GaugeSeries(attrs, list(zip(t, _counter(rng, n, resets), strict=True)))

    # a series that stops for 20 minutes (beyond the 5-minute lookback) and starts again
    t_gap = _times(rng, base_ms + 777, n)
    gap = [(t, v) for i, (t, v) in enumerate(zip(t_gap, _counter(rng, n, (160,)), strict=True))]
    gap = [p for i, p in enumerate(gap) if not 100 <= i < 180]
    # a sparse series: one point every 2 minutes
    t_sparse = _times(rng, base_ms + 3333, n // 8, every=120_000)
    sparse = list(zip(t_sparse, _counter(rng, n // 8), strict=True))

    requests = Metric(
        "http.server.requests",
        "{request}",
        "counter",
        "http_server_requests_total",
        [
            counter_series({"http.method": "GET", "code": "200"}, resets=(60, 200)),
            counter_series({"http.method": "POST", "code": "200"}),
            counter_series({"http.method": "GET", "code": "500"}, resets=(120,)),
            GaugeSeries({"http.method": "PUT", "code": "200"}, gap),
            GaugeSeries({"http.method": "DELETE", "code": "404"}, sparse),
        ],
    )

    def gauge(attrs: dict[str, str], scale: float, offset: float) -> GaugeSeries:
        t = _times(rng, base_ms + int(rng.integers(0, 9000)), n)
        walk = offset + np.cumsum(rng.normal(0, scale, n))
        return GaugeSeries(attrs, [(ti, round(float(v), 4)) for ti, v in zip(t, walk, strict=True)])

    memory = Metric(
        "system.memory.usage",
        "By",
        "gauge",
        "system_memory_usage_bytes",
        [
            gauge({"state": "used"}, 1e6, 4e9),
            gauge({"state": "free"}, 1e6, 2e9),
            gauge({"state": "cached"}, 5e5, 1e9),
        ],
    )
    cpu = Metric(
        "system.cpu.utilization",
        "1",
        "gauge",
        "system_cpu_utilization_ratio",
        [gauge({"cpu": str(i), "state": "user"}, 0.01, 0.3 + 0.1 * i) for i in range(4)],
    )
    # a queue that goes away: a stale marker after its point 100, back at point 140
    gone = gauge({"queue": "c"}, 3.0, 50.0)
    gone.points = [
        (t, STALE_NAN if i == 100 else v)
        for i, (t, v) in enumerate(gone.points)
        if i <= 100 or i >= 140
    ]
    queue = Metric(
        "queue.size",
        "",
        "updown",
        "queue_size",
        [gauge({"queue": q}, 3.0, 50.0) for q in ("a", "b")] + [gone],
    )

    def histogram(attrs: dict[str, str]) -> HistSeries:
        bounds = [5.0, 10.0, 25.0, 50.0, 100.0, 250.0]
        t = _times(rng, base_ms + int(rng.integers(0, 7000)), n)
        counts = np.zeros(len(bounds) + 1, dtype=np.int64)
        total = 0.0
        points = []
        for i, ti in enumerate(t):
            if i == 150:  # a restart: every bucket starts again
                counts[:] = 0
                total = 0.0
            new = rng.poisson([3, 8, 12, 9, 5, 2, 1])
            counts += new
            total += float((new * np.array([3, 8, 18, 40, 80, 200, 400])).sum())
            points.append((ti, [int(c) for c in counts], round(total, 3)))
        return HistSeries(attrs, bounds, points)

    duration = Metric(
        "http.server.duration",
        "ms",
        "histogram",
        "http_server_duration_milliseconds",
        [histogram({"http.route": "/cart"}), histogram({"http.route": "/pay"})],
    )
    api = Resource(
        {"service.name": "api", "service.namespace": "shop", "service.instance.id": "api-1"},
        "shop/api",
        "api-1",
        [requests, memory, duration, queue],
    )
    worker_requests = Metric(
        "http.server.requests",
        "{request}",
        "counter",
        "http_server_requests_total",
        [counter_series({"http.method": "GET", "code": "200"}, resets=(30,))],
    )
    worker = Resource(
        {"service.name": "worker", "service.instance.id": "w-1"},
        "worker",
        "w-1",
        [worker_requests, cpu],
    )
    return [api, worker]
