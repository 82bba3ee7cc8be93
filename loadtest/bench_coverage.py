"""Coverage of one flush: ``python -m loadtest.bench_coverage``.

256,000 rows of 16,000 series (16 points each, one per minute, so one hourly bucket
per series), as a flush under the peers benchmark's load holds: the interpreter time
of ``coverage.compute`` and ``coverage.encode``, best of 5.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from shoal.storage import coverage

SERIES = 16_000
POINTS = 16


def main() -> int:
    series = pa.chunked_array([pa.array(np.repeat(np.arange(SERIES, dtype=np.int64), POINTS))])
    minutes = np.tile(np.arange(POINTS, dtype=np.int64), SERIES) * 60_000_000
    time_us = 1_700_000_000_000_000 + minutes
    best_compute = best_encode = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        cov = coverage.compute(time_us, series, 3600)
        computed = time.perf_counter()
        blob = coverage.encode(cov)
        best_compute = min(best_compute, computed - began)
        best_encode = min(best_encode, time.perf_counter() - computed)
    print(
        f"{SERIES * POINTS} rows of {SERIES} series: compute {best_compute * 1e3:.1f} ms, "
        f"encode {best_encode * 1e3:.1f} ms, {len(blob)} bytes"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
