"""Bytes per span as the OpenTelemetry SDK encodes them for OTLP export.

Two kinds of span: an HTTP server span with the attributes the semantic conventions
give one (as an ASGI instrumentation records them), and the same span carrying an
exception event with a 21-frame Python stack trace (a fixed text, so the figure does
not depend on where the code runs). Per-span size is measured as the growth
of an ExportTraceServiceRequest from 1 to 1,001 spans, so the resource and scope
envelope does not count.
"""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

HTTP_SERVER = {
    "http.request.method": "GET",
    "url.scheme": "https",
    "url.path": "/api/v1/orders/12345",
    "url.query": "expand=items&page=2",
    "server.address": "shop.example.com",
    "server.port": 443,
    "network.protocol.version": "1.1",
    "http.route": "/api/v1/orders/{id}",
    "http.response.status_code": 200,
    "user_agent.original": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 "
    "(KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    "client.address": "203.0.113.7",
}
NAME = "GET /api/v1/orders/{id}"


def _plain(tracer: Tracer) -> None:
    with tracer.start_as_current_span(NAME, kind=SpanKind.SERVER, attributes=HTTP_SERVER):
        pass


STACKTRACE = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/shop/orders/lookup.py", line {100 + 7 * i}, in lookup_{i}\n'
        f"    return lookup_{i + 1}(order_id, shard)\n"
        for i in range(21)
    )
    + "ValueError: order 12345 not found in shard 7\n"
)


def _with_exception(tracer: Tracer) -> None:
    with tracer.start_as_current_span(NAME, kind=SpanKind.SERVER, attributes=HTTP_SERVER) as span:
        span.record_exception(
            ValueError("order 12345 not found in shard 7"),
            attributes={"exception.stacktrace": STACKTRACE},
        )


def per_span_bytes() -> tuple[int, int]:
    """(plain HTTP server span, the same with an exception event), bytes each."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "checkout", "service.instance.id": "c0ffee-1", "host.name": "web-1"}
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.asgi", "0.52b0")

    def size(make: Callable[[Tracer], None], n: int) -> int:
        exporter.clear()
        for _ in range(n):
            make(tracer)
        return len(encode_spans(exporter.get_finished_spans()).SerializeToString())

    out = []
    for make in (_plain, _with_exception):
        out.append(round((size(make, 1001) - size(make, 1)) / 1000))
    provider.shutdown()
    return out[0], out[1]
