"""Checks before anything binds: free ports, and a memory budget that fits.

Both failures are :class:`~shoal.errors.StartupError`: one line that names the
setting to change, and exit code 2, which the systemd unit does not restart on
(``RestartPreventExitStatus=2``): retrying cannot free a port someone else holds
or make the limits fit.

The memory budget is what the settings allow the process to hold at once:

    baseline RSS (interpreter, Arrow, DataFusion, gRPC: measured idle)
  + query_memory_bytes x query_max_concurrency      (each query's pool)
  + UNFLUSHED_LIMIT_FLUSHES x flush_max_bytes        (unflushed rows before ingest is held back)
  + queue_max_bytes                                 (decoded requests waiting for the WAL)
  + max_body_bytes x (INGEST_THREADS + 1)           (bodies being decoded)
  + promql_cache_bytes                              (metric rows kept for PromQL)
  + series_index_bytes                              (the series indexes)
  + SERIES_CACHES x series_cache_bytes x max(1, decode_processes)
                                                    (the codecs' series caches, in the
                                                     server or in each decoding process)
  + DECODE_PROCESS_BYTES x decode_processes         (the decoding processes, if any)

It must fit in the memory the process is given: the ``memory_limit_bytes``
setting, else the cgroup's limit (systemd's ``MemoryMax=``), else nothing is
enforced and the machine's RAM is only compared with it for a warning.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import socket

from shoal.config import Config
from shoal.errors import StartupError
from shoal.sql.admission import cgroup_memory_limit

logger = logging.getLogger(__name__)

MiB = 1024 * 1024

BASELINE_RSS_BYTES = 450 * MiB
"""Resident memory of an idle server with its tables open (measured 160-250 MiB,
docs/benchmarks.md "Footprint"), with room for more tables and allocator slack."""

UNFLUSHED_LIMIT_FLUSHES = 5
"""Ingest is held back, then refused (retryably), while the unflushed rows hold more than
this many ``flush_max_bytes``: the flusher has fallen behind, and memory must stay
bounded. A round writes one ``flush_max_bytes`` while the next arrives, so at full
ingest speed the unflushed rows hold two to three of them; at three, senders were held back
or refused several times a second (docs/rationale.md)."""

DECODE_PROCESS_BYTES = 96 * MiB
"""One decoding process besides its series caches: 77 MiB idle (with multiprocessing's
resource tracker beside the first, 13 MiB), and the arrays of the request it decodes."""

SERIES_CACHES = 2
"""Series caches per decoding process (or in the server when it decodes): remote write's
and OTLP metrics', each at most ``series_cache_bytes``."""

INGEST_THREADS = 1
"""Threads that decode requests. Decoding holds the GIL for most of its time, so a
second thread adds no throughput, only GIL hand-offs between the two (docs/rationale.md)."""


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """What each part of the server may hold, in bytes."""

    baseline: int
    queries: int
    unflushed: int
    queue: int
    bodies: int
    promql_cache: int = 0
    decoders: int = 0
    series_index: int = 0
    series_caches: int = 0

    @property
    def total(self) -> int:
        return (
            self.baseline
            + self.queries
            + self.unflushed
            + self.queue
            + self.bodies
            + self.promql_cache
            + self.decoders
            + self.series_index
            + self.series_caches
        )

    def describe(self) -> str:
        return (
            f"{_mib(self.total)} = baseline {_mib(self.baseline)} + queries {_mib(self.queries)} "
            f"(query_memory_bytes x query_max_concurrency) + unflushed rows {_mib(self.unflushed)} "
            f"({UNFLUSHED_LIMIT_FLUSHES} x flush_max_bytes) + queue {_mib(self.queue)} "
            f"(queue_max_bytes) + bodies {_mib(self.bodies)} "
            f"(max_body_bytes x {INGEST_THREADS + 1}) + PromQL cache "
            f"{_mib(self.promql_cache)} (promql_cache_bytes) + decoding processes "
            f"{_mib(self.decoders)} ({_mib(DECODE_PROCESS_BYTES)} x decode_processes) + "
            f"series indexes {_mib(self.series_index)} (series_index_bytes) + series caches "
            f"{_mib(self.series_caches)} ({SERIES_CACHES} x series_cache_bytes per decoder)"
        )


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB"


def memory_budget(config: Config) -> MemoryBudget:
    """The most memory these settings let the server hold at once."""
    return MemoryBudget(
        baseline=BASELINE_RSS_BYTES,
        queries=int(config.query_memory_bytes) * int(config.query_max_concurrency),
        unflushed=UNFLUSHED_LIMIT_FLUSHES * int(config.flush_max_bytes),
        queue=int(config.queue_max_bytes),
        bodies=int(config.max_body_bytes) * (INGEST_THREADS + 1),
        promql_cache=int(config.promql_cache_bytes),
        decoders=DECODE_PROCESS_BYTES * int(config.decode_processes),
        series_index=int(config.series_index_bytes),
        series_caches=SERIES_CACHES
        * int(config.series_cache_bytes)
        * max(1, int(config.decode_processes)),
    )


def _physical_memory() -> int | None:
    try:
        import psutil
    except ModuleNotFoundError:  # pragma: no cover - psutil is a dependency
        return None
    return int(psutil.virtual_memory().total)


def check_memory(config: Config, cgroup_limit: int | None = None) -> MemoryBudget:
    """Raise :class:`StartupError` when the budget exceeds the memory the server is given."""
    budget = memory_budget(config)
    setting = int(config.memory_limit_bytes)
    if setting:
        limit, source = setting, f"memory_limit_bytes ({config.sources['memory_limit_bytes']})"
    else:
        limit = cgroup_limit if cgroup_limit is not None else (cgroup_memory_limit() or 0)
        source = "the cgroup memory limit (systemd MemoryMax=)"
    if limit:
        if budget.total > limit:
            raise StartupError(
                f"the settings allow {budget.describe()}, more than the {_mib(limit)} of "
                f"{source}: lower query_max_concurrency or query_memory_bytes (or "
                "flush_max_bytes, queue_max_bytes, series_index_bytes, series_cache_bytes), "
                "or give the server more memory"
            )
        logger.info("memory budget %s fits %s of %s", budget.describe(), _mib(limit), source)
        return budget
    ram = _physical_memory()
    if ram is not None and budget.total > ram:
        logger.warning(
            "the settings allow %s, more than this machine's %s of RAM; lower "
            "query_max_concurrency or query_memory_bytes",
            budget.describe(),
            _mib(ram),
        )
    return budget


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def bind_socket(bind: str, port: int, setting: str) -> socket.socket:
    """A listening-ready TCP socket on ``bind:port``; a taken port is a one-line StartupError."""
    host = bind.strip("[]")
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise port_error(bind, port, setting, exc) from None
    return sock


def port_error(bind: str, port: int, setting: str, exc: OSError | None = None) -> StartupError:
    env = "SHOAL_" + setting.upper()
    if exc is None or exc.errno == errno.EADDRINUSE:
        what = "is already in use by another process"
    elif exc.errno == errno.EACCES:
        what = "needs privileges this process lacks"
    else:
        what = f"cannot be bound ({exc.strerror or exc})"
    return StartupError(
        f"port {port} on {bind} {what}: set {setting} ({env}, or --{setting.replace('_', '-')}) "
        "to a free port, or stop the other process"
    )


def check_port_free(bind: str, port: int, setting: str) -> None:
    """Raise StartupError if ``bind:port`` cannot be bound now (port 0 always can)."""
    if port == 0:
        return
    bind_socket(bind, port, setting).close()


def check_distinct_ports(ports: dict[str, int]) -> None:
    """Raise StartupError when two listeners are given the same port (0 picks a free one).

    Both sockets set SO_REUSEADDR before either listens, so the kernel would let them
    share a port and hand each connection to either listener."""
    seen: dict[int, str] = {}
    for setting, port in ports.items():
        if port and port in seen:
            raise StartupError(
                f"{seen[port]} and {setting} are both {port}: give each listener its own port"
            )
        seen[port] = setting
