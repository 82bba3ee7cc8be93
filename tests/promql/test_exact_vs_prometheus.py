"""shoal against a real Prometheus 2.42 to the bit: ``rate``/``increase``/``delta`` on
data where the order of the floating-point operations shows, ``histogram_quantile``
over ``rate`` whose rank falls exactly on a bucket's count, and the order of an
instant ``topk``/``bottomk`` answer whose groups interleave.

The data is searched for (tests/promql/exact.py): counters on which shoal's former
order of operations gave other bits than Prometheus' at the instants queried, and
histograms whose quantile's rank equals a bucket's count under Prometheus' order but
not under the former one. Both servers get it by remote write, series in an order
that is not their labels' order.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import Any

import pytest

from loadtest.ingest import ServerProcess
from loadtest.prometheus import Prometheus
from tests.promql import exact
from tests.promql.conftest import get_json, remote_write_to

MINUTE = 60_000
RANGE_MS = 5 * MINUTE
INSTANTS = (22 * MINUTE + 1_234, 27 * MINUTE + 567)
"""Query times, from the start of the data."""
JOBS = ("b", "a", "c", "a", "b", "c", "c", "b", "a")
"""The job of each counter and gauge: groups that interleave in label order."""

Points = list[tuple[int, float]]


def _window(points: Points, end: int) -> Points:
    return [p for p in points if end - RANGE_MS <= p[0] <= end]


def _counters() -> list[Points]:
    """Counters (times from 0) on which the former order gave other bits at the first
    instant: rate without resets for the first half, increase across resets after."""
    out: list[Points] = []
    seed = 0
    while len(out) < len(JOBS):
        seed += 1
        rng = random.Random(seed)
        resets = 0 if len(out) < len(JOBS) // 2 else 2
        points = exact.counter_points(rng, 0, 130, resets)
        window = _window(points, INSTANTS[0])
        if resets and not any(b[1] < a[1] for a, b in itertools.pairwise(window)):
            continue
        fn = (True, True) if not resets else (True, False)
        new = exact.prometheus(window, INSTANTS[0], RANGE_MS, *fn)
        if new != exact.previous(window, INSTANTS[0], RANGE_MS, *fn):
            out.append(points)
    return out


def _histogram(seed: int) -> tuple[float, Points, Points] | None:
    """Buckets ``le="1"`` (and an empty ``le="2"``) and ``le="+Inf"`` of one histogram,
    and a quantile whose rank is exactly the rate of ``le="1"`` in Prometheus' order
    but above it in the former order (which then picks a later bucket)."""
    rng = random.Random(seed)
    low, total = rng.uniform(0, 20), 0.0
    total = low + rng.uniform(0, 20)
    ones: Points = []
    alls: Points = []
    t = 0
    for _ in range(130):
        ones.append((t, low))
        alls.append((t, total))
        step = rng.uniform(0.01, 5) * rng.choice((0.1, 0.3, 1.7))
        low += step
        total += step + rng.uniform(0.01, 5) * rng.choice((0.1, 0.3, 1.7))
        t += 15_000 + rng.randrange(-2_000, 2_000)
    end = INSTANTS[0]
    p1 = exact.prometheus(_window(ones, end), end, RANGE_MS, True, True)
    pinf = exact.prometheus(_window(alls, end), end, RANGE_MS, True, True)
    o1 = exact.previous(_window(ones, end), end, RANGE_MS, True, True)
    oinf = exact.previous(_window(alls, end), end, RANGE_MS, True, True)
    assert p1 is not None and pinf is not None and o1 is not None and oinf is not None
    q = p1 / pinf
    if q * pinf == p1 and o1 < q * oinf:
        return q, ones, alls
    return None


def _histograms(n: int) -> list[tuple[float, Points, Points]]:
    found = []
    seed = 0
    while len(found) < n:
        seed += 1
        hit = _histogram(seed)
        if hit is not None:
            found.append(hit)
    return found


HISTOGRAMS = _histograms(2)


def _series(base: int) -> list[tuple[dict[str, str], Points]]:
    out: list[tuple[dict[str, str], Points]] = []
    for i, (job, points) in enumerate(zip(JOBS, _counters(), strict=True)):
        labels = {"__name__": "exact_requests_total", "instance": f"i{i}", "job": job}
        out.append((labels, [(base + t, v) for t, v in points]))
        gauge = [(base + t, float((i * 37) % 11) + i / 10) for t, _ in points]
        out.append(({"__name__": "exact_queue_depth", "instance": f"i{i}", "job": job}, gauge))
    for h, (_, ones, alls) in enumerate(HISTOGRAMS):
        for le, points in (("1", ones), ("2", ones), ("+Inf", alls)):
            labels = {"__name__": "exact_latency_seconds_bucket", "job": f"h{h}", "le": le}
            out.append((labels, [(base + t, v) for t, v in points]))
    out.reverse()  # neither in label order nor in the order of the series' names
    return out


@pytest.fixture(scope="module")
def loaded(prometheus: Prometheus, shoal_server: ServerProcess) -> int:
    base = (int(time.time() * 1000) - 40 * MINUTE) // MINUTE * MINUTE + 4_321
    remote_write_to([prometheus.url, shoal_server.url], _series(base))
    return base


def _instant(url: str, query: str, t_ms: int) -> list[tuple[dict[str, str], str]]:
    answer = get_json(url, "/api/v1/query", {"query": query, "time": t_ms / 1000})
    assert answer["status"] == "success", (query, answer)
    return [(item["metric"], item["value"][1]) for item in answer["data"]["result"]]


def _both(
    prometheus: Prometheus, shoal: ServerProcess, query: str, t_ms: int
) -> tuple[list[Any], list[Any]]:
    return _instant(shoal.url, query, t_ms), _instant(prometheus.url, query, t_ms)


def _bits(text: str) -> str:
    return float(text.replace("+Inf", "inf").replace("-Inf", "-inf")).hex()


@pytest.mark.parametrize("fn", ["rate", "increase", "delta"])
@pytest.mark.parametrize("range_text", ["5m", "4m30s", "90500ms"])
def test_range_functions_to_the_bit(
    fn: str,
    range_text: str,
    loaded: int,
    prometheus: Prometheus,
    shoal_server: ServerProcess,
) -> None:
    query = f"{fn}(exact_requests_total[{range_text}])"
    for instant in INSTANTS:
        ours, theirs = _both(prometheus, shoal_server, query, loaded + instant)
        assert len(theirs) == len(JOBS)
        mine = {tuple(sorted(m.items())): v for m, v in ours}
        for metric, value in theirs:
            got = mine[tuple(sorted(metric.items()))]
            assert got == value and _bits(got) == _bits(value), (query, instant, metric)
    params = {
        "query": query,
        "start": (loaded + 6 * MINUTE) / 1000,
        "end": (loaded + 32 * MINUTE) / 1000,
        "step": "13s",
    }
    ours_range = get_json(shoal_server.url, "/api/v1/query_range", params)["data"]["result"]
    theirs_range = get_json(prometheus.url, "/api/v1/query_range", params)["data"]["result"]
    assert [s["metric"] for s in ours_range] == [s["metric"] for s in theirs_range]
    for a, b in zip(ours_range, theirs_range, strict=True):
        assert a["values"] == b["values"], (query, a["metric"])


@pytest.mark.parametrize("which", range(len(HISTOGRAMS)))
def test_quantile_on_a_bucket_boundary_picks_prometheus_bucket(
    which: int, loaded: int, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    q = HISTOGRAMS[which][0]
    query = f'histogram_quantile({q!r}, rate(exact_latency_seconds_bucket{{job="h{which}"}}[5m]))'
    ours, theirs = _both(prometheus, shoal_server, query, loaded + INSTANTS[0])
    # the rank is the first bucket's count exactly: Prometheus answers that bucket's
    # upper bound (the former order went on to the next bucket and answered 2)
    assert theirs == [({"job": f"h{which}"}, "1")]
    assert ours == theirs


ORDER_QUERIES = [
    "exact_queue_depth",
    "topk by (job) (2, exact_queue_depth)",
    "bottomk by (job) (2, exact_queue_depth)",
    "topk without (instance) (1, exact_queue_depth)",
    "bottomk without (instance, job) (4, exact_queue_depth)",
    "topk by (job) (2, rate(exact_requests_total[5m]))",
    "bottomk without (instance) (1, increase(exact_requests_total[5m]))",
    "topk by (job) (5, exact_queue_depth * 2)",
]


@pytest.mark.parametrize("query", ORDER_QUERIES)
def test_instant_answers_in_prometheus_order(
    query: str, loaded: int, prometheus: Prometheus, shoal_server: ServerProcess
) -> None:
    for instant in INSTANTS:
        ours, theirs = _both(prometheus, shoal_server, query, loaded + instant)
        assert len(theirs) >= 3
        assert ours == theirs, query


def test_the_data_tells_the_orders_apart() -> None:
    # label order, which Prometheus answers in, is not the order the series were written
    # (the order of their groups' first series), nor in sorted order of the jobs
    series = _series(0)
    written = [labels for labels, _ in series if labels["__name__"] == "exact_queue_depth"]
    in_label_order = sorted(written, key=lambda m: sorted(m.items()))

    def groups(rows: list[dict[str, str]]) -> list[str]:
        return list(dict.fromkeys(labels["job"] for labels in rows))

    assert groups(written) != groups(in_label_order) != sorted(groups(in_label_order))
