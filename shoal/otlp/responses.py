"""OTLP's answers: each signal's ``Export*ServiceResponse``, with ``partial_success`` when
points were refused (the OTLP specification's partial success)."""

from __future__ import annotations

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

_RESPONSES: dict[str, tuple[type[Message], type[Message], str]] = {
    "metrics": (
        ExportMetricsServiceResponse,
        ExportMetricsPartialSuccess,
        "rejected_data_points",
    ),
    "logs": (ExportLogsServiceResponse, ExportLogsPartialSuccess, "rejected_log_records"),
    "spans": (ExportTraceServiceResponse, ExportTracePartialSuccess, "rejected_spans"),
}
"""Per signal: the Export*ServiceResponse, its partial-success message, the count's field."""


def export_response(signal: str, rejected: int = 0, error_message: str = "") -> Message:
    """The signal's ``Export*ServiceResponse``; partial_success only when ``rejected``
    points were dropped, with ``error_message`` saying why."""
    response, partial, field = _RESPONSES[signal]
    if not rejected:
        return response()
    return response(partial_success=partial(**{field: rejected, "error_message": error_message}))
