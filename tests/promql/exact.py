"""``rate``/``increase``/``delta`` of one window as plain Python floats (IEEE doubles,
like Go's float64): in Prometheus 2.42's order (promql/functions.go, extrapolatedRate),
and in the order shoal used before, to find data on which the two orders disagree."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

Points = Sequence[tuple[int, float]]


def _corrections(points: Points) -> list[float]:
    """The value before each drop, in order."""
    return [p[1] for p, c in itertools.pairwise(points) if c[1] < p[1]]


def _interval(points: Points, result: float, start_ms: int, end_ms: int, counter: bool) -> float:
    """The extrapolated interval (seconds) for a window ``[start_ms, end_ms]``."""
    (t0, v0), (tn, _) = points[0], points[-1]
    to_start = float(t0 - start_ms) / 1000
    to_end = float(end_ms - tn) / 1000
    sampled = float(tn - t0) / 1000
    avg = sampled / float(len(points) - 1)
    if counter and result > 0 and v0 >= 0:
        to_zero = sampled * (v0 / result)
        if to_zero < to_start:
            to_start = to_zero
    threshold = avg * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else avg / 2
    interval += to_end if to_end < threshold else avg / 2
    return interval


def go_seconds(range_ms: int) -> float:
    """Go's ``time.Duration.Seconds()``."""
    whole, rest = divmod(range_ms * 1_000_000, 1_000_000_000)
    return float(whole) + float(rest) / 1e9


def prometheus(
    points: Points, end_ms: int, range_ms: int, counter: bool, rate: bool
) -> float | None:
    """Prometheus 2.42: last - first, each reset's value added in turn, then
    ``result *= (interval / sampled) [/ range seconds]``."""
    if len(points) < 2:
        return None
    result = points[-1][1] - points[0][1]
    if counter:
        for value in _corrections(points):
            result += value
    interval = _interval(points, result, end_ms - range_ms, end_ms, counter)
    sampled = float(points[-1][0] - points[0][0]) / 1000
    factor = interval / sampled
    if rate:
        factor /= go_seconds(range_ms)
    return result * factor


def previous(
    points: Points, end_ms: int, range_ms: int, counter: bool, rate: bool, before: float = 0.0
) -> float | None:
    """shoal's former order: the resets as a difference of running sums (``before`` is
    the running sum of the series' drops before the window), ``result * (interval /
    sampled)``, then ``/ (range_ms / 1000)``."""
    if len(points) < 2:
        return None
    result = points[-1][1] - points[0][1]
    if counter:
        total = before
        running = [before]
        for value in _corrections(points):
            total += value
            running.append(total)
        result = result + (running[-1] - running[0])
    interval = _interval(points, result, end_ms - range_ms, end_ms, counter)
    sampled = float(points[-1][0] - points[0][0]) / 1000
    result = result * (interval / sampled)
    if rate:
        result = result / (range_ms / 1000.0)
    return result


def counter_points(
    rng: random.Random, start_ms: int, n: int, resets: int
) -> list[tuple[int, float]]:
    """``n`` samples of a counter from ``start_ms``, about 15 s apart with jitter, that
    grows by uneven fractions and falls back ``resets`` times."""
    reset_at = set(rng.sample(range(1, n), min(resets, n - 1)))
    t, value, out = start_ms, rng.uniform(0, 50), []
    for i in range(n):
        if i in reset_at:
            value = rng.uniform(0, 3)
        out.append((t, value))
        value += rng.uniform(0.01, 9.99) * rng.choice((0.1, 0.3, 1.7, 13.0))
        t += 15_000 + rng.randrange(-2_000, 2_000)
    return out
