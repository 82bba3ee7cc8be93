"""``shoal serve``: run the server until SIGTERM."""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import platform

from shoal.commands import load_config

ARROW_POOL = "system"
"""pyarrow's allocator in the server: the C library's malloc, not pyarrow's mimalloc.

pyarrow's mimalloc keeps pages freed by other threads in the heap of the thread that
allocated them, and returns them to the kernel only when that thread allocates again:
once the ingest worker threads go idle, the columns of every flushed request stay
resident (360 MiB of unique 1 MiB attribute values left the server 245 MiB above its
starting RSS after the flush; with malloc, the flusher's ``release_unused`` trims them).
Ingest throughput measured the same within noise (docs/benchmarks.md). pyarrow reads
the choice when it loads, so it is made before anything imports pyarrow; an operator's
own ``ARROW_DEFAULT_MEMORY_POOL`` wins. DataFusion has its own allocator (see
:mod:`shoal.sql.allocator`).
"""

MMAP_THRESHOLD = 4 * 1024 * 1024
"""Allocations at least this large get pages of their own from the kernel (glibc).

glibc starts at 128 KiB but raises the threshold to the size of each mmapped block that
is freed (up to 32 MiB); blocks of that size then come from the heap, where a long-lived
neighbour keeps them resident once freed. After 40 requests of unique 1 MiB attribute
values (360 MiB through the server, then flushed), a threshold fixed at 32 MiB (where
glibc's moving one ends up) left RSS 110 MiB above where it was, at 512 KiB 35 MiB, and
at 4 MiB 53 MiB. Every allocation above the threshold is mapped and faulted in afresh,
though: at 128 KiB ingest lost about 10% of its throughput, and at 512 KiB PromQL panels
over a few hundred thousand samples (arrays of a few MB, allocated and freed many times
per query) took 10-25% longer than at 4 MiB (docs/benchmarks.md). 4 MiB keeps most of
the memory bound and those arrays on the heap. An operator's own
``MALLOC_MMAP_THRESHOLD_`` wins.
"""


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD`; False where not glibc or set."""
    if platform.libc_ver()[0] != "glibc" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    m_mmap_threshold = -3
    return bool(ctypes.CDLL(None).mallopt(m_mmap_threshold, MMAP_THRESHOLD))


def run(args: argparse.Namespace) -> int:
    """Load and validate the settings (a bad value exits 2 via the CLI), then serve."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", ARROW_POOL)
    fix_mmap_threshold()
    config = load_config(args)
    level = "DEBUG" if getattr(args, "verbose", False) else config.log_level.upper()
    logging.getLogger().setLevel(level)
    config.data_path.mkdir(parents=True, exist_ok=True)
    from shoal.server.runtime import serve

    return serve(config)
