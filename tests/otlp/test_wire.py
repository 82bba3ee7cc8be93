"""A metrics request is decoded first without its histograms and summaries.

ptars decodes a metrics request with histograms, exponential histograms and summaries
left as bytes, and in full only when the request holds any of them. Whichever way it
went, the rows are those of the full decoding, and a request that is not valid
protobuf is refused with the full decoder's message.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from loadtest import payloads
from shoal.errors import DecodeError
from shoal.otlp import metrics, wire

from .json_helpers import identical
from .test_fuzz import metrics_requests

_REQUEST = wire.REQUEST_TYPES["metrics"]


def _full(body: bytes) -> object:
    try:
        request = wire._OTLP.batch(_REQUEST, body, "x").to_struct_array()
        result = metrics.decode(request)
    except DecodeError as exc:
        return str(exc)
    return result.table, result.rejected, result.errors


def _lean_or_full(body: bytes) -> object:
    try:
        result = metrics.decode(wire.to_struct("metrics", body))
    except DecodeError as exc:
        return str(exc)
    return result.table, result.rejected, result.errors


def _same(a: object, b: object) -> bool:
    """Equal outcomes, NaN values equal to NaN (a summary's quantiles may be NaN)."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return identical(a[0], b[0]) and a[1:] == b[1:]
    return a == b


@settings(max_examples=120, deadline=None)
@given(request=metrics_requests())
def test_rows_are_those_of_the_full_decoding(request: ExportMetricsServiceRequest) -> None:
    body = request.SerializeToString()
    assert _same(_lean_or_full(body), _full(body))


def test_gauges_and_sums_take_the_lean_descriptors_and_histograms_do_not() -> None:
    numbers = payloads.metrics_request(points=20, series=4).SerializeToString()
    lean = wire.to_struct("metrics", numbers)
    found = lean.field("resource_metrics").values.field("scope_metrics").values
    assert str(found.field("metrics").values.field("histogram").type) == "binary"
    request = ExportMetricsServiceRequest()
    metric = request.resource_metrics.add().scope_metrics.add().metrics.add(name="h")
    metric.histogram.SetInParent()  # present, if empty: decoded in full
    full = wire.to_struct("metrics", request.SerializeToString())
    found = full.field("resource_metrics").values.field("scope_metrics").values
    assert str(found.field("metrics").values.field("histogram").type).startswith("struct")
    assert _same(_lean_or_full(numbers), _full(numbers))


def test_bytes_that_are_not_a_request_get_the_full_decoders_message() -> None:
    with pytest.raises(DecodeError, match="metrics request is not valid OTLP protobuf"):
        wire.to_struct("metrics", b"\x0a\xff\xff\xff\xff\x0f")
