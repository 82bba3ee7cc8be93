"""Decoded rows own their buffers: none is a view of the protobuf decoder's output.

That output comes through Arrow's C interface, where one of its buffers still in use
keeps the whole decoded request alive; rows wait in the snapshot until their flush, so
a view would hold every request's decoded body in memory beside its rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from loadtest import payloads
from shoal.otlp import decode, scanned
from shoal.rows.known import KnownSeries

from .test_fuzz import logs_requests, metrics_requests, traces_requests

STRATEGIES = {"metrics": metrics_requests, "logs": logs_requests, "spans": traces_requests}
BENCH_BODIES = {
    "metrics": lambda: payloads.metrics_request(points=300, series=30, seed=4),
    "logs": lambda: payloads.logs_request(records=300, seed=4),
    "spans": lambda: payloads.traces_request(spans=300, seed=4),
}


@pytest.mark.parametrize("signal", sorted(BENCH_BODIES))
def test_load_test_bodies_share_no_buffer(
    signal: str, decoder_output: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # series not seen before: the first time, the request is decoded in full
    monkeypatch.setattr(scanned, "KNOWN", KnownSeries(max_series=1000, max_bytes=16 << 20))
    for round_ in range(2):  # the second time, what the decoder caches by bytes is found
        decoder_output.clear()
        result = decode(signal, BENCH_BODIES[signal]().SerializeToString())
        assert result.table.num_rows == 300
        # known metric series the second time: nothing to decode
        assert decoder_output.batches or (signal == "metrics" and round_ == 1)
        assert decoder_output.shared(result.table) == set()


@settings(
    max_examples=40, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(data=st.data(), signal=st.sampled_from(sorted(STRATEGIES)))
def test_generated_requests_share_no_buffer(
    data: st.DataObject, signal: str, decoder_output: Any
) -> None:
    decoder_output.clear()
    result = decode(signal, data.draw(STRATEGIES[signal]()).SerializeToString())
    assert decoder_output.shared(result.table) == set()


def _one_point(kind: str) -> bytes:
    """A request with one metric of ``kind`` and one point, nothing else beside it: its
    columns are not joined with another kind's, so no copy happens by the way."""
    req = ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "m"
    point = getattr(metric, kind).data_points.add()
    point.time_unix_nano = 1
    if kind == "summary":
        point.sum = 2.5
        quantile = point.quantile_values.add()
        quantile.quantile, quantile.value = 0.5, 1.0
    elif kind == "histogram":
        point.sum, point.min, point.max = 2.5, 0.5, 2.0
        point.explicit_bounds.extend([1.0])
        point.bucket_counts.extend([1, 2])
    elif kind == "exponential_histogram":
        point.sum, point.scale, point.zero_threshold = 2.5, 2, 0.1
        point.positive.offset = 3
        point.positive.bucket_counts.extend([1])
    return req.SerializeToString()


@pytest.mark.parametrize("kind", ["summary", "histogram", "exponential_histogram"])
def test_one_kind_of_point_alone_shares_no_buffer(kind: str, decoder_output: Any) -> None:
    # a summary with nothing but a time once kept the decoder's `sum` column as its own
    decoder_output.clear()
    result = decode("metrics", _one_point(kind))
    assert result.table.num_rows == 1
    assert decoder_output.batches
    assert decoder_output.shared(result.table) == set()
