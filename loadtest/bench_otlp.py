"""OTLP decode throughput: protobuf and OTLP/JSON to Arrow, per signal, on one core.

    python -m loadtest.bench_otlp [--seconds 2] [--points 1000]

Payloads come from :mod:`loadtest.payloads` (1,000 points per request, 8
metrics, 4 attributes per point by default). Each rate is the best of three
timed rounds of ``--seconds`` of CPU time each (``time.process_time``, so
other processes sharing the machine do not count against the rate). The
floor, ``ExportMetricsServiceRequest.FromString`` alone on the same bytes, is
measured in the same run so ratios can be compared across noisy machines.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from loadtest.payloads import logs_request, metrics_request, to_otlp_json, traces_request
from shoal.otlp import decode

TARGETS = {"metrics": 500_000, "logs": 300_000, "spans": 200_000}


def rate(fn: Callable[[], object], items: int, seconds: float) -> float:
    """Items per second, best of three rounds of about ``seconds`` each."""
    fn()
    best = 0.0
    for _ in range(3):
        calls = 0
        start = time.process_time()
        while True:
            fn()
            calls += 1
            elapsed = time.process_time() - start
            if elapsed >= seconds:
                break
        best = max(best, calls * items / elapsed)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each timed round")
    parser.add_argument("--points", type=int, default=1000, help="points per request")
    args = parser.parse_args(argv)
    start_ns = 1_700_000_000_000_000_000
    requests: dict[str, Message] = {
        "metrics": metrics_request(points=args.points, start_ns=start_ns),
        "logs": logs_request(records=args.points, start_ns=start_ns),
        "spans": traces_request(spans=args.points, start_ns=start_ns),
    }
    pb_body = requests["metrics"].SerializeToString()
    floor = rate(lambda: ExportMetricsServiceRequest.FromString(pb_body), args.points, args.seconds)
    rows: list[tuple[str, float, float | None]] = [
        ("floor: ExportMetricsServiceRequest.FromString", floor, None)
    ]
    for signal, message in requests.items():
        body = message.SerializeToString()
        as_json = to_otlp_json(message)
        pb = rate(functools.partial(decode, signal, body), args.points, args.seconds)
        js = rate(functools.partial(decode, signal, as_json, json=True), args.points, args.seconds)
        rows.append((f"{signal} protobuf -> Arrow", pb, TARGETS[signal]))
        rows.append((f"{signal} OTLP/JSON -> Arrow", js, pb / 4))
    width = max(len(name) for name, _, _ in rows)
    print(f"{'path':<{width}}  {'items/s':>10}  {'x floor':>8}  {'target':>10}  status")
    for name, value, target in rows:
        status = "" if target is None else ("ok" if value >= target else "BELOW TARGET")
        shown = "" if target is None else f"{target:>10,.0f}"
        print(f"{name:<{width}}  {value:>10,.0f}  {value / floor:>8.3f}  {shown:>10}  {status}")


if __name__ == "__main__":
    main()
