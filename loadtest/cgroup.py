"""A memory cgroup (v1) for a server under a memory limit, as systemd's ``MemoryMax=`` sets.

The unit in deploy/ runs shoal with ``MemoryMax=2G``. Without systemd as PID 1, the same
limit comes from the cgroup v1 memory controller: a group of its own under
``/sys/fs/cgroup/memory``, its ``memory.limit_in_bytes`` set, the server's pid written to
its ``cgroup.procs`` (:class:`loadtest.ingest.ServerProcess` ``cgroup=``). What the group
counts tells whether the kernel had to reclaim or kill: ``memory.failcnt`` (times the
limit was hit), ``oom_kill`` in ``memory.oom_control`` (processes the OOM killer ended),
``memory.max_usage_in_bytes`` (the peak, page cache included).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup/memory")


def available() -> bool:
    """Whether a memory cgroup can be made here (the v1 controller mounted, writable)."""
    return (ROOT / "cgroup.procs").exists() and os.access(ROOT, os.W_OK)


class MemoryCgroup:
    """A memory cgroup of its own, made by :meth:`create` and removed by :meth:`remove`."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        self.path = ROOT / f"{name}-{os.getpid()}"
        self.limit_bytes = limit_bytes

    def create(self) -> MemoryCgroup:
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
        return self

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def failcnt(self) -> int:
        """Times the group's usage hit the limit (the kernel then reclaimed, or killed)."""
        return int(self._read("memory.failcnt"))

    def oom_kills(self) -> int:
        """Processes of the group the OOM killer ended."""
        for line in self._read("memory.oom_control").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def max_usage(self) -> int:
        """The group's peak usage in bytes (resident memory and page cache)."""
        return int(self._read("memory.max_usage_in_bytes"))

    def remove(self) -> None:
        """Remove the group once its processes have left it (waits up to 10 s)."""
        deadline = time.monotonic() + 10
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # EBUSY: a process of the group has not exited yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
