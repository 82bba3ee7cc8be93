"""A per-process memory ceiling: new queries wait for room instead of pushing the process
over the memory it is given.

Each query has its own pool (``query_memory_bytes``), but pools are per query: several at
once, on top of the unflushed rows and the interpreter, can add up to more than the
machine or the service's cgroup allows, and the kernel would then kill the whole server.
Before a query starts, the gate checks that the process's resident memory plus one more
pool still fits the budget: the ``memory_limit_bytes`` setting, or else the memory limit
of the cgroup the server runs in (``MemoryMax=`` of its systemd unit). The server keeps
memory it freed for reuse while it works (:mod:`shoal.server.pages`); a gate that finds
no room hands that back first and looks again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pyarrow as pa

from shoal.errors import QueryLimitError

_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC_CGROUP = Path("/proc/self/cgroup")


def cgroup_memory_limit(proc_cgroup: Path = _PROC_CGROUP, root: Path = _CGROUP_ROOT) -> int | None:
    """The memory limit of this process's cgroup: the smallest ``memory.max`` (v2) or
    ``memory.limit_in_bytes`` (v1) on the path from its cgroup up to the root, or None.

    Inside a container the hierarchy is mounted at the cgroup itself, which the walk's
    last step (the mount's own file) covers; a hybrid host mounts v2 at ``unified``.
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = root, "memory.max"
            if not (root / "cgroup.controllers").exists() and (root / "unified").is_dir():
                base = root / "unified"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        rel = path.lstrip("/")
        parts = Path(rel).parts if rel else ()
        for depth in range(len(parts), -1, -1):
            found = _read_limit(base.joinpath(*parts[:depth], name))
            if found is not None:
                limits.append(found)
    return min(limits) if limits else None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():  # "max": no limit
        return None
    value = int(text)
    return value if value < (1 << 60) else None  # v1 spells "no limit" as a huge number


def memory_budget(setting: int) -> int | None:
    """The process's memory budget: the setting when set (non-zero), else the cgroup's."""
    return setting if setting > 0 else cgroup_memory_limit()


class MemoryGate:
    """Refuses a new query when one more query pool would not fit the process's budget."""

    def __init__(
        self,
        budget: int | None,
        pool_bytes: int,
        hand_back: Callable[[], object] = lambda: pa.default_memory_pool().release_unused(),
    ) -> None:
        self.budget = budget
        self.pool_bytes = pool_bytes
        self._hand_back = hand_back
        self._process = psutil.Process()

    def check(self) -> None:
        if self.budget is None:
            return
        rss = self._process.memory_info().rss
        if rss + self.pool_bytes > self.budget:
            self._hand_back()  # memory freed and kept for reuse counts until handed back
            rss = self._process.memory_info().rss
        if rss + self.pool_bytes > self.budget:
            raise QueryLimitError(
                "server_memory",
                f"the server uses {rss >> 20} MiB of its {self.budget >> 20} MiB memory budget "
                f"(memory_limit_bytes, or the service's memory limit) and one more query may "
                f"take {self.pool_bytes >> 20} MiB (query_memory_bytes): retry when running "
                "queries have finished, or lower query_max_concurrency",
            )
