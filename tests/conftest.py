"""Fixtures for every test directory: child processes stopped whatever happens."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

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
