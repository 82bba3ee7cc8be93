"""Metrics produced by the real OpenTelemetry SDK decode to exactly what was emitted."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from shoal.otlp import decode
from shoal.schema import METRICS_SCHEMA

from .json_helpers import to_otlp_json


def _emit() -> ExportMetricsServiceRequest:
    reader = InMemoryMetricReader()
    provider = MeterProvider(
        resource=Resource.create(
            {"service.name": "checkout", "host.name": "node-a", "deployment.replicas": 3}
        ),
        metric_readers=[reader],
        views=[
            View(
                instrument_name="payload.size",
                aggregation=ExponentialBucketHistogramAggregation(max_size=20),
            )
        ],
    )
    meter = provider.get_meter("shop.meter", "2.1.0")
    counter = meter.create_counter("orders.placed", unit="{order}", description="Orders placed")
    counter.add(3, {"region": "eu", "vip": True})
    counter.add(2, {"region": "us", "vip": False})
    updown = meter.create_up_down_counter("queue.items", unit="{item}")
    updown.add(10, {"queue": "a"})
    updown.add(-4, {"queue": "a"})
    histogram = meter.create_histogram("request.duration", unit="ms")
    for value in (1.5, 7.0, 230.0, 12.25):
        histogram.record(value, {"route": "/cart", "retries": 2})
    exp = meter.create_histogram("payload.size", unit="By")
    for value in (0.0, 3.0, 17.0, 1024.0, 0.5):
        exp.record(value, {"kind": "json"})

    def observe(_options: CallbackOptions) -> list[Observation]:
        return [Observation(0.75, {"cpu": 0}), Observation(2.5, {"cpu": 1})]

    meter.create_observable_gauge("cpu.utilization", callbacks=[observe], unit="1")
    data = reader.get_metrics_data()
    assert data is not None
    request = encode_metrics(data)
    provider.shutdown()
    return request


@pytest.fixture(scope="module")
def request_pb() -> ExportMetricsServiceRequest:
    return _emit()


def _points(request: ExportMetricsServiceRequest) -> list[tuple[Any, Any, str]]:
    out: list[tuple[Any, Any, str]] = []
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                assert kind is not None
                for dp in getattr(metric, kind).data_points:
                    out.append((metric, dp, kind))
    return out


def _attrs(kvs: Any) -> dict[str, str]:
    from shoal.otlp import anyvalue

    return {kv.key: anyvalue.encode(kv.value)[0] for kv in kvs}


def _find(rows: list[dict[str, Any]], name: str, attrs: dict[str, str]) -> dict[str, Any]:
    hits = [r for r in rows if r["metric_name"] == name and dict(r["attributes"]) == attrs]
    assert len(hits) == 1, (name, attrs, hits)
    return hits[0]


def test_every_instrument_type_decodes_field_by_field(
    request_pb: ExportMetricsServiceRequest,
) -> None:
    result = decode("metrics", request_pb.SerializeToString())
    assert result.table.schema == METRICS_SCHEMA
    points = _points(request_pb)
    assert result.accepted == len(points) == result.table.num_rows
    assert result.rejected == 0 and result.errors == []
    rows = result.table.to_pylist()
    kinds = {r["metric_type"] for r in rows}
    assert kinds == {"sum", "histogram", "exponential_histogram", "gauge"}

    resource = request_pb.resource_metrics[0].resource
    scope = request_pb.resource_metrics[0].scope_metrics[0].scope
    for metric, dp, kind in points:
        row = _find(rows, metric.name, _attrs(dp.attributes))
        assert row["metric_type"] == kind
        assert row["metric_description"] == (metric.description or None)
        assert row["metric_unit"] == (metric.unit or None)
        assert row["time_unix_nano"] == dp.time_unix_nano
        assert row["timestamp"].timestamp() * 1_000_000 == pytest.approx(
            dp.time_unix_nano // 1000, abs=1
        )
        assert row["start_time_unix_nano"] == dp.start_time_unix_nano
        assert (row["start_timestamp"] is None) == (dp.start_time_unix_nano == 0)
        assert row["flags"] == dp.flags
        assert row["service_name"] == "checkout"
        assert dict(row["resource_attributes"]) == _attrs(resource.attributes)
        assert dict(row["resource_attributes_types"]) == {"deployment.replicas": "int"}
        assert row["scope_name"] == scope.name == "shop.meter"
        assert row["scope_version"] == "2.1.0"
        if kind in ("sum", "gauge"):
            field = dp.WhichOneof("value")
            if field == "as_int":
                assert row["value_int"] == dp.as_int
                assert row["value"] == float(dp.as_int)
            else:
                assert row["value_int"] is None
                assert row["value"] == dp.as_double
        else:
            assert row["value"] is None and row["value_int"] is None
        if kind == "sum":
            assert row["aggregation_temporality"] == metric.sum.aggregation_temporality
            assert row["is_monotonic"] == metric.sum.is_monotonic
        if kind == "gauge":
            assert row["aggregation_temporality"] is None and row["is_monotonic"] is None
        if kind == "histogram":
            assert row["aggregation_temporality"] == metric.histogram.aggregation_temporality
            assert row["count"] == dp.count == 4
            assert row["sum"] == dp.sum
            assert row["min"] == dp.min == 1.5
            assert row["max"] == dp.max == 230.0
            assert row["bucket_counts"] == list(dp.bucket_counts)
            assert row["explicit_bounds"] == list(dp.explicit_bounds)
            assert len(row["bucket_counts"]) == len(row["explicit_bounds"]) + 1
        if kind == "exponential_histogram":
            assert row["count"] == dp.count == 5
            assert row["sum"] == dp.sum
            assert row["min"] == dp.min and row["max"] == dp.max
            assert row["exp_scale"] == dp.scale
            assert row["exp_zero_count"] == dp.zero_count == 1
            assert row["exp_zero_threshold"] == dp.zero_threshold
            assert row["exp_positive_offset"] == dp.positive.offset
            assert row["exp_positive_bucket_counts"] == list(dp.positive.bucket_counts)
            assert row["exp_negative_offset"] == dp.negative.offset
            assert row["exp_negative_bucket_counts"] == list(dp.negative.bucket_counts)
            assert sum(row["exp_positive_bucket_counts"]) == 4
        assert len(row["exemplars"]) == len(dp.exemplars)
        for got, ex in zip(row["exemplars"], dp.exemplars, strict=True):
            assert got["time_unix_nano"] == ex.time_unix_nano
            assert got["trace_id"] == (ex.trace_id.hex() or None)


def test_attribute_types_are_recorded(request_pb: ExportMetricsServiceRequest) -> None:
    rows = decode("metrics", request_pb.SerializeToString()).table.to_pylist()
    eu = _find(rows, "orders.placed", {"region": "eu", "vip": "true"})
    assert eu["value_int"] == 3
    assert dict(eu["attributes_types"]) == {"vip": "bool"}
    hist = next(r for r in rows if r["metric_name"] == "request.duration")
    assert dict(hist["attributes"]) == {"route": "/cart", "retries": "2"}
    assert dict(hist["attributes_types"]) == {"retries": "int"}
    queue = _find(rows, "queue.items", {"queue": "a"})
    assert queue["value_int"] == 6 and queue["is_monotonic"] is False
    gauge = _find(rows, "cpu.utilization", {"cpu": "1"})
    assert gauge["value"] == 2.5 and dict(gauge["attributes_types"]) == {"cpu": "int"}


def test_series_id_separates_series_and_ignores_attribute_order(
    request_pb: ExportMetricsServiceRequest,
) -> None:
    rows = decode("metrics", request_pb.SerializeToString()).table.to_pylist()
    ids = [r["series_id"] for r in rows]
    assert len(set(ids)) == len(rows)  # every point here is its own series
    reordered = ExportMetricsServiceRequest()
    reordered.CopyFrom(request_pb)
    for rm in reordered.resource_metrics:
        rm.resource.attributes.reverse()
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for dp in getattr(metric, str(metric.WhichOneof("data"))).data_points:
                    dp.attributes.reverse()
    again = decode("metrics", reordered.SerializeToString()).table.to_pylist()
    assert sorted(ids) == sorted(r["series_id"] for r in again)


def test_json_and_protobuf_decode_to_identical_tables(
    request_pb: ExportMetricsServiceRequest,
) -> None:
    from_pb = decode("metrics", request_pb.SerializeToString())
    from_json = decode("metrics", to_otlp_json(request_pb), json=True)
    assert from_json.table.equals(from_pb.table)
    assert (from_json.accepted, from_json.rejected) == (from_pb.accepted, from_pb.rejected)
