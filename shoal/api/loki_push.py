"""Loki's push API: ``POST /loki/api/v1/push``.

The body is Loki's ``PushRequest`` in protobuf and snappy's block format (Promtail,
Alloy, Fluent Bit, Docker's driver; the default when the content type is not JSON), or
``application/json``; either may come gzip-compressed (``Content-Encoding: gzip``). The
rows go through the same path as OTLP (queue, WAL, fsync before the answer) with the
same token, ``ingest`` role, tenancy (``X-Scope-OrgID`` is ignored: the token decides),
size limit and backpressure.

Answers, as Loki's: 204 once every entry is durable; 400 with the reason for what can
never succeed (also when some entries were refused and the rest stored, as Loki does);
413 for a body over the limit; 415 for an encoding it cannot read; 429 (queue full) or
503 (starting, stopping, WAL unavailable) with ``Retry-After`` only when a retry can
succeed: Promtail, Alloy and Fluent Bit retry 429 and 5xx and drop a batch on any other
4xx (docs/rationale.md).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from shoal.api import otlp_http
from shoal.api.bodies import read_body
from shoal.api.remote_write import refused
from shoal.auth import Authenticator
from shoal.errors import UnsupportedMediaTypeError
from shoal.ingest.decoding import LOKI_PUSH, LOKI_PUSH_JSON, DecodeJob
from shoal.ingest.handler import IngestHandler, IngestOutcome, Stopwatch

router = APIRouter()

_PROTOCOL = "loki_push"


async def _body(request: Request, limit: int) -> bytes:
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity", "snappy"):
        return await read_body(request, limit)
    if encoding == "gzip":
        return await otlp_http.read_body(request, limit)
    raise UnsupportedMediaTypeError(
        f"unsupported content encoding {encoding!r}: send gzip, snappy or no encoding"
    )


def _is_json(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json"


async def _ingest(request: Request, tenant: str) -> IngestOutcome:
    ingest: IngestHandler = request.app.state.ingest
    limit: int = request.app.state.max_body_bytes
    json = _is_json(request)
    await ingest.admit()
    body = await _body(request, limit)
    job = DecodeJob("logs", LOKI_PUSH_JSON if json else LOKI_PUSH, max_bytes=limit)
    return await ingest.ingest(tenant, job, body)


@router.post("/loki/api/v1/push", include_in_schema=False)
async def push(request: Request) -> Response:
    watch = Stopwatch()
    authenticator: Authenticator = request.app.state.authenticator
    tenant = "-"
    try:
        tenant = authenticator.check(request.headers.get("authorization"), "ingest").tenant
        outcome = await _ingest(request, tenant)
    except Exception as exc:
        return refused(request, exc, "logs", _PROTOCOL, tenant, watch)
    metrics = request.app.state.ingest.metrics
    if outcome.rejected:
        metrics.request("logs", _PROTOCOL, tenant, "400", watch.elapsed())
        text = (
            f"{outcome.rejected} entries refused, {outcome.accepted} stored: "
            f"{outcome.error_message}\n"
        )
        return Response(text, 400, media_type="text/plain")
    metrics.request("logs", _PROTOCOL, tenant, "204", watch.elapsed())
    return Response(status_code=204)
