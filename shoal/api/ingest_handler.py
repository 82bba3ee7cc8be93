"""The protocol-independent half of ingest, shared by OTLP (HTTP and gRPC) and remote write.

A request is authenticated by its route, then :class:`IngestHandler` hands its
body to a :class:`~shoal.decoding.DecodeRunner` (a thread of the server, or a
decoding process) as a job; when the decoder is done, its thread gives the rows
(and the WAL payload, when the decoder built it) to an :class:`IngestSink` (the
server's bounded queue in front of the WAL), which appends them. The event loop
is not involved again until the request is durable or has failed: the sink
resolves the request's :class:`Ack`, and a whole WAL group of acks is resolved
with a single wake-up of the loop (:func:`resolve_acks`). The OTLP answer is the
``Export*Response`` of the signal, with ``partial_success`` when points were
rejected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from typing import Protocol

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

from shoal.ack import BACKLOG_POLL_S, Ack, IngestSink
from shoal.api.status import classify
from shoal.decoding import Decoded, DecodeJob, DecodeRunner, ThreadDecoder

logger = logging.getLogger(__name__)

SIGNALS = ("metrics", "logs", "spans")


class IngestMetrics(Protocol):
    """What ingest reports; the bodies do nothing, so :class:`NoopIngestMetrics` is empty."""

    def accepted(self, signal: str, tenant: str, count: int) -> None:
        return None

    def rejected(self, signal: str, tenant: str, reason: str, count: int) -> None:
        return None

    def request(self, signal: str, protocol: str, tenant: str, status: str, seconds: float) -> None:
        return None

    def waited(self, seconds: float) -> None:
        """A request was held back ``seconds`` by the flusher's backlog."""
        return None


class NoopIngestMetrics(IngestMetrics):
    """Reports nothing."""


@dataclasses.dataclass(frozen=True)
class IngestOutcome:
    accepted: int
    rejected: int
    error_message: str
    samples: int = 0
    exemplars: int = 0
    histograms: int = 0


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


def export_response(signal: str, outcome: IngestOutcome | None) -> Message:
    """The signal's ``Export*ServiceResponse``; partial_success only when points were dropped."""
    response, partial, field = _RESPONSES[signal]
    rejected = outcome.rejected if outcome else 0
    if not rejected:
        return response()
    message = outcome.error_message if outcome else ""
    return response(partial_success=partial(**{field: rejected, "error_message": message}))


MAX_HELD = 64
"""Most requests held back at once; more are refused at once (each holds its connection,
and over gRPC its message)."""


class IngestHandler:
    """Decode, validate, submit and await durability for one ingest request."""

    def __init__(
        self,
        sink: IngestSink,
        decoder: DecodeRunner | None = None,
        metrics: IngestMetrics | None = None,
        max_error_chars: int = 1000,
    ) -> None:
        self.sink = sink
        self.decoder: DecodeRunner = decoder or ThreadDecoder()
        self.metrics: IngestMetrics = metrics or NoopIngestMetrics()
        self._max_error_chars = max_error_chars
        self._held = 0

    def _decoded(
        self,
        tenant: str,
        signal: str,
        ack: Ack,
        box: list[Decoded],
        source: tuple[DecodeJob, bytes],
        outcome: Decoded | BaseException,
    ) -> None:
        """The decoder's thread: hand the rows to the sink; never raises."""
        try:
            if isinstance(outcome, BaseException):
                raise outcome
            box.append(outcome)
            ack.rejected = outcome.rejected
            ack.errors = outcome.errors
            if outcome.table.num_rows:
                ack.accepted = outcome.table.num_rows
                self.sink.append(
                    tenant, signal, outcome.table, ack, outcome.payload, source, outcome.all_null
                )
            else:
                ack.resolve(0)
        except BaseException as exc:
            ack.fail(exc)

    async def admit(self) -> None:
        """Raise when a request is refused (not ready, shutting down, queue full), before
        its body is read; while the flusher's backlog is over its cap, first wait up to
        the sink's ``backlog_wait_s`` for it to come back under.

        A sender held back here, its body still unread, is slowed down by the flusher's
        pace instead of refused: refused, it would sleep its whole backoff however soon
        the flush round ended (docs/rationale.md)."""
        wait_s = self.sink.backlog_wait_s
        if wait_s > 0 and self._held < MAX_HELD and self.sink.backlogged():
            began = time.monotonic()
            self._held += 1
            try:
                while self.sink.backlogged() and time.monotonic() - began < wait_s:
                    await asyncio.sleep(BACKLOG_POLL_S)
            finally:
                self._held -= 1
                self.metrics.waited(time.monotonic() - began)
        self.sink.check_admission()

    async def ingest(self, tenant: str, job: DecodeJob, body: bytes) -> IngestOutcome:
        """Raises DecodeError, OverloadedError, WAL errors and the like; the caller maps them."""
        signal = job.signal
        await self.admit()
        if not body:
            return IngestOutcome(0, 0, "")
        ack = Ack(asyncio.get_running_loop())
        box: list[Decoded] = []
        # The decoder's completion does not wake the loop, the ack does.
        self.decoder.submit(
            job,
            tenant,
            body,
            functools.partial(self._decoded, tenant, signal, ack, box, (job, body)),
        )
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
        counts = (box[0].samples, box[0].exemplars, box[0].histograms) if box else (0, 0, 0)
        return IngestOutcome(ack.accepted, ack.rejected, message, *counts)


class Stopwatch:
    """Seconds since construction (for request metrics)."""

    __slots__ = ("_start",)

    def __init__(self) -> None:
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._start
