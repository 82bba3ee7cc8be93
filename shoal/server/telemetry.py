"""Prometheus self-metrics, on an explicit registry (tests get a fresh one).

The core layers report through small protocols with no-op defaults; this is
the one place that adapts them to prometheus_client. Gauges that describe
state (queue depth, the unflushed rows' size, WAL size, RSS) are computed on scrape.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from collections.abc import Callable, Mapping, Sequence

import psutil
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    ProcessCollector,
    generate_latest,
)

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
_FSYNC_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
)  # fmt: skip
_FLUSH_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclasses.dataclass(frozen=True)
class _Family:
    """One metric family of :class:`ServerMetrics`: its attribute and how to make it."""

    attr: str
    kind: type[Counter] | type[Gauge] | type[Histogram]
    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    def make(self, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
        if self.buckets is not None:
            return Histogram(
                self.name, self.help, self.labels, buckets=self.buckets, registry=registry
            )
        return self.kind(self.name, self.help, self.labels, registry=registry)


_FAMILIES: tuple[_Family, ...] = (
    _Family(
        "accepted_total",
        Counter,
        "shoal_ingest_accepted_total",
        "Points, log records or spans acknowledged, per signal and tenant.",
        ("signal", "tenant"),
    ),
    _Family(
        "rejected_total",
        Counter,
        "shoal_ingest_rejected_total",
        "Points, log records or spans not acknowledged, per signal, tenant and reason.",
        ("signal", "tenant", "reason"),
    ),
    _Family(
        "requests_total",
        Counter,
        "shoal_ingest_requests_total",
        "OTLP export requests answered, per signal, protocol, tenant and status.",
        ("signal", "protocol", "tenant", "status"),
    ),
    _Family(
        "request_seconds",
        Histogram,
        "shoal_ingest_request_duration_seconds",
        "Time from request start to answer (the ack latency for accepted requests).",
        ("protocol",),
        _LATENCY_BUCKETS,
    ),
    _Family(
        "queue_overflow_total",
        Counter,
        "shoal_ingest_queue_overflow_total",
        "Requests refused because the ingest queue was full, per bound hit (requests, bytes, "
        "or snapshot: the unflushed rows are over their cap, the flusher is behind).",
        ("reason",),
    ),
    _Family(
        "backlog_wait_seconds",
        Histogram,
        "shoal_ingest_backlog_wait_seconds",
        "Time ingest requests were held back, before they went on or were refused, while "
        "the rows not yet flushed were over their cap (the flusher behind ingest).",
        (),
        _LATENCY_BUCKETS,
    ),
    _Family(
        "decode_process_restarts",
        Counter,
        "shoal_decode_process_restarts_total",
        "Decoding processes started again after one exited (killed, out of memory, a crash); "
        "the requests it held were answered 503, retryable.",
    ),
    _Family(
        "queue_requests",
        Gauge,
        "shoal_ingest_queue_requests",
        "Requests admitted and not yet durable.",
        (),
    ),
    _Family(
        "queue_bytes",
        Gauge,
        "shoal_ingest_queue_bytes",
        "Decoded bytes admitted and not yet durable.",
        (),
    ),
    _Family(
        "wal_fsync_seconds",
        Histogram,
        "shoal_wal_fsync_seconds",
        "WAL fsync latency.",
        (),
        _FSYNC_BUCKETS,
    ),
    _Family(
        "wal_appended_bytes_total",
        Counter,
        "shoal_wal_appended_bytes_total",
        "Bytes written to the WAL.",
        (),
    ),
    _Family(
        "wal_records_total", Counter, "shoal_wal_records_total", "Records written to the WAL.", ()
    ),
    _Family(
        "wal_append_failures_total",
        Counter,
        "shoal_wal_append_failures_total",
        "WAL appends that failed, per reason (io, fatal, closed).",
        ("reason",),
    ),
    _Family(
        "wal_corruptions_total",
        Counter,
        "shoal_wal_corruptions_total",
        "Damaged WAL segments found (and kept aside) while opening the log.",
        (),
    ),
    _Family(
        "wal_torn_tails_total",
        Counter,
        "shoal_wal_torn_tails_total",
        "Torn WAL tails cut while opening the log.",
        (),
    ),
    _Family("wal_bytes", Gauge, "shoal_wal_bytes", "Bytes in WAL segments on disk.", ()),
    _Family("wal_segments", Gauge, "shoal_wal_segments", "WAL segments on disk.", ()),
    _Family(
        "flush_seconds",
        Histogram,
        "shoal_flush_duration_seconds",
        "Duration of one table flush (Parquet write and Delta commit).",
        (),
        _FLUSH_BUCKETS,
    ),
    _Family(
        "flush_rows_total", Counter, "shoal_flush_rows_total", "Rows flushed to Delta tables.", ()
    ),
    _Family(
        "flush_bytes_total",
        Counter,
        "shoal_flush_bytes_total",
        "In-memory bytes flushed to Delta tables.",
        (),
    ),
    _Family(
        "flush_failures_total",
        Counter,
        "shoal_flush_failures_total",
        "Table flushes that failed (retried next round).",
        ("tenant", "table"),
    ),
    _Family(
        "flush_shared_rounds_total",
        Counter,
        "shoal_flush_shared_rounds_total",
        "Flush rounds that had fallen behind ingest and shared their writing with helper threads.",
        (),
    ),
    _Family("snapshot_rows", Gauge, "shoal_snapshot_rows", "Rows in the in-memory snapshot.", ()),
    _Family(
        "snapshot_bytes", Gauge, "shoal_snapshot_bytes", "Bytes in the in-memory snapshot.", ()
    ),
    _Family(
        "promql_cache_bytes",
        Gauge,
        "shoal_promql_cache_bytes",
        "Bytes of metric rows decoded from Parquet kept for PromQL (promql_cache_bytes).",
        (),
    ),
    _Family(
        "promql_cache_reads",
        Gauge,
        "shoal_promql_cache_reads",
        "Reads of one metric's rows in one file since start, found kept (hit) or decoded (miss).",
        ("result",),
    ),
    _Family(
        "memory_returns", Gauge, "shoal_memory_returns", "Freed memory handed back, times.", ()
    ),
    _Family(
        "flush_failing_seconds",
        Gauge,
        "shoal_flush_failing_seconds",
        "Seconds since flushes began to fail (0 while they succeed): the object store "
        "unreachable, slow or refusing; the rows wait in the WAL.",
        (),
    ),
    _Family(
        "storage_cache_bytes",
        Gauge,
        "shoal_storage_cache_bytes",
        "Bytes of Parquet files from object storage kept on local disk (storage_cache_bytes).",
        (),
    ),
    _Family(
        "series_index_bytes",
        Gauge,
        "shoal_series_index_bytes",
        "Bytes the series indexes of every table hold (bounded by series_index_bytes).",
        (),
    ),
    _Family(
        "series_index_evicted",
        Gauge,
        "shoal_series_index_evicted_series",
        "Series dropped from the series indexes since start to keep them within "
        "series_index_bytes (queries reaching back to them read the files' summaries).",
        (),
    ),
    _Family(
        "series_cache_bytes",
        Gauge,
        "shoal_series_cache_bytes",
        "Bytes each series cache of the server process holds (bounded by series_cache_bytes).",
        ("codec",),
    ),
    _Family(
        "series_cache_unkept",
        Gauge,
        "shoal_series_cache_unkept_series",
        "Series a full series cache worked out and did not keep, since start, per codec.",
        ("codec",),
    ),
    _Family(
        "storage_cache_reads",
        Gauge,
        "shoal_storage_cache_reads",
        "Reads of a committed file from object storage since start, found on local disk "
        "(hit) or fetched (miss).",
        ("result",),
    ),
    _Family(
        "snapshot_oldest_age",
        Gauge,
        "shoal_snapshot_oldest_age_seconds",
        "Age of the oldest unflushed record.",
        (),
    ),
    _Family(
        "table_version",
        Gauge,
        "shoal_table_version",
        "Latest Delta version committed by the flusher, per table.",
        ("tenant", "table"),
    ),
    _Family(
        "table_commits_total",
        Counter,
        "shoal_table_commits_total",
        "Delta commits, per table and operation (flush, import, compact, ...).",
        ("tenant", "table", "operation"),
    ),
    _Family(
        "table_commit_retries_total",
        Counter,
        "shoal_table_commit_retries_total",
        "Delta commits retried after losing a race to another writer.",
        ("tenant", "table"),
    ),
    _Family(
        "table_checkpoints_total",
        Counter,
        "shoal_table_checkpoints_total",
        "Delta checkpoints written, per table.",
        ("tenant", "table"),
    ),
)


def _pick(
    stats: Callable[[], Mapping[str, tuple[int, int]]], key: str, i: int
) -> Callable[[], float]:
    return lambda: float(stats()[key][i])


class ServerMetrics:
    """Every metric family the server exposes on ``/metrics``."""

    accepted_total: Counter
    rejected_total: Counter
    requests_total: Counter
    request_seconds: Histogram
    queue_overflow_total: Counter
    backlog_wait_seconds: Histogram
    decode_process_restarts: Counter
    queue_requests: Gauge
    queue_bytes: Gauge
    wal_fsync_seconds: Histogram
    wal_appended_bytes_total: Counter
    wal_records_total: Counter
    wal_append_failures_total: Counter
    wal_corruptions_total: Counter
    wal_torn_tails_total: Counter
    wal_bytes: Gauge
    wal_segments: Gauge
    flush_seconds: Histogram
    flush_rows_total: Counter
    flush_bytes_total: Counter
    flush_failures_total: Counter
    flush_shared_rounds_total: Counter
    snapshot_rows: Gauge
    snapshot_bytes: Gauge
    snapshot_oldest_age: Gauge
    promql_cache_bytes: Gauge
    promql_cache_reads: Gauge
    storage_cache_bytes: Gauge
    flush_failing_seconds: Gauge
    memory_returns: Gauge
    storage_cache_reads: Gauge
    series_index_bytes: Gauge
    series_index_evicted: Gauge
    series_cache_bytes: Gauge
    series_cache_unkept: Gauge
    table_version: Gauge
    table_commits_total: Counter
    table_commit_retries_total: Counter
    table_checkpoints_total: Counter

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        for family in _FAMILIES:
            setattr(self, family.attr, family.make(r))
        self.ready = Gauge("shoal_ready", "1 once the WAL is replayed and ingest open.", registry=r)
        self.rss = Gauge("shoal_process_rss_bytes", "Resident set size of the server.", registry=r)
        process = psutil.Process()
        self.rss.set_function(lambda: float(process.memory_info().rss))
        GCCollector(registry=r)
        self.gc_frozen = Gauge(
            "shoal_gc_frozen_objects",
            "Objects made at start-up and left out of garbage collections.",
            registry=r,
        )
        self.gc_frozen.set_function(lambda: float(gc.get_freeze_count()))
        self._wal_stats: Callable[[], tuple[int, int]] | None = None
        self._lock = threading.Lock()

    # -- state read on scrape -----------------------------------------------------

    def bind_queue(self, depth: Callable[[], int], nbytes: Callable[[], int]) -> None:
        self.queue_requests.set_function(lambda: float(depth()))
        self.queue_bytes.set_function(lambda: float(nbytes()))

    def bind_unflushed(
        self, rows: Callable[[], int], nbytes: Callable[[], int], age: Callable[[], float]
    ) -> None:
        self.snapshot_rows.set_function(lambda: float(rows()))
        self.snapshot_bytes.set_function(lambda: float(nbytes()))
        self.snapshot_oldest_age.set_function(age)

    def bind_promql_cache(self, stats: Callable[[], tuple[int, int, int]]) -> None:
        """``stats() -> (bytes, hits, misses)`` of the PromQL cache."""
        self.promql_cache_bytes.set_function(lambda: float(stats()[0]))
        self.promql_cache_reads.labels("hit").set_function(lambda: float(stats()[1]))
        self.promql_cache_reads.labels("miss").set_function(lambda: float(stats()[2]))

    def bind_page_returns(self, count: Callable[[], int]) -> None:
        self.memory_returns.set_function(lambda: float(count()))

    def bind_flush_failure(self, seconds: Callable[[], float]) -> None:
        self.flush_failing_seconds.set_function(seconds)

    def bind_storage_cache(self, stats: Callable[[], tuple[int, int, int]]) -> None:
        """``stats() -> (bytes, hits, misses)`` of the read cache of object storage."""
        self.storage_cache_bytes.set_function(lambda: float(stats()[0]))
        self.storage_cache_reads.labels("hit").set_function(lambda: float(stats()[1]))
        self.storage_cache_reads.labels("miss").set_function(lambda: float(stats()[2]))

    def bind_series_index(self, stats: Callable[[], tuple[int, int]]) -> None:
        """``stats() -> (bytes, evicted series)`` of the series indexes."""
        self.series_index_bytes.set_function(lambda: float(stats()[0]))
        self.series_index_evicted.set_function(lambda: float(stats()[1]))

    def bind_series_caches(
        self, codecs: Sequence[str], stats: Callable[[], Mapping[str, tuple[int, int]]]
    ) -> None:
        """``stats() -> {codec: (bytes, series not kept)}`` of the series caches."""
        for codec in codecs:
            held, unkept = _pick(stats, codec, 0), _pick(stats, codec, 1)
            self.series_cache_bytes.labels(codec).set_function(held)
            self.series_cache_unkept.labels(codec).set_function(unkept)

    def bind_wal(self, stats: Callable[[], tuple[int, int]]) -> None:
        """``stats() -> (bytes, segments)`` of the WAL directory."""
        self.wal_bytes.set_function(lambda: float(stats()[0]))
        self.wal_segments.set_function(lambda: float(stats()[1]))

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    # -- shoal.ingest.handler.IngestMetrics ----------------------------------------------

    def accepted(self, signal: str, tenant: str, count: int) -> None:
        self.accepted_total.labels(signal, tenant).inc(count)

    def rejected(self, signal: str, tenant: str, reason: str, count: int) -> None:
        self.rejected_total.labels(signal, tenant, reason).inc(count)

    def request(self, signal: str, protocol: str, tenant: str, status: str, seconds: float) -> None:
        self.requests_total.labels(signal, protocol, tenant, status).inc()
        self.request_seconds.labels(protocol).observe(seconds)

    def waited(self, seconds: float) -> None:
        self.backlog_wait_seconds.observe(seconds)

    # -- flusher -------------------------------------------------------------------

    def flushed(self, tenant: str, table: str, rows: int, nbytes: int, seconds: float,
                version: int | None) -> None:  # fmt: skip
        self.flush_seconds.observe(seconds)
        self.flush_rows_total.inc(rows)
        self.flush_bytes_total.inc(nbytes)
        if version is not None:
            self.table_version.labels(tenant, table).set(version)

    def flush_failed(self, tenant: str, table: str) -> None:
        self.flush_failures_total.labels(tenant, table).inc()

    def flush_shared(self) -> None:
        self.flush_shared_rounds_total.inc()


class WalMetricsAdapter:
    """Adapts :class:`shoal.wal.reporting.WalMetrics` to :class:`ServerMetrics`."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    def group_committed(self, records: int, nbytes: int, fsync_seconds: float) -> None:
        self._m.wal_fsync_seconds.observe(fsync_seconds)
        self._m.wal_records_total.inc(records)
        self._m.wal_appended_bytes_total.inc(nbytes)

    def append_failed(self, reason: str, records: int) -> None:
        self._m.wal_append_failures_total.labels(reason).inc(records)

    def corruption_found(self, segment: str, reason: str) -> None:
        self._m.wal_corruptions_total.inc()

    def torn_tail_cut(self, segment: str, nbytes: int) -> None:
        self._m.wal_torn_tails_total.inc()


class StorageMetricsAdapter:
    """Adapts :class:`shoal.storage.reporting.StorageMetrics` to :class:`ServerMetrics`."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    def commit_done(
        self, tenant: str, table: str, operation: str, seconds: float, rows: int, files: int
    ) -> None:
        self._m.table_commits_total.labels(tenant, table, operation).inc()

    def commit_retry(self, tenant: str, table: str) -> None:
        self._m.table_commit_retries_total.labels(tenant, table).inc()

    def checkpoint_done(self, tenant: str, table: str, seconds: float) -> None:
        self._m.table_checkpoints_total.labels(tenant, table).inc()
