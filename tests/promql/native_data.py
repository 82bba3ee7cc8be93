"""Native histogram series for the comparison with a real Prometheus, made from
observations: each histogram holds, at its schema, the observations made since its
series last restarted, each in the bucket that holds it (Prometheus' bucket ``i`` is
``(base^(i-1), base^i]``), independently of shoal's code.

- ``rpc_duration_seconds{route="/a"}``: schema 3, a restart after point 150 (an empty
  histogram: every bucket drops, as a restarted process's does);
- ``rpc_duration_seconds{route="/b"}``: schema 2, negative and zero observations;
- ``resized_seconds``: schema 2 lowered to 0 after point 60 (as a client lowers it when
  its buckets grow too many);
- ``queue_wait_seconds``: a gauge histogram (reset hint GAUGE), new observations each point;
- ``jobs_seconds``: a float histogram (whole counts);
- ``gone_seconds``: ends with a stale marker after point 100.
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np

from loadtest.native_histograms import GAUGE, NativeHistogram, Series

STEP_MS = 15_000
POINTS = 240
STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def index(value: float, schema: int) -> int:
    """The Prometheus bucket of ``|value|`` > 0 at ``schema``."""
    return math.ceil(math.log2(abs(value)) * 2.0**schema)


@dataclasses.dataclass
class Observed:
    """Observations since the last restart."""

    values: list[float] = dataclasses.field(default_factory=list)

    def histogram(self, t_ms: int, schema: int, **extra: object) -> NativeHistogram:
        positive: dict[int, float] = {}
        negative: dict[int, float] = {}
        zero = 0
        for v in self.values:
            if v == 0:
                zero += 1
                continue
            side = positive if v > 0 else negative
            side[index(v, schema)] = side.get(index(v, schema), 0) + 1
        return NativeHistogram(
            t_ms, schema, positive, negative, zero, sum=math.fsum(self.values), **extra
        )  # type: ignore[arg-type]


def _times(rng: np.random.Generator, base: int) -> list[int]:
    jitter = rng.integers(-1500, 1500, POINTS)
    return [int(base + i * STEP_MS + j) for i, j in enumerate(jitter)]


def build(base_ms: int, seed: int = 11) -> list[Series]:
    rng = np.random.default_rng(seed)

    def latencies(n: int, scale: float = 0.05) -> list[float]:
        return [float(v) for v in rng.lognormal(math.log(scale), 1.2, n)]

    out: list[Series] = []
    a = Observed()
    points = []
    for i, t in enumerate(_times(rng, base_ms + 1111)):
        if i == 150:
            a = Observed()  # restarted: an empty histogram first
        else:
            a.values += latencies(int(rng.integers(1, 8)))
        points.append(a.histogram(t, 3))
    out.append(({"__name__": "rpc_duration_seconds", "job": "api", "route": "/a"}, [], points))
    b = Observed()
    points = []
    for t in _times(rng, base_ms + 2222):
        b.values += latencies(int(rng.integers(1, 6)), 2.0)
        if rng.random() < 0.3:
            b.values.append(0.0)
        if rng.random() < 0.2:
            b.values.append(-float(rng.uniform(0.001, 0.01)))  # the sum still grows
        points.append(b.histogram(t, 2))
    out.append(({"__name__": "rpc_duration_seconds", "job": "api", "route": "/b"}, [], points))
    r = Observed()
    points = []
    for i, t in enumerate(_times(rng, base_ms + 6666)):
        r.values += latencies(int(rng.integers(1, 6)), 2.0)
        points.append(r.histogram(t, 2 if i < 60 else 0))
    out.append(({"__name__": "resized_seconds", "job": "api"}, [], points))
    points = []
    for t in _times(rng, base_ms + 3333):
        waits = Observed(latencies(int(rng.integers(0, 20)), 0.2))
        points.append(waits.histogram(t, 1, reset_hint=GAUGE))
    out.append(({"__name__": "queue_wait_seconds", "job": "worker"}, [], points))
    c = Observed(latencies(1))
    points = []
    for t in _times(rng, base_ms + 4444):
        c.values += latencies(int(rng.integers(0, 5)), 1.0)
        points.append(c.histogram(t, 1, floats=True))
    out.append(({"__name__": "jobs_seconds", "job": "worker"}, [], points))
    d = Observed()
    points = []
    for i, t in enumerate(_times(rng, base_ms + 5555)[:101]):
        d.values += latencies(3)
        points.append(d.histogram(t, 0) if i < 100 else NativeHistogram(t, sum=STALE))
    out.append(({"__name__": "gone_seconds", "job": "worker"}, [], points))
    return out
