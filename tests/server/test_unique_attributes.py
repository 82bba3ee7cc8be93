"""Large unique attribute values are not pinned in memory once they are flushed.

The decoders cache what repeats (attribute entries, resources, scopes) by its bytes. The
caches are bounded in bytes and skip entries too large to be worth keeping, so 360 MiB of
unique 1 MiB values leave the server, once flushed, near the memory it had before.
"""

from __future__ import annotations

import time
import urllib.request

import psutil
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from loadtest.ingest import BASE_NS
from shoal.otlp import attributes, common, metrics
from tests.server.conftest import ServerFactory, metric_value, scrape

MIB = 1 << 20
EXPORTS = 40
CACHE_BUDGET = sum(
    cache.max_bytes
    for cache in (
        attributes._cache,
        attributes._lists,
        common._resources,
        common._scopes,
        common._blocks,
        common._taken,
        metrics._metric_blocks,
        metrics._metric_rows,
    )
)
"""The decode caches' byte budgets (attribute entries and lists, resources, scopes, scope
blocks, the resource and scope columns of rows, metric blocks, the metric columns of rows)."""


def _export(i: int) -> bytes:
    """Eight points with a unique 1 MiB attribute each, under a unique 1 MiB resource value."""
    request = ExportMetricsServiceRequest()
    rm = request.resource_metrics.add()
    rm.resource.attributes.add(key="service.name").value.string_value = "blob"
    rm.resource.attributes.add(key="host.notes").value.string_value = f"{i:08d}" + "r" * MIB
    metric = rm.scope_metrics.add().metrics.add(name="blob.size")
    for j in range(8):
        point = metric.gauge.data_points.add(time_unix_nano=BASE_NS + i * 10**9, as_double=j)
        point.attributes.add(key="payload").value.string_value = f"{i:04d}{j:04d}" + "p" * MIB
    return request.SerializeToString()


def test_unique_large_attributes_are_not_pinned_after_a_flush(
    start_server: ServerFactory,
) -> None:
    server = start_server(env={"SHOAL_FLUSH_MAX_AGE_S": "1", "SHOAL_LOG_LEVEL": "warning"})
    assert server.proc is not None
    process = psutil.Process(server.proc.pid)
    before = process.memory_info().rss
    for i in range(EXPORTS):
        request = urllib.request.Request(
            f"{server.url}/v1/metrics",
            data=_export(i),
            headers={"Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200
    deadline = time.monotonic() + 60
    text = scrape(server)
    while time.monotonic() < deadline:
        text = scrape(server)
        if metric_value(text, "shoal_flush_rows_total") >= EXPORTS * 8:
            if metric_value(text, "shoal_snapshot_rows") == 0:
                break
        time.sleep(0.5)
    assert metric_value(text, "shoal_flush_rows_total") == EXPORTS * 8
    assert metric_value(text, "shoal_snapshot_rows") == 0
    time.sleep(1.0)
    after = process.memory_info().rss
    # 360 MiB went through; what stays is at most the caches' budgets plus allocator slack
    assert after - before < CACHE_BUDGET + 64 * MIB, (before >> 20, after >> 20)
