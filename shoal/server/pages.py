"""The server's freed memory: kept while it works, handed back to the kernel once it is quiet.

Every page the kernel gives a process is zeroed on its first touch, and on a virtual
machine that fault is dear: on the 2-core VM of docs/benchmarks.md, 64 MiB touched
page by page took 16,384 faults and 73-75 ms, about 4.6 µs a page. glibc hands memory
back as soon as it is freed: a block at or above its mmap threshold is unmapped, and the
free top of a thread's heap beyond its trim threshold (128 KiB) is given back. A PromQL
panel over a few hundred thousand samples allocates and frees arrays of a few MB many
times, in a worker thread whose heap was trimmed after the last query, so every query
faulted its working memory in again: 13,000-40,000 faults a panel, a third of the time
of the heavier ones (docs/benchmarks-history.md, "Freed memory kept while the server
works").

So the server keeps what it frees while it works (blocks under :data:`MMAP_THRESHOLD`
come from the heap, a heap keeps up to :data:`TRIM_THRESHOLD` of free memory at its
top, threads share :data:`ARENAS` heaps), and :class:`PageReturner` hands all of it
back in one ``malloc_trim``: once the process has been quiet for :data:`QUIET_S` after
working (a dashboard refreshed every few seconds finds its memory still mapped), when
a flush round leaves no rows unflushed (ingest stopped, or slow enough to be flushed
by age), and when resident memory has grown :data:`GROWTH_BYTES` beyond where the
last hand-back left it (what is kept stays bounded under steady load). Handing back
every few seconds under load, as the flusher did, faulted the next queries' memory
in again. An operator's own ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or
``MALLOC_ARENA_MAX`` wins.

This module must not import pyarrow: :func:`configure` runs before the memory pool
choice that pyarrow reads when it loads.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

logger = logging.getLogger(__name__)

MiB = 1 << 20
MMAP_THRESHOLD = 32 * MiB
"""Allocations at least this large get pages of their own, unmapped when freed (glibc's
largest moving threshold; a thread's heap is at most 64 MiB anyway)."""
TRIM_THRESHOLD = 128 * MiB
"""Free memory a heap keeps at its top after a free, until the next hand-back."""
POLL_S = 1.0
"""How often the process' CPU time and resident memory are looked at."""
QUIET_SHARE = 0.05
"""Under this share of one core over a poll, the process is quiet."""
QUIET_S = 30.0
"""Quiet this long after working, the process hands back what it freed."""
GROWTH_BYTES = 128 * MiB
"""Resident memory this far above where the last hand-back left it: hand back now."""

ARENAS = max(2, 2 * (os.cpu_count() or 1))
"""glibc's heaps (arenas) that threads share. Each thread's heap keeps its free top (a
heap is at most 64 MiB, under :data:`TRIM_THRESHOLD`), which ``malloc_trim`` does not
return: with glibc's default of 8 per core, a million-series ingest peaked at 1,203 MB
against 878 with 2 heaps, which cost ingest a fifth of its rate; 2 per core kept it."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_SETTINGS = (
    ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENAS),
)


def configure() -> bool:
    """Set glibc's mmap and trim thresholds and its number of heaps (each unless the
    operator set it in the environment); False where the C library is not glibc or a
    setting was refused. Before the server starts its threads (a thread already given a
    heap keeps it)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    ok = True
    for variable, option, value in _SETTINGS:
        if variable not in os.environ:
            ok = bool(libc.mallopt(option, value)) and ok
    return ok


def _release_unused() -> None:
    import pyarrow as pa  # loaded by then: the server reads Arrow long before

    pa.default_memory_pool().release_unused()  # malloc_trim(0) for the system pool


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


class Probes(NamedTuple):
    """The process as :class:`PageReturner` sees it (its CPU time, a clock, its resident
    memory) and the hand-back it does; tests replace them together, with a process moved
    by hand."""

    trim: Callable[[], object] = _release_unused
    """Hands the freed memory back."""
    cpu: Callable[[], float] = time.process_time
    """The process' CPU time, in seconds."""
    clock: Callable[[], float] = time.monotonic
    """Seconds, for the polls and the quiet spells."""
    rss: Callable[[], int] = _rss
    """The process' resident memory, in bytes."""


PROCESS = Probes()
"""The probes of this process, the server's."""


class PageReturner:
    """Hands freed memory back (``probes.trim``) after :data:`QUIET_S` of quiet that follows
    work, and whenever resident memory grew :data:`GROWTH_BYTES` since the last time."""

    def __init__(
        self, probes: Probes = PROCESS, poll_s: float = POLL_S, quiet_s: float = QUIET_S
    ) -> None:
        self._probes = probes
        self._poll_s = poll_s
        self._quiet_s = quiet_s
        self._seen_at = self._worked_at = probes.clock()
        self._seen_cpu = probes.cpu()
        self._base = probes.rss()
        self._kept = False
        """The process has worked since the last hand-back (and may hold freed pages)."""
        self.returns = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shoal-pages", daemon=True)

    def check(self) -> bool:
        """One look: hand the pages back if due; True when it did."""
        now, used = self._probes.clock(), self._probes.cpu()
        if used - self._seen_cpu > QUIET_SHARE * (now - self._seen_at):
            self._kept, self._worked_at = True, now
        quiet_after_work = self._kept and now - self._worked_at >= self._quiet_s
        due = quiet_after_work or self._probes.rss() - self._base >= GROWTH_BYTES
        if due:
            with self._lock:
                self._return(quiet_after_work)
            used = self._probes.cpu()  # the hand-back's own work is not the next poll's
        self._seen_at, self._seen_cpu = now, used
        return due

    def _return(self, settled: bool) -> None:
        try:
            self._probes.trim()
        except Exception:  # never fatal: the pages stay until the next try
            logger.exception("handing freed memory back failed")
        self.returns += 1
        self._kept = self._kept and not settled
        self._base = self._probes.rss()

    def hand_back(self) -> None:
        """Hand back now (a flush round left no rows unflushed: ingest stopped or is
        slow); on the server's flusher thread."""
        with self._lock:
            self._return(True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.check()
