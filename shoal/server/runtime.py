"""Process lifecycle: start, replay, serve, drain, stop.

Order of startup: listeners come up first (``/healthz`` answers, ingest gets
503 and ``/readyz`` says not ready), then the tables are opened, the WAL is
opened and replayed into the unflushed rows past each table's committed LSN, the
flusher starts, and ingest opens (``/readyz`` 200); the series indexes are then
read in the background, so that the first query does not wait for them.

SIGTERM/SIGINT: ingest answers 503 / UNAVAILABLE, admitted requests finish,
the listeners stop, the flusher commits what is left, the WAL is closed, exit
0, all within ``shutdown_timeout_s``. A fatal WAL error stops the process with
exit code 1 so systemd restarts it and the WAL is replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import ipaddress
import logging
import os
import signal
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import uvicorn
import uvloop
from grpc import aio
from prometheus_client import CollectorRegistry

from shoal.api.app import AppServices, create_app, front_door
from shoal.api.otlp_grpc import create_server
from shoal.auth import Authenticator, TokenStore
from shoal.config import Config
from shoal.errors import ConfigError
from shoal.ingest.decoding import (
    SERIES_CACHES,
    DecodeRunner,
    ThreadDecoder,
    limit_series_caches,
    series_cache_stats,
)
from shoal.ingest.feed import RowFeed
from shoal.ingest.handler import IngestHandler
from shoal.ingest.ingestor import Ingestor
from shoal.ingest.processes import ProcessDecoder
from shoal.ingest.queue import IngestQueue
from shoal.ingest.replay import replay
from shoal.logql.service import LogQLService
from shoal.pgwire.server import PgServer
from shoal.promql import mapping
from shoal.promql.service import PromQLService
from shoal.server import http, pages, preflight
from shoal.server.preflight import INGEST_THREADS, UNFLUSHED_LIMIT_FLUSHES
from shoal.server.telemetry import ServerMetrics, StorageMetricsAdapter, WalMetricsAdapter
from shoal.sql.service import QueryService
from shoal.storage import layout
from shoal.storage.cache import FileCache
from shoal.storage.flusher import Flusher, FlushPolicy
from shoal.storage.reader import TenantReader
from shoal.storage.store import TableStore
from shoal.storage.unflushed import UnflushedRows
from shoal.traceql.service import TraceQLService
from shoal.traceql.servicegraph import ServiceGraph
from shoal.wal import Wal

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FATAL = 1
"""A fatal WAL error: systemd restarts the server and the WAL is replayed. Settings that
do not fit (bad values, a taken port, a memory budget over the limit) exit 2 through the
CLI's ConfigError path, which the unit does not restart on."""


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_port(bind: str, port: int) -> str:
    host = bind.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the runtime owns SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _wal_dir_stats(path: Path) -> tuple[int, int]:
    total = count = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(path):
            if entry.name.endswith(".wal"):
                count += 1
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
    return total, count


class ServerRuntime:
    """Everything one ``shoal serve`` process runs."""

    def __init__(self, config: Config, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        self.data_dir = config.data_path
        self.metrics = ServerMetrics(registry)
        self.unflushed = UnflushedRows()
        self.queue = IngestQueue(
            config.queue_max_requests,
            config.queue_max_bytes,
            float(config.retry_after_s),
            on_overflow=lambda reason: self.metrics.queue_overflow_total.labels(reason).inc(),
            backlog=lambda: self.unflushed.bytes,
            max_backlog_bytes=UNFLUSHED_LIMIT_FLUSHES * config.flush_max_bytes,
            backlog_wait_s=float(config.backlog_wait_s),
            on_wait=self.metrics.waited,
        )
        self.executor = ThreadPoolExecutor(
            max_workers=INGEST_THREADS, thread_name_prefix="shoal-ingest"
        )
        self.authenticator = Authenticator(
            TokenStore(self.data_dir),
            allow_anonymous=is_loopback(config.bind) or bool(config.insecure),
        )
        self.feed = RowFeed()
        self.ingestor = Ingestor(self.queue, self.unflushed, on_fatal=self._fatal, feed=self.feed)
        self.decoder: DecodeRunner = ThreadDecoder(self.executor)
        self.ingest = IngestHandler(self.ingestor, self.decoder, self.metrics)
        self.metrics.bind_queue(lambda: self.queue.depth, lambda: self.queue.bytes)
        self.metrics.bind_unflushed(
            lambda: self.unflushed.rows, lambda: self.unflushed.bytes, self.unflushed.oldest_age_s
        )
        self.metrics.bind_wal(lambda: _wal_dir_stats(self.data_dir / "wal"))
        self.store: TableStore | None = None
        self.wal: Wal | None = None
        self.flusher: Flusher | None = None
        self.pages = pages.PageReturner()
        self.metrics.bind_page_returns(lambda: self.pages.returns)
        self.query_service: QueryService | None = None
        self.http_port = 0
        self.grpc_port = 0
        self.pg_port = 0
        self.pg: PgServer | None = None
        self.pg_ssl: ssl.SSLContext | None = None
        self._ready = False
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fatal_error: BaseException | None = None

    # -- checks before anything binds --------------------------------------------------

    def preflight(self) -> None:
        """Refuse configurations that must not start (raises ConfigError, exit code 2)."""
        preflight.check_memory(self.config)
        if not self.authenticator.has_tokens and not is_loopback(self.config.bind):
            if not self.config.insecure:
                raise ConfigError(
                    f"refusing to bind {self.config.bind} with no tokens configured: create "
                    "one with `shoal token create --tenant NAME`, bind 127.0.0.1, or pass "
                    "--insecure to accept unauthenticated requests as tenant 'default'"
                )
            logger.warning(
                "bound to %s with no tokens: anyone who can reach it writes and reads "
                "tenant 'default'",
                self.config.bind,
            )

        self.pg_ssl = self._pg_tls()
        if self.pg_enabled and self.pg_ssl is None and not is_loopback(self.config.bind):
            raise ConfigError(
                f"refusing to serve the PostgreSQL protocol on {self.config.bind} without TLS "
                "(passwords are tokens): set pg_tls_cert and pg_tls_key, or pg_enabled=false"
            )

    @property
    def pg_enabled(self) -> bool:
        choice = str(self.config.pg_enabled)
        return choice == "true" or (choice == "auto" and is_loopback(self.config.bind))

    def _pg_tls(self) -> ssl.SSLContext | None:
        cert, key = str(self.config.pg_tls_cert), str(self.config.pg_tls_key)
        if not cert and not key:
            return None
        if not cert or not key:
            raise ConfigError("pg_tls_cert and pg_tls_key must be set together")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load pg_tls_cert/pg_tls_key ({cert}, {key}): {exc}"
            ) from None
        return context

    async def _start_pg(self) -> None:
        """The PostgreSQL-protocol listener (it serves queries, so it starts once they can run)."""
        if not self.pg_enabled or self.query_service is None:
            return
        pg = PgServer(
            self.query_service,
            self.authenticator,
            self.pg_ssl,
            max_message_bytes=int(self.config.query_max_sql_bytes) * 2 + 65536,
            max_connections=int(self.config.pg_max_connections),
        )
        try:
            self.pg_port = await pg.start(self.config.bind.strip("[]"), self.config.pg_port)
        except OSError as exc:
            if str(self.config.pg_enabled) == "true":
                raise preflight.port_error(
                    self.config.bind, self.config.pg_port, "pg_port", exc
                ) from exc
            logger.error(
                "PostgreSQL protocol listener not started on port %d: %s (set pg_port, or "
                "pg_enabled=false)",
                self.config.pg_port,
                exc,
            )
            return
        self.pg = pg
        logger.info(
            "listening: PostgreSQL protocol on %s%s",
            _host_port(self.config.bind, self.pg_port),
            " (TLS available)" if self.pg_ssl is not None else "",
        )

    # -- lifecycle ---------------------------------------------------------------------

    def _fatal(self, exc: BaseException) -> None:
        if self._fatal_error is not None:
            return
        self._fatal_error = exc
        logger.critical("fatal WAL error, stopping so the WAL is replayed on restart: %s", exc)
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)

    def is_ready(self) -> bool:
        return self._ready

    def trouble(self) -> str | None:
        """What is wrong while ingest still works: flushes failing (the store down)."""
        failure = self.flusher.failure if self.flusher is not None else None
        if failure is None:
            return None
        since, error = failure
        return (
            f"flushes failing for {time.time() - since:.0f}s, rows kept in the WAL "
            f"({self.unflushed.rows} unflushed): {error}"
        )

    def open_storage(self) -> tuple[TableStore, Wal]:
        """Open the tables and the WAL, and replay the WAL into the unflushed rows."""
        started = time.perf_counter()
        store = self.store = TableStore.for_config(
            self.config, StorageMetricsAdapter(self.metrics), background=True
        )
        committed: dict[tuple[str, str], int] = {}
        for tenant in store.tenants():
            for table in store.tables(tenant):
                committed[(tenant, table)] = store.committed_lsn(tenant, table)
        wal = self.wal = Wal.open(
            self.data_dir / "wal",
            fsync=self.config.wal_fsync,
            segment_bytes=self.config.wal_segment_bytes,
            max_record_bytes=self.config.wal_max_record_bytes,
            corruption_policy=self.config.wal_corruption_policy,
            metrics=WalMetricsAdapter(self.metrics),
            on_durable=self.ingestor.on_durable,
            # LSNs must stay above every committed one, even if the WAL directory was lost.
            min_next_lsn=max(committed.values(), default=0) + 1,
        )
        replayed, skipped = replay(wal.replay(0), store, self.unflushed)
        logger.info(
            "replayed %d WAL record(s) (%d rows) into the unflushed rows, %d already committed, "
            "in %.2fs",
            replayed, self.unflushed.rows, skipped, time.perf_counter() - started,
        )  # fmt: skip
        return store, wal

    async def run(self) -> int:
        self.preflight()
        loop = self._loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        limit_series_caches(int(self.config.series_cache_bytes))
        self.metrics.bind_series_caches(SERIES_CACHES, series_cache_stats)
        if self.config.decode_processes:
            # started first: their imports overlap the WAL replay
            self.decoder = ProcessDecoder(
                self.config.decode_processes,
                self.metrics.decode_process_restarts.inc,
                int(self.config.series_cache_bytes),
            )
            self.ingest.decoder = self.decoder

        app = create_app(
            AppServices(
                authenticator=self.authenticator,
                ingest=self.ingest,
                is_ready=self.is_ready,
                metrics_exposition=self.metrics.exposition,
                trouble=self.trouble,
                max_body_bytes=self.config.max_body_bytes,
                retry_after_s=float(self.config.retry_after_s),
                feed=self.feed,
            )
        )
        uv = _QuietServer(
            uvicorn.Config(
                front_door(app),
                host=self.config.bind.strip("[]"),
                port=self.config.http_port,
                log_config=None,
                access_log=False,
                http=http.protocol_class(float(self.config.http_read_timeout_s)),
                lifespan="off",
                timeout_graceful_shutdown=max(1, int(self.config.shutdown_timeout_s / 3)),
                timeout_keep_alive=30,
                server_header=False,
                # shoal reads no client address: X-Forwarded-* rewriting is per-request
                # work for nothing
                proxy_headers=False,
            )
        )
        # Bind both ports before starting either listener: a taken port is one line
        # naming the setting, not a traceback from each listener.
        bind = self.config.bind
        preflight.check_distinct_ports(
            {"http_port": self.config.http_port, "grpc_port": self.config.grpc_port}
            | ({"pg_port": self.config.pg_port} if self.pg_enabled else {})
        )
        http_socket = preflight.bind_socket(bind, self.config.http_port, "http_port")
        try:
            preflight.check_port_free(bind, self.config.grpc_port, "grpc_port")
            if str(self.config.pg_enabled) == "true":  # required: a taken port stops the start
                preflight.check_port_free(bind, self.config.pg_port, "pg_port")
            try:
                grpc_server, self.grpc_port = create_server(
                    self.ingest,
                    self.authenticator,
                    _host_port(bind, self.config.grpc_port),
                    self.config.grpc_max_message_bytes,
                    float(self.config.retry_after_s),
                )
            except (OSError, RuntimeError) as exc:
                raise preflight.port_error(bind, self.config.grpc_port, "grpc_port") from exc
            await grpc_server.start()
        except BaseException:
            http_socket.close()
            raise
        http_task = asyncio.create_task(uv.serve(sockets=[http_socket]), name="shoal-http")
        while not uv.started:
            if http_task.done():
                await grpc_server.stop(None)
                await http_task
                raise OSError(f"the HTTP listener on port {self.config.http_port} did not start")
            await asyncio.sleep(0.01)
        self.http_port = uv.servers[0].sockets[0].getsockname()[1]
        logger.info(
            "listening: OTLP/HTTP and SQL on %s, OTLP/gRPC on %s",
            _host_port(self.config.bind, self.http_port),
            _host_port(self.config.bind, self.grpc_port),
        )
        try:
            store, wal = await loop.run_in_executor(None, self.open_storage)
            files = None
            if not store.location.is_local:
                files = FileCache(
                    store.location,
                    self.data_dir / "cache",
                    int(self.config.storage_cache_bytes),
                    pin_s=float(self.config.query_timeout_s) * 2,
                )
                self.metrics.bind_storage_cache(files.stats)
                store.keep_written(files.put)
            reader = TenantReader(store, self.unflushed, int(self.config.promql_cache_bytes), files)
            self.query_service = QueryService(reader, self.config)
            slices = reader.slices
            self.metrics.bind_promql_cache(lambda: (slices.bytes, slices.hits, slices.misses))
            self.metrics.bind_series_index(store.series_budget.stats)
            app.state.query_service = self.query_service
            app.state.promql = PromQLService(
                reader,
                self.query_service,
                mapping.promoted(self.config.promql_promote_resource_attributes),
                ServiceGraph(reader),
            )
            app.state.traceql = TraceQLService(
                reader, self.query_service, int(self.config.traceql_max_spans)
            )
            app.state.logql = LogQLService(self.query_service)
            app.state.tail_buffer_rows = int(self.config.loki_tail_buffer_rows)
            app.state.settings = self.config
            app.state.wal_damaged_segments = len(wal.recovery_report.damaged)
            await self._start_pg()
        except BaseException:
            logger.exception("startup failed")
            uv.should_exit = True
            await grpc_server.stop(None)
            await http_task
            raise
        policy = FlushPolicy(self.config.flush_max_bytes, self.config.flush_max_age_s)
        self.flusher = Flusher(
            self.unflushed, store, wal, policy, self.metrics, helpers=layout.HELPERS,
            emptied=self.pages.hand_back,
        )  # fmt: skip
        flusher = self.flusher
        self.metrics.bind_flush_failure(
            lambda: time.time() - flusher.failure[0] if flusher.failure else 0.0
        )
        self.flusher.start()
        self.pages.start()
        self.ingestor.open(wal)
        loop.run_in_executor(None, reader.warm, stop.is_set)  # no first query waits for it
        # what the start-up made (170,000 objects) leaves every later garbage collection:
        # a query's many small objects set off full ones (docs/rationale.md)
        gc.collect()
        gc.freeze()
        self._ready = True
        self.metrics.ready.set(1)
        logger.info("ready")

        await stop.wait()
        return await self._shutdown(uv, http_task, grpc_server)

    async def _shutdown(
        self, uv: uvicorn.Server, http_task: asyncio.Task[None], grpc: aio.Server
    ) -> int:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + float(self.config.shutdown_timeout_s)
        self._ready = False
        self.metrics.ready.set(0)
        self.pages.stop()
        self.ingestor.drain()
        fatal = self._fatal_error is not None
        logger.info("stopping: draining %d queued request(s)", self.queue.depth)
        if not fatal:
            drained = await loop.run_in_executor(
                None, self.queue.wait_empty, max(0.0, (deadline - time.monotonic()) / 2)
            )
            if not drained:
                logger.warning("%d request(s) still queued at shutdown", self.queue.depth)
        if self.pg is not None:
            await self.pg.close()
        await grpc.stop(grace=max(0.0, min(2.0, deadline - time.monotonic())))
        uv.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(http_task, max(0.1, deadline - time.monotonic()))
        await loop.run_in_executor(None, self.decoder.close)
        committed = False
        if self.flusher is not None and not fatal:
            flushed = await loop.run_in_executor(
                None, self.flusher.shutdown, max(0.1, deadline - time.monotonic())
            )
            if not flushed:
                logger.warning("final flush incomplete; the WAL keeps the rest for replay")
            # every acknowledged record is in a table: the WAL holds nothing to replay
            committed = flushed and self.unflushed.rows == 0
        if self.wal is not None:
            try:
                await loop.run_in_executor(
                    None,
                    functools.partial(
                        self.wal.shutdown,
                        max(0.1, deadline - time.monotonic()),
                        retire=committed,
                    ),
                )
            except Exception:
                logger.exception("closing the WAL failed")
        if fatal:
            logger.critical("exiting after a fatal WAL error: %s", self._fatal_error)
            return EXIT_FATAL
        logger.info("stopped")
        return EXIT_OK


def serve(config: Config) -> int:
    """Run the server until SIGTERM; returns the process exit code."""
    runtime = ServerRuntime(config)
    if config.event_loop == "uvloop":
        return uvloop.run(runtime.run())
    return asyncio.run(runtime.run())
