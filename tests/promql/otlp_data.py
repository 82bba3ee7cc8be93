"""OTLP metric requests for the PromQL tests, built with the OTLP protobuf classes.

A :class:`Dataset` holds a few metrics of every kind; the same samples can be
encoded as one OTLP ``ExportMetricsServiceRequest`` (for shoal) and listed as
Prometheus series (for a real Prometheus fed by remote write), so both see
exactly the same data under the names the OTLP mapping should produce.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as mpb

AGG_CUMULATIVE = mpb.AGGREGATION_TEMPORALITY_CUMULATIVE


STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
"""Prometheus' stale marker: a NaN with this bit pattern (OTLP sends a flag instead)."""


def is_stale(value: float) -> bool:
    return struct.pack("<d", value) == struct.pack("<d", STALE_NAN)


def kv(attrs: dict[str, str]) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()]


def fmt_le(bound: float) -> str:
    text = repr(float(bound))
    return text[:-2] if text.endswith(".0") else text


@dataclasses.dataclass
class GaugeSeries:
    attrs: dict[str, str]
    points: list[tuple[int, float]]  # (ms, value)


@dataclasses.dataclass
class HistSeries:
    attrs: dict[str, str]
    bounds: list[float]
    points: list[tuple[int, list[int], float]]  # (ms, bucket counts (not cumulative), sum)


@dataclasses.dataclass
class Metric:
    name: str
    unit: str
    kind: str  # gauge, counter, updown, histogram
    prom_name: str
    series: list[GaugeSeries] | list[HistSeries]


@dataclasses.dataclass
class Resource:
    attrs: dict[str, str]
    job: str
    instance: str
    metrics: list[Metric]


def request(resources: list[Resource]) -> bytes:
    req = ExportMetricsServiceRequest()
    for res in resources:
        rm = req.resource_metrics.add()
        rm.resource.attributes.extend(kv(res.attrs))
        sm = rm.scope_metrics.add()
        sm.scope.name = "tests"
        for metric in res.metrics:
            m = sm.metrics.add()
            m.name = metric.name
            m.unit = metric.unit
            if metric.kind in ("gauge",):
                for s in metric.series:
                    assert isinstance(s, GaugeSeries)
                    for t, v in s.points:
                        p = m.gauge.data_points.add()
                        p.attributes.extend(kv(s.attrs))
                        p.time_unix_nano = t * 1_000_000
                        if is_stale(v):
                            # FLAG_NO_RECORDED_VALUE; shoal's decoder wants a value beside it
                            p.flags = 1
                            p.as_double = 0.0
                        else:
                            p.as_double = v
            elif metric.kind in ("counter", "updown"):
                m.sum.aggregation_temporality = AGG_CUMULATIVE
                m.sum.is_monotonic = metric.kind == "counter"
                for s in metric.series:
                    assert isinstance(s, GaugeSeries)
                    for t, v in s.points:
                        p = m.sum.data_points.add()
                        p.attributes.extend(kv(s.attrs))
                        p.time_unix_nano = t * 1_000_000
                        if is_stale(v):
                            # FLAG_NO_RECORDED_VALUE; shoal's decoder wants a value beside it
                            p.flags = 1
                            p.as_double = 0.0
                        else:
                            p.as_double = v
            else:
                m.histogram.aggregation_temporality = AGG_CUMULATIVE
                for h in metric.series:
                    assert isinstance(h, HistSeries)
                    for t, counts, total in h.points:
                        hp = m.histogram.data_points.add()
                        hp.attributes.extend(kv(h.attrs))
                        hp.time_unix_nano = t * 1_000_000
                        hp.count = sum(counts)
                        hp.sum = total
                        hp.bucket_counts.extend(counts)
                        hp.explicit_bounds.extend(h.bounds)
    return req.SerializeToString()


def prometheus_series(
    resources: list[Resource],
) -> Iterator[tuple[dict[str, str], list[tuple[int, float]]]]:
    """The series a Prometheus fed by the same OTel data holds: labels and samples."""
    for res in resources:
        ident = {"job": res.job, "instance": res.instance}
        for metric in res.metrics:
            for s in metric.series:
                labels = {k.replace(".", "_"): v for k, v in s.attrs.items()} | ident
                if isinstance(s, GaugeSeries):
                    yield {"__name__": metric.prom_name, **labels}, list(s.points)
                    continue
                cum: list[list[float]] = []
                for _, counts, _ in s.points:
                    run = 0.0
                    row = []
                    for c in counts:
                        run += c
                        row.append(run)
                    cum.append(row)
                les = [fmt_le(b) for b in s.bounds] + ["+Inf"]
                for j, le in enumerate(les):
                    yield (
                        {"__name__": f"{metric.prom_name}_bucket", "le": le, **labels},
                        [(p[0], cum[i][j]) for i, p in enumerate(s.points)],
                    )
                yield (
                    {"__name__": f"{metric.prom_name}_sum", **labels},
                    [(p[0], p[2]) for p in s.points],
                )
                yield (
                    {"__name__": f"{metric.prom_name}_count", **labels},
                    [(p[0], float(sum(p[1]))) for p in s.points],
                )
