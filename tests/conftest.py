"""Fixtures for every test directory: child processes stopped whatever happens."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import settings

# No per-example deadline: a test's time is a benchmark's business, and on a shared
# 2-core machine an example that waits for a core would fail a test that is right.
settings.register_profile("shoal", deadline=None)
settings.load_profile("shoal")

Track = Callable[["subprocess.Popen[Any]"], "subprocess.Popen[Any]"]


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a child (and its process group when it leads one) and reap it."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


@pytest.fixture
def children() -> Iterator[Track]:
    """``children(proc)`` registers a child process; teardown kills any still running,
    whether the test passed, failed, or stopped before its own cleanup."""
    tracked: list[subprocess.Popen[Any]] = []

    def track(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
        tracked.append(proc)
        return proc

    yield track
    for proc in reversed(tracked):
        stop_process(proc)


class DecoderOutput:
    """What the protobuf decoder (``ProtoArrow.batch``) returned since the last
    :meth:`clear`, and which columns of a table share a buffer with it."""

    def __init__(self) -> None:
        self.batches: list[Any] = []

    def clear(self) -> None:
        self.batches.clear()

    def shared(self, table: Any) -> set[str]:
        """The columns of ``table`` (a ``pyarrow.Table``) with a buffer that overlaps one
        of the decoder's, children included."""
        theirs = [
            (b.address, b.address + b.size)
            for batch in self.batches
            for column in batch.columns
            for b in column.buffers()
            if b is not None and b.size
        ]
        return {
            name
            for name, column in zip(table.column_names, table.columns, strict=True)
            for chunk in column.chunks
            for b in chunk.buffers()
            if b is not None and b.size
            for start, end in theirs
            if b.address < end and start < b.address + b.size
        }


@pytest.fixture
def decoder_output(monkeypatch: pytest.MonkeyPatch) -> DecoderOutput:
    """Records every batch the protobuf decoder returns during the test."""
    from shoal.rows.protoarrow import ProtoArrow

    out = DecoderOutput()
    batch = ProtoArrow.batch

    def recorded(self: ProtoArrow, *args: Any, **kwargs: Any) -> Any:
        result = batch(self, *args, **kwargs)
        out.batches.append(result)
        return result

    monkeypatch.setattr(ProtoArrow, "batch", recorded)
    return out


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real S3-compatible server on loopback (moto's server mode, loadtest/s3server.py),
    with its AWS variables set in this process (restored after the session)."""
    from loadtest.ingest import free_port
    from loadtest.s3server import S3Server

    server = S3Server(free_port(), log=tmp_path_factory.mktemp("s3") / "s3.log").start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_url(s3_server: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh ``s3://`` prefix for one test (the fault mode cleared after it)."""
    import hashlib

    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:12]
    yield f"s3://shoal/{digest}-{os.getpid()}"
    s3_server.fault()
