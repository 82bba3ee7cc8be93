"""The protocol-independent half of ingest, shared by OTLP (HTTP and gRPC) and remote write.

A request is authenticated by its route, then :class:`IngestHandler` hands its
body to a :class:`~shoal.ingest.decoding.DecodeRunner` (a thread of the server, or a
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

from shoal.errors import refusal_reason
from shoal.ingest.ack import Ack
from shoal.ingest.decoding import Decoded, DecodeJob, DecodeRunner, Source, ThreadDecoder

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


class IngestSink(Protocol):
    """Where decoded rows go: the queue in front of the WAL (:class:`Ingestor`)."""

    async def admit(self) -> None:
        """Raise (not ready, shutting down, queue full) before any work is spent on a
        request; hold it back first while the flusher's backlog is over its cap."""
        ...

    def append(self, tenant: str, rows: Decoded, ack: Ack, source: Source) -> None:
        """On a worker thread: take a queue slot for the decoded ``rows`` of ``tenant``,
        encode and append them (``rows.payload``, when the decoder built it, is their WAL
        payload already; ``source``, the job and body they were decoded from, which the
        sink may log instead of the rows).

        Raises if it is refused at once; otherwise ``ack`` is resolved with the WAL LSN
        once the rows are durable (and among the unflushed rows), or failed."""
        ...


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

    def _decoded(
        self,
        tenant: str,
        signal: str,
        ack: Ack,
        box: list[Decoded],
        source: Source,
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
                self.sink.append(tenant, outcome, ack, source)
            else:
                ack.resolve(0)
        except BaseException as exc:
            ack.fail(exc)

    async def admit(self) -> None:
        """Raise when a request is refused (not ready, shutting down, queue full), before
        its body is read or decoded; while the flusher's backlog is over its cap, first
        hold the request back for up to ``backlog_wait_s`` (:meth:`IngestQueue.admit`).
        Every door awaits this once per request, before anything else is spent on it."""
        await self.sink.admit()

    async def ingest(self, tenant: str, job: DecodeJob, body: bytes) -> IngestOutcome:
        """Decode, append and await durability for a request :meth:`admit` let in.

        Raises DecodeError, OverloadedError, WAL errors and the like; the caller maps them."""
        signal = job.signal
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
                self.metrics.rejected(signal, tenant, refusal_reason(exc), ack.accepted)
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
