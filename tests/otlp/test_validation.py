"""Documented validation rules: what is rejected, what is accepted, what is an error."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from shoal.errors import DecodeError
from shoal.otlp import SIGNALS, decode
from shoal.schema import LOGS_SCHEMA, METRICS_SCHEMA, SPANS_SCHEMA

from .json_helpers import identical, to_otlp_json

T0 = 1_700_000_000_123_456_789


def _metrics(*metrics: Metric) -> ExportMetricsServiceRequest:
    req = ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.add(key="service.name", value=AnyValue(string_value="svc"))
    rm.scope_metrics.add().metrics.extend(metrics)
    return req


def _gauge(name: str, *values: float | None, time: int = T0) -> Metric:
    m = Metric(name=name)
    for v in values:
        dp = m.gauge.data_points.add(time_unix_nano=time)
        if v is not None:
            dp.as_double = v
    return m


def _both(req: object, signal: str) -> list[object]:
    from google.protobuf.message import Message

    assert isinstance(req, Message)
    a = decode(signal, req.SerializeToString())
    b = decode(signal, to_otlp_json(req), json=True)
    assert identical(a.table, b.table) and (a.rejected, a.errors) == (b.rejected, b.errors)
    return [a]


def test_signals_and_empty_requests_have_exact_schemas() -> None:
    assert SIGNALS == ("metrics", "logs", "spans")
    for signal, schema in zip(SIGNALS, (METRICS_SCHEMA, LOGS_SCHEMA, SPANS_SCHEMA), strict=True):
        result = decode(signal, b"")
        assert result.table.schema == schema
        assert (result.accepted, result.rejected, result.errors) == (0, 0, [])
        assert decode(signal, b"{}", json=True).table.schema == schema


def test_unknown_signal_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown signal"):
        decode("profiles", b"")


def test_rejected_metric_points_are_counted_with_reasons() -> None:
    m_hist = Metric(name="h")
    ok = m_hist.histogram.data_points.add(time_unix_nano=T0, count=3)
    ok.bucket_counts.extend([1, 2])
    ok.explicit_bounds.extend([5.0])
    bad = m_hist.histogram.data_points.add(time_unix_nano=T0, count=3)
    bad.bucket_counts.extend([1, 2])
    bad.explicit_bounds.extend([5.0, 6.0])
    req = _metrics(
        _gauge("", 1.0, 2.0),  # no name: both rejected
        _gauge("g", 1.0, None, math.nan),  # the one without a value is rejected
        _gauge("t", 1.0, time=0),  # time 0 rejected
        Metric(name="nodata"),  # no points: a message, nothing counted
        m_hist,
    )
    result = decode("metrics", req.SerializeToString())
    assert result.accepted == 3
    assert result.rejected == 5
    text = " | ".join(result.errors)
    assert "metric name is empty (2)" in text
    assert "number data point has no value (1)" in text
    assert "time_unix_nano is 0 (1)" in text
    assert "bucket_counts length" in text
    assert "metric has no data" in text
    rows = result.table.to_pylist()
    assert [r["metric_name"] for r in rows] == ["g", "g", "h"]
    assert rows[0]["value"] == 1.0 and math.isnan(rows[1]["value"])
    _both(req, "metrics")


def test_bad_ids_reject_spans_and_logs() -> None:
    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    good = dict(start_time_unix_nano=T0, end_time_unix_nano=T0 + 5, name="s")
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, **good)
    spans.add(trace_id=b"\x01" * 15, span_id=b"\x02" * 8, **good)
    spans.add(trace_id=b"\x00" * 16, span_id=b"\x02" * 8, **good)
    spans.add(trace_id=b"\x01" * 16, span_id=b"", **good)
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, parent_span_id=b"\x03" * 3, **good)
    spans.add(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 - 1,
    )
    result = decode("spans", req.SerializeToString())
    assert (result.accepted, result.rejected) == (1, 5)
    assert result.table.column("duration_ns").to_pylist() == [5]
    _both(req, "spans")

    logs = ExportLogsServiceRequest()
    recs = logs.resource_logs.add().scope_logs.add().log_records
    recs.add(time_unix_nano=T0, trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    recs.add(time_unix_nano=T0, trace_id=b"\x01" * 3)
    recs.add(time_unix_nano=T0, span_id=b"\x01" * 9)
    recs.add(observed_time_unix_nano=T0)  # falls back to the observed time
    recs.add()  # no time at all
    result = decode("logs", logs.SerializeToString())
    assert (result.accepted, result.rejected) == (2, 3)
    rows = result.table.to_pylist()
    assert rows[1]["time_unix_nano"] == 0 and rows[1]["observed_time_unix_nano"] == T0
    assert rows[1]["timestamp"] == rows[1]["observed_timestamp"]
    assert rows[1]["body"] is None and rows[1]["trace_id"] is None
    _both(logs, "logs")


def test_timestamps_are_microseconds_with_exact_nanoseconds() -> None:
    result = decode("metrics", _metrics(_gauge("g", 1.0)).SerializeToString())
    assert result.table.column("time_unix_nano")[0].as_py() == T0
    assert result.table.column("timestamp").cast("int64")[0].as_py() == T0 // 1000
    assert result.table.column("start_timestamp")[0].as_py() is None


@pytest.mark.parametrize(
    ("signal", "body", "is_json", "needle"),
    [
        ("metrics", b"\xff\xff\xff", False, "not valid OTLP protobuf"),
        ("logs", b"{not json", True, "not valid JSON"),
        ("spans", b"[]", True, "must be a JSON object"),
        ("metrics", b'{"resourceMetrics": 5}', True, "resourceMetrics: expected a list"),
        (
            "metrics",
            b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","gauge":'
            b'{"dataPoints":[{"timeUnixNano":"soon"}]}}]}]}]}',
            True,
            "resourceMetrics[0].scopeMetrics[0].metrics[0].gauge.dataPoints[0].timeUnixNano",
        ),
        (
            "spans",
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}',
            True,
            "invalid hex id",
        ),
        # integers too long for Python's int(): a decode error, not a ValueError
        (
            "logs",
            b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"'
            + b"9" * 5000
            + b'"}]}]}]}',
            True,
            "logRecords[0].timeUnixNano: expected an integer",
        ),
        (
            "logs",
            b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":'
            + b"9" * 5000
            + b"}]}]}]}",
            True,
            "not valid JSON",
        ),
    ],
)
def test_malformed_requests_raise_decode_error(
    signal: str, body: bytes, is_json: bool, needle: str
) -> None:
    with pytest.raises(DecodeError) as info:
        decode(signal, body, json=is_json)
    assert needle in str(info.value)


def test_series_id_is_stable_across_processes() -> None:
    req = _metrics(_gauge("g", 1.0))
    req.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0].attributes.append(
        KeyValue(key="k", value=AnyValue(int_value=7))
    )
    here = decode("metrics", req.SerializeToString()).table.column("series_id")[0].as_py()
    code = (
        "import sys; from shoal.otlp import decode;"
        "print(decode('metrics', sys.stdin.buffer.read()).table.column('series_id')[0].as_py())"
    )
    for seed in ("0", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=req.SerializeToString(),
            capture_output=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
            timeout=60,
        )
        assert int(out.stdout) == here
    # the type of a value is part of the series: int 7 and string "7" differ
    as_text = ExportMetricsServiceRequest()
    as_text.CopyFrom(req)
    dp = as_text.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0]
    dp.attributes[0].value.string_value = "7"
    other = decode("metrics", as_text.SerializeToString()).table.column("series_id")[0].as_py()
    assert other != here


def test_corrupt_array_body_is_a_decode_error() -> None:
    # ExportLogsServiceRequest > ResourceLogs > ScopeLogs > LogRecord.body (AnyValue)
    # whose array_value (field 5) holds a truncated varint: corrupt wire data
    body_value = b"\x2a\x02\x08\xff"  # array_value: 2 bytes, a tag then a cut-off varint
    record = b"\x09" + (1).to_bytes(8, "little") + b"\x2a" + bytes([len(body_value)]) + body_value
    scope_logs = b"\x12" + bytes([len(record)]) + record
    resource_logs = b"\x12" + bytes([len(scope_logs)]) + scope_logs
    request = b"\x0a" + bytes([len(resource_logs)]) + resource_logs
    with pytest.raises(DecodeError, match="log record body"):
        decode("logs", request)
