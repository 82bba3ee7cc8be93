"""The protocol-independent half of OTLP ingest, shared by HTTP and gRPC.

A request is authenticated by its route, then :class:`IngestHandler` decodes
and validates it (off the event loop), hands the decoded table to an
:class:`IngestSink` (the server's bounded queue in front of the WAL) and waits
until the sink says it is durable. The answer is the OTLP ``Export*Response``
of the signal, with ``partial_success`` when points were rejected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Protocol, TypeVar

import pyarrow as pa
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

from shoal import otlp
from shoal.api.status import classify

logger = logging.getLogger(__name__)

SIGNALS = ("metrics", "logs", "spans")
_T = TypeVar("_T")


class IngestSink(Protocol):
    """Where decoded data goes: the server's queue in front of the WAL."""

    def check_admission(self) -> None:
        """Raise (not ready, shutting down, queue full) before any work is spent."""
        ...

    async def submit(self, tenant: str, signal: str, table: pa.Table) -> int:
        """Make ``table`` durable for ``tenant``; returns its WAL LSN once fsynced."""
        ...


class IngestMetrics(Protocol):
    def accepted(self, signal: str, tenant: str, count: int) -> None: ...

    def rejected(self, signal: str, tenant: str, reason: str, count: int) -> None: ...

    def request(
        self, signal: str, protocol: str, tenant: str, status: str, seconds: float
    ) -> None: ...


class NoopIngestMetrics:
    def accepted(self, signal: str, tenant: str, count: int) -> None:
        pass

    def rejected(self, signal: str, tenant: str, reason: str, count: int) -> None:
        pass

    def request(self, signal: str, protocol: str, tenant: str, status: str, seconds: float) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class IngestOutcome:
    accepted: int
    rejected: int
    error_message: str


def export_response(signal: str, outcome: IngestOutcome | None) -> Message:
    """The signal's ``Export*ServiceResponse``; partial_success only when points were dropped."""
    rejected = outcome.rejected if outcome else 0
    message = outcome.error_message if outcome and rejected else ""
    if signal == "metrics":
        if rejected:
            return ExportMetricsServiceResponse(
                partial_success=ExportMetricsPartialSuccess(
                    rejected_data_points=rejected, error_message=message
                )
            )
        return ExportMetricsServiceResponse()
    if signal == "logs":
        if rejected:
            return ExportLogsServiceResponse(
                partial_success=ExportLogsPartialSuccess(
                    rejected_log_records=rejected, error_message=message
                )
            )
        return ExportLogsServiceResponse()
    if rejected:
        return ExportTraceServiceResponse(
            partial_success=ExportTracePartialSuccess(
                rejected_spans=rejected, error_message=message
            )
        )
    return ExportTraceServiceResponse()


class IngestHandler:
    """Decode, validate, submit and await durability for one OTLP request."""

    def __init__(
        self,
        sink: IngestSink,
        executor: Executor | None = None,
        metrics: IngestMetrics | None = None,
        max_error_chars: int = 1000,
    ) -> None:
        self.sink = sink
        self.metrics: IngestMetrics = metrics or NoopIngestMetrics()
        self._executor = executor
        self._max_error_chars = max_error_chars

    async def _off_loop(self, fn: Callable[[], _T]) -> _T:
        if self._executor is None:
            return fn()
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def ingest(self, tenant: str, signal: str, body: bytes, json: bool) -> IngestOutcome:
        """Raises DecodeError, OverloadedError, WAL errors and the like; the caller maps them."""
        self.sink.check_admission()
        if not body:
            return IngestOutcome(0, 0, "")
        result = await self._off_loop(lambda: otlp.decode(signal, body, json=json))
        if result.rejected:
            self.metrics.rejected(signal, tenant, "invalid", result.rejected)
        if result.table.num_rows:
            try:
                await self.sink.submit(tenant, signal, result.table)
            except Exception as exc:
                self.metrics.rejected(signal, tenant, classify(exc).reason, result.table.num_rows)
                raise
            self.metrics.accepted(signal, tenant, result.table.num_rows)
        message = "; ".join(result.errors)[: self._max_error_chars]
        return IngestOutcome(result.table.num_rows, result.rejected, message)


class Stopwatch:
    """Seconds since construction (for request metrics)."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start
