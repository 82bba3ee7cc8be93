"""OTLP/HTTP: ``POST /v1/metrics``, ``/v1/logs``, ``/v1/traces``; metrics also at
Prometheus' OTLP path, ``POST /api/v1/otlp/v1/metrics``, so that an SDK or Collector
configured for Prometheus' OTLP receiver works unchanged.

Protobuf (``application/x-protobuf``) and JSON (``application/json``) bodies,
optionally gzip-compressed; the answer uses the request's content type. The
body is capped at ``max_body_bytes`` both as received and while it is
decompressed, in a streaming decompressor with an output limit, so a gzip bomb
is refused with 413 after at most ``max_body_bytes`` of output.
"""

from __future__ import annotations

import logging
import zlib

from fastapi import APIRouter, Request, Response
from google.protobuf import json_format

from shoal.api.status import classify, http_error_body
from shoal.auth import Authenticator
from shoal.errors import DecodeError, PayloadTooLargeError, UnsupportedMediaTypeError
from shoal.ingest.decoding import OTLP, OTLP_JSON, DecodeJob
from shoal.ingest.handler import IngestHandler, Stopwatch
from shoal.otlp.responses import export_response

logger = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_PROTOBUF_TYPES = {PROTOBUF, "application/protobuf", "application/vnd.google.protobuf"}

router = APIRouter()


def _media(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _answers_json(request: Request) -> bool:
    """Errors are protobuf only for a protobuf request; anything else (JSON, curl's
    form-encoded default, no content type) gets the JSON encoding of the same Status."""
    return _media(request) not in _PROTOBUF_TYPES


def _content_kind(request: Request) -> bool:
    """True for JSON, False for protobuf; raises for anything else."""
    media = _media(request)
    if media in _PROTOBUF_TYPES:
        return False
    if media == JSON:
        return True
    raw = request.headers.get("content-type", "")
    raise UnsupportedMediaTypeError(f"unsupported content type {raw!r}: send {PROTOBUF} or {JSON}")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, decompressed, never holding more than ``limit`` bytes of it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(limit)
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity", "gzip"):
        raise UnsupportedMediaTypeError(
            f"unsupported content encoding {encoding!r}: send gzip or no encoding"
        )
    received = 0
    out: list[bytes] = []
    produced = 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None
    async for chunk in request.stream():
        if not chunk:
            continue
        received += len(chunk)
        if received > limit:
            raise PayloadTooLargeError(limit)
        if inflater is None:
            out.append(chunk)
            continue
        if inflater.eof:
            raise DecodeError("gzip body has trailing data after the end of the stream")
        try:
            piece = inflater.decompress(chunk, limit - produced + 1)
        except zlib.error as exc:
            raise DecodeError(f"body is not valid gzip: {exc}") from None
        produced += len(piece)
        if produced > limit or inflater.unconsumed_tail:
            raise PayloadTooLargeError(limit, "decompressed request body")
        out.append(piece)
    if inflater is not None and received and not inflater.eof:
        raise DecodeError("gzip body is truncated")
    return b"".join(out)


async def _export(request: Request, signal: str) -> Response:
    watch = Stopwatch()
    ingest: IngestHandler = request.app.state.ingest
    authenticator: Authenticator = request.app.state.authenticator
    max_body: int = request.app.state.max_body_bytes
    json = _answers_json(request)
    tenant = "-"
    try:
        # who is asking comes first: nothing about the request is judged before that
        principal = authenticator.check(request.headers.get("authorization"), "ingest")
        tenant = principal.tenant
        json = _content_kind(request)
        await ingest.admit()
        body = await read_body(request, max_body)
        outcome = await ingest.ingest(tenant, DecodeJob(signal, OTLP_JSON if json else OTLP), body)
    except Exception as exc:
        status = classify(exc, request.app.state.retry_after_s)
        if status.http >= 500:
            logger.error("%s ingest failed: %s", signal, exc, exc_info=status.http == 500)
        ingest.metrics.request(signal, "http", tenant, str(status.http), watch.elapsed())
        content, headers = http_error_body(status, str(exc), json)
        return Response(
            content, status.http, headers=headers, media_type=JSON if json else PROTOBUF
        )
    message = export_response(signal, outcome.rejected, outcome.error_message)
    ingest.metrics.request(signal, "http", tenant, "200", watch.elapsed())
    if json:
        return Response(json_format.MessageToJson(message, indent=None), 200, media_type=JSON)
    return Response(message.SerializeToString(), 200, media_type=PROTOBUF)


@router.post("/v1/metrics", include_in_schema=False)
@router.post("/api/v1/otlp/v1/metrics", include_in_schema=False)
async def export_metrics(request: Request) -> Response:
    return await _export(request, "metrics")


@router.post("/v1/logs", include_in_schema=False)
async def export_logs(request: Request) -> Response:
    return await _export(request, "logs")


@router.post("/v1/traces", include_in_schema=False)
async def export_traces(request: Request) -> Response:
    return await _export(request, "spans")
