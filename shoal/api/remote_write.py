"""Prometheus remote write: ``POST /api/v1/write`` (Remote-Write 1.0 and 2.0).

The message comes from ``Content-Type`` (``proto=io.prometheus.write.v2.Request`` for
2.0, 1.0 otherwise), the body is snappy's block format. The rows go through the same
path as OTLP (queue, WAL, fsync before the answer) with the same token, role, tenancy,
size limit and backpressure. Answers: 204 once every sample is durable (2.0 with the
``X-Prometheus-Remote-Write-*-Written`` headers); 400 for what can never succeed, with
what was wrong (also when some series or native histograms were refused and the rest
stored, as the specification requires); 415 for a content type or encoding it cannot read;
503 with ``Retry-After`` when a retry can succeed, a full queue included (its senders drop a
batch answered 429 unless told otherwise: :func:`~shoal.api.status.remote_write_status`).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response

from shoal.api.bodies import read_body
from shoal.api.status import remote_write_status
from shoal.auth import Authenticator
from shoal.errors import UnsupportedMediaTypeError
from shoal.ingest.decoding import REMOTE_WRITE, DecodeJob
from shoal.ingest.handler import IngestHandler, Stopwatch
from shoal.promwrite import decode as promwrite

logger = logging.getLogger(__name__)

router = APIRouter()

WRITTEN = "X-Prometheus-Remote-Write-{}-Written"


def _encoding(request: Request) -> None:
    encoding = request.headers.get("content-encoding", "snappy").strip().lower()
    if encoding != "snappy":
        raise UnsupportedMediaTypeError(
            f"unsupported content encoding {encoding!r}: remote write bodies are snappy"
        )


@router.post("/api/v1/write", include_in_schema=False)
async def write(request: Request) -> Response:
    watch = Stopwatch()
    ingest: IngestHandler = request.app.state.ingest
    authenticator: Authenticator = request.app.state.authenticator
    limit: int = request.app.state.max_body_bytes
    tenant = "-"
    counts = {"Samples": 0, "Histograms": 0, "Exemplars": 0}
    message = promwrite.V1
    try:
        principal = authenticator.check(request.headers.get("authorization"), "ingest")
        tenant = principal.tenant
        message = promwrite.message_of(request.headers.get("content-type", ""))
        _encoding(request)
        await ingest.admit()
        body = await read_body(request, limit)

        job = DecodeJob("metrics", REMOTE_WRITE, message, limit)
        outcome = await ingest.ingest(tenant, job, body)
        counts["Samples"] = outcome.samples
        counts["Exemplars"] = outcome.exemplars
        counts["Histograms"] = outcome.histograms
    except Exception as exc:
        status = remote_write_status(exc, request.app.state.retry_after_s)
        if status.http >= 500:
            logger.error("remote write failed: %s", exc, exc_info=status.http == 500)
        ingest.metrics.request("metrics", "remote_write", tenant, str(status.http), watch.elapsed())
        headers = {}
        if status.retry_after_s is not None:
            headers["Retry-After"] = str(max(1, round(status.retry_after_s)))
        return Response(f"{exc}\n", status.http, headers=headers, media_type="text/plain")
    headers = {}
    if message == promwrite.V2:
        headers = {WRITTEN.format(kind): str(n) for kind, n in counts.items()}
    if outcome.rejected:
        ingest.metrics.request("metrics", "remote_write", tenant, "400", watch.elapsed())
        text = (
            f"{outcome.rejected} samples refused, {outcome.accepted} stored: "
            f"{outcome.error_message}\n"
        )
        return Response(text, 400, headers=headers, media_type="text/plain")
    ingest.metrics.request("metrics", "remote_write", tenant, "204", watch.elapsed())
    return Response(status_code=204, headers=headers)
