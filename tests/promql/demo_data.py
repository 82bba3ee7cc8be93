"""Samples shaped like the PromQL compliance tester's demo service, as a scrape would write them.

The compliance query set (testdata/compliance/) is written against three
instances of a demo service scraped every 5 s by a job ``demo``. This module
makes series of the same names and labels with values of the same kinds, each
instance scraped at its own offset from the 5 s grid: memory gauges by type, a
CPU count, CPU counters by mode (one instance restarts halfway, a counter
reset), a growing disk gauge, a request-duration histogram by method, path and
status, a batch job's last-success timestamp, and a metric that comes and goes
(with the staleness marker a scrape writes when a series disappears).
"""

from __future__ import annotations

import itertools
import math
import struct

import numpy as np

from loadtest import remote_write

SCRAPE_MS = 5_000
INSTANCES = ("demo.promlabs.com:10000", "demo.promlabs.com:10001", "demo.promlabs.com:10002")
OFFSETS_MS = (1_234, 2_718, 4_321)
BOUNDS = ("0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf")
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]

COUNTERS = ("demo_cpu_usage_seconds_total",)
HISTOGRAMS = ("demo_api_request_duration_seconds",)

Samples = list[tuple[int, float]]
Series = tuple[dict[str, str], Samples]


def _series(name: str, t: np.ndarray, values: np.ndarray, **labels: str) -> Series:
    samples = [(int(a), float(b)) for a, b in zip(t, values, strict=True)]
    return {"__name__": name, **labels}, samples


def build(start_ms: int, end_ms: int, seed: int = 11) -> list[Series]:
    """Every series between ``start_ms`` and ``end_ms``."""
    rng = np.random.default_rng(seed)
    out: list[Series] = []
    for n, (instance, offset) in enumerate(zip(INSTANCES, OFFSETS_MS, strict=True)):
        t = np.arange(start_ms + offset, end_ms, SCRAPE_MS, dtype=np.int64)
        k = len(t)
        base = {"job": "demo", "instance": instance}
        phase = np.arange(k) / 120.0 * 2 * math.pi
        for i, kind in enumerate(("buffers", "cached", "free", "used")):
            level = (n + 1) * (i + 1) * 1.5e8 + 3e7 * np.sin(phase + i)
            out.append(_series("demo_memory_usage_bytes", t, level, **base, type=kind))
        out.append(_series("demo_num_cpus", t, np.full(k, float(2 + 2 * n)), **base))
        for i, mode in enumerate(("idle", "system", "user")):
            counter = np.cumsum(rng.uniform(0.1, 1.0 + i, k))
            if n == 1:  # this instance restarts halfway: its counters start again
                half = k // 2
                counter[half:] -= counter[half - 1] + 0.25
            out.append(_series("demo_cpu_usage_seconds_total", t, counter, **base, mode=mode))
        disk = 1e9 + 1e6 * (n + 1) * np.arange(k) + rng.normal(0, 2e5, k)
        out.append(_series("demo_disk_usage_bytes", t, disk, **base))
        runs = t - (t - t[0]) % 300_000  # the batch job succeeds every 5 minutes
        name = "demo_batch_last_success_timestamp_seconds"
        out.append(_series(name, t, np.floor(runs / 1000.0), **base))
        _histograms(rng, t, base, out)
        _intermittent(t, base, out)
    return out


def _histograms(
    rng: np.random.Generator, t: np.ndarray, base: dict[str, str], out: list[Series]
) -> None:
    k = len(t)
    name = "demo_api_request_duration_seconds"
    for method, path, status in itertools.product(
        ("GET", "POST"), ("/api/foo", "/api/bar"), ("200", "500")
    ):
        labels = {**base, "method": method, "path": path, "status": status}
        per_bucket = rng.poisson(rng.uniform(0.2, 3.0, len(BOUNDS)), (k, len(BOUNDS)))
        cumulative = np.cumsum(np.cumsum(per_bucket, axis=1), axis=0).astype(float)
        for j, le in enumerate(BOUNDS):
            out.append(_series(name + "_bucket", t, cumulative[:, j], **labels, le=le))
        total = np.cumsum(per_bucket.sum(axis=1) * rng.uniform(0.01, 0.3, k))
        out.append(_series(name + "_count", t, cumulative[:, -1], **labels))
        out.append(_series(name + "_sum", t, total, **labels))


def _intermittent(t: np.ndarray, base: dict[str, str], out: list[Series]) -> None:
    """Present for two minutes, gone for two; a staleness marker at the first missed scrape."""
    up = ((t - t[0]) // 120_000) % 2 == 0
    samples: Samples = []
    for i, (when, on) in enumerate(zip(t, up, strict=True)):
        if on:
            samples.append((int(when), float(i % 7)))
        elif i > 0 and up[i - 1]:
            samples.append((int(when), STALE))
    out.append(({"__name__": "demo_intermittent_metric", **base}, samples))


def requests(series: list[Series], chunk_ms: int = 600_000) -> list[bytes]:
    """Remote-write 1.0 bodies (snappy-compressed) in time order, ``chunk_ms`` of samples each,
    with the counters' and histograms' metadata as Prometheus sends it."""
    first = min(s[1][0][0] for s in series if s[1])
    last = max(s[1][-1][0] for s in series if s[1])
    metadata = b"".join(
        [remote_write.metadata_v1(name, 1) for name in COUNTERS]
        + [remote_write.metadata_v1(name, 3) for name in HISTOGRAMS]
    )
    bodies = []
    for lo in range(first, last + 1, chunk_ms):
        hi = lo + chunk_ms
        part = [(lab, [p for p in samples if lo <= p[0] < hi]) for lab, samples in series]
        raw = remote_write.encode([(lab, samples) for lab, samples in part if samples])
        bodies.append(remote_write.compress(raw + metadata))
    return bodies
