"""``shoal serve``: run the server until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NoReturn

from shoal.commands import load_config
from shoal.server import pages

ARROW_POOL = "system"
"""pyarrow's allocator in the server: the C library's malloc, not pyarrow's mimalloc.

pyarrow's mimalloc keeps pages freed by other threads in the heap of the thread that
allocated them, and returns them to the kernel only when that thread allocates again:
once the ingest worker threads go idle, the columns of every flushed request stay
resident (360 MiB of unique 1 MiB attribute values left the server 245 MiB above its
starting RSS after the flush; with malloc, :mod:`shoal.server.pages` trims them).
Ingest throughput measured the same within noise (docs/benchmarks.md). pyarrow reads
the choice when it loads, so it is made before anything imports pyarrow; an operator's
own ``ARROW_DEFAULT_MEMORY_POOL`` wins. DataFusion has its own allocator (see
:mod:`shoal.sql.allocator`).
"""


def prepare() -> None:
    """The allocators' settings, made before anything loads pyarrow (the command line
    calls this first: even its logging set-up loads pyarrow)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", ARROW_POOL)
    pages.configure()


def run(args: argparse.Namespace) -> int:
    """Load and validate the settings (a bad value exits 2 via the CLI), then serve."""
    config = load_config(args)
    level = "DEBUG" if getattr(args, "verbose", False) else config.log_level.upper()
    logging.getLogger().setLevel(level)
    config.data_path.mkdir(parents=True, exist_ok=True)
    from shoal.server.runtime import serve

    leave(serve(config))


WRITERS_S = 30.0
"""How long the exit waits for the threads still writing derived files (the series
index's merge or checkpoint a final flush may start)."""


def leave(code: int) -> NoReturn:
    """End the process once the server has stopped, without the interpreter's teardown.

    Everything is flushed and the WAL closed by then; what remained was the native
    libraries' teardown at exit, which now and then aborted a clean stop (SIGABRT,
    "terminate called without an active exception", twice in the test suite's
    thousands of stops, both after the log's "stopped"), so that a clean stop exited
    -6 and systemd restarted the service. The threads that write derived files are
    waited for (not every thread: idle pool workers wait for the teardown to end them),
    the logs flushed, and the process leaves with ``code``."""
    from shoal.storage import series

    series.wait_for_writers(WRITERS_S)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
