"""shoal errors as HTTP and gRPC statuses: the mapping the ingest and admin routes share.

The SQL and Prometheus routes add their own few cases on top (a query error
is 400, a missing table 404; the Prometheus API answers in its own error
format) and fall back to :func:`classify` for the rest.

The OTLP specification decides the codes: malformed data is 400 /
INVALID_ARGUMENT (not retryable); a full queue is 429 with ``Retry-After`` /
UNAVAILABLE with ``RetryInfo`` (retryable: a bare RESOURCE_EXHAUSTED makes the
Collector drop the batch); a server that cannot take data right now (starting,
stopping, WAL out of space) is 503 / UNAVAILABLE.

Remote write answers every refusal a retry can fix with 503 and ``Retry-After``
(:func:`remote_write_status`): its senders retry 5xx, and by default drop a batch
answered 429.
"""

from __future__ import annotations

import dataclasses

import grpc
from google.protobuf import duration_pb2, json_format
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status as grpc_rpc_status

from shoal.errors import (
    AuthError,
    DecodeError,
    NotReadyError,
    OverloadedError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RecordTooLargeError,
    ShuttingDownError,
    UnsupportedMediaTypeError,
    WalError,
    refusal_reason,
)


@dataclasses.dataclass(frozen=True)
class ErrorStatus:
    """How one error is answered on both protocols."""

    http: int
    grpc: grpc.StatusCode
    reason: str
    retry_after_s: float | None = None


_STATUSES: tuple[
    tuple[type[BaseException] | tuple[type[BaseException], ...], int, grpc.StatusCode, bool], ...
] = (
    (OverloadedError, 429, grpc.StatusCode.UNAVAILABLE, True),
    (DecodeError, 400, grpc.StatusCode.INVALID_ARGUMENT, False),
    ((PayloadTooLargeError, RecordTooLargeError), 413, grpc.StatusCode.INVALID_ARGUMENT, False),
    (UnsupportedMediaTypeError, 415, grpc.StatusCode.INVALID_ARGUMENT, False),
    (PermissionDeniedError, 403, grpc.StatusCode.PERMISSION_DENIED, False),
    (AuthError, 401, grpc.StatusCode.UNAUTHENTICATED, False),
    ((NotReadyError, ShuttingDownError, WalError), 503, grpc.StatusCode.UNAVAILABLE, True),
)
"""Per kind of error: its HTTP status, its gRPC code, whether a retry can succeed (then
the answer carries Retry-After / RetryInfo). Anything else is 500 / INTERNAL."""


def classify(exc: BaseException, retry_after_s: float = 1.0) -> ErrorStatus:
    """The status for an exception; its ``reason`` is :func:`refusal_reason`'s. Unknown
    exceptions are 500 / INTERNAL."""
    reason = refusal_reason(exc)
    for kinds, http, code, retryable in _STATUSES:
        if isinstance(exc, kinds):
            if not retryable:
                return ErrorStatus(http, code, reason)
            after = exc.retry_after_s if isinstance(exc, OverloadedError) else retry_after_s
            return ErrorStatus(http, code, reason, after)
    return ErrorStatus(500, grpc.StatusCode.INTERNAL, reason)


def remote_write_status(exc: BaseException, retry_after_s: float = 1.0) -> ErrorStatus:
    """The status of a remote-write answer: :func:`classify`'s, except that a refusal a
    retry can fix (one with a Retry-After, such as a full queue's 429) is 503.

    Prometheus' sender and the Collector's ``prometheusremotewrite`` exporter retry 5xx
    but, unless told ``retry_on_http_429`` (off by default), drop a batch answered 429
    as non-recoverable (docs/remote-write.md)."""
    status = classify(exc, retry_after_s)
    if status.retry_after_s is not None and status.http < 500:
        return dataclasses.replace(status, http=503)
    return status


def rpc_status(
    code: grpc.StatusCode, message: str, retry_after_s: float | None
) -> status_pb2.Status:
    """A ``google.rpc.Status`` with a ``RetryInfo`` detail when a retry delay applies."""
    status = status_pb2.Status(code=code.value[0], message=message)
    if retry_after_s is not None:
        info = error_details_pb2.RetryInfo(
            retry_delay=duration_pb2.Duration(
                seconds=int(retry_after_s), nanos=int((retry_after_s % 1) * 1e9)
            )
        )
        status.details.add().Pack(info)
    return status


def http_error_body(status: ErrorStatus, message: str, json: bool) -> tuple[bytes, dict[str, str]]:
    """The body and extra headers of an HTTP error answer to an OTLP request."""
    rpc = rpc_status(status.grpc, message, status.retry_after_s)
    headers: dict[str, str] = {}
    if status.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(status.retry_after_s)))
    if json:
        return json_format.MessageToJson(rpc, indent=None).encode("utf-8"), headers
    return rpc.SerializeToString(), headers


def grpc_trailing_metadata(status: ErrorStatus, message: str) -> tuple[tuple[str, bytes], ...]:
    """Trailers carrying the RetryInfo of a retryable error.

    ``grpc-status-details-bin`` holds the ``google.rpc.Status`` with a RetryInfo
    detail (what the Collector's exporter reads), as grpcio-status builds it;
    ``google.rpc.retryinfo-bin`` holds the bare RetryInfo (what the OpenTelemetry
    Python exporter reads).
    """
    if status.retry_after_s is None:
        return ()
    rpc = rpc_status(status.grpc, message, status.retry_after_s)
    info = error_details_pb2.RetryInfo()
    rpc.details[0].Unpack(info)
    details: tuple[tuple[str, bytes], ...] = grpc_rpc_status.to_status(rpc).trailing_metadata
    return (*details, ("google.rpc.retryinfo-bin", info.SerializeToString()))
