"""The bounded ingest queue refuses explicitly, by requests and by bytes."""

from __future__ import annotations

import threading

import pytest

from shoal.errors import OverloadedError
from shoal.ingest.queue import IngestQueue


def test_bounded_by_requests_and_bytes() -> None:
    reasons: list[str] = []
    q = IngestQueue(max_requests=2, max_bytes=100, retry_after_s=3, on_overflow=reasons.append)
    q.acquire(60)
    with pytest.raises(OverloadedError) as info:
        q.acquire(50)
    assert info.value.reason == "bytes" and info.value.retry_after_s == 3
    q.acquire(40)
    with pytest.raises(OverloadedError, match="requests"):
        q.check()
    with pytest.raises(OverloadedError):
        q.acquire(1)
    assert (q.depth, q.bytes) == (2, 100)
    q.release(60)
    q.release(40)
    assert (q.depth, q.bytes) == (0, 0)
    assert reasons == ["bytes", "requests", "requests"]


def test_an_oversized_request_gets_an_empty_queue() -> None:
    q = IngestQueue(max_requests=4, max_bytes=10, retry_after_s=1)
    q.acquire(1000)
    with pytest.raises(OverloadedError):
        q.acquire(1)
    q.release(1000)


def test_wait_empty() -> None:
    q = IngestQueue(max_requests=4, max_bytes=10, retry_after_s=1)
    assert q.wait_empty(0.01)
    q.acquire(1)
    assert not q.wait_empty(0.01)
    timer = threading.Timer(0.05, q.release, args=(1,))
    timer.start()
    assert q.wait_empty(5)
    timer.join()


def test_refuses_while_the_flush_backlog_is_over_its_limit() -> None:
    reasons: list[str] = []
    backlog = [0]
    q = IngestQueue(
        max_requests=4,
        max_bytes=100,
        retry_after_s=2,
        on_overflow=reasons.append,
        backlog=lambda: backlog[0],
        max_backlog_bytes=1000,
    )
    q.acquire(10)
    backlog[0] = 1001
    with pytest.raises(OverloadedError) as info:
        q.check()
    assert info.value.reason == "snapshot" and info.value.retry_after_s == 2
    with pytest.raises(OverloadedError):
        q.acquire(10)
    assert (q.depth, q.bytes) == (1, 10)
    backlog[0] = 1000
    q.check()
    q.acquire(10)
    assert reasons == ["snapshot", "snapshot"]
