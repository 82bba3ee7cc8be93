"""OTLP/gRPC: the ``Export`` methods of MetricsService, LogsService and TraceService.

The handlers are registered as generic handlers without a request
deserializer, so the decoder receives the message bytes exactly as sent (no
decode-to-Python-objects and re-encode). gzip-compressed messages are
decompressed by gRPC itself; ``grpc_max_message_bytes`` caps them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
from grpc import aio

from shoal.api.status import classify, grpc_trailing_metadata
from shoal.auth import Authenticator, grpc_principal
from shoal.ingest.decoding import DecodeJob
from shoal.ingest.handler import IngestHandler, Stopwatch
from shoal.otlp.responses import export_response

logger = logging.getLogger(__name__)

SERVICES: dict[str, str] = {
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "spans": "opentelemetry.proto.collector.trace.v1.TraceService",
}

Handler = Callable[[bytes, aio.ServicerContext[bytes, bytes]], Awaitable[bytes]]


def _export_handler(
    signal: str, ingest: IngestHandler, authenticator: Authenticator, retry_after_s: float
) -> Handler:
    async def export(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
        watch = Stopwatch()
        tenant = "-"
        try:
            principal = grpc_principal(authenticator, context.invocation_metadata(), "ingest")
            tenant = principal.tenant
            await ingest.admit()
            outcome = await ingest.ingest(tenant, DecodeJob(signal), request)
        except Exception as exc:
            status = classify(exc, retry_after_s)
            if status.http >= 500:
                logger.error("%s ingest failed: %s", signal, exc, exc_info=status.http == 500)
            ingest.metrics.request(signal, "grpc", tenant, status.grpc.name, watch.elapsed())
            await context.abort(
                status.grpc, str(exc), trailing_metadata=grpc_trailing_metadata(status, str(exc))
            )
            raise AssertionError("unreachable: abort raises") from exc
        ingest.metrics.request(signal, "grpc", tenant, "OK", watch.elapsed())
        answer = export_response(signal, outcome.rejected, outcome.error_message)
        return bytes(answer.SerializeToString())

    return export


def generic_handlers(
    ingest: IngestHandler, authenticator: Authenticator, retry_after_s: float
) -> list[grpc.GenericRpcHandler]:
    """One generic handler per OTLP service, taking and returning raw bytes."""
    handlers: list[grpc.GenericRpcHandler] = []
    for signal, service in SERVICES.items():
        method = grpc.unary_unary_rpc_method_handler(
            _export_handler(signal, ingest, authenticator, retry_after_s)
        )
        handlers.append(grpc.method_handlers_generic_handler(service, {"Export": method}))
    return handlers


def create_server(
    ingest: IngestHandler,
    authenticator: Authenticator,
    address: str,
    max_message_bytes: int,
    retry_after_s: float,
) -> tuple[aio.Server, int]:
    """A grpc.aio server with the OTLP services bound to ``address``; returns it and its port."""
    server = aio.server(
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers(generic_handlers(ingest, authenticator, retry_after_s))
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the gRPC listener to {address}")
    return server, port
