"""The protocol-independent half of OTLP ingest, shared by HTTP and gRPC.

A request is authenticated by its route, then :class:`IngestHandler` hands
one job to a worker thread: decode and validate the body, then give the
decoded table to an :class:`IngestSink` (the server's bounded queue in front
of the WAL), which encodes and appends it. The event loop is not involved
again until the request is durable or has failed: the sink resolves the
request's :class:`Ack`, and a whole WAL group of acks is resolved with a
single wake-up of the loop (:func:`resolve_acks`). The answer is the OTLP
``Export*Response`` of the signal, with ``partial_success`` when points were
rejected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Protocol

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

Decoder = Callable[[bytes], otlp.DecodeResult]
"""A request body -> the rows of its signal's table."""


def _settle(future: asyncio.Future[int], value: int, error: BaseException | None) -> None:
    if future.done():  # the request was cancelled meanwhile
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def _settle_many(items: list[tuple[asyncio.Future[int], int]]) -> None:
    for future, value in items:
        _settle(future, value, None)


class Ack:
    """The completion of one ingest request, resolvable from any thread.

    ``future`` (on the request's event loop) resolves to the WAL LSN once the
    rows are durable, to 0 when there was nothing to store, or fails with the
    error that refused the request. The worker thread fills in the decode
    outcome (``accepted``, ``rejected``, ``errors``) before handing it on.
    """

    __slots__ = ("accepted", "errors", "future", "loop", "rejected")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[int] = loop.create_future()
        self.accepted = 0
        self.rejected = 0
        self.errors: list[str] = []

    def resolve(self, lsn: int) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, lsn, None)

    def fail(self, error: BaseException) -> None:
        self.loop.call_soon_threadsafe(_settle, self.future, 0, error)


def resolve_acks(acks: Iterable[tuple[int, Ack]]) -> None:
    """Resolve many acks (a WAL group) with one wake-up per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[int], int]]] = {}
    for lsn, ack in acks:
        by_loop.setdefault(ack.loop, []).append((ack.future, lsn))
    for loop, items in by_loop.items():
        loop.call_soon_threadsafe(_settle_many, items)


class IngestSink(Protocol):
    """Where decoded data goes: the server's queue in front of the WAL."""

    def check_admission(self) -> None:
        """Raise (not ready, shutting down, queue full) before any work is spent."""
        ...

    def append(self, tenant: str, signal: str, table: pa.Table, ack: Ack) -> None:
        """On a worker thread: admit, encode and append ``table`` for ``tenant``.

        Raises if it is refused at once; otherwise ``ack`` is resolved with the
        WAL LSN once the rows are durable (and in the snapshot), or failed.
        """
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

    def _job(
        self, tenant: str, signal: str, body: bytes, json: bool, ack: Ack, decode: Decoder | None
    ) -> None:
        """Worker thread: decode, then hand the rows to the sink; never raises."""
        try:
            result = decode(body) if decode is not None else otlp.decode(signal, body, json=json)
            ack.rejected = result.rejected
            ack.errors = result.errors
            if result.table.num_rows:
                ack.accepted = result.table.num_rows
                self.sink.append(tenant, signal, result.table, ack)
            else:
                ack.resolve(0)
        except BaseException as exc:
            ack.fail(exc)

    async def ingest(
        self, tenant: str, signal: str, body: bytes, json: bool, decode: Decoder | None = None
    ) -> IngestOutcome:
        """Raises DecodeError, OverloadedError, WAL errors and the like; the caller maps them.

        ``decode`` replaces the OTLP decoder of ``signal`` (remote write brings its own);
        it runs on the worker thread."""
        self.sink.check_admission()
        if not body:
            return IngestOutcome(0, 0, "")
        ack = Ack(asyncio.get_running_loop())
        if self._executor is None:
            self._job(tenant, signal, body, json, ack, decode)
        else:
            # A plain submit: the job's completion does not wake the loop, the ack does.
            self._executor.submit(self._job, tenant, signal, body, json, ack, decode)
        try:
            # Shielded: a client that goes away must not cancel the acknowledgement.
            await asyncio.shield(ack.future)
        except Exception as exc:
            if ack.rejected:
                self.metrics.rejected(signal, tenant, "invalid", ack.rejected)
            if ack.accepted:
                self.metrics.rejected(signal, tenant, classify(exc).reason, ack.accepted)
            raise
        if ack.rejected:
            self.metrics.rejected(signal, tenant, "invalid", ack.rejected)
        if ack.accepted:
            self.metrics.accepted(signal, tenant, ack.accepted)
        message = "; ".join(ack.errors)[: self._max_error_chars] if ack.errors else ""
        return IngestOutcome(ack.accepted, ack.rejected, message)


class Stopwatch:
    """Seconds since construction (for request metrics)."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start
