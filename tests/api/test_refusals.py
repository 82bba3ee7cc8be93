"""What a refused ingest request gets, per door: remote write answers every refusal a retry
can fix with 503 and Retry-After (its senders retry 5xx and drop a batch answered 429),
OTLP keeps the OTLP specification's 429 for a full queue."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtest import payloads, remote_write
from loadtest.ingest import BASE_NS
from shoal.api.app import AppServices, create_app, front_door
from shoal.auth import Authenticator, TokenStore
from shoal.errors import (
    DecoderLostError,
    NotReadyError,
    OverloadedError,
    ShuttingDownError,
    WalAppendError,
)
from shoal.ingest.ack import Ack
from shoal.ingest.handler import IngestHandler


class _Refusing:
    """A sink that refuses at admission (before the body is read) or at append (after
    decoding, as the queue and the WAL do)."""

    def __init__(self, at_admission: BaseException | None, at_append: BaseException | None):
        self.at_admission = at_admission
        self.at_append = at_append

    async def admit(self) -> None:
        if self.at_admission is not None:
            raise self.at_admission

    def append(self, tenant: str, rows: Any, ack: Ack, source: Any) -> None:
        if self.at_append is not None:
            raise self.at_append
        ack.resolve(1)


def _app(tmp_path: Path, sink: _Refusing) -> Any:
    return front_door(
        create_app(
            AppServices(
                authenticator=Authenticator(TokenStore(tmp_path), allow_anonymous=True),
                ingest=IngestHandler(sink),
                is_ready=lambda: True,
                metrics_exposition=lambda: (b"", "text/plain"),
                max_body_bytes=1 << 20,
                retry_after_s=3.0,
            )
        )
    )


def _post(app: Any, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post(path, content=body, headers=headers)

    return asyncio.run(run())


WRITE = remote_write.compress(remote_write.encode([({"__name__": "up"}, [(1_000, 1.0)])]))
WRITE_HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
RETRYABLE = [
    pytest.param(OverloadedError("requests", 2.0), None, "2", id="queue-full-at-admission"),
    pytest.param(None, OverloadedError("bytes", 2.0), "2", id="queue-full-at-append"),
    pytest.param(OverloadedError("snapshot", 2.0), None, "2", id="flusher-backlog"),
    pytest.param(NotReadyError("replaying"), None, "3", id="not-ready"),
    pytest.param(ShuttingDownError("stopping"), None, "3", id="shutting-down"),
    pytest.param(None, WalAppendError("no space left"), "3", id="wal-append-failed"),
    pytest.param(None, DecoderLostError("decoder exited"), "3", id="decoder-lost"),
]


@pytest.mark.parametrize(("at_admission", "at_append", "retry_after"), RETRYABLE)
def test_remote_write_answers_what_a_retry_can_fix_with_503_and_retry_after(
    tmp_path: Path,
    at_admission: BaseException | None,
    at_append: BaseException | None,
    retry_after: str,
) -> None:
    answer = _post(_app(tmp_path, _Refusing(at_admission, at_append)), "/api/v1/write", WRITE,
                   WRITE_HEADERS)  # fmt: skip
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == retry_after
    assert str(at_admission or at_append) in answer.text


def test_remote_write_keeps_4xx_for_what_can_never_succeed(tmp_path: Path) -> None:
    app = _app(tmp_path, _Refusing(None, None))
    malformed = _post(app, "/api/v1/write", b"\x05garbage", WRITE_HEADERS)
    assert malformed.status_code == 400 and "retry-after" not in malformed.headers
    stored = _post(app, "/api/v1/write", WRITE, WRITE_HEADERS)
    assert stored.status_code == 204


def test_otlp_keeps_429_for_a_full_queue(tmp_path: Path) -> None:
    """The OTLP specification names 429 (and 503) retryable, and its exporters retry it."""
    body = payloads.metrics_request(points=10, series=2, start_ns=BASE_NS).SerializeToString()
    for path in ("/v1/metrics", "/api/v1/otlp/v1/metrics"):
        app = _app(tmp_path, _Refusing(OverloadedError("requests", 2.0), None))
        answer = _post(app, path, body, {"Content-Type": "application/x-protobuf"})
        assert answer.status_code == 429 and answer.headers["retry-after"] == "2", path
